// docs/operations.md "State checks": at each `check` entry every node hashes its state at that index
// over later event-loop turns (never inside apply), and compares the digest the entry carries with
// its own. A replica whose state differs stops serving and reports `failure`; compaction and digest
// runs share the broker's one snapshot cursor without cancelling each other.
import assert from 'node:assert/strict';
import { connect as tcpConnect } from 'node:net';
import { describe, it } from 'node:test';
import { Broker } from '../src/broker/broker.js';
import type { Command, Entry } from '../src/broker/commands.js';
import { contractSettings } from '../src/log/broker-log.contract.js';
import type { BrokerLog, LogListener } from '../src/log/broker-log.js';
import { BrokerNode } from '../src/server/broker-node.js';
import { nodeOptions, WAIT_MS, withTimeout } from './helpers.js';
import { until } from './support/wait.js';

/** A log whose entries the test commits, one batch per call; serving once serveStart() ran. */
class FeedLog implements BrokerLog {
  listener: LogListener | null = null;
  private index = 0;
  private period = 0;
  readonly accepting = true;
  get serving(): boolean {
    return this.period !== 0;
  }
  checkServing(): boolean {
    return this.serving;
  }
  get servePeriod(): number {
    return this.period;
  }
  now(): number {
    return 1_700_000_000_000 + this.index;
  }
  start(listener: LogListener): void {
    this.listener = listener;
  }
  updateSettings(): void {}
  propose(): void {}
  async stop(): Promise<void> {
    this.period = 0;
  }
  get lastIndex(): number {
    return this.index;
  }
  commit(cmds: Command[]): void {
    const entries: Entry[] = cmds.map((cmd) => ({ index: ++this.index, time: this.now(), cmd }));
    this.listener?.committed(entries);
  }
  serveStart(): void {
    this.commit([{ t: 'serve-start', node: 1, settings: contractSettings }]);
    this.period = this.index;
    this.listener?.serving(true, this.period);
  }
}

const connectCmd = (conn: string, clientId: string): Command => ({
  t: 'connect',
  conn,
  clientId,
  protocol: 5,
  clean: false,
  expiryS: 3600,
  will: null,
  username: null,
  receiveMax: 65535,
  maxPacketSize: 0,
  problemInfo: true,
});

/** Sessions enough that a digest run takes several slices. */
const SESSIONS = 3_000;
const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

/** A node over a FeedLog, not started (a follower), with SESSIONS sessions applied. */
interface Replica {
  node: BrokerNode;
  log: FeedLog;
}

function follower(): Replica {
  const log = new FeedLog();
  const node = new BrokerNode(nodeOptions(), log);
  log.start(node);
  log.commit([{ t: 'serve-start', node: 2, settings: contractSettings }]);
  const cmds: Command[] = [];
  for (let i = 0; i < SESSIONS; i++) cmds.push(connectCmd(`1.${i + 1}`, `c${i}`));
  log.commit(cmds);
  return { node, log };
}

/** The canonical digest of a node's snapshot at its last applied entry. */
function digestOf(chunks: Iterable<Uint8Array> | null): string {
  assert.ok(chunks !== null, 'a snapshot was given');
  const b = new Broker();
  b.restore(chunks);
  return b.digest();
}

