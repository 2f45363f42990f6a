import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { DashboardAuth, isForeignWrite, readCookie } from '../../apps/gateway/src/ops/dashboard-auth.ts';

const basic = (user: string, password: string) => `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;

describe('dashboard authentication', () => {
  const both = new DashboardAuth({ user: 'admin', password: 'pw', token: 'tok' }, '/admin/queues', 'realm');
  const basicOnly = new DashboardAuth({ user: 'admin', password: 'pw' }, '/admin/queues', 'realm');
  const tokenOnly = new DashboardAuth({ token: 'tok' }, '/admin/queues', 'realm');

  it('lets in the right basic-auth user and password, and nothing near them', () => {
    assert.ok(both.allows(basic('admin', 'pw'), undefined));
    assert.ok(!both.allows(basic('admin', 'wrong'), undefined));
    assert.ok(!both.allows(basic('other', 'pw'), undefined));
    assert.ok(!both.allows(basic('admin', 'pw:'), undefined), 'the password is all after the first colon');
    assert.ok(!both.allows(`Basic ${Buffer.from('adminpw').toString('base64')}`, undefined), 'no colon');
    assert.ok(!tokenOnly.allows(basic('admin', 'pw'), undefined), 'basic auth off without a user and password');
  });

  it('lets in the bearer token, and only where a token is configured', () => {
    assert.ok(both.allows('Bearer tok', undefined));
    assert.ok(!both.allows('Bearer to', undefined));
    assert.ok(!both.allows('tok', undefined));
    assert.ok(!basicOnly.allows('Bearer ', undefined));
    assert.ok(!basicOnly.allows('', undefined));
  });

  it('gives a session cookie that is not the token, and lets it in', () => {
    assert.ok(tokenOnly.session);
    assert.notEqual(tokenOnly.session, 'tok');
    assert.ok(!tokenOnly.session.includes('tok'));
    assert.ok(tokenOnly.allows('', tokenOnly.session));
    assert.ok(!tokenOnly.allows('', 'forged'));
    assert.equal(basicOnly.session, undefined);
    assert.ok(!basicOnly.allows('', ''), 'no cookie works without a token');
    const other = new DashboardAuth({ token: 'other' }, '/admin/queues', 'realm');
    assert.ok(!other.allows('', tokenOnly.session), 'a session is bound to its token');
  });

  it('checks a ?token= login', () => {
    assert.ok(tokenOnly.tokenMatches('tok'));
    assert.ok(!tokenOnly.tokenMatches('tok '));
    assert.ok(!basicOnly.tokenMatches('tok'));
  });

  it('challenges with each way in and says how to get in', () => {
    assert.deepEqual(both.challenges, ['Basic realm="realm", charset="UTF-8"', 'Bearer realm="realm"']);
    assert.deepEqual(basicOnly.challenges, ['Basic realm="realm", charset="UTF-8"']);
    assert.match(tokenOnly.how, /\/admin\/queues\?token=<DASHBOARD_TOKEN>/);
    assert.doesNotMatch(tokenOnly.how, /DASHBOARD_USER/);
  });

  it('reads its cookie among others', () => {
    assert.equal(readCookie('a=1; tserve_dashboard=xyz; b=2', 'tserve_dashboard'), 'xyz');
    assert.equal(readCookie('tserve_dashboardx=1', 'tserve_dashboard'), undefined);
    assert.equal(readCookie(undefined, 'tserve_dashboard'), undefined);
  });
});

describe('dashboard writes from other sites', () => {
  it('lets reads through from anywhere', () => {
    assert.ok(!isForeignWrite({ method: 'GET', secFetchSite: 'cross-site' }));
    assert.ok(!isForeignWrite({ method: 'HEAD', origin: 'https://evil.example', host: 'gw:8000' }));
  });

  it('trusts Sec-Fetch-Site first, then Origin against Host', () => {
    assert.ok(isForeignWrite({ method: 'PUT', secFetchSite: 'cross-site', origin: 'http://gw:8000', host: 'gw:8000' }));
    assert.ok(isForeignWrite({ method: 'PUT', secFetchSite: 'same-site' }));
    assert.ok(
      !isForeignWrite({ method: 'PUT', secFetchSite: 'same-origin', origin: 'https://evil.example', host: 'gw:8000' }),
    );
    assert.ok(!isForeignWrite({ method: 'PUT', secFetchSite: 'none' }));
    assert.ok(isForeignWrite({ method: 'POST', origin: 'https://evil.example', host: 'gw:8000' }));
    assert.ok(isForeignWrite({ method: 'POST', origin: 'not a url', host: 'gw:8000' }));
    assert.ok(!isForeignWrite({ method: 'POST', origin: 'http://gw:8000', host: 'gw:8000' }));
  });

  it('lets through clients that are not browsers (neither header)', () => {
    assert.ok(!isForeignWrite({ method: 'DELETE', host: 'gw:8000' }));
  });
});
