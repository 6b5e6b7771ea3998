// What the encoder leaves out or normalises for the level it writes, and how it reports a packet it
// cannot represent. Byte-exact fixtures for every packet type live in codec-fixtures.test.ts.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { frame, MAX, str, u16 } from './codec.testkit.js';
import { Decoder } from './decoder.js';
import { encode } from './encoder.js';
import type { Packet } from './packets.js';
import { RC } from './reason-codes.js';

describe('encoder', { timeout: 10_000 }, () => {
  it('leaves out reason codes and properties that 3.1.1 has no place for', () => {
    assert.deepStrictEqual(
      encode({ type: 'puback', pid: 9, code: RC.NO_MATCHING_SUBSCRIBERS, props: { reasonString: 'x' } }, 4),
      frame(0x40, u16(9)),
    );
    assert.deepStrictEqual(encode({ type: 'disconnect', code: RC.SESSION_TAKEN_OVER, props: { reasonString: 'x' } }, 4), frame(0xe0));
    assert.deepStrictEqual(encode({ type: 'connack', sessionPresent: false, code: 0, props: { maxQos: 1 } }, 4), frame(0x20, 0, 0));
    assert.deepStrictEqual(encode({ type: 'unsuback', pid: 2, codes: [0], props: { reasonString: 'x' } }, 4), frame(0xb0, u16(2)));
    assert.deepStrictEqual(
      encode({ type: 'publish', dup: false, qos: 0, retain: false, topic: 't', payload: Buffer.from('p'), props: { messageExpiry: 5 } }, 4),
      frame(0x30, str('t'), 0x70),
    );
  });

  it('writes only the QoS bits of subscription options before 5.0 [MQTT-3.8.3-4]', () => {
    const p: Packet = { type: 'subscribe', pid: 1, subs: [{ filter: 'a', qos: 1, nl: true, rap: true, rh: 2 }], props: { subId: 4 } };
    assert.deepStrictEqual(encode(p, 4), frame(0x82, u16(1), str('a'), 1));
  });

  it('clears DUP on a QoS 0 PUBLISH [MQTT-3.3.1-2]', () => {
    const bytes = encode({ type: 'publish', dup: true, qos: 0, retain: false, topic: 't', payload: Buffer.alloc(0), props: {} }, 5);
    assert.equal((bytes[0] as number) & 0x08, 0);
  });

  it('writes a property block of 128 bytes or more with a two-byte length, and reads it back', () => {
    const p: Packet = {
      type: 'disconnect',
      code: RC.ADMINISTRATIVE_ACTION,
      props: { reasonString: 'r'.repeat(300), userProps: [['k', 'v']] },
    };
    const bytes = encode(p, 5);
    // 1 reason code + 2 length bytes + (3 + 300) reason string + 7 user property.
    assert.equal(bytes.length, 2 + 1 + 2 + 303 + 7 + 1);
    assert.deepStrictEqual(new Decoder({ maxPacketSize: MAX, level: 5 }).feed(bytes), { packets: [p], error: null });
  });

  it('writes a 200 KB PUBLISH with a three-byte remaining length', () => {
    const p: Packet = {
      type: 'publish',
      dup: false,
      qos: 1,
      retain: true,
      topic: 'big',
      pid: 77,
      payload: Buffer.alloc(200_000, 1),
      props: {},
    };
    const bytes = encode(p, 5);
    assert.equal(bytes.length, 1 + 3 + 5 + 2 + 1 + 200_000);
    assert.deepStrictEqual(new Decoder({ maxPacketSize: MAX, level: 5 }).feed(bytes), { packets: [p], error: null });
  });

  it('refuses with RangeError a packet it cannot represent', () => {
    const longTopic: Packet = {
      type: 'publish',
      dup: false,
      qos: 0,
      retain: false,
      topic: 'a'.repeat(70_000),
      payload: Buffer.alloc(0),
      props: {},
    };
    assert.throws(() => encode(longTopic, 4), RangeError);
    assert.throws(() => encode({ type: 'auth', code: 0, props: {} }, 4), RangeError);
    assert.throws(() => encode({ type: 'subscribe', pid: 1, subs: [], props: { subId: 2 ** 28 } }, 5), RangeError);
  });
});