describe('state checks', { timeout: 30_000 }, () => {
  it('hashes the state after the check entry, over later turns, and equals the state at that index', async () => {
    const { node, log } = follower();
    log.commit([{ t: 'check', atIndex: 0, digest: '' }]);
    const at = log.lastIndex;
    assert.equal(node.lastCheck, null, 'nothing hashed inside the apply turn');
    assert.equal(node.digestRunning, at);
    // Entries keep coming while the run is open; the digest is still the one at the check.
    log.commit([connectCmd('1.99999', 'late'), { t: 'tick' }]);
    await until('the digest run ends', () => node.lastCheck !== null);
    // A twin that applies a tick at the check's index has the same state there (neither command
    // changes more than the index and time), and no run holds its cursor.
    const { node: twin, log: twinLog } = follower();
    twinLog.commit([{ t: 'tick' }]);
    const atCheck = digestOf(twin.snapshot());
    assert.notEqual(digestOf(node.snapshot()), atCheck, 'the state moved on since');
    assert.deepEqual(node.lastCheck, { index: at, digest: atCheck });
    await Promise.all([node.stop(), twin.stop()]);
  });

  it('a replica whose state differs stops serving and reports the mismatch; the others pass', async () => {
    const a = follower();
    const b = follower();
    // b serves, and one entry of its log differs from a's at the same index.
    const started = b.node.start();
    b.log.serveStart();
    await withTimeout(started, WAIT_MS, 'listening');
    try {
      await mismatchStopsServing(a, b);
    } finally {
      await Promise.all([a.node.stop(), b.node.stop()]);
    }
  });

  async function mismatchStopsServing(a: Replica, b: Replica): Promise<void> {
    a.log.commit([{ t: 'serve-start', node: 1, settings: contractSettings }, { t: 'tick' }]);
    b.log.commit([connectCmd(`${b.log.servePeriod}.1`, 'only-on-b')]);
    for (const r of [a, b]) r.log.commit([{ t: 'check', atIndex: 0, digest: '' }]);
    await until('both digests', () => a.node.lastCheck !== null && b.node.lastCheck !== null);
    const leaders = a.node.lastCheck;
    assert.ok(leaders !== null);
    assert.notEqual(b.node.lastCheck?.digest, leaders.digest);
    for (const r of [a, b]) r.log.commit([{ t: 'check', atIndex: leaders.index, digest: leaders.digest }]);
    assert.equal(a.node.failure, null);
    assert.equal(b.node.failure, `digest mismatch at ${leaders.index}`);
    assert.equal(a.node.counters.get('check-match'), 1);
    const port = b.node.port;
    await until('b stopped listening', () => b.node.connectionCount === 0);
    const refused = await new Promise<boolean>((resolve) => {
      const s = tcpConnect(port, '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(false);
      });
      s.once('error', () => resolve(true));
    });
    assert.ok(refused, 'no MQTT listener on the failed node');
  }

  it('compares a check that arrives while its run is still open once the run ends', async () => {
    const a = follower();
    const b = follower();
    a.log.commit([{ t: 'check', atIndex: 0, digest: '' }]);
    await until('a digest', () => a.node.lastCheck !== null);
    const leaders = a.node.lastCheck;
    assert.ok(leaders !== null);
    // b applies the check and the next one in one batch, as a follower catching up does.
    b.log.commit([
      { t: 'check', atIndex: 0, digest: '' },
      { t: 'check', atIndex: leaders.index, digest: 'f'.repeat(64) },
    ]);
    assert.equal(b.node.failure, null, 'the run has not ended yet');
    assert.equal(b.node.counters.get('digest-skipped'), 1, 'the second check found the run open');
    await until('the verdict', () => b.node.failure !== null);
    assert.equal(b.node.failure, `digest mismatch at ${leaders.index}`);
    await Promise.all([a.node.stop(), b.node.stop()]);
  });

  it('counts a check for an index it never hashed, without failing', async () => {
    const { node, log } = follower();
    log.commit([{ t: 'check', atIndex: 2, digest: 'f'.repeat(64) }]);
    await until('the run ends', () => node.lastCheck !== null);
    assert.equal(node.counters.get('check-unknown'), 1);
    assert.equal(node.failure, null);
    await node.stop();
  });

  it('defers compaction while a run is open, and skips a run while a compaction cursor is open', async () => {
    const { node, log } = follower();
    log.commit([{ t: 'check', atIndex: 0, digest: '' }]);
    assert.equal(node.snapshot(), null, 'compaction asks again later');
    await until('the run ends', () => node.lastCheck !== null);
    const compaction = node.snapshot();
    assert.ok(compaction !== null);
    const chunks: Uint8Array[] = [];
    const it = compaction[Symbol.iterator]();
    const first = it.next();
    if (first.done !== true) chunks.push(first.value);
    log.commit([{ t: 'check', atIndex: 0, digest: '' }]);
    assert.equal(node.counters.get('digest-skipped'), 1, 'the check found the compaction cursor open');
    assert.equal(node.digestRunning, null);
    for (let r = it.next(); r.done !== true; r = it.next()) chunks.push(r.value);
    await turn();
    const restored = new Broker();
    restored.restore(chunks);
    assert.equal(restored.appliedIndex, log.lastIndex - 1, 'the compaction cursor read to its end at its own index');
    await node.stop();
  });
});
