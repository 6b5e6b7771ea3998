import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Message } from '../broker/commands.js';
import { encode } from '../protocol/encoder.js';
import type { Packet } from '../protocol/packets.js';
import { RC, SUBACK_FAILURE_V4 } from '../protocol/reason-codes.js';
import { type ConnackLimits, codesAckBytes, publishWithAlias, responseInformation, toWire, withoutProblemInfo } from './outbound.js';

const limits: ConnackLimits = {
  receiveMaximum: 64,
  maxQos: 2,
  retainAvailable: true,
  maxPacketSize: 1 << 20,
  topicAliasMaximum: 10,
  serverKeepAlive: undefined,
};

const msg: Message = {
  topic: 'a/b',
  payload: new Uint8Array([1]),
  qos: 1,
  retain: false,
  props: { contentType: 'text/plain', userProps: [['k', 'v']] },
};

describe('effects to wire packets', { timeout: 30_000 }, () => {
  it('maps CONNACK reason codes to 3.1.1 return codes and adds no properties', () => {
    const p = toWire({ type: 'connack', sessionPresent: false, code: RC.CLIENT_IDENTIFIER_NOT_VALID }, 4, limits);
    assert.deepEqual(p, { type: 'connack', sessionPresent: false, code: 2, props: {} });
  });

  it('announces only the v5 CONNACK properties that differ from the defaults', () => {
    const p = toWire({ type: 'connack', sessionPresent: true, code: RC.SUCCESS, assignedClientId: 'auto-1' }, 5, {
      ...limits,
      maxQos: 1,
      retainAvailable: false,
      serverKeepAlive: 60,
    });
    assert.equal(p.type, 'connack');
    if (p.type !== 'connack') return;
    assert.deepEqual(p.props, {
      receiveMax: 64,
      maxPacketSize: 1 << 20,
      wildcardAvailable: 1,
      subIdAvailable: 1,
      sharedAvailable: 1,
      maxQos: 1,
      retainAvailable: 0,
      topicAliasMax: 10,
      serverKeepAlive: 60,
      assignedClientId: 'auto-1',
    });
  });

  it('turns every SUBACK failure into 0x80 for 3.1.1 and keeps v5 codes', () => {
    const ack = { type: 'suback', pid: 5, codes: [1, RC.TOPIC_FILTER_INVALID, RC.NOT_AUTHORIZED] } as const;
    const v4 = toWire({ ...ack, codes: [...ack.codes] }, 4, limits);
    const v5 = toWire({ ...ack, codes: [...ack.codes] }, 5, limits);
    assert.deepEqual(v4.type === 'suback' && v4.codes, [1, SUBACK_FAILURE_V4, SUBACK_FAILURE_V4]);
    assert.deepEqual(v5.type === 'suback' && v5.codes, [1, RC.TOPIC_FILTER_INVALID, RC.NOT_AUTHORIZED]);
  });

  it('sends 3.1.1 acknowledgements without a reason code', () => {
    const p = toWire({ type: 'puback', pid: 3, code: RC.NO_MATCHING_SUBSCRIBERS }, 4, limits);
    assert.deepEqual(p, { type: 'puback', pid: 3, code: 0, props: {} });
  });

  it('puts message properties, remaining expiry and subscription ids on a v5 PUBLISH only', () => {
    const out = { type: 'publish', pid: 9, qos: 1, retain: true, dup: true, msg, expiryS: 42, subIds: [7] } as const;
    const v5 = toWire({ ...out, subIds: [7] }, 5, limits);
    const v4 = toWire({ ...out, subIds: [7] }, 4, limits);
    assert.deepEqual(v5, {
      type: 'publish',
      dup: true,
      qos: 1,
      retain: true,
      topic: 'a/b',
      pid: 9,
      payload: msg.payload,
      props: { messageExpiry: 42, contentType: 'text/plain', userProps: [['k', 'v']], subIds: [7] },
    });
    assert.deepEqual(v4.type === 'publish' && v4.props, {});
  });
});

