// Snapshots through RaftDriver over loopback TCP (§7): the application's cursor is read a slice per
// event-loop turn, the log is compacted to its bounds, and a follower that comes back after the
// leader compacted past it is caught up by InstallSnapshot in chunks and restores the same state.
// Waits are bounded; nothing asserts speed.
import assert from 'node:assert/strict';
import { afterEach, describe, test } from 'node:test';
import type { Message } from '../raft/core/messages.js';
import type { Snapshot } from '../raft/core/snapshot.js';
import { type DriverLogger, RaftDriver } from '../raft/driver/driver.js';
import { Transport } from '../raft/transport/transport.js';
import { LOOPBACK, waitFor } from '../raft/transport/transport-harness.testkit.js';

const E = 200;
const IDS = [1, 2, 3];
const LOG_ENTRIES_MAX = 20;
const CHUNK_BYTES = 512;
const quiet: DriverLogger = { info: () => {}, warn: () => {}, error: () => {} };

/** The test application: the data of every entry applied, in order; its snapshot is that list as
 * JSON, handed over in 100-byte pieces by a generator, as the broker's cursor hands its chunks. */
class App {
  state: string[] = [];
  restored: Snapshot[] = [];
  cursorTurns = 0;
  /** The application's one cursor is in use elsewhere: it answers "not now". */
  busy = false;
  refused = 0;

  source(): Iterable<Uint8Array> | null {
    if (!this.busy) return this.snapshot();
    this.refused++;
    return null;
  }

  *snapshot(): Generator<Uint8Array> {
    const bytes = Buffer.from(JSON.stringify(this.state));
    for (let at = 0; at < bytes.length; at += 100) {
      this.cursorTurns++;
      yield bytes.subarray(at, at + 100);
    }
  }

  restore(s: Snapshot): void {
    this.state = JSON.parse(Buffer.concat(s.chunks.map((c) => Buffer.from(c))).toString()) as string[];
    this.restored.push(s);
  }
}

interface Node {
  id: number;
  driver: RaftDriver;
  transport: Transport<Message>;
  app: App;
  sent: Message[];
}

let running: Node[] = [];
afterEach(async () => {
  await Promise.all(running.map((n) => n.driver.stop()));
  running = [];
});

function makeNode(id: number, generation: number): Node {
  const app = new App();
  const node = { id, app, sent: [] } as unknown as Node;
  node.driver = new RaftDriver({
    id,
    voters: IDS,
    electionTimeoutMs: E,
    logger: quiet,
    seed: id + 10 * generation,
    core: { logEntriesMax: LOG_ENTRIES_MAX, snapshotChunkBytesMax: CHUNK_BYTES },
    onCommitted: (entries) => {
      for (const e of entries) if (e.data !== null) app.state.push(Buffer.from(e.data).toString());
    },
    snapshotSource: () => app.source(),
    onSnapshot: (s) => app.restore(s),
    transport: (validate) => {
      node.transport = new Transport<Message>({
        nodeId: id,
        incarnation: `inc-${id}-${generation}`,
        clusterId: 'test',
        epoch: { generation: 1, id: 'e1' },
        listen: { host: LOOPBACK, port: 0 },
        peers: new Map(IDS.map((p) => [p, { host: LOOPBACK, port: 0 }])),
        logger: quiet,
        validate,
        random: () => 0.5,
      });
      const send = node.transport.send.bind(node.transport);
      node.transport.send = (to, m) => {
        node.sent.push(m);
        send(to, m);
      };
      return node.transport;
    },
  });
  running.push(node);
  return node;
}

function connect(nodes: readonly Node[]): void {
  for (const n of nodes) for (const o of nodes) if (o !== n) n.transport.setPeerAddress(o.id, o.transport.address());
}

async function leaderOf(nodes: readonly Node[]): Promise<Node> {
  let leader: Node | undefined;
  await waitFor(
    'one leader that the others know',
    () => {
      const ls = nodes.filter((n) => n.driver.currentRole === 'leader');
      leader = ls.length === 1 ? ls[0] : undefined;
      return leader !== undefined && nodes.every((n) => n.driver.leader === leader!.id);
    },
    40 * E,
  );
  return leader!;
}

/** Three nodes; a follower stops, the leader commits `count` entries and compacts past it. */
async function compactedPastAFollower(count: number): Promise<{ nodes: Node[]; leader: Node; gone: Node }> {
  const nodes = IDS.map((id) => makeNode(id, 0));
  for (const n of nodes) await n.driver.start();
  connect(nodes);
  const leader = await leaderOf(nodes);
  const gone = nodes.find((n) => n !== leader)!;
  await gone.driver.stop();
  await proposeMany(leader, 0, count);
  await waitFor('the leader to compact', () => leader.driver.status().snapshotIndex > 0, 10_000);
  return { nodes, leader, gone };
}

