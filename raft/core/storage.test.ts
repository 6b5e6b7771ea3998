import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogEntry } from './messages.js';
import type { Snapshot } from './snapshot.js';
import { MemoryStorage, StoredLog } from './storage.js';

const entry = (index: number, term: number, data = `e${index}`): LogEntry => ({
  index,
  term,
  time: index,
  data: new TextEncoder().encode(data),
});
const run = (from: number, to: number, term: number): LogEntry[] => {
  const out: LogEntry[] = [];
  for (let i = from; i <= to; i++) out.push(entry(i, term));
  return out;
};
const snapshot = (index: number, term: number): Snapshot => ({
  index,
  term,
  time: index,
  config: null,
  chunks: [new Uint8Array([index])],
  bytes: 1,
});
const terms = (s: StoredLog): number[] => (s.state()?.entries ?? []).map((e) => e.term);

describe('raft storage: the stored log and the in-memory storage', () => {
  it('holds nothing until written, then the term, vote and entries written', () => {
    const m = new MemoryStorage();
    assert.equal(m.load(), null);
    m.setHardState({ term: 2, vote: 1, voteInc: '0' });
    m.append(run(1, 3, 2), null);
    const st = m.load();
    assert.equal(st?.term, 2);
    assert.equal(st?.vote, 1);
    assert.deepEqual(
      st?.entries.map((e) => e.index),
      [1, 2, 3],
    );
    assert.deepEqual(m.sync(), { index: 3, term: 2, hard: { term: 2, vote: 1, voteInc: '0' } });
  });

  it('a truncation deletes from its index before the new entries are appended (§5.3)', () => {
    const s = new StoredLog();
    s.append(run(1, 5, 1), null);
    s.append(run(3, 4, 2), 3);
    assert.deepEqual(terms(s), [1, 1, 2, 2]);
    assert.deepEqual(s.durable(), { index: 4, term: 2, hard: { term: 0, vote: 0, voteInc: '' } });
  });

  it('refuses an entry that does not follow the last one', () => {
    const s = new StoredLog();
    s.append(run(1, 2, 1), null);
    assert.throws(() => s.append([entry(4, 1)], null), /stored entry 4 after 2/);
  });

  it('a snapshot keeps the entries after it when the log holds its last entry, else replaces the log (§7)', () => {
    const kept = new StoredLog();
    kept.append(run(1, 6, 1), null);
    kept.saveSnapshot(snapshot(4, 1));
    assert.equal(kept.state()?.snapshot?.index, 4);
    assert.deepEqual(
      kept.state()?.entries.map((e) => e.index),
      [5, 6],
    );
    assert.deepEqual(kept.durable().index, 6);
    const replaced = new StoredLog();
    replaced.append(run(1, 6, 1), null);
    replaced.saveSnapshot(snapshot(4, 3));
    assert.deepEqual(replaced.state()?.entries, []);
    assert.deepEqual(replaced.durable(), { index: 4, term: 3, hard: { term: 0, vote: 0, voteInc: '' } });
    replaced.append(run(5, 5, 3), null);
    assert.equal(replaced.lastIndex(), 5);
  });

  it('a truncation at or below the snapshot drops every entry and keeps the snapshot', () => {
    const s = new StoredLog();
    s.append(run(1, 6, 1), null);
    s.saveSnapshot(snapshot(3, 1));
    s.append([], 2);
    assert.equal(s.lastIndex(), 3);
    assert.equal(s.termAt(3), 1);
  });
});
