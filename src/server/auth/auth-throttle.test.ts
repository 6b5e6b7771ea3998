// Failed-login backoff: doubling per failure up to the cap, per address and per username, forgotten
// after a quiet minute or a success, and tables that never exceed their bound.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AUTH_BACKOFF_BASE_MS, AUTH_BACKOFF_MAX_MS, AuthThrottle } from './auth-throttle.js';

describe('AuthThrottle', { timeout: 10_000 }, () => {
  it('doubles the delay with each failure in a row, up to the cap', () => {
    const t = new AuthThrottle();
    const delays = Array.from({ length: 8 }, (_, i) => t.fail('10.0.0.1', 'u', i * 10_000));
    assert.deepEqual(
      delays,
      delays.map((_, i) => Math.min(AUTH_BACKOFF_BASE_MS * 2 ** i, AUTH_BACKOFF_MAX_MS)),
    );
  });

  it('blocks the address and the username for the window, from any other address or name', () => {
    const t = new AuthThrottle();
    t.fail('10.0.0.1', 'alice', 0);
    assert.equal(t.blockedFor('10.0.0.1', 'bob', 50), AUTH_BACKOFF_BASE_MS - 50);
    assert.equal(t.blockedFor('10.0.0.2', 'alice', 50), AUTH_BACKOFF_BASE_MS - 50);
    assert.equal(t.blockedFor('10.0.0.2', 'bob', 50), 0);
    assert.equal(t.blockedFor('10.0.0.1', 'alice', AUTH_BACKOFF_BASE_MS), 0);
  });

  it('starts again from the base after a success or a quiet minute', () => {
    const t = new AuthThrottle();
    t.fail('a', 'u', 0);
    t.fail('a', 'u', 1_000);
    t.succeed('a', 'u');
    assert.equal(t.fail('a', 'u', 2_000), AUTH_BACKOFF_BASE_MS);
    t.fail('a', 'u', 3_000);
    assert.equal(t.fail('a', 'u', 100_000), AUTH_BACKOFF_BASE_MS);
  });

  it('keeps at most its bound of entries under a storm of distinct addresses and names', () => {
    const t = new AuthThrottle(100);
    for (let i = 0; i < 10_000; i++) t.fail(`10.0.${i >> 8}.${i & 255}`, `user${i}`, i);
    assert.equal(t.byAddress.size, 100);
    assert.equal(t.byUser.size, 100);
    assert.equal(t.byAddress.evicted, 9_900);
  });
});
