// RaftDriver over the data-directory storage (src/cluster/raft-storage.ts) on the power-cut double
// (src/log/wal/mem-storage.ts), three drivers in one process over loopback: power cuts of one node
// and of all three keep only what each storage synced and tear the rest, and every entry committed
// before a cut is committed after it, with the log compacted to small bounds (snapshots and
// checkpoints written, a follower caught up past them). The driver under a real power loss, which
// kill -9 of a process (test/cluster-data-dir.slow.test.ts) cannot show. Waits are bounded.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import type { Message } from '../raft/core/messages.js';
import type { Snapshot } from '../raft/core/snapshot.js';
import { type DriverLogger, RaftDriver } from '../raft/driver/driver.js';
import { Transport } from '../raft/transport/transport.js';
import { LOOPBACK, waitFor } from '../raft/transport/transport-harness.testkit.js';
import { driverStorage, RaftDirStorage } from '../src/cluster/raft-storage.js';
import { MemStorage, seededRandom } from '../src/log/wal/mem-storage.js';

const E = 200;
const IDS = [1, 2, 3];
const dir = mkdtempSync(join(tmpdir(), 'raftmq-driver-data-dir-'));
/** Each test's state files (and their membership records) in a directory of its own. */
let stateDir = dir;
const fileOf = (id: number): string => join(stateDir, `node-${id}.state`);
const quiet: DriverLogger = { info: () => {}, warn: () => {}, error: () => {} };
const WAIT_MS = 20_000;
/** Power cuts of all three nodes (each after one of a follower). */
const ROUNDS = 6;

/** The application: the data of every entry applied, in order; its snapshot is that list as JSON. */
class App {
  state: string[] = [];
  /** Consistent at the moment it is asked for, as the broker's cursor is. */
  snapshot(): Iterable<Uint8Array> {
    const bytes = Buffer.from(JSON.stringify(this.state));
    const chunks: Uint8Array[] = [];
    for (let at = 0; at < bytes.length; at += 100) chunks.push(bytes.subarray(at, at + 100));
    return chunks;
  }
  restore(s: Snapshot): void {
    this.state = JSON.parse(Buffer.concat(s.chunks.map((c) => Buffer.from(c))).toString()) as string[];
  }
}

/** One node id: its disk (kept across power cuts) and the meta.json member it names. */
interface Disk {
  mem: MemStorage;
  incarnation: string;
}

interface Node {
  id: number;
  driver: RaftDriver;
  transport: Transport<Message>;
  app: App;
  storage: RaftDirStorage;
}

const disks = new Map<number, Disk>(IDS.map((id) => [id, { mem: new MemStorage(), incarnation: `first-${id}` }]));
let live: Node[] = [];
/** onStorageFailed calls, by node id. */
let failures: { id: number; err: Error }[] = [];
after(async () => {
  await Promise.all(live.map((n) => n.driver.stop()));
  rmSync(dir, { recursive: true, force: true });
});

async function startNode(id: number): Promise<Node> {
  const disk = disks.get(id) as Disk;
  const opened = await RaftDirStorage.open({
    storage: disk.mem,
    logger: quiet,
    segmentBytes: 4096,
    chunkBytesMax: 512,
    // meta.json is written with temporary file, fsync and rename: here it is durable at once.
    adopt: async (inc) => {
      disk.incarnation = inc;
    },
  });
  const app = new App();
  const n = { id, app, storage: opened.storage } as unknown as Node;
  n.driver = new RaftDriver({
    id,
    nodes: IDS,
    stateFile: fileOf(id),
    electionTimeoutMs: E,
    logger: quiet,
    core: { logEntriesMax: 20, snapshotChunkBytesMax: 512 },
    storage: driverStorage({
      dir: `disk-${id}`,
      storage: opened.storage,
      loaded: opened.state,
      incarnation: disk.incarnation,
      report: opened.report,
      release: () => {},
    }),
    onCommitted: (entries) => {
      for (const e of entries) if (e.data !== null) app.state.push(Buffer.from(e.data).toString());
    },
    snapshotSource: () => app.snapshot(),
    onSnapshot: (s) => app.restore(s),
    // A storage the power cut took away fails its next call: that process is gone.
    onStorageFailed: (err) => failures.push({ id, err }),
    transport: (validate, identity) => {
      n.transport = new Transport<Message>({
        nodeId: id,
        incarnation: identity.incarnation,
        clusterId: 'raftmq',
        epoch: identity.epoch,
        listen: { host: LOOPBACK, port: 0 },
        peers: new Map(IDS.map((p) => [p, { host: LOOPBACK, port: 0 }])),
        logger: quiet,
        validate,
      });
      return n.transport;
    },
  });
  await n.driver.start();
  live.push(n);
  return n;
}

function link(nodes: readonly Node[]): void {
  for (const n of nodes) for (const o of nodes) if (o !== n) n.transport.setPeerAddress(o.id, o.transport.address());
}

/** The power goes on these nodes at once: each driver halts in the same turn, and each disk keeps
 * what was synced and a torn part of the rest. */
function powerCut(nodes: readonly Node[], random: () => number): void {
  for (const n of nodes) {
    n.driver.halt();
    const disk = disks.get(n.id) as Disk;
    disk.mem = disk.mem.powerCut(random);
  }
  live = live.filter((n) => !nodes.includes(n));
}

