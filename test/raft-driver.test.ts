// RaftDriver in one process: three drivers over real loopback transports, and a hand-driven raw peer
// for what a well-behaved node never sends. Waits are bounded; nothing asserts speed.
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import type { LogEntry, Message } from '../raft/core/messages.js';
import { staticEnvelope } from '../raft/core/test-cluster.js';
import { type DriverLogger, RaftDriver } from '../raft/driver/driver.js';
import { type RaftWireCodec, type RaftWireOptions, raftWireCodec } from '../raft/driver/wire-codec.js';
import { encodeFrame } from '../raft/transport/frame.js';
import { Transport } from '../raft/transport/transport.js';
import { frameOf, LOOPBACK, RawPeer, settle, waitFor } from '../raft/transport/transport-harness.testkit.js';

const E = 200;
const IDS = [1, 2, 3];

class Recorder implements DriverLogger {
  readonly lines: Array<{ level: string; fields: Record<string, unknown>; msg: string }> = [];
  info(fields: Record<string, unknown>, msg: string): void {
    this.lines.push({ level: 'info', fields, msg });
  }
  warn(fields: Record<string, unknown>, msg: string): void {
    this.lines.push({ level: 'warn', fields, msg });
  }
  error(fields: Record<string, unknown>, msg: string): void {
    this.lines.push({ level: 'error', fields, msg });
  }
}

interface Harness {
  driver: RaftDriver;
  transport: Transport<Message>;
  codec: RaftWireCodec;
  logger: Recorder;
  committed: LogEntry[];
  sent: Message[];
  /** While true, this node's append responses are kept in `withheld` instead of sent. */
  withhold: boolean;
  withheld: Array<[number, Message]>;
  /** Append responses handed to the transport and not yet flushed. */
  unflushed: number;
  /** For each batch this node applied while not leading: the append responses still unflushed. */
  unflushedAtApply: number[];
}

let running: Harness[] = [];
let raws: RawPeer[] = [];
afterEach(async () => {
  for (const r of raws) r.destroy();
  await Promise.all(running.map((h) => h.driver.stop()));
  running = [];
  raws = [];
});

interface DriverOptions {
  uncommittedBytesMax?: number;
  holdMs?: number;
  /** The transport writes only when the driver flushes, as in RaftLog. */
  callerFlushes?: boolean;
  /** The wire codec's options; by default the hot messages go in the layout. */
  wire?: (id: number) => RaftWireOptions;
}

function makeDriver(id: number, opts: DriverOptions = {}): Harness {
  const logger = new Recorder();
  const h = {
    logger,
    committed: [],
    sent: [],
    withhold: false,
    withheld: [],
    unflushed: 0,
    unflushedAtApply: [],
    codec: raftWireCodec(opts.wire?.(id)),
  } as unknown as Harness;
  h.driver = new RaftDriver({
    id,
    voters: IDS,
    electionTimeoutMs: E,
    logger,
    seed: id,
    ...(opts.uncommittedBytesMax === undefined ? {} : { uncommittedBytesMax: opts.uncommittedBytesMax }),
    ...(opts.holdMs === undefined ? {} : { holdMs: opts.holdMs }),
    onCommitted: (entries) => {
      if (h.driver.currentRole !== 'leader') h.unflushedAtApply.push(h.unflushed);
      h.committed.push(...entries);
    },
    transport: (validate) => {
      h.transport = new Transport<Message>({
        nodeId: id,
        incarnation: `inc-${id}`,
        clusterId: 'test',
        epoch: { generation: 1, id: 'e1' },
        listen: { host: LOOPBACK, port: 0 },
        peers: new Map(IDS.map((p) => [p, { host: LOOPBACK, port: 0 }])),
        logger,
        validate,
        codec: h.codec,
        random: () => 0.5,
        ...(opts.callerFlushes === true ? { callerFlushes: true } : {}),
      });
      // Record what the driver hands to the transport, then pass it on.
      const send = h.transport.send.bind(h.transport);
      h.transport.send = (to, m) => {
        if (h.withhold && m.type === 'append-response') {
          h.withheld.push([to, m]);
          return;
        }
        h.sent.push(m);
        if (m.type === 'append-response') h.unflushed++;
        send(to, m);
      };
      const flush = h.transport.flush.bind(h.transport);
      h.transport.flush = () => {
        h.unflushed = 0;
        flush();
      };
      return h.transport;
    },
  });
  running.push(h);
  return h;
}

