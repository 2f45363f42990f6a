import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { gcOverWindow, readGatewayGc } from '../../bench/lib/gateway-gc.ts';

/** What a gateway's /metrics says of its collections: prom-client's histogram, before any full collection. */
const METRICS = `# HELP nodejs_gc_duration_seconds Garbage collection duration by kind, one of major, minor, incremental or weakcb.
# TYPE nodejs_gc_duration_seconds histogram
nodejs_gc_duration_seconds_bucket{le="+Inf",kind="incremental"} 6
nodejs_gc_duration_seconds_sum{kind="incremental"} 0.010196798998862505
nodejs_gc_duration_seconds_count{kind="incremental"} 6
nodejs_gc_duration_seconds_bucket{le="0.001",kind="minor"} 6
nodejs_gc_duration_seconds_bucket{le="+Inf",kind="minor"} 205
nodejs_gc_duration_seconds_sum{kind="minor"} 0.6063796619959174
nodejs_gc_duration_seconds_count{kind="minor"} 205
nodejs_gc_duration_seconds_sum{kind="weakcb"} 0.5
nodejs_gc_duration_seconds_count{kind="weakcb"} 3
`;

describe("bench: the gateway's collections", () => {
  it('reads each pausing kind from /metrics on its own, a kind not yet seen as none', async () => {
    const server = http.createServer((req, res) => res.end(req.url === '/metrics' ? METRICS : ''));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const reading = await readGatewayGc(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
      assert.deepEqual(reading, {
        minor: { count: 205, seconds: 0.6063796619959174 },
        major: { count: 0, seconds: 0 },
        incremental: { count: 6, seconds: 0.010196798998862505 },
      });
    } finally {
      server.close();
      server.closeAllConnections();
    }
  });

  it('reads nothing from a gateway that refuses /metrics or does not answer', async () => {
    const server = http.createServer((_req, res) => res.writeHead(401).end(METRICS));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      assert.equal(await readGatewayGc(url), undefined);
    } finally {
      server.close();
      server.closeAllConnections();
    }
    await once(server, 'close');
    assert.equal(await readGatewayGc(url), undefined);
  });

  it("gives each kind's collections, mean pause and paused share of the window", () => {
    const none = { count: 0, seconds: 0 };
    const start = { minor: { count: 100, seconds: 0.5 }, major: { count: 7, seconds: 0.1 }, incremental: none };
    const end = {
      minor: { count: 180, seconds: 0.9 },
      major: { count: 7, seconds: 0.1 },
      incremental: { count: 4, seconds: 0.008 },
    };
    const gc = gcOverWindow(start, end, 20);
    assert.equal(gc.minor.collections, 80);
    assert.ok(Math.abs(gc.minor.meanPauseMs - 5) < 1e-9);
    assert.ok(Math.abs(gc.minor.pausedShare - 0.02) < 1e-9);
    assert.deepEqual(gc.major, { collections: 0, meanPauseMs: 0, pausedShare: 0 });
    assert.equal(gc.incremental.collections, 4);
    assert.ok(Math.abs(gc.incremental.meanPauseMs - 2) < 1e-9);
  });
});
