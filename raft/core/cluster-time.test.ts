import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ClusterClock } from './cluster-time.js';

describe('ClusterClock.offsets', () => {
  it("gives each fresh voter clock's distance from the median, and leaves stale samples out", () => {
    const c = new ClusterClock({ electionTimeoutMs: 100, maxClockOffsetMs: 1_000 });
    // Leader monotonic 1000; its own wall clock reads 50,000.
    c.sampleSelf(1, 50_000, 1_000);
    // Node 2 answered a round trip 990..1000 with 50,300 (midpoint 995): 305 ahead of the leader.
    c.sample(2, 50_300, 990, 1_000);
    // Node 3 is 190 behind.
    c.sample(3, 49_805, 990, 1_000);
    assert.deepEqual(
      [...c.offsets(1_000)],
      [
        [1, 0],
        [2, 305],
        [3, -190],
      ],
    );
    // Past 4 E every sample is stale, so nothing is reported.
    assert.equal(c.offsets(1_000 + 401).size, 0);
  });
});
