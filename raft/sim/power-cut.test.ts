import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogEntry } from '../core/messages.js';
import { Prng } from '../core/prng.js';
import { StoredLog } from '../core/storage.js';
import { decodeRecords, encodeRecord, type StorageRecord } from '../core/storage-records.js';
import { PowerCutStorage } from './power-cut.js';

const entry = (index: number, term: number): LogEntry => ({ index, term, time: index * 10, data: new Uint8Array([index & 0xff, term]) });

/** A random write: append (sometimes after a truncation), hard state, or a snapshot of a held entry. */
function randomWrite(r: Prng, log: StoredLog, term: { t: number }): StorageRecord {
  const k = r.int(10);
  if (k < 2) {
    term.t += 1;
    return { kind: 'hard-state', hard: { term: term.t, vote: 1 + r.int(3), voteInc: `i${r.int(3)}` } };
  }
  if (k < 3 && log.lastIndex() > log.snapshotIndex) {
    const index = log.snapshotIndex + 1 + r.int(log.lastIndex() - log.snapshotIndex);
    const t = log.termAt(index) ?? 0;
    return { kind: 'snapshot', snapshot: { index, term: t, time: index * 10, config: null, chunks: [new Uint8Array(r.int(5))], bytes: 0 } };
  }
  const truncate = r.chance(0.2) && log.lastIndex() > log.snapshotIndex;
  const from = truncate ? log.snapshotIndex + 1 + r.int(log.lastIndex() - log.snapshotIndex) : log.lastIndex() + 1;
  const entries: LogEntry[] = [];
  for (let i = 0; i < 1 + r.int(4); i++) entries.push(entry(from + i, term.t));
  return { kind: 'append', entries, truncatedFrom: truncate ? from : null };
}

function apply(
  target: { append: StoredLog['append']; setHardState: StoredLog['setHardState']; saveSnapshot: StoredLog['saveSnapshot'] },
  w: StorageRecord,
): void {
  if (w.kind === 'append') target.append(w.entries, w.truncatedFrom);
  else if (w.kind === 'hard-state') target.setHardState(w.hard);
  else target.saveSnapshot({ ...w.snapshot, bytes: w.snapshot.chunks.reduce((n, c) => n + c.length, 0) });
}

describe('raft storage: the power-cut double', () => {
  it('records decode to what was encoded', () => {
    const recs: StorageRecord[] = [
      {
        kind: 'append',
        entries: [entry(1, 1), { index: 2, term: 1, time: 20, data: null, config: [{ node: 1, inc: 'a' }] }],
        truncatedFrom: null,
      },
      { kind: 'hard-state', hard: { term: 3, vote: 2, voteInc: 'b1' } },
      {
        kind: 'snapshot',
        snapshot: { index: 2, term: 1, time: 20, config: [{ node: 1, inc: 'a' }], chunks: [new Uint8Array([1, 2])], bytes: 2 },
      },
      { kind: 'append', entries: [entry(3, 3)], truncatedFrom: 3 },
    ];
    const bytes = new Uint8Array(Buffer.concat(recs.map(encodeRecord)));
    const d = decodeRecords(bytes);
    assert.equal(d.stop, null);
    assert.equal(d.validBytes, bytes.length);
    assert.deepEqual(d.records, recs);
  });

  it('every cut of a record stream decodes to the records before the cut, and names where it stopped', () => {
    const recs = [0, 1, 2].map((k): StorageRecord => ({ kind: 'append', entries: [entry(k + 1, 1)], truncatedFrom: null }));
    const parts = recs.map(encodeRecord);
    const bytes = Buffer.concat(parts);
    const ends = parts.map((_, k) => parts.slice(0, k + 1).reduce((n, p) => n + p.length, 0));
    for (let cut = 0; cut <= bytes.length; cut++) {
      const d = decodeRecords(bytes.subarray(0, cut));
      const whole = ends.filter((e) => e <= cut).length;
      assert.equal(d.records.length, whole, `cut at ${cut}`);
      assert.equal(d.stop === null, cut === 0 || ends.includes(cut), `cut at ${cut}: ${d.stop}`);
    }
  });

  it('a flipped byte in a record stops reading there (checksum)', () => {
    const parts = [1, 2].map((i) => encodeRecord({ kind: 'append', entries: [entry(i, 1)], truncatedFrom: null }));
    const bytes = Buffer.concat(parts);
    const first = parts[0]?.length ?? 0;
    for (let at = first + 8; at < bytes.length; at++) {
      const bad = Buffer.from(bytes);
      bad[at] = (bad[at] ?? 0) ^ 0x40;
      const d = decodeRecords(bad);
      assert.equal(d.records.length, 1);
      assert.match(d.stop ?? '', /checksum/);
    }
  });

  it('at a power cut only synced writes survive, a torn write is cut, and the state is the one at the last sync', () => {
    let torn = 0;
    for (let seed = 1; seed <= 200; seed++) {
      const r = new Prng(seed);
      const storage = new PowerCutStorage();
      const model = new StoredLog();
      let atSync: ReturnType<StoredLog['state']> = null;
      const term = { t: 1 };
      const writes = 5 + r.int(30);
      for (let k = 0; k < writes; k++) {
        const w = randomWrite(r, model, term);
        apply(model, w);
        apply(storage, w);
        if (r.chance(0.3)) {
          const d = storage.sync();
          assert.deepEqual(d, model.durable());
          atSync = model.state();
        }
      }
      const tornBytes = storage.powerCut(r);
      if (tornBytes > 0) {
        torn++;
        assert.equal(storage.lastRecovery.cutBytes, tornBytes, `seed ${seed}: the torn tail is cut`);
      }
      assert.deepEqual(storage.load(), atSync, `seed ${seed}`);
      // The storage goes on after recovery: a new write and sync survive the next cut.
      storage.setHardState({ term: 99, vote: 1, voteInc: '' });
      storage.sync();
      storage.powerCut(r);
      assert.equal(storage.load()?.term, 99);
    }
    assert.ok(torn > 50, `torn writes in ${torn} of 200 seeds`);
  });

  it('an unsynced write is lost even when later writes follow it', () => {
    const storage = new PowerCutStorage();
    storage.append([entry(1, 1)], null);
    storage.sync();
    storage.append([entry(2, 1)], null);
    storage.append([entry(3, 1)], null);
    assert.equal(storage.file.unsyncedWrites, 2);
    storage.powerCut(new Prng(5));
    assert.equal(storage.load()?.entries.length, 1);
  });
});
