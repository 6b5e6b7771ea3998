import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RECONNECT_DELAY_MAX_MS, reconnectDelayMs } from './backoff.js';

describe('reconnect backoff', { timeout: 10_000 }, () => {
  it('doubles from 50 ms and stops at 2 s when jitter draws zero', () => {
    const delays = Array.from({ length: 8 }, (_, i) => reconnectDelayMs(i, () => 0));
    assert.deepEqual(delays, [50, 100, 200, 400, 800, 1600, 2000, 2000]);
  });

  it('shortens each delay by at most a quarter, so the cap holds whatever the draw', () => {
    for (const attempt of [0, 3, 10, 1000]) {
      const longest = reconnectDelayMs(attempt, () => 0);
      const shortest = reconnectDelayMs(attempt, () => 0.999999);
      assert.ok(shortest >= Math.floor(longest * 0.75) && shortest < longest, `attempt ${attempt}`);
      assert.ok(longest <= RECONNECT_DELAY_MAX_MS);
    }
  });

  it('treats a random source outside [0, 1) as zero instead of producing a bad delay', () => {
    assert.equal(
      reconnectDelayMs(0, () => Number.NaN),
      50,
    );
    assert.equal(
      reconnectDelayMs(0, () => 7),
      50,
    );
  });
});
