import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Message } from './messages.js';
import { rechunk } from './snapshot.js';
import { type NodeOptions, staticEnvelope, TestCluster } from './test-cluster.js';

const E = 100;
const enc = new TextEncoder();
const dec = new TextDecoder();

function electedCluster(node: NodeOptions = {}): TestCluster {
  const c = new TestCluster({ electionTimeoutMs: E, node });
  c.node(1).campaign();
  c.stabilize();
  assert.equal(c.node(1).role, 'leader');
  return c;
}

/** Proposes `n` entries named p<from>..p<from+n-1> one at a time and lets them commit. */
function proposeEach(c: TestCluster, from: number, n: number): void {
  for (let k = from; k < from + n; k++) {
    const r = c.node(1).propose([enc.encode(`p${k}`)]);
    assert.ok(r.ok);
    c.stabilize();
  }
}

/** The state a test application would snapshot: the data of every entry applied, joined. */
function stateOf(c: TestCluster, id: number): string {
  const restored = c.restored.get(id);
  const base = restored === undefined ? [] : [dec.decode(Buffer.concat(restored.chunks.map((x) => Buffer.from(x))))];
  const after = (c.applied.get(id) ?? []).filter((e) => e.index > (restored?.index ?? 0));
  const applied = after.flatMap((e) => (e.data === null ? [] : [dec.decode(e.data)]));
  return [...base.filter((x) => x !== ''), ...applied].join(',');
}

const snapshotChunks = (m: Message[]) => m.filter((x) => x.type === 'snapshot');

