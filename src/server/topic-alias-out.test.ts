// Outbound topic aliases: a client that applies what it receives always resolves the right topic,
// and no alias exceeds the maximum.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { OutboundAliases } from './topic-alias-out.js';

describe('outbound topic aliases', { timeout: 30_000 }, () => {
  it('sends the topic with a new alias, then the alias alone, and replaces the least recently used', () => {
    const a = new OutboundAliases(2);
    assert.deepEqual([a.assign('x'), a.known], [1, false]);
    assert.deepEqual([a.assign('y'), a.known], [2, false]);
    assert.deepEqual([a.assign('x'), a.known], [1, true]);
    // y is now least recently used and gives up alias 2.
    assert.deepEqual([a.assign('z'), a.known], [2, false]);
    assert.deepEqual([a.assign('y'), a.known], [1, false]);
  });

  it('reuses an alias given back by cancel', () => {
    const a = new OutboundAliases(3);
    a.assign('x');
    a.assign('y');
    a.cancel('y');
    assert.deepEqual([a.assign('z'), a.known], [2, false]);
    assert.equal(a.size, 2);
  });

  it('keeps a receiving client consistent and every alias within 1..max, for any topic sequence', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5 }),
        fc.array(fc.record({ topic: fc.constantFrom('a', 'b', 'c', 'd', 'e', 'f', 'g'), sent: fc.boolean() }), { maxLength: 200 }),
        (max, ops) => {
          const a = new OutboundAliases(max);
          const client = new Map<number, string>();
          for (const { topic, sent } of ops) {
            const alias = a.assign(topic);
            assert.ok(alias >= 1 && alias <= max);
            if (!sent && !a.known) {
              a.cancel(topic);
              continue;
            }
            if (a.known) assert.equal(client.get(alias), topic, 'alias alone resolves to the topic');
            else client.set(alias, topic);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
