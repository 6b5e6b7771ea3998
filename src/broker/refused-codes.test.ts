import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RC } from '../protocol/reason-codes.js';
import { events, Harness, sent } from './broker-harness.testkit.js';
import { REFUSED_NONE } from './commands.js';

// A SUBSCRIBE or UNSUBSCRIBE whose filters the connection refused in part carries the codes it
// decided in the command (`refused`); apply's SUBACK or UNSUBACK then holds a code for every filter
// of the packet, in packet order, so nothing waits in the connection for the effect.

const sub = (filter: string) => ({ filter, qos: 1 as const, nl: false, rap: false, rh: 0 as const });

describe('codes of refused filters travel in the command', { timeout: 30_000 }, () => {
  it('answers a SUBSCRIBE with the refused codes and apply’s grants in packet order', () => {
    const h = new Harness();
    const c = h.conn(1);
    h.connect(c, 'alice');
    const bad = RC.TOPIC_FILTER_INVALID;
    const out = h.apply({ t: 'subscribe', conn: c, pid: 5, subs: [sub('a'), sub('b')], refused: [bad, REFUSED_NONE, bad, REFUSED_NONE] });
    assert.deepEqual(sent(out, c), [{ type: 'suback', pid: 5, codes: [bad, RC.GRANTED_QOS_1, bad, RC.GRANTED_QOS_1] }]);
  });

  it('answers an UNSUBSCRIBE with the refused codes and apply’s results in packet order', () => {
    const h = new Harness();
    const c = h.conn(1);
    h.connect(c, 'alice');
    h.subscribe(c, 1, [{ filter: 'a' }]);
    const bad = RC.TOPIC_FILTER_INVALID;
    const out = h.apply({ t: 'unsubscribe', conn: c, pid: 6, filters: ['a', 'z'], refused: [REFUSED_NONE, bad, REFUSED_NONE] });
    assert.deepEqual(sent(out, c), [{ type: 'unsuback', pid: 6, codes: [RC.SUCCESS, bad, RC.NO_SUBSCRIPTION_EXISTED] }]);
  });

  it('refuses a command whose refused codes do not leave one slot per proposed filter', () => {
    const h = new Harness();
    const c = h.conn(1);
    h.connect(c, 'alice');
    for (const refused of [[REFUSED_NONE], [RC.TOPIC_FILTER_INVALID, 0, REFUSED_NONE, REFUSED_NONE]]) {
      const out = h.apply({ t: 'subscribe', conn: c, pid: 7, subs: [sub('a'), sub('b')], refused });
      assert.deepEqual(sent(out, c), [], JSON.stringify(refused));
      assert.equal(events(out, 'no-op').length, 1);
    }
  });
});
