import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Entry } from '../broker/commands.js';
import { brokerLogContract, contractSettings } from './broker-log.contract.js';
import { LocalLog } from './local-log.js';

brokerLogContract('LocalLog', async () => {
  const log = new LocalLog({ node: 1, settings: contractSettings });
  return { log, dispose: () => log.stop() };
});

describe('LocalLog', { timeout: 10_000 }, () => {
  it('keeps time from going backwards when the wall clock steps back', async () => {
    let wall = 10_000;
    const log = new LocalLog({ node: 1, settings: contractSettings, clock: () => wall });
    const entries: Entry[] = [];
    log.start({ committed: (e) => entries.push(...e), serving: () => {}, drain: () => {} });
    await new Promise((r) => setImmediate(r));
    wall = 5_000;
    log.propose({ t: 'tick' });
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(entries.map((e) => e.time), [10_000, 10_000]);
    await log.stop();
  });

  it('turns accepting off over its pending bound and reports drain after the flush', async () => {
    const log = new LocalLog({ node: 1, settings: contractSettings, pendingBytesMax: 100 });
    let drains = 0;
    log.start({ committed: () => {}, serving: () => {}, drain: () => drains++ });
    await new Promise((r) => setImmediate(r));
    const drainsBefore = drains;
    const payload = new Uint8Array(200);
    log.propose({ t: 'publish', conn: '1.1', pid: 1, msg: { topic: 't', payload, qos: 1, retain: false } });
    assert.equal(log.accepting, false);
    await new Promise((r) => setImmediate(r));
    assert.equal(log.accepting, true);
    assert.equal(drains, drainsBefore + 1);
    await log.stop();
  });
});
