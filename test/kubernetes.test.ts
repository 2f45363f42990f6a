/**
 * Issues 14 and 43: deploy/kubernetes renders (kubectl kustomize, no cluster needed), every object
 * is valid against the Kubernetes and KEDA schemas (kubernetes-models), every container's settings
 * parse with the programs' own config loaders, and every KEDA ScaledObject reads, from the gateway
 * Service, the backlog of the model its workers serve. That value is then read as KEDA reads it from
 * real gateways: it rises under load until KEDA would add workers, counts the requests of every
 * gateway, and falls to 0 at rest.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { parseAllDocuments } from 'yaml';
import { loadGatewayConfig, loadWorkerConfig } from '@tserve/config';
import { redisOptions } from '@tserve/queue';
import { ConfigMap, Namespace, PersistentVolumeClaim, Service } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import {
  MODEL_DIR,
  processMemory,
  ROOT,
  TestSystem,
  sleep,
  uniquePrefix,
  waitFor,
  type Proc,
} from './helpers/system.ts';
import { variedTexts } from './helpers/texts.ts';

type K8sObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string };
  spec?: any;
  data?: Record<string, string>;
};

const VALIDATORS: Record<string, (o: any) => { validate(): void }> = {
  'v1/ConfigMap': (o) => new ConfigMap(o),
  'v1/Namespace': (o) => new Namespace(o),
  'v1/PersistentVolumeClaim': (o) => new PersistentVolumeClaim(o),
  'v1/Service': (o) => new Service(o),
  'apps/v1/Deployment': (o) => new Deployment(o),
  'apps/v1/StatefulSet': (o) => new StatefulSet(o),
  'autoscaling/v2/HorizontalPodAutoscaler': (o) => new HorizontalPodAutoscaler(o),
  'policy/v1/PodDisruptionBudget': (o) => new PodDisruptionBudget(o),
  'keda.sh/v1alpha1/ScaledObject': (o) => new ScaledObject(o),
};

const OVERLAYS = ['cpu', 'gpu', 'gpu-scale-to-zero', 'sentinel'];
const hasKubectl = !spawnSync('kubectl', ['version', '--client'], { encoding: 'utf8' }).error;

function render(overlay: string): K8sObject[] {
  const run = spawnSync('kubectl', ['kustomize', path.join(ROOT, 'deploy/kubernetes/overlays', overlay)], {
    encoding: 'utf8',
  });
  assert.equal(run.status, 0, `kubectl kustomize ${overlay}: ${run.stderr}`);
  return parseAllDocuments(run.stdout)
    .map((d) => d.toJS() as K8sObject)
    .filter(Boolean);
}

/**
 * A container's environment as the process sees it: its ConfigMaps first, then its own env, where a
 * value taken from a Secret stands as `secret-<key>` and `$(NAME)` is replaced with an earlier
 * variable's value, as Kubernetes does.
 */
function environment(container: any, objects: K8sObject[]): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of container.envFrom ?? []) {
    const map =
      from.configMapRef && objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === from.configMapRef.name);
    Object.assign(env, map?.data ?? {});
  }
  for (const e of container.env ?? []) {
    const secret = e.valueFrom?.secretKeyRef?.key;
    env[e.name] =
      e.value?.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (ref: string, name: string) => env[name] ?? ref) ??
      (secret ? `secret-${secret}` : `(from ${Object.keys(e.valueFrom ?? {}).join(',')})`);
  }
  return env;
}

/** How far a CPU worker's memory limit stands over its WORKER_MEMORY_MB: room for what the budget's estimate misses. */
const LIMIT_OVER_BUDGET = 1.25;

/** A memory quantity in bytes ("512Mi", "1Gi", "128M"). */
function bytesOf(quantity: string): number {
  const match = /^(\d+)(Ki|Mi|Gi|k|M|G)?$/.exec(quantity);
  assert.ok(match, `memory quantity ${quantity}`);
  const unit = { Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, k: 1e3, M: 1e6, G: 1e9 }[match[2] ?? ''] ?? 1;
  return Number(match[1]) * unit;
}