async function startCluster(opts: DriverOptions = {}): Promise<Harness[]> {
  const hs = IDS.map((id) => makeDriver(id, opts));
  for (const h of hs) await h.driver.start();
  for (const h of hs) for (const o of hs) if (o !== h) h.transport.setPeerAddress(o.driver.id, o.transport.address());
  return hs;
}

async function leaderOf(hs: Harness[]): Promise<Harness> {
  let leader: Harness | undefined;
  await waitFor(
    'one leader that both followers know',
    () => {
      const ls = hs.filter((h) => h.driver.currentRole === 'leader');
      leader = ls.length === 1 ? ls[0] : undefined;
      return leader !== undefined && hs.every((h) => h.driver.leader === leader!.driver.id);
    },
    40 * E,
  );
  return leader!;
}

const bytes = (n: number, fill: number): Uint8Array => new Uint8Array(n).fill(fill);

describe('RaftDriver over loopback TCP', { timeout: 60_000 }, () => {
  test('proposals made in one event-loop turn travel as one append per follower', async () => {
    const hs = await startCluster();
    const leader = await leaderOf(hs);
    await waitFor('the leader entry to commit everywhere', () => hs.every((h) => h.committed.length >= 1), 10_000);
    leader.sent.length = 0;
    const tickets = Array.from({ length: 10 }, (_, k) => leader.driver.propose(bytes(100, k)));
    await waitFor(
      'the ten entries to commit on every node',
      () => hs.every((h) => h.committed.filter((e) => e.data !== null).length === 10),
      10_000,
    );
    const appends = leader.sent.filter((m) => m.type === 'append' && m.entries.length > 0);
    assert.equal(appends.length, 2, 'one append with entries to each of the two followers');
    for (const a of appends) assert.equal(a.type === 'append' && a.entries.length, 10);
    assert.ok(leader.codec.encoder.entryCache.hits >= 1, 'the second follower got the bytes encoded for the first');
    const first = leader.committed.find((e) => e.data !== null)!;
    assert.deepEqual(
      tickets.map((t) => (t instanceof Error ? t.message : t.index)),
      tickets.map((_, k) => first.index + k),
    );
    for (const h of hs) {
      assert.deepEqual(
        h.committed.filter((e) => e.data !== null).map((e) => e.data![0]),
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
        `node ${h.driver.id} applies in proposal order`,
      );
      assert.equal(h.driver.appliedIndex, h.committed.at(-1)!.index);
    }
  });

  test('a small batch waits while entries are in flight and goes as one append once they commit', async () => {
    // A hold far longer than the test: only the commit can release the batch.
    const hs = await startCluster({ holdMs: 60_000 });
    const leader = await leaderOf(hs);
    await waitFor('the leader entry to commit everywhere', () => hs.every((h) => h.committed.length >= 1), 10_000);
    const followers = hs.filter((h) => h !== leader);
    for (const f of followers) f.withhold = true;
    leader.sent.length = 0;
    leader.driver.propose(bytes(10, 1));
    await waitFor('the first entry held by both followers', () => followers.every((f) => f.withheld.length >= 1), 10_000);
    for (let k = 2; k <= 4; k++) {
      leader.driver.propose(bytes(10, k));
      await new Promise((r) => setImmediate(r));
      await new Promise((r) => setImmediate(r));
    }
    const withEntries = (): Message[] => leader.sent.filter((m) => m.type === 'append' && m.entries.length > 0);
    assert.equal(withEntries().length, 2, 'while the first entry is in flight only its own appends went out');
    for (const f of followers) {
      f.withhold = false;
      for (const [to, m] of f.withheld.splice(0)) f.transport.send(to, m);
    }
    await waitFor('all four entries to commit on the leader', () => leader.committed.filter((e) => e.data !== null).length === 4, 10_000);
    await waitFor('the held batch to reach both followers', () => withEntries().length >= 4, 10_000);
    const later = withEntries().slice(2);
    assert.deepEqual(
      later.map((m) => (m.type === 'append' ? m.entries.map((e) => e.data?.[0]) : [])),
      [
        [2, 3, 4],
        [2, 3, 4],
      ],
      'the three proposals of three turns went as one append to each follower',
    );
  });

  test('a follower writes its answers to the appends of a read before it applies what they committed', async () => {
    const hs = await startCluster({ callerFlushes: true });
    const leader = await leaderOf(hs);
    const followers = hs.filter((h) => h !== leader);
    for (let turn = 0; turn < 20; turn++) {
      for (let k = 0; k < 5; k++) leader.driver.propose(bytes(50, k));
      await new Promise((r) => setImmediate(r));
    }
    await waitFor('100 entries on every node', () => hs.every((h) => h.committed.filter((e) => e.data !== null).length === 100), 10_000);
    for (const f of followers) {
      assert.ok(f.unflushedAtApply.length >= 2, `node ${f.driver.id} applied in ${f.unflushedAtApply.length} batches`);
      assert.deepEqual(
        f.unflushedAtApply.filter((n) => n > 0),
        [],
        `node ${f.driver.id} applied with answers still queued`,
      );
    }
  });

  test('a node that writes msgpackr only serves with nodes that write the layout', async () => {
    const hs = await startCluster({ wire: (id) => ({ layout: id !== 1 }) });
    const leader = await leaderOf(hs);
    for (let k = 0; k < 5; k++) leader.driver.propose(bytes(50, k));
    await waitFor('five entries on every node', () => hs.every((h) => h.committed.filter((e) => e.data !== null).length === 5), 10_000);
    for (const h of hs) assert.equal(h.transport.stats().badFrames, 0);
  });

  test('a follower refuses proposals, naming the leader it knows', async () => {
    const hs = await startCluster();
    const leader = await leaderOf(hs);
    const follower = hs.find((h) => h !== leader)!;
    const r = follower.driver.propose(bytes(10, 1));
    assert.ok(r instanceof Error);
    assert.equal((r as Error & { code: string }).code, 'RAFT_NOT_LEADER');
    assert.equal(follower.driver.leader, leader.driver.id);
  });

  test('accepting turns false over the uncommitted-bytes bound and drain follows the commit', async () => {
    const hs = await startCluster({ uncommittedBytesMax: 1_000 });
    const leader = await leaderOf(hs);
    let drains = 0;
    leader.driver.on('drain', () => drains++);
    for (let k = 0; k < 20; k++) leader.driver.propose(bytes(100, k));
    assert.equal(leader.driver.accepting, false, '2,000 bytes proposed against a 1,000-byte bound');
    assert.equal(leader.driver.uncommittedBytes, 2_000);
    await waitFor('drain', () => drains === 1, 10_000);
    assert.equal(leader.driver.accepting, true);
    assert.equal(leader.driver.uncommittedBytes, 0);
  });

  test('status reports role, term, leader, indexes, per-peer contact and the lease of the leader', async () => {
    const hs = await startCluster();
    // Read the status of whichever node leads with a lease at that moment: on a loaded machine
    // leadership may move between finding the leader and reading its status.
    let s: ReturnType<RaftDriver['status']> | undefined;
    let leader: (typeof hs)[number] | undefined;
    await waitFor(
      'a leader with a lease, contact with a follower, and cluster time from the wall clocks',
      () => {
        for (const h of hs) {
          const st = h.driver.status();
          const heard = Object.values(st.lastContactAgoMs).some((v) => v !== null);
          // Cluster time follows the voters' wall clocks once the leader has samples from two that
          // agree; until then it is the log's last time (docs/design.md "Cluster time").
          const followsClocks = Math.abs(st.clusterTime - Date.now()) < 60_000;
          if (st.role === 'leader' && st.hasLease && heard && followsClocks) {
            s = st;
            leader = h;
            return true;
          }
        }
        return false;
      },
      20 * E,
    );
    assert.ok(s !== undefined && leader !== undefined);
    assert.equal(s.leader, leader.driver.id);
    assert.ok(s.term >= 1);
    assert.ok(s.commitIndex >= 1 && s.commitIndex <= s.lastIndex);
    assert.ok(Number.isInteger(s.clusterTime), 'cluster time is whole ms');
    for (const f of hs.filter((h) => h !== leader)) {
      assert.equal(f.driver.status().hasLease, false, 'a follower never holds a lease');
    }
  });

  test('stop() ends timers and traffic: a stopped leader sends nothing more', async () => {
    const hs = await startCluster();
    const leader = await leaderOf(hs);
    await leader.driver.stop();
    const sentAtStop = leader.sent.length;
    await settle(3 * E);
    assert.equal(leader.sent.length, sentAtStop, 'no heartbeat after stop');
    assert.equal(leader.driver.propose(bytes(1, 0)) instanceof Error, true);
    await waitFor(
      'a new leader among the two others',
      () => hs.filter((h) => h !== leader && h.driver.currentRole === 'leader').length === 1,
      40 * E,
    );
  });

  test('a message that fails validation closes its link, is logged, and never reaches the core', async () => {
    const h = makeDriver(1);
    await h.driver.start();
    const r = new RawPeer(h.transport.address().port);
    raws.push(r);
    r.write(frameOf(RawPeer.hello(2)));
    await waitFor('the inbound link from node 2', () => h.logger.lines.some((l) => l.msg === 'peer link up' && l.fields.peer === 2), 5_000);
    const termBefore = h.driver.currentTerm;
    // Entry indexes out of sequence, at a far higher term: stepping it would move our term.
    const badAppend = {
      type: 'append',
      from: 2,
      to: 1,
      term: 99,
      prevIndex: 0,
      prevTerm: 0,
      commit: 0,
      entries: [{ index: 5, term: 99, data: null }],
    };
    r.write(frameOf(badAppend));
    await r.waitClosed();
    assert.equal(h.driver.currentTerm, termBefore);
    assert.equal(h.driver.status().refusedMessages, 1);
    const refused = h.logger.lines.filter((l) => l.msg === 'raft message refused; closing its link');
    assert.equal(refused.length, 1);
    assert.equal(refused[0]!.fields.code, 'RAFT_BAD_MESSAGE');
  });

  test('a layout body that does not fit, or fails validation, closes its link and never reaches the core', async () => {
    const h = makeDriver(1);
    await h.driver.start();
    const encoder = raftWireCodec();
    const termBefore = h.driver.currentTerm;
    // Out of sequence at a far higher term: the layout carries it, the validator refuses it.
    const badAppend: Message = {
      ...staticEnvelope,
      type: 'append',
      from: 2,
      to: 1,
      term: 99,
      prevIndex: 0,
      prevTerm: 0,
      commit: 0,
      sentAt: 0,
      entries: [{ index: 5, term: 99, time: 0, data: null }],
    };
    const appendBody = Uint8Array.from(encoder.encode(badAppend).body);
    const heartbeat = encoder.encode({ ...staticEnvelope, type: 'heartbeat', from: 2, to: 1, term: 99, commit: 0, sentAt: 0 });
    const truncated = heartbeat.body.subarray(0, heartbeat.body.length - 1);
    const cases = [
      { frame: encodeFrame(appendBody, 2), log: 'raft message refused; closing its link' },
      { frame: encodeFrame(truncated, 2), log: 'peer link closed', code: 'body-malformed' },
    ];
    for (const c of cases) {
      const r = new RawPeer(h.transport.address().port);
      raws.push(r);
      r.write(frameOf(RawPeer.hello(2)));
      await waitFor(
        'the inbound link from node 2',
        () => h.logger.lines.some((l) => l.msg === 'peer link up' && l.fields.peer === 2),
        5_000,
      );
      h.logger.lines.length = 0;
      r.write(c.frame);
      await r.waitClosed();
      assert.ok(
        h.logger.lines.some((l) => l.msg === c.log && (c.code === undefined || l.fields.code === c.code)),
        c.log,
      );
    }
    assert.equal(h.driver.currentTerm, termBefore);
    assert.equal(h.driver.status().refusedMessages, 1);
    assert.equal(h.transport.stats().badFrames, 2);
  });

  test('a message claiming another sender than its link is dropped', async () => {
    const h = makeDriver(1);
    await h.driver.start();
    const r = new RawPeer(h.transport.address().port);
    raws.push(r);
    r.write(frameOf(RawPeer.hello(2)));
    await waitFor('the inbound link from node 2', () => h.logger.lines.some((l) => l.msg === 'peer link up' && l.fields.peer === 2), 5_000);
    r.write(frameOf({ ...staticEnvelope, type: 'heartbeat', from: 3, to: 1, term: 7, commit: 0, sentAt: 0 }));
    await waitFor('the drop to be logged', () => h.logger.lines.some((l) => l.fields.kind === 'sender-mismatch'), 5_000);
    assert.equal(h.driver.currentTerm, 0, 'the impostor heartbeat did not move our term');
    assert.equal(h.driver.lastContact(3), undefined);
  });
});
