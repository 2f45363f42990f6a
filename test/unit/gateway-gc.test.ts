import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { gcOverWindow, readGatewayGc } from '../../bench/lib/gateway-gc.ts';

/** What a gateway's /metrics says of its collections: prom-client's histogram, minor and incremental. */
const METRICS = `# HELP nodejs_gc_duration_seconds Garbage collection duration by kind, one of major, minor, incremental or weakcb.
# TYPE nodejs_gc_duration_seconds histogram
nodejs_gc_duration_seconds_bucket{le="+Inf",kind="incremental"} 6
nodejs_gc_duration_seconds_sum{kind="incremental"} 0.010196798998862505
nodejs_gc_duration_seconds_count{kind="incremental"} 6
nodejs_gc_duration_seconds_bucket{le="0.001",kind="minor"} 6
nodejs_gc_duration_seconds_bucket{le="+Inf",kind="minor"} 205
nodejs_gc_duration_seconds_sum{kind="minor"} 0.6063796619959174
nodejs_gc_duration_seconds_count{kind="minor"} 205
`;

describe("bench: the gateway's young-generation collections", () => {
  it('reads the minor collections from /metrics, not the other kinds', async () => {
    const server = http.createServer((req, res) => res.end(req.url === '/metrics' ? METRICS : ''));
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const reading = await readGatewayGc(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
      assert.deepEqual(reading, { count: 205, seconds: 0.6063796619959174 });
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

  it('gives the collections, mean pause and paused share of the window', () => {
    const gc = gcOverWindow({ count: 100, seconds: 0.5 }, { count: 180, seconds: 0.9 }, 20);
    assert.equal(gc.collections, 80);
    assert.ok(Math.abs(gc.meanPauseMs - 5) < 1e-9);
    assert.ok(Math.abs(gc.pausedShare - 0.02) < 1e-9);
    assert.deepEqual(gcOverWindow({ count: 7, seconds: 0.1 }, { count: 7, seconds: 0.1 }, 20), { collections: 0, meanPauseMs: 0, pausedShare: 0 });
  });
});
