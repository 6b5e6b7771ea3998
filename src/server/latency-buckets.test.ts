import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { LatencyBuckets } from './latency-buckets.js';

describe('LatencyBuckets', () => {
  it('counts each observation in the first bucket whose bound it does not exceed, +Inf above all', () => {
    const h = new LatencyBuckets([0.001, 0.01, 0.1]);
    for (const s of [0.0005, 0.001, 0.002, 0.05, 3, -1, Number.NaN]) h.observe(s);
    // -1 and NaN are taken as 0.
    assert.deepEqual(h.counts, [4, 1, 1, 1]);
    assert.equal(h.count, 7);
    assert.ok(Math.abs(h.sum - 3.0535) < 1e-9);
  });
});
