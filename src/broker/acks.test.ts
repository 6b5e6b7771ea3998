import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { Harness, msg, testSettings } from './broker-harness.testkit.js';
import type { AckItem, Effect } from './commands.js';

// An `acks` command (a connection's acks of one read) must apply exactly as its acks would as
// entries of their own at the same time: the same state and the same effects, in the same order.

/** A subscriber `sub` with QoS 1 and QoS 2 messages in flight and more queued behind its window. */
function withInflight(h: Harness, messages: number): void {
  h.connect(h.conn(1), 'sub');
  h.subscribe(h.conn(1), 1, [
    { filter: 'q1/#', qos: 1 },
    { filter: 'q2/#', qos: 2 },
  ]);
  h.connect(h.conn(2), 'pub');
  for (let i = 0; i < messages; i++) h.publish(h.conn(2), msg(i % 2 === 0 ? 'q1/x' : 'q2/x', `m${i}`, i % 2 === 0 ? 1 : 2), i + 1);
}

const arbAcks = fc.array(
  fc.record({ pid: fc.integer({ min: 1, max: 24 }), kind: fc.constantFrom('puback' as const, 'pubrec' as const, 'pubcomp' as const) }),
  { minLength: 2, maxLength: 40 },
);

describe('broker: acks of one read as one command', { timeout: 30_000 }, () => {
  it('gives the state and effects that the same acks give as single entries', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 20 }), arbAcks, (messages, acks: AckItem[]) => {
        const settings = { ...testSettings, maxInflight: 4 };
        const one = new Harness(settings);
        const each = new Harness(settings);
        withInflight(one, messages);
        withInflight(each, messages);
        const batched = one.apply({ t: 'acks', conn: one.conn(1), acks });
        // Ticks at the same time bring the batched log to the same index as the singles' (the
        // entries of one append share one time).
        for (let i = 1; i < acks.length; i++) assert.deepStrictEqual(one.apply({ t: 'tick' }), []);
        const singles: Effect[] = [];
        for (const a of acks) singles.push(...each.apply({ t: 'ack', conn: each.conn(1), pid: a.pid, kind: a.kind }));
        assert.deepStrictEqual(batched, singles);
        assert.equal(one.broker.digest(), each.broker.digest());
      }),
      { numRuns: 300 },
    );
  });
});