/** A ScaledObject's metrics-api trigger as KEDA reads it, and the replica bounds it scales within. */
interface BacklogTrigger {
  scaledObject: string;
  /** The Deployment it scales. */
  target: string;
  url: URL;
  valueLocation: string;
  targetValue: number;
  activationTargetValue: number;
  minReplicas: number;
  maxReplicas: number;
}

function backlogTriggers(objects: K8sObject[]): BacklogTrigger[] {
  return objects
    .filter((o) => o.kind === 'ScaledObject')
    .flatMap((so) =>
      so.spec.triggers
        .filter((t: any) => t.type === 'metrics-api')
        .map((t: any) => ({
          scaledObject: so.metadata.name,
          target: so.spec.scaleTargetRef.name,
          url: new URL(t.metadata.url),
          valueLocation: t.metadata.valueLocation,
          targetValue: Number(t.metadata.targetValue),
          activationTargetValue: Number(t.metadata.activationTargetValue ?? 0),
          // KEDA's defaults when a ScaledObject leaves them out.
          minReplicas: so.spec.minReplicaCount ?? 0,
          maxReplicas: so.spec.maxReplicaCount ?? 100,
        })),
    );
}

/** The Deployment's first container, and its environment as the process sees it. */
function containerOf(
  objects: K8sObject[],
  deployment: string,
): { container: any; env: Record<string, string> } | undefined {
  const d = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === deployment);
  const container = d?.spec.template.spec.containers[0];
  return container && { container, env: environment(container, objects) };
}

/**
 * Where a request to the gateway Service lands: its full DNS name (what the KEDA operator resolves
 * from its own namespace) and port, checked to lead to the gateway's own listening port.
 */
function gatewayService(objects: K8sObject[]): { host: string; port: string } {
  // The Deployment that takes the traffic (the dashboard's runs the gateway program too, for itself).
  const gateway = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'tserve-gateway');
  assert.ok(gateway, 'no Deployment tserve-gateway');
  const labels = gateway.spec.template.metadata.labels;
  const service = objects.find(
    (o) => o.kind === 'Service' && Object.entries(o.spec.selector ?? {}).every(([k, v]) => labels[k] === v),
  );
  assert.ok(service, 'no Service selects the gateway pods');
  const container = gateway.spec.template.spec.containers[0];
  const listening = loadGatewayConfig(environment(container, objects)).PORT;
  const port = service.spec.ports.find((p: any) => {
    const target = container.ports.find((c: any) => c.name === p.targetPort || c.containerPort === p.targetPort);
    return target?.containerPort === listening;
  });
  assert.ok(port, `no port of Service ${service.metadata.name} leads to the gateway's PORT ${listening}`);
  return {
    host: `${service.metadata.name}.${service.metadata.namespace ?? 'default'}.svc.cluster.local`,
    port: String(port.port),
  };
}

/**
 * Every metrics-api trigger against the gateway Service and the workers it scales: the URL goes to
 * the Service and asks for the model the workers serve (URL-encoded), and targetValue is one batch
 * of those workers (BATCH_MAX_SIZE). Returns the disagreements, each a sentence; empty when all agree.
 */
function triggerMismatches(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  const service = gatewayService(objects);
  for (const so of objects.filter((o) => o.kind === 'ScaledObject')) {
    const kinds = so.spec.triggers.map((t: any) => t.type);
    if (!kinds.includes('metrics-api') || kinds.some((k: string) => k !== 'metrics-api'))
      problems.push(`${so.metadata.name}: triggers ${kinds.join(', ')}`);
  }
  for (const t of backlogTriggers(objects)) {
    const workers = containerOf(objects, t.target);
    if (!workers) {
      problems.push(`${t.scaledObject}: no Deployment ${t.target}`);
      continue;
    }
    const port = t.url.port || (t.url.protocol === 'https:' ? '443' : '80');
    if (t.url.hostname !== service.host || port !== service.port)
      problems.push(
        `${t.scaledObject}: KEDA asks ${t.url.hostname}:${port}, the gateway Service is ${service.host}:${service.port}`,
      );
    // The raw query: a model id holds '/', and may hold what a query string reserves.
    const raw = t.url.search
      .slice(1)
      .split('&')
      .find((p) => p.startsWith('model='))
      ?.slice('model='.length);
    const model = workers.env.MODEL;
    if (raw === undefined || decodeURIComponent(raw) !== model)
      problems.push(`${t.scaledObject}: asks for the backlog of ${raw}, but the workers of ${t.target} serve ${model}`);
    else if (raw !== encodeURIComponent(model))
      problems.push(`${t.scaledObject}: the model ${raw} in its URL is not URL-encoded (${encodeURIComponent(model)})`);
    const batch = loadWorkerConfig(workers.env).BATCH_MAX_SIZE;
    if (t.targetValue !== batch)
      problems.push(`${t.scaledObject}: targetValue ${t.targetValue}, but one batch of its workers is ${batch}`);
  }
  return problems;
}

