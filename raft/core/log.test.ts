import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { MemoryLog, SLAB_BYTES } from './log.js';
import type { LogEntry } from './messages.js';

// The log keeps entry data in slabs (raft/core/log.ts): what it hands out must read back as what
// was appended, through appends, truncations, commits, compactions and installs, and a view handed
// out earlier must keep its bytes whatever the log does afterwards.

/** Data of `length` bytes whose content names the entry and its term, so two differ. */
function dataOf(index: number, term: number, length: number): Uint8Array {
  const d = new Uint8Array(length);
  for (let i = 0; i < length; i++) d[i] = (index * 31 + term * 7 + i) & 0xff;
  return d;
}

type Op =
  | { readonly op: 'own'; readonly lengths: readonly (number | null)[] }
  | { readonly op: 'conflict'; readonly back: number; readonly lengths: readonly (number | null)[] }
  | { readonly op: 'commit'; readonly upTo: number }
  | { readonly op: 'compact'; readonly upTo: number }
  | { readonly op: 'install'; readonly ahead: number };

const lengthArb = fc.oneof(
  { weight: 1, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.constant(0) },
  { weight: 8, arbitrary: fc.integer({ min: 1, max: 3000 }) },
  { weight: 1, arbitrary: fc.integer({ min: SLAB_BYTES - 10, max: SLAB_BYTES + 5000 }) },
);
const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ op: fc.constant('own' as const), lengths: fc.array(lengthArb, { minLength: 1, maxLength: 60 }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      op: fc.constant('conflict' as const),
      back: fc.integer({ min: 0, max: 40 }),
      lengths: fc.array(lengthArb, { minLength: 1, maxLength: 40 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('commit' as const), upTo: fc.double({ min: 0, max: 1, noNaN: true }) }) },
  { weight: 2, arbitrary: fc.record({ op: fc.constant('compact' as const), upTo: fc.double({ min: 0, max: 1, noNaN: true }) }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant('install' as const), ahead: fc.integer({ min: 0, max: 5 }) }) },
);

describe('MemoryLog data in slabs', () => {
  it('reads back what was appended, and earlier views keep their bytes', () => {
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 1, maxLength: 40 }), (ops) => {
        const log = new MemoryLog();
        // The model: entries held, from base + 1.
        let model: LogEntry[] = [];
        let base = 0;
        let term = 1;
        const views: Array<{ view: Uint8Array; want: Uint8Array }> = [];
        const make = (index: number, t: number, length: number | null): LogEntry => ({
          index,
          term: t,
          time: index,
          data: length === null ? null : dataOf(index, t, length),
        });
        for (const o of ops) {
          const last = base + model.length;
          if (o.op === 'own') {
            const es = o.lengths.map((l, k) => make(last + 1 + k, term, l));
            log.appendOwn(es);
            model.push(...es);
          } else if (o.op === 'conflict') {
            // A newer leader's entries from a point above the commit: the log truncates there.
            term++;
            const from = Math.max(log.commit, last - o.back) + 1;
            const prevIndex = from - 1;
            const prevTerm = log.termAt(prevIndex) as number;
            const es = o.lengths.map((l, k) => make(from + k, term, l));
            const out = log.tryAppend(prevIndex, prevTerm, es);
            assert.ok(out.ok);
            model = model.slice(0, prevIndex - base).concat(es);
          } else if (o.op === 'commit') {
            const to = log.commit + Math.floor((last - log.commit) * o.upTo);
            log.commitTo(to);
          } else if (o.op === 'compact') {
            const to = base + Math.floor((log.commit - base) * o.upTo);
            if (to > base) {
              log.compact(to);
              model = model.slice(to - base);
              base = to;
            }
          } else {
            term++;
            const at = last + o.ahead + 1;
            log.install({ index: at, term, time: at });
            model = [];
            base = at;
          }
          // Every held entry reads back; keep a few views to check after later operations.
          assert.equal(log.lastIndex(), base + model.length);
          assert.equal(log.snapshotIndex, base);
          let bytes = 0;
          for (const want of model) {
            const got = log.entry(want.index);
            assert.equal(got.term, want.term);
            assert.equal(got.time, want.time);
            assert.deepEqual(got.data, want.data);
            assert.equal(log.dataLength(want.index), want.data?.length ?? 0);
            bytes += want.data?.length ?? 0;
            if (got.data !== null && got.data.length > 0 && views.length < 200 && want.index % 7 === 0) {
              views.push({ view: got.data, want: (want.data as Uint8Array).slice() });
            }
          }
          assert.equal(log.bytes, bytes);
          const lo = base + 1;
          const hi = base + model.length + 1;
          assert.deepEqual(
            log.slice(lo, hi).map((e) => e.data),
            model.map((e) => e.data),
          );
          for (const v of views) assert.deepEqual(v.view, v.want);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('lets go of the slabs below the first entry it holds', () => {
    const log = new MemoryLog();
    const n = 3000;
    const length = 1000; // 65 entries a slab
    log.appendOwn(Array.from({ length: n }, (_, k) => ({ index: k + 1, term: 1, time: 0, data: dataOf(k + 1, 1, length) })));
    log.commitTo(n);
    const slabs = (l: MemoryLog): number => (l as unknown as { slabs: Uint8Array[] }).slabs.length;
    const before = slabs(log);
    assert.equal(before, Math.ceil(n / Math.floor(SLAB_BYTES / length)));
    log.compact(n - 10);
    assert.equal(slabs(log), 1);
    assert.deepEqual(log.entry(n).data, dataOf(n, 1, length));
    log.compact(n);
    assert.equal(slabs(log), 1, 'the slab being filled stays');
    log.appendOwn([{ index: n + 1, term: 1, time: 0, data: dataOf(n + 1, 1, 10) }]);
    assert.deepEqual(log.entry(n + 1).data, dataOf(n + 1, 1, 10));
  });
});
