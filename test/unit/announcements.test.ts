import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Announcements } from '../../apps/worker/src/transport/announcements.ts';

describe('Announcements', () => {
  it('expects jobs at the start, until a fetch finds the queue empty', () => {
    const a = new Announcements();
    assert.equal(a.expecting, true);
    assert.equal(a.waiting, undefined, 'the queue must be asked');
    a.fetched(1, 1);
    assert.equal(a.expecting, true, 'a backlog is fetched until it is empty');
    a.fetched(1, 0);
    assert.equal(a.expecting, false);
    assert.equal(a.waiting, 0);
  });

  it('counts announced jobs down as they are fetched', () => {
    const a = new Announcements();
    a.fetched(1, 0);
    a.heard(3, false);
    assert.equal(a.expecting, true);
    assert.equal(a.waiting, 3);
    a.fetched(2, 2);
    assert.equal(a.waiting, 1);
    a.fetched(1, 1);
    assert.equal(a.expecting, false, 'a lone job costs one fetch: none is made after it');
  });

  it('forgets what was announced once a fetch comes back short: another worker took it', () => {
    const a = new Announcements();
    a.fetched(1, 0);
    a.heard(4, false);
    a.fetched(4, 1);
    assert.equal(a.expecting, false);
    assert.equal(a.waiting, 0);
  });

  it('drains the queue again when a poll finds a job nobody announced', () => {
    const a = new Announcements();
    a.fetched(1, 0);
    a.fetched(1, 1, true);
    assert.equal(a.expecting, true);
    assert.equal(a.waiting, undefined);
    a.fetched(1, 0, false);
    assert.equal(a.expecting, false);
  });

  it('a poll that finds nothing leaves the worker waiting for notices', () => {
    const a = new Announcements();
    a.fetched(1, 0);
    a.fetched(1, 0, true);
    assert.equal(a.expecting, false);
  });

  it("takes the queue's own count over what the notices told", () => {
    const a = new Announcements();
    a.heard(5, false);
    a.counted(2);
    assert.equal(a.waiting, 2);
    a.counted(0);
    assert.equal(a.expecting, false);
  });

  it('tells once that interactive jobs were announced, and not for batch-class ones', () => {
    const a = new Announcements();
    a.heard(2, false);
    assert.equal(a.interactiveSinceAsked(), false);
    a.heard(1, true);
    a.heard(1, false);
    assert.equal(a.interactiveSinceAsked(), true);
    assert.equal(a.interactiveSinceAsked(), false, 'asked again with nothing new announced');
  });
});
