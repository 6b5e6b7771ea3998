import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { LogLimiter } from './log-limiter.js';

describe('LogLimiter', { timeout: 10_000 }, () => {
  test('admits one line per key per window and reports how many it held back', () => {
    const l = new LogLimiter(1_000);
    assert.equal(l.admit('bad', 0), 0);
    assert.equal(l.admit('bad', 10), null);
    assert.equal(l.admit('bad', 999), null);
    assert.equal(l.admit('other', 999), 0, 'keys are limited separately');
    assert.equal(l.admit('bad', 1_000), 2, 'the next line names the two held back');
    assert.equal(l.admit('bad', 1_500), null);
  });

  test('a flood of new keys cannot grow it past its bound', () => {
    const l = new LogLimiter(1_000, 4);
    for (let k = 0; k < 100; k++) assert.equal(l.admit(`key-${k}`, 0), 0);
    assert.equal(l.admit('key-99', 1), null, 'the newest key is still remembered');
  });
});
