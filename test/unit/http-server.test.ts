import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import type http from 'node:http';
import type { AddressInfo } from 'node:net';
import express, { type Express } from 'express';
import { expressServer, slowClientTimeouts } from '../../apps/gateway/src/http/http-server.ts';
import { loadGatewayConfig } from '@tserve/config';

describe('expressServer: requests born with the app’s prototypes', () => {
  let app: Express;
  let server: http.Server;
  let base: string;
  const born: Array<{ request: object | null; response: object | null }> = [];

  before(async () => {
    app = express();
    const sub = express();
    sub.get('/inner', (req, res) => res.json({ sub: req.app === sub, path: req.path }));
    // The sub-app hands the request back: the parent's prototypes must be restored for the routes after it.
    sub.get('/through', (_req, _res, next) => next());
    app.use('/sub', sub);
    app.get('/sub/through', (req, res) => res.json({ app: req.app === app, header: req.get('x-probe') ?? null }));
    app.post('/echo', express.json(), (req, res) =>
      res.status(201).json({ app: req.app === app, body: req.body as unknown, header: req.get('x-probe') ?? null }),
    );
    server = expressServer(app, { headersTimeout: 5000 }, () => {});
    // Before Express's own listener: what Node created, before Express could change it.
    server.prependListener('request', (req: http.IncomingMessage, res: http.ServerResponse) => {
      born.push({ request: Object.getPrototypeOf(req) as object, response: Object.getPrototypeOf(res) as object });
    });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(() => {
    server.closeAllConnections();
    server.close();
  });

  it('creates each request and response with the app’s prototypes, so that Express need not change them', async () => {
    born.length = 0;
    const res = await fetch(`${base}/echo`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-probe': 'p' },
      body: '{"a":1}',
    });
    assert.equal(res.status, 201);
    assert.deepEqual(await res.json(), { app: true, body: { a: 1 }, header: 'p' });
    assert.equal(born.length, 1);
    assert.equal(born[0].request, app.request, 'the request was born with the app’s request prototype');
    assert.equal(born[0].response, app.response, 'the response was born with the app’s response prototype');
  });

  it('keeps the server options it is given', () => {
    assert.equal(server.headersTimeout, 5000);
  });

  it('serves a mounted sub-app, and the parent’s routes after a sub-app hands a request back', async () => {
    const inner = await fetch(`${base}/sub/inner`);
    assert.deepEqual(await inner.json(), { sub: true, path: '/inner' });
    const through = await fetch(`${base}/sub/through`, { headers: { 'x-probe': 'q' } });
    assert.deepEqual(await through.json(), { app: true, header: 'q' });
  });

  it('answers an unknown route with Express’s own 404', async () => {
    const res = await fetch(`${base}/nowhere`);
    assert.equal(res.status, 404);
    await res.arrayBuffer();
  });
});

describe('slowClientTimeouts', () => {
  it('gives Node whole milliseconds whatever REQUEST_TIMEOUT_MS (5000 used to crash the gateway at start)', () => {
    for (const timeout of ['5000', '10000', '30000', '7']) {
      const config = loadGatewayConfig({ REQUEST_TIMEOUT_MS: timeout });
      const options = slowClientTimeouts(config.HTTP_HEADERS_TIMEOUT_MS, config.HTTP_REQUEST_TIMEOUT_MS);
      assert.ok(
        Number.isInteger(options.connectionsCheckingInterval),
        `${timeout}: ${options.connectionsCheckingInterval}`,
      );
      // Node's own check of the options: it throws where it would refuse them.
      expressServer(express(), options, () => {}).close();
    }
  });
});
