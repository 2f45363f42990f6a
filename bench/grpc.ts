/**
 * The same requests over gRPC and over HTTP (issue 58): KServe v2's ModelInfer on the gRPC port
 * against `POST /v2/models/<model>/infer` with the same JSON tensor, to one gateway and one worker.
 * One closed-loop driver in this process sends both, `concurrency` requests in flight: HTTP over a
 * keep-alive socket per request in flight, gRPC over one HTTP/2 channel, as their clients do. Each
 * round measures both sides one after the other, the order swapped every round. Per concurrency
 * and side: the medians over the rounds of requests/s, p50, and the CPU per request of the gateway
 * and of this process (the clients: on a small machine they share the cores with the server).
 * `--client h2load` drives both sides with nghttp2's h2load instead (Debian: nghttp2-client), a C
 * load tool whose cost is the same for both protocols: the same request every time, HTTP/1.1 over
 * `concurrency` connections against gRPC over one HTTP/2 connection with that many streams. The
 * client's CPU is then not counted: h2load's process is gone before it can be read.
 * Usage: npm run bench:grpc [-- --concurrency 1,64 --rounds 6 --seconds 5 --model <id> --client node|h2load]
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { BenchSystem } from './lib/system.ts';
import { cpuBetween, sampleCpu } from './lib/cpu.ts';
import { median, round, summarize } from './lib/stats.ts';
import { freePort, MODEL_DIR } from '../test/helpers/processes.ts';
import { grpcClient, texts, unary } from '../test/helpers/grpc.ts';
import { PROSE } from '../test/helpers/texts.ts';

const { values } = parseArgs({
  options: {
    concurrency: { type: 'string', default: '1,64' },
    rounds: { type: 'string', default: '6' },
    seconds: { type: 'string', default: '5' },
    model: { type: 'string', default: 'replica/MiniLM-L6-H384-uncased-sst2' },
    client: { type: 'string', default: 'node' },
  },
});
if (!['node', 'h2load'].includes(values.client)) throw new Error('--client is node or h2load');
const concurrencies = values.concurrency.split(',').map(Number);
const rounds = Number(values.rounds);
const seconds = Number(values.seconds);
const model = values.model;

/** About 16 tokens of the prose, a different one each request. */
let next = 0;
const text = () => Array.from({ length: 12 }, (_, i) => PROSE[(next + i) % PROSE.length]).join(' ') + ` ${next++}`;

type Send = () => Promise<void>;

function httpSender(port: number, connections: number): Send {
  const agent = new http.Agent({ keepAlive: true, maxSockets: connections });
  return () =>
    new Promise<void>((resolve, reject) => {
      const body = JSON.stringify({ inputs: [{ name: 'text', datatype: 'BYTES', shape: [1], data: [text()] }] });
      const req = http.request(
        {
          host: '127.0.0.1',
          port,
          path: `/v2/models/${model}/infer`,
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          res.resume();
          res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))));
        },
      );
      req.on('error', reject);
      req.end(body);
    });
}

function grpcSender(port: number): { send: Send; close: () => void } {
  const client = grpcClient('inference.GRPCInferenceService', port);
  const send = async () => {
    await unary(client, 'ModelInfer', { model_name: model, inputs: [texts(text())] });
  };
  return { send, close: () => client.close() };
}

/** `connections` loops, each sending its next request when its last is answered, for a warm-up second and then `seconds`. */
async function closedLoop(send: Send, connections: number, gatewayPid: number) {
  const latencies: number[] = [];
  let measuring = false;
  let stop = false;
  const loop = async () => {
    while (!stop) {
      const start = performance.now();
      await send();
      if (measuring) latencies.push(performance.now() - start);
    }
  };
  const loops = Array.from({ length: connections }, loop);
  await new Promise((r) => setTimeout(r, 1000));
  measuring = true;
  const before = sampleCpu({ gateway: gatewayPid, client: process.pid });
  await new Promise((r) => setTimeout(r, seconds * 1000));
  const after = sampleCpu({ gateway: gatewayPid, client: process.pid });
  measuring = false;
  stop = true;
  await Promise.all(loops);
  const cpu = cpuBetween(before, after).procs;
  const perRequest = (pct: number | undefined) => ((pct ?? NaN) / 100) * ((seconds * 1000) / latencies.length);
  return {
    rps: latencies.length / seconds,
    p50: summarize(latencies).p50,
    gatewayCpuMsPerRequest: perRequest(cpu.gateway),
    clientCpuMsPerRequest: perRequest(cpu.client),
  };
}

/** The request h2load sends on each side, written once: KServe's JSON, and a gRPC frame of the same ModelInferRequest. */
function h2loadBodies(dir: string, grpcPort: number): Record<'http' | 'grpc', string> {
  const input = text();
  const client = grpcClient('inference.GRPCInferenceService', grpcPort);
  const serialize = (
    client.constructor as unknown as { service: Record<string, { requestSerialize: (m: object) => Buffer }> }
  ).service.ModelInfer.requestSerialize;
  const message = serialize({ model_name: model, inputs: [texts(input)] });
  client.close();
  // gRPC's framing: not compressed (one byte), the message's length (four, big-endian), the message.
  const frame = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), message]);
  frame.writeUInt32BE(message.length, 1);
  const bodies = { http: path.join(dir, 'http.json'), grpc: path.join(dir, 'grpc.bin') };
  fs.writeFileSync(
    bodies.http,
    JSON.stringify({ inputs: [{ name: 'text', datatype: 'BYTES', shape: [1], data: [input] }] }),
  );
  fs.writeFileSync(bodies.grpc, frame);
  return bodies;
}

