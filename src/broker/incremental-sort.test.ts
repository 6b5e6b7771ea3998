import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { IncrementalSort } from './incremental-sort.js';

const cmp = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

describe('IncrementalSort', { timeout: 30_000 }, () => {
  it('sorts like Array.prototype.sort whatever the size of its steps', () => {
    fc.assert(
      fc.property(
        fc.uniqueArray(fc.string(), { maxLength: 300 }),
        fc.array(fc.integer({ min: 1, max: 500 }), { minLength: 1, maxLength: 20 }),
        (keys, steps) => {
          const sort = new IncrementalSort([...keys], cmp);
          let calls = 0;
          while (!sort.step(steps[calls % steps.length] as number)) calls++;
          assert.deepEqual(sort.sorted, [...keys].sort(cmp));
        },
      ),
      { numRuns: 500 },
    );
  });

  it('takes about n log2 n moves, so a bounded step bounds the work of one pull', () => {
    const n = 1_000;
    const sort = new IncrementalSort(
      Array.from({ length: n }, (_, i) => `k${(i * 7_919) % n}`),
      cmp,
    );
    let steps = 0;
    while (!sort.step(100)) steps++;
    assert.ok(steps <= Math.ceil((n * Math.ceil(Math.log2(n))) / 100), `${steps} steps of 100 moves`);
    assert.throws(() => new IncrementalSort(['b', 'a'], cmp).sorted, /before it finished/);
  });
});
