import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Command, Entry } from '../broker/commands.js';
import { brokerLogContract, contractSettings } from './broker-log.contract.js';
import { CONNECT_COST, LocalLog } from './local-log.js';

function connectCmd(conn: string): Command {
  return {
    t: 'connect',
    conn,
    clientId: conn,
    protocol: 4,
    clean: true,
    expiryS: 0,
    will: null,
    username: null,
    receiveMax: 65535,
    maxPacketSize: 0,
    problemInfo: true,
  };
}

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
    assert.deepEqual(
      entries.map((e) => e.time),
      [10_000, 10_000],
    );
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
  it('commits a large turn of proposals over several turns, in order, at most the per-turn bound each', async () => {
    // A turn of thousands of proposals (every client disconnecting at once) must not become one
    // event-loop turn of apply; proposals made while committing go after the ones still waiting.
    const log = new LocalLog({ node: 1, settings: contractSettings, entriesPerTurnMax: 3 });
    const batches: Entry[][] = [];
    log.start({
      committed: (e) => {
        batches.push([...e]);
        if (batches.length === 1) log.propose({ t: 'ack', conn: '1.1', pid: 99, kind: 'puback' });
      },
      serving: () => {},
      drain: () => {},
    });
    await new Promise((r) => setImmediate(r));
    batches.length = 0;
    for (let pid = 1; pid <= 8; pid++) log.propose({ t: 'ack', conn: '1.1', pid, kind: 'puback' });
    for (let turn = 0; turn < 5; turn++) await new Promise((r) => setImmediate(r));
    assert.deepEqual(
      batches.map((b) => b.length),
      [3, 3, 3],
    );
    const all = batches.flat();
    assert.deepEqual(
      all.map((e) => (e.cmd as { pid: number }).pid),
      [1, 2, 3, 4, 5, 6, 7, 8, 99],
    );
    for (let i = 1; i < all.length; i++) assert.equal(all[i]!.index, all[i - 1]!.index + 1);
    await log.stop();
  });

  it('counts a connect as CONNECT_COST entries of a turn, and commits at least one entry per turn', async () => {
    // Thousands of clients reconnecting at once: each connect may resume a session and send its
    // queued messages, so a turn holds fewer of them than of other entries.
    const log = new LocalLog({ node: 1, settings: contractSettings, entriesPerTurnMax: CONNECT_COST * 2 + 1 });
    const batches: string[][] = [];
    log.start({ committed: (e) => batches.push(e.map((x) => x.cmd.t)), serving: () => {}, drain: () => {} });
    await new Promise((r) => setImmediate(r));
    batches.length = 0;
    for (let i = 0; i < 5; i++) log.propose(connectCmd(`1.${i}`));
    log.propose({ t: 'ack', conn: '1.1', pid: 1, kind: 'puback' });
    for (let turn = 0; turn < 5; turn++) await new Promise((r) => setImmediate(r));
    assert.deepEqual(batches, [
      ['connect', 'connect'],
      ['connect', 'connect'],
      ['connect', 'ack'],
    ]);
    await log.stop();

    const tiny = new LocalLog({ node: 1, settings: contractSettings, entriesPerTurnMax: 1 });
    const sizes: number[] = [];
    tiny.start({ committed: (e) => sizes.push(e.length), serving: () => {}, drain: () => {} });
    await new Promise((r) => setImmediate(r));
    sizes.length = 0;
    tiny.propose(connectCmd('1.1'));
    tiny.propose(connectCmd('1.2'));
    for (let turn = 0; turn < 3; turn++) await new Promise((r) => setImmediate(r));
    assert.deepEqual(sizes, [1, 1]);
    await tiny.stop();
  });
});
