import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { RC } from '../protocol/reason-codes.js';
import { holdAfterPubrec, isHeld, qos1ReusesHeldId, releaseOnPubrel } from './qos2-receiver.js';
import { newSession, type Session } from './session.js';

function session(protocol: 4 | 5): Session {
  const s = newSession('publisher');
  s.protocol = protocol;
  return s;
}

describe('the QoS 2 receiver', () => {
  it('holds an id after a successful PUBREC until PUBREL releases it', () => {
    const s = session(5);
    assert.equal(isHeld(s, 7), false);
    holdAfterPubrec(s, 7, RC.SUCCESS);
    assert.equal(isHeld(s, 7), true);
    assert.equal(releaseOnPubrel(s, 7), RC.SUCCESS);
    assert.equal(isHeld(s, 7), false);
  });

  it('holds nothing after a PUBREC with an error code, which ends the flow', () => {
    const s = session(5);
    holdAfterPubrec(s, 3, RC.NO_MATCHING_SUBSCRIBERS);
    assert.equal(isHeld(s, 3), true, '0x10 is a success code: the flow goes on');
    holdAfterPubrec(s, 4, RC.QUOTA_EXCEEDED);
    holdAfterPubrec(s, 5, RC.NOT_AUTHORIZED);
    assert.equal(isHeld(s, 4), false);
    assert.equal(isHeld(s, 5), false);
  });

  it('answers a PUBREL for an id not held with 0x92 on MQTT 5 and success on 3.1.1', () => {
    assert.equal(releaseOnPubrel(session(5), 9), RC.PACKET_IDENTIFIER_NOT_FOUND);
    assert.equal(releaseOnPubrel(session(4), 9), RC.SUCCESS);
  });

  it('refuses a QoS 1 reuse of a held id only for MQTT 5 sessions', () => {
    const v5 = session(5);
    const v4 = session(4);
    holdAfterPubrec(v5, 11, RC.SUCCESS);
    holdAfterPubrec(v4, 11, RC.SUCCESS);
    assert.equal(qos1ReusesHeldId(v5, 11), true);
    assert.equal(qos1ReusesHeldId(v5, 12), false);
    assert.equal(qos1ReusesHeldId(v4, 11), false);
    assert.equal(qos1ReusesHeldId(undefined, 11), false);
    assert.equal(isHeld(undefined, 11), false);
  });

  it('holds exactly the ids whose last event was a successful PUBREC', () => {
    const op = fc.record({ pid: fc.integer({ min: 1, max: 8 }), rel: fc.boolean(), ok: fc.boolean() });
    fc.assert(
      fc.property(fc.array(op, { maxLength: 60 }), (ops) => {
        const s = session(5);
        const model = new Set<number>();
        for (const o of ops) {
          if (o.rel) {
            const code = releaseOnPubrel(s, o.pid);
            assert.equal(code, model.has(o.pid) ? RC.SUCCESS : RC.PACKET_IDENTIFIER_NOT_FOUND);
            model.delete(o.pid);
          } else {
            holdAfterPubrec(s, o.pid, o.ok ? RC.SUCCESS : RC.UNSPECIFIED_ERROR);
            if (o.ok) model.add(o.pid);
          }
        }
        for (let pid = 1; pid <= 8; pid++) assert.equal(isHeld(s, pid), model.has(pid));
      }),
    );
  });
});