/** One side measured by h2load: a warm-up second, then `seconds`; each request's time from its log. */
async function h2loadRun(
  side: 'http' | 'grpc',
  connections: number,
  target: { httpPort: number; grpcPort: number; bodies: Record<'http' | 'grpc', string>; dir: string },
  gatewayPid: number,
) {
  const log = path.join(target.dir, `${side}.log`);
  // h2load appends to its log.
  fs.rmSync(log, { force: true });
  const timing = ['-D', String(seconds), '--warm-up-time', '1', `--log-file=${log}`];
  const args =
    side === 'grpc'
      ? [
          ...['-c', '1', '-m', String(connections), ...timing, '-d', target.bodies.grpc],
          ...['-H', 'content-type: application/grpc', '-H', 'te: trailers'],
          `http://127.0.0.1:${target.grpcPort}/inference.GRPCInferenceService/ModelInfer`,
        ]
      : [
          ...['--h1', '-c', String(connections), '-m', '1', ...timing, '-d', target.bodies.http],
          ...['-H', 'content-type: application/json'],
          `http://127.0.0.1:${target.httpPort}/v2/models/${model}/infer`,
        ];
  const child = spawn('h2load', args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  await new Promise((r) => setTimeout(r, 1000));
  const before = sampleCpu({ gateway: gatewayPid });
  const startedAt = performance.now();
  if ((await exited) !== 0) throw new Error(`h2load failed:\n${output}`);
  const after = sampleCpu({ gateway: gatewayPid });
  const elapsedMs = performance.now() - startedAt;
  // h2load counts a request as failed or errored when its stream or connection broke; one still in
  // flight when the duration ended is neither, and its log line has status 0.
  const broken = /(\d+) failed, (\d+) errored/.exec(output);
  if (!broken || Number(broken[1]) + Number(broken[2]) > 0) throw new Error(`${side}: h2load saw failures:\n${output}`);
  const lines = fs
    .readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .filter((line) => line.split('\t')[1] !== '0');
  const ok = lines.filter((line) => line.split('\t')[1] === '200');
  if (ok.length !== lines.length) throw new Error(`${side}: ${lines.length - ok.length} answers were not 200`);
  const latencies = ok.map((line) => Number(line.split('\t')[2]) / 1000);
  const gatewayPct = cpuBetween(before, after).procs.gateway ?? NaN;
  return {
    rps: latencies.length / seconds,
    p50: summarize(latencies).p50,
    gatewayCpuMsPerRequest: (gatewayPct / 100) * (elapsedMs / latencies.length),
    clientCpuMsPerRequest: NaN,
  };
}

const system = new BenchSystem({ modelDir: MODEL_DIR, logLevel: 'error' });
const sides = ['http', 'grpc'] as const;
type Point = Awaited<ReturnType<typeof closedLoop>>;

try {
  await system.startRedis();
  const grpcPort = await freePort();
  await system.startGateway({ GRPC_PORT: grpcPort });
  await system.startWorker(model);
  const gatewayPid = system.gateway!.pid;
  const points = new Map<string, Point[]>();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tserve-bench-grpc-'));
  const h2load = { httpPort: system.port, grpcPort, bodies: h2loadBodies(dir, grpcPort), dir };
  for (let r = 0; r < rounds; r++) {
    for (const connections of concurrencies) {
      for (const side of r % 2 === 0 ? sides : [...sides].reverse()) {
        let point: Point;
        if (values.client === 'h2load') point = await h2loadRun(side, connections, h2load, gatewayPid);
        else {
          const grpcClient = side === 'grpc' ? grpcSender(grpcPort) : undefined;
          point = await closedLoop(grpcClient?.send ?? httpSender(system.port, connections), connections, gatewayPid);
          grpcClient?.close();
        }
        const key = `${connections} ${side}`;
        points.set(key, [...(points.get(key) ?? []), point]);
        process.stderr.write(
          `round ${r + 1} c=${connections} ${side}: ${round(point.rps, 1)} req/s, p50 ${round(point.p50)} ms, CPU ms/request gateway ${round(point.gatewayCpuMsPerRequest, 3)} client ${round(point.clientCpuMsPerRequest, 3)}\n`,
        );
      }
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
  console.log(
    `${model}, KServe v2 infer of one 16-token text, ${values.client === 'h2load' ? 'h2load' : 'Node clients'}; medians of ${rounds} rounds of ${seconds} s`,
  );
  console.log('conc  side     req/s    p50 ms   CPU ms/req: gateway   client   gRPC/HTTP req/s, p50');
  for (const connections of concurrencies) {
    const of = (side: string) => points.get(`${connections} ${side}`) ?? [];
    for (const side of sides) {
      const got = of(side);
      const ratio =
        side === 'grpc'
          ? `${round(median(got.map((p) => p.rps)) / median(of('http').map((p) => p.rps)), 3)}, ${round(median(got.map((p) => p.p50)) / median(of('http').map((p) => p.p50)), 3)}`
          : '';
      console.log(
        [
          String(connections).padStart(4),
          side.padStart(5),
          round(median(got.map((p) => p.rps)), 1)
            .toFixed(1)
            .padStart(9),
          round(median(got.map((p) => p.p50)), 2)
            .toFixed(2)
            .padStart(9),
          round(median(got.map((p) => p.gatewayCpuMsPerRequest)), 3)
            .toFixed(3)
            .padStart(20),
          round(median(got.map((p) => p.clientCpuMsPerRequest)), 3)
            .toFixed(3)
            .padStart(8),
          `   ${ratio}`,
        ].join(' '),
      );
    }
  }
} finally {
  await system.stop();
}
