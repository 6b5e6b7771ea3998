import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { connPeriod } from './session.js';

// connPeriod decides which serving period a command's connection belongs to, on every replica; its
// hand-written scan must accept and read exactly what the specification of a ConnId says.
const reference = (conn: string): number | null => {
  const m = /^(\d{1,15})\.\d{1,15}$/.exec(conn);
  return m === null ? null : Number(m[1]);
};

describe('connPeriod', { timeout: 30_000 }, () => {
  it('reads the period of well-formed ids and refuses malformed ones, as the ConnId pattern does', () => {
    const part = fc.string({ unit: fc.constantFrom('0', '1', '7', '9'), minLength: 0, maxLength: 17 });
    const near = fc.tuple(part, fc.constantFrom('.', '..', '', '/', ' .', '.\n'), part).map(([a, dot, b]) => a + dot + b);
    const noisy = fc.string({ unit: fc.constantFrom('0', '5', '.', 'a', '-', '+', 'e', '٣', '\n'), maxLength: 20 });
    fc.assert(
      fc.property(fc.oneof(near, noisy), (conn) => {
        assert.equal(connPeriod(conn), reference(conn), JSON.stringify(conn));
      }),
      { numRuns: 5_000 },
    );
  });

  it('reads the largest 15-digit period exactly', () => {
    assert.equal(connPeriod('999999999999999.1'), 999_999_999_999_999);
    assert.equal(connPeriod('0001.0'), 1);
    assert.equal(connPeriod('1234567890123456.1'), null);
    assert.equal(connPeriod('1.1234567890123456'), null);
  });
});