describe('raft core: snapshots and compaction (§7)', { timeout: 30_000 }, () => {
  it('compaction drops the applied entries up to the snapshot and keeps its last index, term and time', () => {
    const c = electedCluster();
    proposeEach(c, 1, 5);
    const n = c.node(1);
    const last = n.lastIndex;
    const time = n.entries().at(-2)?.time;
    assert.equal(n.compact(last - 1, [enc.encode(stateOf(c, 1))]), null);
    assert.equal(n.firstIndex, last);
    assert.equal(n.entries().length, 1);
    assert.equal(n.latestSnapshot?.index, last - 1);
    assert.equal(n.latestSnapshot?.term, 1);
    assert.equal(n.latestSnapshot?.time, time);
    assert.deepEqual(
      n.latestSnapshot?.config,
      [1, 2, 3].map((node) => ({ node, inc: '0' })),
    );
    assert.equal(n.compact(last - 1, [])?.code, 'RAFT_SNAPSHOT_STALE', 'the same index again');
    assert.equal(n.compact(last + 1, [])?.code, 'RAFT_SNAPSHOT_STALE', 'beyond what was applied');
  });

  it('snapshotWanted turns true once more applied entries than logEntriesMax are held, and false after compaction', () => {
    const c = electedCluster({ logEntriesMax: 4 });
    proposeEach(c, 1, 3);
    assert.equal(c.node(1).snapshotWanted(), false, '1 empty entry + 3 applied');
    proposeEach(c, 4, 1);
    assert.equal(c.node(1).snapshotWanted(), true);
    c.node(1).compact(c.node(1).appliedIndex, [enc.encode('x')]);
    assert.equal(c.node(1).snapshotWanted(), false);
  });

  it('snapshotWanted counts bytes too: logBytesMax', () => {
    const c = electedCluster({ logBytesMax: 10 });
    proposeEach(c, 1, 2);
    assert.equal(c.node(1).snapshotWanted(), false, '4 bytes applied');
    assert.ok(c.node(1).propose([new Uint8Array(20)]).ok);
    c.stabilize();
    assert.equal(c.node(1).snapshotWanted(), true);
  });

  it('a leader keeps the entries a follower a little behind still needs, so it catches up by appends, not a snapshot', () => {
    const c = electedCluster({ logEntriesMax: 10 });
    c.partition([[1, 2], [3]]);
    proposeEach(c, 1, 5);
    const n = c.node(1);
    n.compact(n.appliedIndex, [enc.encode(stateOf(c, 1))]);
    assert.equal(n.latestSnapshot?.index, n.appliedIndex);
    assert.equal(n.firstIndex, (n.progressOf(3)?.match ?? 0) + 1, 'held from the lagging follower on');
    c.heal();
    c.drainOutput();
    c.run(E);
    const out = c.drainOutput();
    assert.equal(out.filter((l) => l.includes(' snapshot ')).length, 0, out.join('\n'));
    assert.equal(c.node(3).commitIndex, n.commitIndex);
  });

  it('a follower that lagged past the compacted log catches up by InstallSnapshot in chunks, a window at a time, then by appends', () => {
    const c = electedCluster({ snapshotChunkBytesMax: 4, logEntriesMax: 2 });
    proposeEach(c, 1, 2);
    c.partition([[1, 2], [3]]);
    proposeEach(c, 3, 4);
    const n = c.node(1);
    const state = stateOf(c, 1);
    n.compact(n.appliedIndex, [enc.encode(state)]);
    const chunks = Math.ceil(state.length / 4);
    c.heal();
    proposeEach(c, 7, 1);
    c.drainOutput();
    c.run(E);
    const out = c.drainOutput();
    const sent = out.filter((l) => l.startsWith('1->3 snapshot'));
    assert.equal(sent.length, chunks, out.join('\n'));
    assert.ok(out.includes(`3 restored snapshot at ${n.latestSnapshot?.index}/1`), out.join('\n'));
    assert.equal(c.node(3).commitIndex, n.commitIndex);
    assert.equal(stateOf(c, 3), stateOf(c, 1));
    assert.equal(c.node(3).firstIndex, (n.latestSnapshot?.index ?? 0) + 1);
    assert.equal(n.progressOf(3)?.state, 'replicate');
  });

  it('a crash during an install discards the partial snapshot; the leader starts over from chunk 0', () => {
    const c = electedCluster({ snapshotChunkBytesMax: 2, logEntriesMax: 2 });
    c.partition([[1, 2], [3]]);
    proposeEach(c, 1, 6);
    c.node(1).compact(c.node(1).appliedIndex, [enc.encode(stateOf(c, 1))]);
    c.heal();
    // Let three chunks through, then crash node 3 with the rest in flight.
    let delivered = 0;
    for (let round = 0; round < 50 && delivered < 3; round++) {
      c.tick(E / 5);
      c.stabilize((m) => m.type !== 'snapshot' || ++delivered <= 3);
    }
    assert.equal(delivered > 3, true, 'the transfer went on after three chunks');
    c.crash(3);
    c.restart(3);
    assert.equal(c.node(3).latestSnapshot, null, 'a partial snapshot is not durable state');
    c.drainOutput();
    c.run(2 * E);
    const out = c.drainOutput();
    assert.ok(
      out.some((l) => l.startsWith('1->3 snapshot') && l.includes('chunk 1/')),
      out.join('\n'),
    );
    assert.equal(c.node(3).commitIndex, c.node(1).commitIndex);
    assert.equal(c.restored.get(3)?.index, c.node(1).latestSnapshot?.index);
  });

  it('a restarted node restores its own snapshot first and re-applies only the entries after it', () => {
    const c = electedCluster();
    proposeEach(c, 1, 4);
    const f = c.node(2);
    f.compact(3, [enc.encode('upto3')]);
    c.crash(2);
    c.restart(2);
    c.run(E);
    assert.equal(c.restored.get(2)?.index, 3);
    assert.deepEqual(
      c.applied.get(2)?.map((e) => e.index),
      [4, 5],
    );
  });

  it('an append carries at most appendBytesMax of data, but always one entry', () => {
    const c = electedCluster({ appendBytesMax: 10 });
    c.drainOutput();
    assert.ok(c.node(1).propose([new Uint8Array(6), new Uint8Array(6), new Uint8Array(30)]).ok);
    const appends = c
      .node(1)
      .takeReady()
      .messages.filter((m) => m.type === 'append' && m.to === 2);
    assert.deepEqual(
      appends.map((m) => (m.type === 'append' ? m.entries.length : -1)),
      [1, 1, 1],
    );
  });

  it('a snapshot chunk over the chunk bound, or with seq past its count, is refused and changes nothing', () => {
    const c = electedCluster({ snapshotChunkBytesMax: 8 });
    const base = {
      ...staticEnvelope,
      type: 'snapshot',
      from: 1,
      to: 2,
      term: 1,
      index: 5,
      lastTerm: 1,
      time: 0,
      config: null,
      sentAt: 0,
    } as const;
    const big: Message = { ...base, seq: 0, chunks: 1, data: new Uint8Array(9) };
    const past: Message = { ...base, seq: 2, chunks: 2, data: new Uint8Array(1) };
    assert.equal(c.node(2).step(big)?.code, 'RAFT_BAD_MESSAGE');
    assert.equal(c.node(2).step(past)?.code, 'RAFT_BAD_MESSAGE');
    assert.equal(snapshotChunks(c.node(2).takeReady().messages).length, 0);
    assert.equal(c.node(2).latestSnapshot, null);
  });

  it('bounds of zero, fractions, or a restored log that does not start right after its snapshot are refused as options', () => {
    for (const bad of [
      { logEntriesMax: 0 },
      { snapshotChunkBytesMax: 1.5 },
      { snapshotChunksInflightMax: -1 },
      { appendBytesMax: 0 },
      { logBytesMax: Number.NaN },
    ]) {
      assert.throws(() => new TestCluster({ electionTimeoutMs: E, node: bad }), { code: 'RAFT_BAD_OPTIONS' }, JSON.stringify(bad));
    }
    const snapshot = { index: 5, term: 1, time: 0, config: null, chunks: [new Uint8Array(0)], bytes: 0 };
    const entries = [{ index: 7, term: 1, time: 0, data: null }];
    const restore = new Map([[1, { term: 1, vote: 0, entries, snapshot }]]);
    assert.throws(() => new TestCluster({ electionTimeoutMs: E, restore }), { code: 'RAFT_BAD_OPTIONS' });
  });

  it('rechunk cuts chunks to the bound without copying and makes one empty chunk of an empty state', () => {
    const src = new Uint8Array([1, 2, 3, 4, 5]);
    const r = rechunk([src, new Uint8Array(0), new Uint8Array([6])], 2);
    assert.deepEqual(
      r.chunks.map((x) => [...x]),
      [[1, 2], [3, 4], [5], [6]],
    );
    assert.equal(r.bytes, 6);
    assert.equal(r.chunks[0]?.buffer, src.buffer);
    assert.deepEqual(
      rechunk([], 2).chunks.map((x) => x.length),
      [0],
    );
  });
});
