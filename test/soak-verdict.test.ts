// The soak's pass criteria (bench/soak/verdict.ts): the heap slope over the last two thirds, and
// each failure named by its figure.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { failures, heapGrowthPctPerMin, lastTwoThirds, type MemorySample, type WorkloadFigures } from '../bench/soak/verdict.js';

const heap = (node: number, minute: number, heapUsedBytes: number): MemorySample => ({
  minute,
  node,
  heapUsedBytes,
  rssBytes: 50e6,
  queuedMessages: 0,
  afterForcedGc: true,
});

const clean: WorkloadFigures = {
  acked: 100,
  lost: 0,
  qos2Duplicates: 0,
  slowBound: 104,
  slowHeldMax: 104,
  slowBursts: 3,
  abruptCloses: 10,
  willsOfAbrupt: 10,
  willsOfNormal: 0,
};

/** A flat heap of 20 MB over minutes 0..minutes, node 1. */
const flat = (minutes: number): MemorySample[] => Array.from({ length: minutes + 1 }, (_, m) => heap(1, m, 20e6));

describe('soak verdict', () => {
  it('measures a steady growth as its percentage of the mean heap per minute', () => {
    // 100, 101, 102 MB: slope 1 MB/min over a mean of 101 MB.
    const g = heapGrowthPctPerMin([heap(1, 4, 100e6), heap(1, 5, 101e6), heap(1, 6, 102e6)]);
    assert.ok(g !== null && Math.abs(g - 100 / 101) < 1e-9, `growth ${g}`);
    assert.equal(heapGrowthPctPerMin([heap(1, 4, 100e6)]), null);
  });

  it('ignores the first third of the run and the sample before the load', () => {
    const s = flat(9);
    assert.deepEqual(
      lastTwoThirds(s, 9).map((x) => x.minute),
      [3, 4, 5, 6, 7, 8, 9],
    );
    assert.deepEqual(
      lastTwoThirds(flat(2), 2).map((x) => x.minute),
      [1, 2],
    );
    // A warm-up that doubles the heap in the first third does not fail a run that is flat after it.
    const warm = [heap(1, 0, 5e6), heap(1, 1, 10e6), heap(1, 2, 20e6), ...flat(9).slice(3)];
    assert.deepEqual(failures(9, warm, clean, []), []);
  });

  it('passes a flat run and fails a leak of more than 1 %/min, naming the node and the figure', () => {
    assert.deepEqual(failures(10, flat(10), clean, [{ node: 1, exit: null }]), []);
    const leak = Array.from({ length: 11 }, (_, m) => heap(2, m, 20e6 * (1 + 0.02 * m)));
    const f = failures(10, [...flat(10), ...leak], clean, []);
    assert.equal(f.length, 1);
    assert.match(f[0]!, /^heap growth of node 2: 1\.\d\d %\/min over minutes 4-10/);
  });

  it('the heap criterion holds exactly when the slope is at most 1 %/min', () => {
    fc.assert(
      // A heap shrinking by at most 3 % of its start a minute stays positive over 30 minutes; a
      // steeper one would reach 0 or below, which no heap reading can be.
      fc.property(fc.double({ min: -0.03, max: 0.05, noNaN: true }), fc.integer({ min: 2, max: 30 }), (perMin, minutes) => {
        const s = Array.from({ length: minutes + 1 }, (_, m) => heap(1, m, 1e7 + 1e7 * perMin * m));
        const window = lastTwoThirds(s, minutes);
        const g = heapGrowthPctPerMin(window)!;
        assert.equal(failures(minutes, s, clean, []).length === 0, g <= 1);
      }),
    );
  });

  it('names each other figure that fails', () => {
    const cases: [Partial<WorkloadFigures>, RegExp][] = [
      [{ lost: 3 }, /^lost: 3 of 100/],
      [{ qos2Duplicates: 1 }, /^qos2 duplicates: 1/],
      [{ slowHeldMax: 105 }, /^slow subscriber queue: 105 held, over its bound of 104/],
      [{ slowBursts: 0 }, /^slow subscriber: no burst/],
      [{ willsOfAbrupt: 9 }, /^wills: 9 of 10 abrupt closes/],
      [{ willsOfNormal: 1 }, /^wills after a normal disconnect: 1/],
      [{ acked: 0 }, /^acknowledged QoS 1\/2 messages: none/],
    ];
    for (const [change, name] of cases) {
      const f = failures(10, flat(10), { ...clean, ...change }, []);
      assert.equal(f.length, 1, `${JSON.stringify(change)}: ${f.join('; ')}`);
      assert.match(f[0]!, name);
    }
    assert.deepEqual(failures(10, flat(10), clean, [{ node: 3, exit: 'signal SIGKILL' }]), ['node 3 died during the run (signal SIGKILL)']);
    assert.match(failures(10, [heap(1, 10, 1e7)], clean, [])[0]!, /fewer than two samples/);
  });
});