async function leaderOf(nodes: readonly Node[]): Promise<Node> {
  let leader: Node | undefined;
  await waitFor(
    'one leader that the others know',
    () => {
      const ls = nodes.filter((n) => n.driver.currentRole === 'leader');
      leader = ls.length === 1 ? ls[0] : undefined;
      return leader !== undefined && nodes.every((n) => n.driver.leader === leader?.id);
    },
    WAIT_MS,
  );
  return leader as Node;
}

/** Proposes `count` entries on whichever node leads, a few per turn, until all committed there. */
async function propose(nodes: readonly Node[], tag: string, count: number): Promise<void> {
  for (let k = 0; k < count; k++) {
    const leader = await leaderOf(nodes);
    const data = `${tag}-${k}`;
    const r = leader.driver.propose(Buffer.from(data));
    if (r instanceof Error) {
      k--;
      await new Promise((resolve) => setTimeout(resolve, 10));
      continue;
    }
    if (k % 5 === 4 || k === count - 1) {
      await waitFor(`${data} applied on the leader`, () => leader.driver.appliedIndex >= r.index, WAIT_MS);
    }
  }
}

/** The longest applied sequence of the nodes; each node's is a prefix of it. */
function applied(nodes: readonly Node[]): string[] {
  const longest = nodes.map((n) => n.app.state).reduce((a, b) => (b.length > a.length ? b : a), []);
  for (const n of nodes) assert.deepEqual(n.app.state, longest.slice(0, n.app.state.length), `node ${n.id} applied a prefix`);
  return [...longest];
}

describe('RaftDriver over the data-directory storage with power cuts', { timeout: 120_000 }, () => {
  test('every entry committed before a power cut of one node or all three is committed after it', async () => {
    const random = seededRandom(7);
    let nodes = await Promise.all(IDS.map(startNode));
    link(nodes);
    await propose(nodes, 'a', 30);
    for (let round = 0; round < ROUNDS; round++) {
      // One follower loses power while the leader goes on and compacts past it.
      const leader = await leaderOf(nodes);
      const follower = nodes.find((n) => n !== leader) as Node;
      powerCut([follower], random);
      const rest = nodes.filter((n) => n !== follower);
      await propose(rest, `b${round}`, 30);
      const back = await startNode(follower.id);
      nodes = [...rest, back];
      link(nodes);
      await propose(nodes, `c${round}`, 10);
      const target = Math.max(...rest.map((n) => n.driver.commitIndex));
      await waitFor('the follower caught up', () => back.driver.appliedIndex >= target, WAIT_MS);
      // Then all three lose power at once, at a random turn while the leader takes entries.
      const lead = await leaderOf(nodes);
      const turns = 5 + Math.floor(random() * 60);
      for (let t = 0; t < turns; t++) {
        for (let k = 0; k < 2; k++) lead.driver.propose(Buffer.from(`inflight${round}-${t}-${k}`));
        await new Promise((resolve) => setImmediate(resolve));
      }
      const before = applied(nodes);
      powerCut(nodes, random);
      nodes = await Promise.all(IDS.map(startNode));
      link(nodes);
      for (const n of nodes) assert.equal(n.driver.status().membership, 'member', `node ${n.id} resumed its storage`);
      await propose(nodes, `marker${round}`, 1);
      await waitFor('the marker applied everywhere', () => nodes.every((n) => n.app.state.includes(`marker${round}-0`)), WAIT_MS);
      const now = applied(nodes);
      assert.deepEqual(now.slice(0, before.length), before, `round ${round}: every entry committed before the cut is still committed`);
    }
    assert.ok(
      nodes.some((n) => n.driver.status().snapshotIndex > 0),
      'the log was compacted, so snapshots and checkpoints were on the disks',
    );
  });

  test('a failed fdatasync stops that driver once and is never retried; the other two go on', async () => {
    await Promise.all(live.map((n) => n.driver.stop()));
    live = [];
    stateDir = mkdtempSync(join(dir, 'second-'));
    for (const id of IDS) disks.set(id, { mem: new MemStorage(), incarnation: `second-${id}` });
    failures = [];
    const nodes = await Promise.all(IDS.map(startNode));
    link(nodes);
    await propose(nodes, 'x', 10);
    const leader = await leaderOf(nodes);
    const follower = nodes.find((n) => n !== leader) as Node;
    const mem = (disks.get(follower.id) as Disk).mem;
    mem.failSyncs(new Error('EIO'));
    const rest = nodes.filter((n) => n !== follower);
    await propose(rest, 'y', 10);
    await waitFor('the failure reported', () => failures.length > 0, WAIT_MS);
    assert.deepEqual(
      failures.map((f) => f.id),
      [follower.id],
      'reported once, by the node whose disk failed',
    );
    // The first sync to fail closes a batch, or, when compaction came first, writes a snapshot file.
    assert.match(failures[0]?.err.message ?? '', /(fdatasync of raft-\d{20}\.seg|fsync of raft-snap-\d{20}\.tmp) failed: EIO/);
    await waitFor('that driver stopped', () => follower.driver.status().role !== 'leader' && mem.failedSyncs > 0, WAIT_MS);
    const failed = mem.failedSyncs;
    await propose(rest, 'z', 10);
    assert.equal(mem.failedSyncs, failed, 'no sync is tried again');
    assert.equal(follower.driver.propose(Buffer.from('after')) instanceof Error, true, 'the driver no longer takes part');
  });
});
