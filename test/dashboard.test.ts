/**
 * The bull-board queue dashboard at /admin/queues: off (404) unless credentials are configured,
 * 401 without them, read-only on request, and a real browser sees each served model's queue.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { queueNameFor } from '@tserve/queue';
import { ROOT, TestSystem, uniquePrefix } from './helpers/system.ts';
import { CLASSIFIER as MODEL } from './helpers/replicas.ts';
import { foreignRequests, launchBrowser, noBrowser } from './helpers/browser.ts';

const QUEUE = queueNameFor(MODEL);
const USER = 'ops';
const PASSWORD = `pw-${Math.random().toString(36).slice(2)}`;
const TOKEN = `tok-${Math.random().toString(36).slice(2)}`;
const SCREENSHOT = path.join(ROOT, 'test/artifacts/dashboard.png');

const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

describe('queue dashboard', () => {
  const system = new TestSystem(uniquePrefix('dashboard'));
  // Same prefix, so it sees the same worker and queue; its settings differ.
  const tokenGateway = new TestSystem(system.prefix);
  const plain = new TestSystem(uniquePrefix('dashboard-off'));

  before(async () => {
    await system.startGateway({ DASHBOARD_USER: USER, DASHBOARD_PASSWORD: PASSWORD });
    await tokenGateway.startGateway({ DASHBOARD_TOKEN: TOKEN, DASHBOARD_READONLY: 'true' });
    await plain.startGateway();
    system.startWorker({ model: MODEL });
    await system.waitForWorkers(MODEL);
    await tokenGateway.waitForWorkers(MODEL);
    // Ordinary (interactive) requests, a burst of them: the first goes alone, the rest coalesce behind it.
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) => system.infer(MODEL, `a job for the board to show, number ${i}`)),
    );
    for (const res of answers) assert.equal(res.status, 200, JSON.stringify(res.body));
  });
  after(async () => {
    await plain.stop();
    await tokenGateway.stop();
    await system.stop();
  });

  it('is off, with a 404 saying how to turn it on, when no credentials are configured', async () => {
    for (const pathname of ['/admin/queues', '/admin/queues/api/queues']) {
      const res = await fetch(`${plain.url}${pathname}`, { headers: { authorization: basic(USER, PASSWORD) } });
      assert.equal(res.status, 404);
      assert.match(res.headers.get('content-type') ?? '', /application\/json/);
      const body = (await res.json()) as { error: string; error_type: string };
      assert.equal(body.error_type, 'not_found');
      assert.match(body.error, /DASHBOARD_USER/);
      assert.match(body.error, /DASHBOARD_TOKEN/);
    }
  });

  it('answers 401 with a basic-auth challenge without the right credentials', async () => {
    for (const authorization of [undefined, basic(USER, 'wrong'), basic('someone', PASSWORD), `Bearer ${PASSWORD}`]) {
      for (const pathname of ['/admin/queues', '/admin/queues/api/queues', '/admin/queues/static/favicon-32x32.png']) {
        const res = await fetch(`${system.url}${pathname}`, { headers: authorization ? { authorization } : {} });
        assert.equal(res.status, 401, `${pathname} with ${authorization}`);
        assert.match(res.headers.get('www-authenticate') ?? '', /^Basic realm="[^"]+"/);
        const body = (await res.json()) as { error: string; error_type: string };
        assert.equal(body.error_type, 'unauthorized');
        assert.ok(!JSON.stringify(body).includes(PASSWORD), 'the answer never echoes a credential');
      }
    }
  });

  it('serves the board and its queue API with the right credentials', async () => {
    const authorization = basic(USER, PASSWORD);
    const page = await fetch(`${system.url}/admin/queues`, { headers: { authorization } });
    assert.equal(page.status, 200);
    const html = await page.text();
    assert.match(html, /<base href="\/admin\/queues\/"/);
    assert.doesNotMatch(html, /(src|href)="([a-z]+:)?\/\//i, 'the page links another origin');
    assert.match(html, /href="static\/css\/[^"]+\.css"/, 'its own stylesheet is still linked');
    const api = await fetch(`${system.url}/admin/queues/api/queues`, { headers: { authorization } });
    assert.equal(api.status, 200);
    const body = (await api.json()) as {
      queues: Array<{ name: string; readOnlyMode: boolean; counts: Record<string, number> }>;
    };
    const queue = body.queues.find((q) => q.name === QUEUE);
    assert.ok(queue, `queues: ${body.queues.map((q) => q.name).join(', ')}`);
    assert.equal(queue.readOnlyMode, false);
    assert.ok(queue.counts.completed >= 1, JSON.stringify(queue.counts));
  });

  it('refuses changes sent from another site', async () => {
    const res = await fetch(`${system.url}/admin/queues/api/queues/${QUEUE}/resume`, {
      method: 'PUT',
      headers: { authorization: basic(USER, PASSWORD), origin: 'https://elsewhere.example' },
    });
    assert.equal(res.status, 403);
    assert.equal(((await res.json()) as { error_type: string }).error_type, 'forbidden');
    const fromSibling = await fetch(`${system.url}/admin/queues/api/queues/${QUEUE}/resume`, {
      method: 'PUT',
      headers: { authorization: basic(USER, PASSWORD), 'sec-fetch-site': 'same-site' },
    });
    assert.equal(fromSibling.status, 403);
  });

  it('takes a bearer token, or a ?token= login that sets a cookie; read-only refuses changes', async () => {
    const refused = await fetch(`${tokenGateway.url}/admin/queues/api/queues`, {
      headers: { authorization: 'Bearer wrong' },
    });
    assert.equal(refused.status, 401);
    assert.match(refused.headers.get('www-authenticate') ?? '', /^Bearer realm=/);

    const api = await fetch(`${tokenGateway.url}/admin/queues/api/queues`, {
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(api.status, 200);
    const queue = ((await api.json()) as { queues: Array<{ name: string; readOnlyMode: boolean }> }).queues.find(
      (q) => q.name === QUEUE,
    );
    assert.equal(queue?.readOnlyMode, true);
    const pause = await fetch(`${tokenGateway.url}/admin/queues/api/queues/${QUEUE}/pause`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKEN}` },
    });
    assert.equal(pause.status, 405, 'read-only: the queue cannot be paused');
    assert.equal((await system.infer(MODEL, 'still served')).status, 200);

    const login = await fetch(`${tokenGateway.url}/admin/queues?token=${TOKEN}`, { redirect: 'manual' });
    assert.equal(login.status, 303);
    assert.equal(login.headers.get('location'), '/admin/queues', 'the token is dropped from the address');
    const cookie = login.headers.get('set-cookie') ?? '';
    assert.match(cookie, /HttpOnly/);
    assert.match(cookie, /SameSite=Strict/);
    assert.ok(!cookie.includes(TOKEN), 'the cookie does not hold the token itself');
    const withCookie = await fetch(`${tokenGateway.url}/admin/queues/api/queues`, {
      headers: { cookie: cookie.split(';')[0] },
    });
    assert.equal(withCookie.status, 200);
    const badLogin = await fetch(`${tokenGateway.url}/admin/queues?token=wrong`, { redirect: 'manual' });
    assert.equal(badLogin.status, 401);
  });

  it(
    "shows the model's queue in a browser, with the jobs of ordinary requests and how many each carries",
    { skip: noBrowser },
    async () => {
      const browser = await launchBrowser();
      try {
        const context = await browser.newContext({
          httpCredentials: { username: USER, password: PASSWORD },
          viewport: { width: 1280, height: 800 },
        });
        const page = await context.newPage();
        // The dashboard must work on a private network: nothing outside the gateway is even asked for
        // (bull-board's own page links a public font CDN, which the gateway leaves out). Such requests
        // are recorded, and aborted so that none leaves this machine.
        const foreign = await foreignRequests(page, system.url);
        await page.goto(`${system.url}/admin/queues`);
        await page.getByText(QUEUE).first().waitFor({ state: 'visible', timeout: 30_000 });
        // Open the model's queue and wait for its job list, so the screenshot shows the board, not its spinner.
        await page.getByText(QUEUE).first().click();
        await page
          .getByText(/completed/i)
          .first()
          .waitFor({ state: 'visible', timeout: 30_000 });
        // The completed jobs of the interactive requests sent above, each named with its request count.
        await page.goto(`${system.url}/admin/queues/queue/${encodeURIComponent(QUEUE)}?status=completed`);
        await page
          .getByText(/infer ×\d+/)
          .first()
          .waitFor({ state: 'visible', timeout: 30_000 });
        const shown = (await page.getByText(/infer ×\d+/).allInnerTexts()).map((text) =>
          Number(/×(\d+)/.exec(text)![1]),
        );
        assert.ok(shown.length > 0 && shown.every((n) => n >= 1), `requests per job shown: ${shown.join(', ')}`);
        await page
          .getByText(/Loading/)
          .waitFor({ state: 'detached', timeout: 30_000 })
          .catch(() => {});
        fs.mkdirSync(path.dirname(SCREENSHOT), { recursive: true });
        await page.screenshot({ path: SCREENSHOT, fullPage: true });
        assert.ok(fs.statSync(SCREENSHOT).size > 10_000, 'screenshot written');
        // The board's own pages may still change things (resuming a running queue changes nothing).
        const status = await page.evaluate(
          (queue) => fetch(`api/queues/${queue}/resume`, { method: 'PUT' }).then((r) => r.status),
          QUEUE,
        );
        assert.equal(status, 200);
        assert.deepEqual(foreign, [], 'the dashboard asked for resources from other origins');
      } finally {
        await browser.close();
      }
    },
  );
});