async function proposeMany(leader: Node, from: number, count: number): Promise<void> {
  for (let k = from; k < from + count; k++) {
    const r = leader.driver.propose(Buffer.from(`entry-${k}`));
    assert.ok(!(r instanceof Error), String(r));
    if (k % 10 === 9) await waitFor('a batch to commit', () => leader.driver.appliedIndex >= leader.driver.lastIndex, 10_000);
  }
  await waitFor('the proposals to commit', () => leader.driver.appliedIndex >= leader.driver.lastIndex, 10_000);
}

describe('RaftDriver snapshots over loopback TCP', { timeout: 60_000 }, () => {
  test('the log stays within its bounds: the cursor is read over several turns and the log compacted', async () => {
    const nodes = IDS.map((id) => makeNode(id, 0));
    for (const n of nodes) await n.driver.start();
    connect(nodes);
    const leader = await leaderOf(nodes);
    await proposeMany(leader, 0, 120);
    // At most LOG_ENTRIES_MAX applied since the newest snapshot, and as many before it on a leader
    // for followers that are behind, once the last snapshot has been taken.
    await waitFor(
      'every node to compact within its bounds',
      () => nodes.every((n) => n.driver.status().snapshotIndex > 0 && n.driver.status().logEntries <= 2 * LOG_ENTRIES_MAX),
      10_000,
    );
    for (const n of nodes) assert.ok(n.app.cursorTurns > 1, 'the cursor handed over several chunks');
  });

  test('compaction waits while the application says not now, asks again at later events, and then compacts', async () => {
    const nodes = IDS.map((id) => makeNode(id, 0));
    for (const n of nodes) n.app.busy = true;
    for (const n of nodes) await n.driver.start();
    connect(nodes);
    const leader = await leaderOf(nodes);
    await proposeMany(leader, 0, 3 * LOG_ENTRIES_MAX);
    await waitFor('the request to be repeated', () => nodes.every((n) => n.app.refused > 1), 10_000);
    for (const n of nodes) assert.equal(n.driver.status().snapshotIndex, 0, 'no compaction without the application');
    for (const n of nodes) n.app.busy = false;
    await waitFor('every node to compact', () => nodes.every((n) => n.driver.status().snapshotIndex > 0), 10_000);
  });

  test('a follower that comes back after the leader compacted past it installs the snapshot in chunks and reaches the same state', async () => {
    // Enough state that the snapshot needs several chunks of CHUNK_BYTES.
    const { nodes, leader, gone } = await compactedPastAFollower(300);
    const back = makeNode(gone.id, 1);
    await back.driver.start();
    connect([...nodes.filter((n) => n !== gone), back]);
    await waitFor('the new follower to catch up', () => back.driver.appliedIndex >= leader.driver.appliedIndex, 20_000);
    assert.ok(back.app.restored.length >= 1, 'it restored a snapshot');
    const chunks = leader.sent.filter((m) => m.type === 'snapshot' && m.to === back.id);
    assert.ok(chunks.length > 1, `the snapshot went in ${chunks.length} chunks`);
    for (const m of chunks) assert.ok(m.type === 'snapshot' && m.data.length <= CHUNK_BYTES);
    await proposeMany(leader, 300, 5);
    await waitFor('the last proposals to reach it', () => back.driver.appliedIndex >= leader.driver.appliedIndex, 10_000);
    assert.deepEqual(back.app.state, leader.app.state);
  });

  test('a snapshot from the leader without onSnapshot stops the driver and reports it, never applying past the gap', async () => {
    const { nodes, gone } = await compactedPastAFollower(60);
    let fatal: Error | undefined;
    let transport: Transport<Message> | undefined;
    const applied: number[] = [];
    const back = new RaftDriver({
      id: gone.id,
      voters: IDS,
      electionTimeoutMs: E,
      logger: quiet,
      onCommitted: (entries) => applied.push(...entries.map((e) => e.index)),
      onFatal: (err) => {
        fatal = err;
      },
      transport: (validate) => {
        transport = new Transport<Message>({
          nodeId: gone.id,
          incarnation: 'inc-bare',
          clusterId: 'test',
          epoch: { generation: 1, id: 'e1' },
          listen: { host: LOOPBACK, port: 0 },
          peers: new Map(IDS.map((p) => [p, { host: LOOPBACK, port: 0 }])),
          logger: quiet,
          validate,
          random: () => 0.5,
        });
        return transport;
      },
    });
    running.push({ id: gone.id, driver: back } as unknown as Node);
    await back.start();
    const bare = transport!;
    for (const n of nodes) if (n !== gone) n.transport.setPeerAddress(gone.id, bare.address());
    for (const n of nodes) if (n !== gone) bare.setPeerAddress(n.id, n.transport.address());
    await waitFor('the driver to report it', () => fatal !== undefined, 20_000);
    assert.equal((fatal as Error & { code?: string }).code, 'RAFT_DRIVER_STATE');
    assert.deepEqual(applied, [], 'nothing applied without the state before it');
  });
});