describe('v5 output shaped by what the client asked', { timeout: 30_000 }, () => {
  it('puts a Reason String on failing acks unless the client asked for no problem information', () => {
    const fail = { type: 'puback', pid: 1, code: RC.QUOTA_EXCEEDED } as const;
    assert.deepEqual((toWire(fail, 5, limits) as { props: object }).props, { reasonString: 'quota exceeded' });
    assert.deepEqual((toWire(fail, 5, { ...limits, noProblemInfo: true }) as { props: object }).props, {});
    assert.deepEqual((toWire({ type: 'puback', pid: 1, code: RC.SUCCESS }, 5, limits) as { props: object }).props, {});
    const suback = toWire({ type: 'suback', pid: 2, codes: [RC.GRANTED_QOS_1, RC.NOT_AUTHORIZED] }, 5, limits) as { props: object };
    assert.deepEqual(suback.props, { reasonString: 'not authorized' });
  });

  it('gives Response Information and enhanced-authentication data in a successful CONNACK only', () => {
    const l: ConnackLimits = { ...limits, responseInfoFor: 'dev-1', auth: { method: 'SCRAM-SHA-256', data: Buffer.from('v=x') } };
    const ok = toWire({ type: 'connack', sessionPresent: false, code: RC.SUCCESS }, 5, l) as Extract<Packet, { type: 'connack' }>;
    assert.equal(ok.props.responseInfo, 'response/dev-1/');
    assert.equal(ok.props.authMethod, 'SCRAM-SHA-256');
    assert.deepEqual(ok.props.authData, Buffer.from('v=x'));
    const refused = toWire({ type: 'connack', sessionPresent: false, code: RC.NOT_AUTHORIZED }, 5, l) as Extract<
      Packet,
      { type: 'connack' }
    >;
    assert.deepEqual(refused.props, { reasonString: 'not authorized' });
    assert.equal(responseInformation('a+b'), undefined, 'no topic prefix from a wildcard client id');
  });

  it('leaves Response Information out where it would exceed an MQTT string, counting UTF-8 bytes', () => {
    assert.equal(responseInformation('a'.repeat(65_525))?.length, 65_535);
    assert.equal(responseInformation('a'.repeat(65_526)), undefined);
    // 'é' is two bytes: 32,763 of them make 65,526 bytes although the string has 32,763 characters.
    assert.equal(responseInformation(`${'é'.repeat(32_762)}a`), `response/${'é'.repeat(32_762)}a/`);
    assert.equal(responseInformation('é'.repeat(32_763)), undefined);
  });

  it('sizes a SUBACK and an UNSUBACK without properties as the encoder writes them', () => {
    for (const n of [1, 2, 124, 125, 126, 16_380, 16_381, 16_382, 40_000]) {
      const codes = new Array<number>(n).fill(RC.GRANTED_QOS_1);
      assert.equal(codesAckBytes(n), encode({ type: 'suback', pid: 7, codes, props: {} }, 5).length, `SUBACK of ${n}`);
      assert.equal(codesAckBytes(n), encode({ type: 'unsuback', pid: 7, codes, props: {} }, 5).length, `UNSUBACK of ${n}`);
    }
  });

  it('strips Reason String and User Properties, and reports when there were none', () => {
    const p: Packet = {
      type: 'disconnect',
      code: RC.QUOTA_EXCEEDED,
      props: { reasonString: 'r', userProps: [['k', 'v']], sessionExpiry: 5 },
    };
    assert.deepEqual(withoutProblemInfo(p), { type: 'disconnect', code: RC.QUOTA_EXCEEDED, props: { sessionExpiry: 5 } });
    assert.equal(withoutProblemInfo({ type: 'pingresp' }), null);
    assert.equal(withoutProblemInfo({ type: 'puback', pid: 1, code: 0, props: {} }), null);
  });

  it('sends the topic with a new outbound alias and the alias alone once known', () => {
    const out = { type: 'publish', pid: 4, qos: 1, retain: false, dup: false, msg } as const;
    const first = publishWithAlias(out, 3, false) as Extract<Packet, { type: 'publish' }>;
    const again = publishWithAlias(out, 3, true) as Extract<Packet, { type: 'publish' }>;
    assert.deepEqual([first.topic, first.props.topicAlias, first.pid], ['a/b', 3, 4]);
    assert.deepEqual([again.topic, again.props.topicAlias, again.props.contentType], ['', 3, 'text/plain']);
  });
});