/**
 * A GJSON path as KEDA's metrics-api scaler applies it to a JSON body (format json), for the plain
 * paths a manifest here uses: keys and array indexes joined by dots. GJSON's wildcards, queries,
 * modifiers and escapes are refused rather than guessed at. KEDA takes a number, or a string it
 * parses as a quantity (plain numbers only here); anything else fails the read.
 */
function valueAt(body: unknown, location: string): number {
  if (/[*?#@|\\!=<>%]/.test(location))
    throw new Error(`valueLocation ${location}: more than a dotted path; this test reads only those`);
  let value: unknown = body;
  for (const key of location.split('.')) {
    if (Array.isArray(value) && /^\d+$/.test(key)) value = value[Number(key)];
    else if (value !== null && typeof value === 'object' && !Array.isArray(value) && Object.hasOwn(value, key))
      value = (value as Record<string, unknown>)[key];
    else value = undefined;
    if (value === undefined)
      throw new Error(`valueLocation ${location}: nothing at "${key}" in ${JSON.stringify(body)}`);
  }
  if (typeof value === 'number') return value;
  if (typeof value === 'string' && /^-?\d+(\.\d+)?$/.test(value)) return Number(value);
  throw new Error(`valueLocation ${location}: ${JSON.stringify(value)} is not a number`);
}

/** One read of the trigger as KEDA makes it: its URL's path and query, sent to `gateway` instead of the Service. */
async function kedaReads(trigger: BacklogTrigger, gateway: string): Promise<number> {
  const res = await fetch(new URL(trigger.url.pathname + trigger.url.search, gateway));
  const text = await res.text();
  // KEDA counts any other status as a failed read.
  if (res.status !== 200) throw new Error(`GET ${trigger.url.pathname}${trigger.url.search}: ${res.status} ${text}`);
  return valueAt(JSON.parse(text), trigger.valueLocation);
}

/**
 * The replicas KEDA has the HPA ask for at `value`: metrics-api's metric is an AverageValue, so
 * ceil(value / targetValue), within the ScaledObject's bounds; at or below activationTargetValue
 * the trigger is inactive, which scales to zero where minReplicaCount allows it. (The HPA's
 * tolerance around the current count and its stabilisation windows are left out.)
 */
function replicasFor(trigger: BacklogTrigger, value: number): number {
  if (value <= trigger.activationTargetValue && trigger.minReplicas === 0) return 0;
  return Math.min(trigger.maxReplicas, Math.max(trigger.minReplicas, Math.ceil(value / trigger.targetValue)));
}

/**
 * Load as clients make it: `clients` each send a request, and the next once it is answered, at
 * least `min` requests in all and then until `enough()`, at most `cap`. Resolves with every
 * answer's status once all are answered.
 */
async function load(
  system: TestSystem,
  model: string,
  clients: number,
  bounds: { min: number; cap: number },
  enough: () => boolean,
): Promise<number[]> {
  const statuses: number[] = [];
  let sent = 0;
  await Promise.all(
    Array.from({ length: clients }, async (_, c) => {
      while (sent < bounds.min || (!enough() && sent < bounds.cap)) {
        sent++;
        statuses.push(
          (await system.infer(model, `client ${c} says request ${sent} was ${sent % 2 ? 'great' : 'awful'}`)).status,
        );
      }
    }),
  );
  return statuses;
}

/**
 * Reads the trigger from each gateway, as KEDA polls it, until `until` settles: `peaks` keeps the
 * highest value read from each. A failed read ends it with that error.
 */
async function watchPeaks(
  trigger: BacklogTrigger,
  gateways: TestSystem[],
  peaks: number[],
  until: Promise<unknown>,
): Promise<void> {
  let settled = false;
  until.then(
    () => (settled = true),
    () => (settled = true),
  );
  while (!settled) {
    for (const [i, g] of gateways.entries()) peaks[i] = Math.max(peaks[i], await kedaReads(trigger, g.url));
    await sleep(20);
  }
}

/** Counts of each status, for messages. */
const tally = (statuses: number[]) =>
  JSON.stringify(Object.fromEntries([...new Set(statuses)].map((s) => [s, statuses.filter((x) => x === s).length])));

describe(
  'Kubernetes manifests',
  { skip: hasKubectl ? false : 'kubectl is not installed (it renders the kustomizations)' },
  () => {
    for (const overlay of OVERLAYS) {
      it(`overlays/${overlay} renders, and every object is valid against the Kubernetes and KEDA schemas`, () => {
        const objects = render(overlay);
        assert.ok(objects.length >= 10);
        for (const o of objects) {
          const validator = VALIDATORS[`${o.apiVersion}/${o.kind}`];
          assert.ok(validator, `no schema checked for ${o.apiVersion} ${o.kind}`);
          assert.doesNotThrow(() => validator(o).validate(), `${o.kind} ${o.metadata.name}`);
          if (o.kind !== 'Namespace') assert.equal(o.metadata.namespace, 'tserve', `${o.kind} ${o.metadata.name}`);
        }
      });

      it(`overlays/${overlay}: every container's settings parse, grace periods cover the drains, probes ask real routes`, () => {
        const objects = render(overlay);
        for (const d of objects.filter((o) => o.kind === 'Deployment')) {
          const pod = d.spec.template.spec;
          const container = pod.containers[0];
          const env = environment(container, objects);
          const script = container.command.join(' ');
          if (script.includes('gateway')) {
            const config = loadGatewayConfig(env);
            assert.ok(
              pod.terminationGracePeriodSeconds * 1000 > config.SHUTDOWN_GRACE_MS,
              `${d.metadata.name}: terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} <= SHUTDOWN_GRACE_MS`,
            );
            for (const probe of ['readinessProbe', 'livenessProbe']) {
              assert.ok(['/ready', '/health'].includes(container[probe]?.httpGet?.path), `${d.metadata.name} ${probe}`);
            }
          } else {
            assert.equal(script, 'tserve worker');
            const config = loadWorkerConfig(env);
            assert.ok(config.MODEL);
            assert.ok(
              pod.terminationGracePeriodSeconds >= 30,
              `${d.metadata.name}: a worker needs time to finish its batch`,
            );
            if (overlay === 'gpu') assert.equal(container.resources.limits['nvidia.com/gpu'], '1');
            // A worker's memory is bounded by its budget on a CPU, and its limit leaves room beside the budget.
            const { requests, limits } = container.resources;
            assert.ok(
              limits?.memory && requests?.memory && bytesOf(requests.memory) <= bytesOf(limits.memory),
              `${d.metadata.name}: memory request and limit`,
            );
            if (config.DEVICE === 'cpu') {
              assert.ok(
                config.WORKER_MEMORY_MB,
                `${d.metadata.name}: a CPU worker keeps its calls within WORKER_MEMORY_MB`,
              );
              const budget = config.WORKER_MEMORY_MB * 2 ** 20;
              assert.ok(
                bytesOf(limits.memory) >= LIMIT_OVER_BUDGET * budget,
                `${d.metadata.name}: memory limit ${limits.memory} under ${LIMIT_OVER_BUDGET} x WORKER_MEMORY_MB (${config.WORKER_MEMORY_MB} MiB)`,
              );
            } else
              assert.equal(
                config.WORKER_MEMORY_MB,
                undefined,
                `${d.metadata.name}: WORKER_MEMORY_MB bounds nothing on a GPU`,
              );
          }
        }
        const gateway = objects.find((o) => o.kind === 'Deployment' && o.metadata.name === 'tserve-gateway')!;
        assert.equal(gateway.spec.template.spec.containers[0].readinessProbe.httpGet.path, '/ready');
        assert.equal(gateway.spec.template.spec.containers[0].livenessProbe.httpGet.path, '/health');
        assert.ok(gateway.spec.template.spec.containers[0].startupProbe);
        const container = gateway.spec.template.spec.containers[0];
        // A gateway turning large answers held /health 1.9 s: not dead, and not to be restarted with every request it holds.
        assert.ok((container.livenessProbe.timeoutSeconds ?? 1) >= 5, 'gateway liveness timeoutSeconds under 5 s');
        // Its byte bounds fit its memory limit, with room for the process and the answers it builds (gateway.yaml says why 512 MiB).
        const config = loadGatewayConfig(environment(container, objects));
        const held = config.MAX_BODIES_BYTES + config.MAX_UNREAD_ANSWERS_BYTES;
        const limit = container.resources.limits.memory;
        assert.ok(
          bytesOf(limit) >= held + 512 * 2 ** 20,
          `gateway memory limit ${limit} under MAX_BODIES_BYTES + MAX_UNREAD_ANSWERS_BYTES (${held}) + 512 MiB`,
        );
        const dashboard = objects.find((o) => o.kind === 'Service' && o.metadata.name === 'tserve-dashboard')!;
        assert.equal(dashboard.spec.type, 'ClusterIP', 'the dashboard stays internal');
      });

      it(`overlays/${overlay}: every ScaledObject reads the gateway Service's backlog of its own workers' model, one batch per worker`, () => {
        const objects = render(overlay);
        assert.ok(backlogTriggers(objects).length >= 1);
        assert.deepEqual(triggerMismatches(objects), []);
      });

      it(`overlays/${overlay}: the gateways' MODELS are the models of the worker Deployments`, () => {
        const objects = render(overlay);
        const gateway = containerOf(objects, 'tserve-gateway')!;
        const served = objects
          .filter((o) => o.kind === 'Deployment' && o.metadata.name.startsWith('tserve-worker'))
          .map((d) => containerOf(objects, d.metadata.name)!.env.MODEL)
          .sort();
        assert.deepEqual([...loadGatewayConfig(gateway.env).MODELS].sort(), served);
      });
    }

    it("overlays/sentinel: no Redis of its own; every process finds the primary through the sentinels, with the Secret's password", () => {
      const objects = render('sentinel');
      assert.deepEqual(
        objects.filter((o) => o.metadata.name === 'tserve-redis').map((o) => o.kind),
        [],
        "the base's Redis is gone",
      );
      const deployments = objects.filter((o) => o.kind === 'Deployment');
      assert.ok(deployments.length >= 3);
      for (const d of deployments) {
        const { env, container } = containerOf(objects, d.metadata.name)!;
        const config = container.command.join(' ') === 'tserve worker' ? loadWorkerConfig(env) : loadGatewayConfig(env);
        const where = d.metadata.name;
        assert.deepEqual(config.REDIS_SENTINELS, [{ host: 'redis.redis.svc.cluster.local', port: 26379 }], where);
        assert.equal(config.REDIS_SENTINEL_MASTER, 'mymaster', where);
        const options = redisOptions(config);
        assert.equal(options.password, 'secret-password', `${where}: REDIS_URL's password from the Secret`);
        assert.equal(options.name, 'mymaster');
        assert.equal(config.REDIS_SENTINEL_PASSWORD, 'secret-sentinel-password', where);
        // The password is defined before the REDIS_URL that names it: Kubernetes expands only earlier variables.
        const names = container.env.map((e: { name: string }) => e.name);
        assert.ok(names.indexOf('REDIS_PASSWORD') < names.indexOf('REDIS_URL'), where);
      }
    });

    it('a ScaledObject that disagrees with its workers or the gateway Service is caught', () => {
      const objects = render('cpu');
      const isWorker = (o: K8sObject) => o.kind === 'Deployment' && o.metadata.name.startsWith('tserve-worker');
      const withWorkerEnv = (env: Array<{ name: string; value: string }>) =>
        objects.map((o) => {
          if (!isWorker(o)) return o;
          const copy = structuredClone(o);
          const container = copy.spec.template.spec.containers[0];
          container.env = [...container.env.filter((e: any) => !env.some((x) => x.name === e.name)), ...env];
          return copy;
        });
      const withUrl = (edit: (url: string) => string) =>
        objects.map((o) => {
          if (o.kind !== 'ScaledObject') return o;
          const copy = structuredClone(o);
          for (const t of copy.spec.triggers) t.metadata.url = edit(t.metadata.url);
          return copy;
        });
      assert.match(
        triggerMismatches(withWorkerEnv([{ name: 'MODEL', value: 'org/another-model' }])).join('\n'),
        /asks for the backlog of replica%2FMiniLM-L6-H384-uncased-sst2, but the workers of tserve-worker-minilm-sst2 serve org\/another-model/,
      );
      assert.match(
        triggerMismatches(withWorkerEnv([{ name: 'BATCH_MAX_SIZE', value: '64' }])).join('\n'),
        /targetValue 32, but one batch of its workers is 64/,
      );
      assert.match(
        triggerMismatches(withUrl((u) => u.replace('%2F', '/'))).join('\n'),
        /replica\/MiniLM-L6-H384-uncased-sst2 in its URL is not URL-encoded/,
      );
      assert.match(
        triggerMismatches(withUrl((u) => u.replace('.tserve.svc', '.default.svc'))).join('\n'),
        /asks tserve-gateway\.default\.svc\.cluster\.local:80, the gateway Service is tserve-gateway\.tserve\.svc\.cluster\.local:80/,
      );
      assert.match(
        triggerMismatches(withUrl((u) => u.replace(':80/', ':8000/'))).join('\n'),
        /asks tserve-gateway\.tserve\.svc\.cluster\.local:8000, the gateway/,
      );
      const redisTrigger = objects.map((o) =>
        o.kind === 'ScaledObject'
          ? { ...o, spec: { ...o.spec, triggers: [{ type: 'redis', metadata: { listName: 'tserve:wait' } }] } }
          : o,
      );
      assert.match(triggerMismatches(redisTrigger).join('\n'), /triggers redis/);
    });
  },
);

/**
 * The trigger the manifests give KEDA, evaluated as KEDA does against real gateways: its URL's path
 * and query, the value at its valueLocation, and the replicas that value asks for. The model is
 * the one the manifests name, so the same id goes from the ScaledObject to the worker.
 */
describe(
  'KEDA reading the backlog trigger from real gateways',
  { skip: hasKubectl ? false : 'kubectl is not installed (it renders the kustomizations)' },
  () => {
    // Set in before(), which the skip above keeps from running without kubectl.
    let trigger: BacklogTrigger;
    let model: string;
    let system: TestSystem;

    before(async () => {
      const objects = render('cpu');
      [trigger] = backlogTriggers(objects);
      model = containerOf(objects, trigger.target)!.env.MODEL;
      assert.ok(
        fs.existsSync(path.join(MODEL_DIR, model, 'config.json')),
        `the replica of ${model}, which the manifests serve, is in ${MODEL_DIR}`,
      );
      system = new TestSystem(uniquePrefix('keda'));
      await system.startGateway();
      system.startWorker({ model });
      await system.waitForWorkers(model);
    });
    after(async () => {
      await system?.stop();
    });

    it('under 64 clients on one worker the backlog rises until KEDA asks for more workers; at rest it is 0', async (t) => {
      assert.equal(await kedaReads(trigger, system.url), 0, 'nothing outstanding before the load');
      const peaks = [0];
      let failed: Error | undefined;
      // The load goes on until KEDA would scale out (bounded in requests, not in time).
      const running = load(
        system,
        model,
        64,
        { min: 320, cap: 2000 },
        () => failed !== undefined || replicasFor(trigger, peaks[0]) >= 2,
      );
      await watchPeaks(trigger, [system], peaks, running).catch((err: Error) => (failed = err));
      const statuses = await running;
      if (failed) throw failed;
      assert.ok(
        statuses.every((s) => s === 200),
        `every request answered: ${tally(statuses)}`,
      );
      const [peak] = peaks;
      assert.ok(peak >= 32, `the backlog read under 64 clients: at most ${peak}`);
      assert.ok(replicasFor(trigger, peak) >= 2, `KEDA asks for ${replicasFor(trigger, peak)} workers at ${peak}`);
      // Every request is answered: nothing is outstanding.
      await waitFor('KEDA to read 0 at rest', async () => (await kedaReads(trigger, system.url)) === 0, 10_000, 50);
      assert.equal(replicasFor(trigger, 0), trigger.minReplicas);
      t.diagnostic(
        `one gateway: peak ${peak} (KEDA asks for ${replicasFor(trigger, peak)} workers) over ${statuses.length} requests; 0 at rest`,
      );
    });

    it("with two gateways, either one's backlog counts both gateways' requests", async (t) => {
      // A second gateway on the same prefix: the same Redis, the same workers, counts exchanged.
      const other = new TestSystem(system.prefix);
      try {
        await other.startGateway();
        await other.waitForWorkers(model);
        const gateways = [system, other];
        // 32 clients at each gateway, each with at most one request in flight: neither gateway holds
        // more than 32 of its own, so a read above 32 includes the other gateway's.
        const peaks = [0, 0];
        let failed: Error | undefined;
        const enough = () => failed !== undefined || peaks.every((p) => p > 32);
        const running = Promise.all(gateways.map((g) => load(g, model, 32, { min: 160, cap: 1000 }, enough)));
        await watchPeaks(trigger, gateways, peaks, running).catch((err: Error) => (failed = err));
        const statuses = (await running).flat();
        if (failed) throw failed;
        assert.ok(
          statuses.every((s) => s === 200),
          `every request answered: ${tally(statuses)}`,
        );
        for (const peak of peaks)
          assert.ok(
            peak > 32 && replicasFor(trigger, peak) >= 2,
            `the backlog read from each gateway: at most ${peaks.join(' and ')}`,
          );
        for (const [i, g] of gateways.entries())
          await waitFor(
            `gateway ${i + 1} to read 0 at rest`,
            async () => (await kedaReads(trigger, g.url)) === 0,
            10_000,
            50,
          );
        t.diagnostic(
          `two gateways: peaks ${peaks.join(' and ')} read from each, over ${statuses.length} requests; 0 at rest`,
        );
      } finally {
        // Its gateway only: the prefix is the first system's, cleaned by its own stop(). (SIGTERM under
        // c8, as TestSystem.stop does: a killed process writes no coverage.)
        await Promise.all(other.procs.map((p) => p.stop(process.env.NODE_V8_COVERAGE ? 'SIGTERM' : 'SIGKILL')));
      }
    });
  },
);

/**
 * Issue 46: the scale-to-zero variant of the GPU overlay. Its trigger, read as KEDA reads it from a
 * real gateway started with the manifests' MODELS and no worker, asks for no worker at rest, for one
 * while a request waits, and for none again once that request is answered and the worker is gone. The
 * worker runs on this machine's CPU: what is tested is the signal, not the GPU.
 */
describe(
  'the GPU overlay scaled to zero',
  { skip: hasKubectl ? false : 'kubectl is not installed (it renders the kustomizations)' },
  () => {
    let trigger: BacklogTrigger;
    let model: string;
    let gatewayEnv: Record<string, string>;
    let system: TestSystem;

    before(async () => {
      const objects = render('gpu-scale-to-zero');
      [trigger] = backlogTriggers(objects);
      model = containerOf(objects, trigger.target)!.env.MODEL;
      gatewayEnv = containerOf(objects, 'tserve-gateway')!.env;
      system = new TestSystem(uniquePrefix('zero'));
      await system.startGateway({ MODELS: gatewayEnv.MODELS });
    });
    after(async () => {
      await system?.stop();
    });

    it('scales from zero on a waiting request, and back to zero once it is answered', async (t) => {
      assert.equal(trigger.minReplicas, 0);
      const objects = render('gpu-scale-to-zero');
      assert.equal(
        objects.find((o) => o.kind === 'Deployment' && o.metadata.name === trigger.target)!.spec.replicas,
        0,
        'no worker before KEDA acts',
      );
      // A waiting request may outlast a cold start (docs/operations.md).
      assert.ok(
        loadGatewayConfig(gatewayEnv).REQUEST_TIMEOUT_MS >= 120_000,
        'the gateways wait long enough for a cold start',
      );
      assert.equal(await kedaReads(trigger, system.url), 0);
      assert.equal(replicasFor(trigger, 0), 0, 'no worker at rest');
      // Ready with no worker: the Service keeps the gateway, which must take the request that wakes one.
      assert.equal((await fetch(`${system.url}/ready`)).status, 200);
      const waiting = system.post(
        `/models/${model}`,
        { inputs: 'a request from zero' },
        { 'x-wait-for-model': 'true' },
      );
      const read = await waitFor('the trigger to read the waiting request', async () => {
        const value = await kedaReads(trigger, system.url);
        return value > trigger.activationTargetValue && value;
      });
      assert.ok(replicasFor(trigger, read) >= 1, `KEDA asks for ${replicasFor(trigger, read)} workers at ${read}`);
      const worker = system.startWorker({ model });
      const answered = await waiting;
      assert.equal(answered.status, 200, JSON.stringify(answered.body));
      await worker.stop('SIGTERM');
      await waitFor(
        'the trigger to read 0 with no worker and no traffic',
        async () => (await kedaReads(trigger, system.url)) === 0,
        10_000,
        50,
      );
      assert.equal(replicasFor(trigger, 0), 0);
      t.diagnostic(
        `read ${read} while the request waited (KEDA asks for ${replicasFor(trigger, read)} worker); 0 after`,
      );
    });
  },
);

/**
 * Issue 50: a worker run as the cpu overlay runs it (its model, dtype, threads and WORKER_MEMORY_MB)
 * under mixed-length load keeps its peak resident memory under the manifest's limit. The load is
 * bounded in requests: inputs long enough to be cut to the model's 512 tokens, 64 at once, so that
 * the largest calls the budget allows run, then the varied load (1 to 400 words) from 64 clients.
 * The peak is the kernel's own (VmHWM), which no sampling can miss; the limit stands a quarter over
 * the budget, and the budget over the peak, so that noise cannot cross it.
 */
describe(
  "a worker with the manifests' memory settings",
  { skip: hasKubectl ? false : 'kubectl is not installed (it renders the kustomizations)' },
  () => {
    let system: TestSystem;
    let model: string;
    let limitBytes: number;
    let budgetMiB: number;
    let worker: Proc;

    before(async () => {
      const objects = render('cpu');
      const deployment = objects.find((o) => o.kind === 'Deployment' && o.metadata.name.startsWith('tserve-worker'))!;
      const { container, env } = containerOf(objects, deployment.metadata.name)!;
      limitBytes = bytesOf(container.resources.limits.memory);
      model = env.MODEL;
      // What the manifest sets for the worker itself; where Redis, the models and the heartbeats are is the test's.
      const own = Object.fromEntries(
        Object.entries(env).filter(
          ([name]) =>
            ![
              'REDIS_URL',
              'QUEUE_PREFIX',
              'LOG_LEVEL',
              'HEARTBEAT_MS',
              'WORKER_TTL_MS',
              'MODEL_DIR',
              'WORKER_ID',
            ].includes(name),
        ),
      );
      budgetMiB = loadWorkerConfig(env).WORKER_MEMORY_MB!;
      system = new TestSystem(uniquePrefix('memory'));
      await system.startGateway();
      worker = system.startWorker({ model, env: own });
      await system.waitForWorkers(model);
    });
    after(async () => {
      await system?.stop();
    });

    it('keeps its peak RSS under the memory limit through the largest calls its budget allows and the varied load', async (t) => {
      const long = variedTexts(64, 520, 600, 2);
      const texts = [...long, ...variedTexts(192)];
      let next = 0;
      const statuses: number[] = [];
      await Promise.all(
        Array.from({ length: 64 }, async () => {
          while (next < texts.length) statuses.push((await system.infer(model, texts[next++])).status);
        }),
      );
      assert.ok(
        statuses.every((s) => s === 200),
        `every request answered: ${tally(statuses)}`,
      );
      const peak = processMemory(worker.pid)!.peak;
      // The heartbeat's report of the largest call, once it carries one.
      const largest = await waitFor(
        'the largest call in a heartbeat',
        async () => (await system.metric('tserve_worker_largest_call_tokens', { model })) || undefined,
      );
      t.diagnostic(
        `peak RSS ${peak.toFixed(0)} MiB (budget ${budgetMiB} MiB, limit ${limitBytes / 2 ** 20} MiB); largest call ${largest} tokens; ${statuses.length} requests`,
      );
      assert.ok(largest >= 4 * 512, `calls of several 512-token rows ran: the largest held ${largest} tokens`);
      assert.ok(peak * 2 ** 20 < limitBytes, `peak RSS ${peak} MiB under the limit ${limitBytes / 2 ** 20} MiB`);
    });
  },
);
