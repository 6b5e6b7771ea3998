// A cluster node's raft storage on the power-cut double (src/log/wal/mem-storage.ts): what a load
// returns after a cut is the state after some prefix of the writes, never less than every write
// a flush() reported durable; truncations (§5.3) and snapshots survive restarts; one fdatasync per
// turn's writes; damage before the last commit record refuses the start, naming the file.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogEntry } from '../../raft/core/messages.js';
import type { DurableState } from '../../raft/core/raft.js';
import type { Snapshot } from '../../raft/core/snapshot.js';
import { StoredLog } from '../../raft/core/storage.js';
import { MemStorage, seededRandom } from '../log/wal/mem-storage.js';
import { DataDirError } from '../log/wal/wal.js';
import { RaftDirStorage, raftSegmentName, raftSnapshotName } from './raft-storage.js';

const quiet = { info() {}, warn() {}, error() {} };
const turn = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

const entry = (index: number, term: number): LogEntry => ({
  index,
  term,
  time: index,
  data: new TextEncoder().encode(`e${index}.${term}`),
});
const run = (from: number, to: number, term: number): LogEntry[] => {
  const out: LogEntry[] = [];
  for (let i = from; i <= to; i++) out.push(entry(i, term));
  return out;
};
const snapshot = (index: number, term: number, bytes = 3): Snapshot => ({
  index,
  term,
  time: index,
  config: null,
  chunks: [new Uint8Array(bytes).fill(index & 0xff)],
  bytes,
});

const hex = (b: Uint8Array | null): string | null => (b === null ? null : Buffer.from(b).toString('hex'));
const concat = (chunks: readonly Uint8Array[]): Uint8Array => Buffer.concat(chunks.map((c) => Buffer.from(c)));

/** A state as comparable JSON: chunk boundaries of a snapshot do not matter, its bytes do. */
function norm(s: DurableState | null): string {
  if (s === null) return 'null';
  const snap = s.snapshot ?? null;
  return JSON.stringify({
    term: s.term,
    vote: s.vote,
    voteInc: s.voteInc ?? '',
    entries: s.entries.map((e) => [e.index, e.term, e.time, hex(e.data)]),
    snapshot: snap === null ? null : [snap.index, snap.term, snap.time, snap.bytes, hex(concat(snap.chunks))],
  });
}

async function open(mem: MemStorage, segmentBytes = 1 << 20) {
  return RaftDirStorage.open({ storage: mem, logger: quiet, segmentBytes });
}

