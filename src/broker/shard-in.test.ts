// The sequence rule of received forwarded messages (docs/scale-out.md "Receiving"): per (origin
// shard, log identity) only the next sequence is applied, a repeat is dropped, and a message ahead of
// a gap is not applied but left for redelivery. A property drives the real state machine with a
// redelivering channel (repeats, any order, as JetStream after a nak or a failover) and checks that
// the subscriber gets every message once, in order; the planted bug `high-water-skip` (accepting a
// sequence ahead of a gap) must make the same property fail.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { RC } from '../protocol/reason-codes.js';
import { Broker } from './broker.js';
import { Harness, msg, published, sent } from './broker-harness.testkit.js';
import type { Effect } from './commands.js';

/** The planted bug: a sequence above the highest is applied even when it skips some. */
class HighWaterSkipBroker extends Broker {
  protected override sequenceVerdict(highest: number, seq: number): 'apply' | 'repeat' | 'gap' {
    return seq <= highest ? 'repeat' : 'apply';
  }
}

/** The receiver's connection: not a client's, as in a node (a conn id of the serving period). */
const receiver = (h: Harness): string => h.conn(900);

/** Delivers sequences 1..n through a channel that, at each step, hands over any message not yet
 * acknowledged (picked by `picks`), or a repeat of one acknowledged; a message is acknowledged when
 * apply answers below 0x80. Returns the payloads the subscriber got, in order. */
function run(broker: Broker, n: number, picks: number[]): string[] {
  const h = new Harness(undefined, broker);
  const RECEIVER = receiver(h);
  const sub = h.conn(1);
  h.connect(sub, 'sub', { clean: true });
  h.subscribe(sub, 1, [{ filter: 'g/#', qos: 1 }]);
  const unacked = new Set<number>(Array.from({ length: n }, (_, i) => i + 1));
  const got: string[] = [];
  // The subscriber acknowledges each delivery at once, so its in-flight window never holds one back.
  const deliver = (seq: number): Effect[] => {
    const out = h.apply({ t: 'shard-in', conn: RECEIVER, handle: seq, origin: 'a', log: '1-1', seq, msg: msg('g/1', `m${seq}`, 1) });
    for (const p of published(out, sub)) if (p.pid !== undefined) h.apply({ t: 'ack', conn: sub, pid: p.pid, kind: 'puback' });
    return out;
  };
  // Bounded: each pick either acknowledges one or is a repeat; without a gap rule bug the lowest
  // unacknowledged is always applied when picked, and after the picks the channel redelivers in order.
  for (const p of picks) {
    const pending = [...unacked];
    const seq = pending.length === 0 || p % 5 === 0 ? (p % n) + 1 : (pending[p % pending.length] as number);
    const out = deliver(seq);
    got.push(...published(out, sub).map((x) => new TextDecoder().decode(x.msg.payload)));
    const ack = sent(out, RECEIVER).find((x) => x.type === 'puback');
    assert.ok(ack !== undefined && ack.type === 'puback', 'apply answers every shard-in');
    if (ack.code < 0x80) unacked.delete(seq);
  }
  for (let guard = 0; unacked.size > 0 && guard < n; guard++) {
    const seq = Math.min(...unacked);
    const out = deliver(seq);
    got.push(...published(out, sub).map((x) => new TextDecoder().decode(x.msg.payload)));
    const ack = sent(out, RECEIVER).find((x) => x.type === 'puback');
    if (ack !== undefined && ack.type === 'puback' && ack.code < 0x80) unacked.delete(seq);
  }
  return got;
}

const property = (make: () => Broker) =>
  fc.property(fc.integer({ min: 1, max: 8 }), fc.array(fc.nat(1000), { maxLength: 40 }), (n, picks) => {
    const got = run(make(), n, picks);
    assert.deepEqual(
      got,
      Array.from({ length: n }, (_, i) => `m${i + 1}`),
    );
  });

describe('the sequence rule of forwarded messages', () => {
  it('delivers every message once and in order, whatever the channel repeats or reorders', () => {
    fc.assert(
      property(() => new Broker()),
      { numRuns: 500 },
    );
  });

  it('catches the planted bug high-water-skip', () => {
    const r = fc.check(
      property(() => new HighWaterSkipBroker()),
      { numRuns: 500 },
    );
    assert.equal(r.failed, true, 'the property must fail for a state machine that skips a gap');
  });

  it('answers a repeat and the next with codes below 0x80, a gap with 0x80', () => {
    const h = new Harness();
    const RECEIVER = receiver(h);
    const code = (seq: number, log = 'L'): number | undefined => {
      const out = h.apply({ t: 'shard-in', conn: RECEIVER, handle: 7, origin: 'a', log, seq, msg: msg('g/1', 'x', 1) });
      const p = sent(out, RECEIVER)[0];
      return p?.type === 'puback' ? p.code : undefined;
    };
    assert.equal(code(2), RC.UNSPECIFIED_ERROR, 'ahead of a gap');
    assert.equal(code(1), RC.NO_MATCHING_SUBSCRIBERS, 'applied, no subscriber');
    assert.equal(code(1), RC.SUCCESS, 'a repeat, acknowledged');
    assert.equal(code(2), RC.NO_MATCHING_SUBSCRIBERS);
    assert.equal(code(1, 'M'), RC.NO_MATCHING_SUBSCRIBERS, 'another log identity has its own sequence');
    assert.equal(h.broker.highestFrom('a', 'L'), 2);
    const b = new Broker();
    b.restore([...h.broker.snapshot()]);
    assert.equal(b.highestFrom('a', 'L'), 2, 'kept across a snapshot');
    assert.equal(b.highestFrom('a', 'M'), 1);
    assert.equal(b.digest(), h.broker.digest());
  });
});