describe('raft storage in a data directory', () => {
  it('loads nothing from an empty directory, then what was written and flushed', async () => {
    const mem = new MemStorage();
    const a = await open(mem);
    assert.equal(a.state, null);
    a.storage.setHardState({ term: 2, vote: 1, voteInc: 'x' });
    a.storage.append(run(1, 5, 2), null);
    const d = await a.storage.flush();
    assert.deepEqual(d, { index: 5, term: 2, hard: { term: 2, vote: 1, voteInc: 'x' } });
    await a.storage.close();
    const b = await open(mem);
    assert.equal(b.state?.term, 2);
    assert.equal(b.state?.voteInc, 'x');
    assert.deepEqual(
      b.state?.entries.map((e) => [e.index, e.term]),
      run(1, 5, 2).map((e) => [e.index, e.term]),
    );
  });

  it('writes one turn of writes as one batch with one fdatasync, and reports it durable only after', async () => {
    const mem = new MemStorage();
    const { storage } = await open(mem);
    const reports: number[] = [];
    storage.listen(
      (d) => reports.push(d.index),
      (err) => assert.fail(err),
    );
    storage.append(run(1, 1, 1), null); // the first batch creates the segment
    await storage.flush();
    const syncs = mem.syncs;
    const release = mem.holdSyncs();
    for (let i = 2; i <= 20; i++) storage.append([entry(i, 1)], null);
    storage.setHardState({ term: 1, vote: 2, voteInc: 'y' });
    for (let k = 0; k < 20 && mem.syncsHeld === 0; k++) await turn();
    assert.equal(mem.syncsHeld, 1, 'one sync waits for the whole turn');
    assert.deepEqual(reports, [1], 'nothing of the held batch is reported before its sync');
    release();
    await storage.flush();
    assert.equal(mem.syncs - syncs, 1, 'one fdatasync for the turn');
    assert.deepEqual(reports, [1, 20]);
  });

  it('counts its fdatasyncs and the raft entries they made durable, its segment bytes and its newest snapshot', async () => {
    const mem = new MemStorage();
    const a = await open(mem, 200);
    a.storage.append(run(1, 1, 1), null);
    await a.storage.flush();
    assert.deepEqual([a.storage.fsyncs, a.storage.entriesWritten], [1, 1]);
    // One turn: nine entries and a vote, one batch.
    for (let i = 2; i <= 10; i++) a.storage.append([entry(i, 1)], null);
    a.storage.setHardState({ term: 1, vote: 2, voteInc: 'y' });
    await a.storage.flush();
    assert.deepEqual([a.storage.fsyncs, a.storage.entriesWritten], [2, 10], 'entries per fsync: 10 / 2');
    // A rewrite of a conflicting suffix counts the entries written again.
    a.storage.append(run(9, 12, 2), 9);
    await a.storage.flush();
    assert.deepEqual([a.storage.fsyncs, a.storage.entriesWritten], [3, 14]);
    const segBytes = async (): Promise<number> => {
      let n = 0;
      for (const name of (await mem.list()).filter((x) => x.endsWith('.seg'))) n += (await mem.read(name))?.length ?? 0;
      return n;
    };
    assert.equal(a.storage.logBytes, await segBytes());
    assert.deepEqual(a.storage.lastSnapshot, { index: 0, bytes: 0, writtenAt: null });
    // A checkpoint rewrites the entries after the snapshot: they are not counted again.
    a.storage.saveSnapshot(snapshot(10, 2, 1000));
    await a.storage.flush();
    assert.equal(a.storage.fsyncs, 4);
    assert.equal(a.storage.entriesWritten, 14);
    assert.equal(a.storage.lastSnapshot.index, 10);
    assert.equal(a.storage.lastSnapshot.bytes, 1000);
    assert.equal(typeof a.storage.lastSnapshot.writtenAt, 'number');
    assert.equal(a.storage.logBytes, await segBytes(), 'only the checkpoint segment is left');
    await a.storage.close();
    const b = await open(mem, 200);
    assert.deepEqual(b.storage.lastSnapshot, { index: 10, bytes: 1000, writtenAt: null }, 'read at start');
    assert.deepEqual([b.storage.fsyncs, b.storage.entriesWritten], [0, 0], 'counted since start');
    assert.equal(b.storage.logBytes, await segBytes());
  });

  it('keeps a truncation of a conflicting suffix across a restart', async () => {
    const mem = new MemStorage();
    const a = await open(mem);
    a.storage.append(run(1, 6, 1), null);
    await a.storage.flush();
    a.storage.append(run(3, 4, 2), 3);
    await a.storage.flush();
    await a.storage.close();
    const b = await open(mem);
    assert.deepEqual(
      b.state?.entries.map((e) => [e.index, e.term]),
      [
        [1, 1],
        [2, 1],
        [3, 2],
        [4, 2],
      ],
    );
  });

  it('writes a snapshot, then a checkpoint, and only then removes the older segments', async () => {
    const mem = new MemStorage();
    const a = await open(mem, 200);
    for (let i = 1; i <= 30; i++) {
      a.storage.append([entry(i, 1)], null);
      await a.storage.flush();
    }
    assert.ok((await mem.list()).filter((n) => n.endsWith('.seg')).length > 3, 'small segments rolled');
    a.storage.saveSnapshot(snapshot(25, 1, 1000));
    a.storage.setHardState({ term: 3, vote: 0, voteInc: '' });
    await a.storage.flush();
    const names = await mem.list();
    assert.deepEqual(
      names.filter((n) => n.startsWith('raft-')),
      [raftSegmentName(31), raftSnapshotName(25)],
    );
    await a.storage.close();
    const b = await open(mem);
    assert.equal(b.state?.snapshot?.index, 25);
    assert.equal(b.state?.snapshot?.bytes, 1000);
    assert.equal(b.state?.term, 3);
    assert.deepEqual(
      b.state?.entries.map((e) => e.index),
      [26, 27, 28, 29, 30],
    );
  });

  it('after a snapshot that does not match the log (installed from a leader), holds no older entry', async () => {
    const mem = new MemStorage();
    const a = await open(mem);
    a.storage.append(run(1, 10, 1), null);
    a.storage.saveSnapshot(snapshot(7, 2));
    await a.storage.flush();
    await a.storage.close();
    const b = await open(mem);
    assert.equal(b.state?.snapshot?.index, 7);
    assert.deepEqual(b.state?.entries, []);
  });

  it('after reset() holds only what the new member wrote, and notes the member before writing it', async () => {
    const mem = new MemStorage();
    const adopted: string[] = [];
    const opts = { storage: mem, logger: quiet, adopt: async (inc: string) => void adopted.push(inc) };
    const a = await RaftDirStorage.open(opts);
    a.storage.append(run(1, 8, 1), null);
    a.storage.saveSnapshot(snapshot(4, 1));
    await a.storage.flush();
    a.storage.reset('new');
    a.storage.setHardState({ term: 5, vote: 0, voteInc: '' });
    a.storage.append(run(1, 2, 5), null);
    await a.storage.flush();
    assert.deepEqual(adopted, ['new']);
    assert.deepEqual(
      (await mem.list()).filter((n) => n.startsWith('raft-')),
      [raftSegmentName(1)],
    );
    await a.storage.close();
    const b = await RaftDirStorage.open(opts);
    assert.equal(b.state?.snapshot ?? null, null);
    assert.equal(b.state?.term, 5);
    assert.deepEqual(
      b.state?.entries.map((e) => [e.index, e.term]),
      [
        [1, 5],
        [2, 5],
      ],
    );
  });

  it('refuses a start when a byte before the last commit record is damaged, naming the file and changing nothing', async () => {
    const mem = new MemStorage();
    const a = await open(mem);
    for (let i = 1; i <= 3; i++) {
      a.storage.append([entry(i, 1)], null);
      await a.storage.flush();
    }
    await a.storage.close();
    const name = raftSegmentName(1);
    const before = mem.bytes(name) as Uint8Array;
    mem.damage(name, 40, (before[40] as number) ^ 0xff);
    const damaged = mem.bytes(name) as Uint8Array;
    await assert.rejects(
      open(mem),
      (err: unknown) => err instanceof DataDirError && err.code === 'DATA_DIR_CORRUPT' && err.message.includes(name),
    );
    assert.deepEqual(mem.bytes(name), damaged, 'the file is left as it was');
  });

  it('cuts a torn tail after the last commit record with one log line', async () => {
    const mem = new MemStorage();
    const a = await open(mem);
    a.storage.append(run(1, 3, 1), null);
    await a.storage.flush();
    const release = mem.holdSyncs();
    a.storage.append(run(4, 9, 1), null);
    for (let k = 0; k < 20 && mem.syncsHeld === 0; k++) await turn();
    const cut = mem.powerCut(() => 0.999);
    release();
    const lines: string[] = [];
    const b = await RaftDirStorage.open({ storage: cut, logger: { ...quiet, warn: (_f, msg) => lines.push(msg) } });
    assert.deepEqual(
      b.state?.entries.map((e) => e.index),
      [1, 2, 3],
    );
    assert.equal(lines.filter((l) => l.includes('torn tail')).length, 1);
    assert.ok(b.report.cut !== null && b.report.cut.file === raftSegmentName(1));
  });

  it('stops for good at a failed fdatasync and reports it once', async () => {
    const mem = new MemStorage();
    const { storage } = await open(mem);
    const failures: Error[] = [];
    storage.listen(
      () => {},
      (err) => failures.push(err),
    );
    storage.append(run(1, 1, 1), null);
    await storage.flush();
    mem.failSyncs(new Error('EIO'));
    storage.append(run(2, 2, 1), null);
    await assert.rejects(storage.flush(), /fdatasync of raft-0+1\.seg failed: EIO/);
    storage.append(run(3, 3, 1), null);
    await assert.rejects(storage.flush(), /EIO/);
    for (let k = 0; k < 5; k++) await turn();
    assert.equal(failures.length, 1);
    assert.equal(mem.failedSyncs, 1, 'the sync is never retried');
  });

  it('after power cuts at random moments, loads the state after a prefix of the writes, holding every one flushed', async () => {
    for (let seed = 1; seed <= 40; seed++) {
      const random = seededRandom(seed);
      const pick = (n: number): number => Math.floor(random() * n);
      let mem = new MemStorage();
      let opened = await open(mem, 300 + pick(600));
      // The model: the state after each write since the last recovery.
      let model = new StoredLog();
      let states = [norm(opened.state)];
      let durable = 0;
      let term = 1;
      for (let round = 0; round < 3; round++) {
        const st = opened.storage;
        st.listen(
          () => {},
          () => {},
        );
        const ops = 10 + pick(30);
        for (let k = 0; k < ops; k++) {
          const last = model.lastIndex();
          const base = model.snapshotIndex;
          const r = random();
          if (r < 0.5) {
            const n = 1 + pick(4);
            const es = run(last + 1, last + n, term);
            model.append(es, null);
            st.append(es, null);
          } else if (r < 0.65 && last > base + 1) {
            term++;
            const from = base + 2 + pick(last - base - 1);
            const es = run(from, from + pick(3), term);
            model.append(es, from);
            st.append(es, from);
          } else if (r < 0.8) {
            term++;
            const h = { term, vote: pick(4), voteInc: `i${pick(3)}` };
            model.setHardState(h);
            st.setHardState(h);
          } else if (r < 0.9 && last > base) {
            const at = base + 1 + pick(last - base);
            const s = snapshot(at, model.termAt(at) ?? 0, 1 + pick(700));
            model.saveSnapshot(s);
            st.saveSnapshot(s);
          } else if (r < 0.95) {
            term++;
            const s = snapshot(last + 1 + pick(5), term, 1 + pick(50));
            model.saveSnapshot(s);
            st.saveSnapshot(s);
          } else {
            await st.flush();
            durable = states.length;
          }
          states.push(norm(model.state()));
          if (random() < 0.3) await turn();
        }
        const cut = mem.powerCut(random);
        mem = cut;
        opened = await open(mem, 300 + pick(600));
        const got = norm(opened.state);
        const k = states.indexOf(got, Math.max(0, durable - 1));
        assert.ok(
          k >= 0 && k >= durable - 1,
          `seed ${seed} round ${round}: the loaded state is not one after a prefix holding every flushed write`,
        );
        // Go on from what survived.
        model = new StoredLog();
        const s = opened.state;
        if (s !== null) {
          if (s.snapshot) model.saveSnapshot(s.snapshot);
          model.setHardState({ term: s.term, vote: s.vote, voteInc: s.voteInc ?? '' });
          model.append(s.entries, null);
        }
        states = [norm(model.state())];
        durable = 0;
      }
    }
  });
});
