// The decoder's refusals: each malformed or forbidden input gets its specific reason code and key,
// decided on the raw bytes, and the decoder stays refused afterwards.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { frame, MAX, str, u16, u32 } from './codec.testkit.js';
import { Decoder, type DecoderOptions } from './decoder.js';
import type { ProtocolLevel } from './packets.js';
import { RC } from './reason-codes.js';

const connected = (level: ProtocolLevel): DecoderOptions => ({ maxPacketSize: MAX, level });
const fresh: DecoderOptions = { maxPacketSize: MAX };
const asClient = (level: ProtocolLevel): DecoderOptions => ({ maxPacketSize: MAX, role: 'client', level });

/** A CONNECT body after the fixed header, for 3.1.1 or 5.0, with the given flags and tail. */
function connectBody(level: 4 | 5, flags: number, ...tail: (number | number[])[]): (number | number[])[] {
  return [str('MQTT'), level, flags, u16(60), ...(level === 5 ? [0] : []), ...tail];
}

interface Case {
  name: string;
  opts: DecoderOptions;
  bytes: Buffer;
  reason: number;
  key: string;
}

const cases: Case[] = [
  // Framing and the fixed header.
  {
    name: 'a remaining length of more than 4 bytes',
    opts: connected(4),
    bytes: Buffer.from([0x30, 0xff, 0xff, 0xff, 0xff, 0x01]),
    reason: RC.MALFORMED_PACKET,
    key: 'remaining-length',
  },
  {
    name: 'a remaining length not minimally encoded',
    opts: connected(4),
    bytes: Buffer.from([0xc0, 0x80, 0x00]),
    reason: RC.MALFORMED_PACKET,
    key: 'remaining-length',
  },
  { name: 'reserved packet type 0', opts: connected(4), bytes: frame(0x00), reason: RC.MALFORMED_PACKET, key: 'packet-type' },
  { name: 'packet type 15 (AUTH) in 3.1.1', opts: connected(4), bytes: frame(0xf0), reason: RC.MALFORMED_PACKET, key: 'packet-type' },
  {
    name: 'SUBSCRIBE with flags 0000',
    opts: connected(4),
    bytes: frame(0x80, u16(1), str('a'), 0),
    reason: RC.MALFORMED_PACKET,
    key: 'header-flags',
  },
  {
    name: 'UNSUBSCRIBE with flags 0000',
    opts: connected(5),
    bytes: frame(0xa0, u16(1), 0, str('a')),
    reason: RC.MALFORMED_PACKET,
    key: 'header-flags',
  },
  { name: 'PUBREL with flags 0000', opts: connected(4), bytes: frame(0x60, u16(1)), reason: RC.MALFORMED_PACKET, key: 'header-flags' },
  { name: 'PINGREQ with a flag set', opts: connected(4), bytes: frame(0xc1), reason: RC.MALFORMED_PACKET, key: 'header-flags' },
  {
    name: 'CONNECT with a flag set',
    opts: fresh,
    bytes: frame(0x12, ...connectBody(4, 0x02, str('c'))),
    reason: RC.MALFORMED_PACKET,
    key: 'header-flags',
  },
  { name: 'PUBLISH with QoS 3', opts: connected(4), bytes: frame(0x36, str('t'), u16(1)), reason: RC.MALFORMED_PACKET, key: 'qos3' },
  { name: 'PUBLISH QoS 0 with DUP', opts: connected(5), bytes: frame(0x38, str('t'), 0), reason: RC.MALFORMED_PACKET, key: 'dup-qos0' },
  { name: 'a first packet that is not CONNECT', opts: fresh, bytes: frame(0xc0), reason: RC.PROTOCOL_ERROR, key: 'first-packet' },
  { name: 'AUTH before CONNECT', opts: fresh, bytes: frame(0xf0), reason: RC.PROTOCOL_ERROR, key: 'first-packet' },
  {
    name: 'a second CONNECT',
    opts: connected(4),
    bytes: frame(0x10, ...connectBody(4, 0x02, str('c'))),
    reason: RC.PROTOCOL_ERROR,
    key: 'second-connect',
  },
  { name: 'a CONNACK sent to the server', opts: connected(4), bytes: frame(0x20, 0, 0), reason: RC.PROTOCOL_ERROR, key: 'direction' },
  {
    name: 'a SUBSCRIBE sent to a client',
    opts: asClient(4),
    bytes: frame(0x82, u16(1), str('a'), 0),
    reason: RC.PROTOCOL_ERROR,
    key: 'direction',
  },
  {
    name: 'a packet shorter than its fields',
    opts: connected(4),
    bytes: frame(0x30, u16(9), ...Buffer.from('abc')),
    reason: RC.MALFORMED_PACKET,
    key: 'truncated',
  },
  { name: 'PINGREQ with a body', opts: connected(4), bytes: frame(0xc0, 0), reason: RC.MALFORMED_PACKET, key: 'trailing-bytes' },
  { name: '3.1.1 DISCONNECT with a body', opts: connected(4), bytes: frame(0xe0, 0), reason: RC.MALFORMED_PACKET, key: 'trailing-bytes' },
  {
    name: 'PUBACK with bytes after the packet identifier in 3.1.1',
    opts: connected(4),
    bytes: frame(0x40, u16(1), 0),
    reason: RC.MALFORMED_PACKET,
    key: 'trailing-bytes',
  },

  // UTF-8 strings, checked on the raw bytes [MQTT-1.5.3-1/2].
  {
    name: 'a topic with an invalid UTF-8 sequence',
    opts: connected(4),
    bytes: frame(0x30, [0, 2, 0xc3, 0x28]),
    reason: RC.MALFORMED_PACKET,
    key: 'utf8',
  },
  {
    name: 'a topic containing U+0000',
    opts: connected(4),
    bytes: frame(0x30, [0, 3, 0x61, 0x00, 0x62]),
    reason: RC.MALFORMED_PACKET,
    key: 'utf8',
  },
  {
    name: 'a topic containing an encoded UTF-16 surrogate',
    opts: connected(5),
    bytes: frame(0x30, [0, 3, 0xed, 0xa0, 0x80], 0),
    reason: RC.MALFORMED_PACKET,
    key: 'utf8',
  },
  {
    name: 'a topic with an overlong encoding of "/"',
    opts: connected(4),
    bytes: frame(0x30, [0, 2, 0xc0, 0xaf]),
    reason: RC.MALFORMED_PACKET,
    key: 'utf8',
  },
  {
    name: 'a client identifier with invalid UTF-8',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(4, 0x02, [0, 1, 0xff])),
    reason: RC.MALFORMED_PACKET,
    key: 'utf8',
  },
  {
    name: 'a user property with invalid UTF-8',
    opts: connected(5),
    bytes: frame(0x40, u16(1), 0, [6, 0x26, 0, 1, 0x80, 0, 0]),
    reason: RC.MALFORMED_PACKET,
    key: 'utf8',
  },
  {
    name: 'a topic filter containing U+0000',
    opts: connected(4),
    bytes: frame(0x82, u16(1), [0, 1, 0], 0),
    reason: RC.MALFORMED_PACKET,
    key: 'utf8',
  },

  // CONNECT (§3.1.2).
  {
    name: 'an unknown protocol name',
    opts: fresh,
    bytes: frame(0x10, str('MQTX'), 4, 2, u16(60), str('c')),
    reason: RC.PROTOCOL_ERROR,
    key: 'protocol-name',
  },
  {
    name: 'an unknown protocol level',
    opts: fresh,
    bytes: frame(0x10, str('MQTT'), 6, 2, u16(60), str('c')),
    reason: RC.UNSUPPORTED_PROTOCOL_VERSION,
    key: 'protocol-level',
  },
  {
    name: 'protocol name MQTT with level 3',
    opts: fresh,
    bytes: frame(0x10, str('MQTT'), 3, 2, u16(60), str('c')),
    reason: RC.UNSUPPORTED_PROTOCOL_VERSION,
    key: 'protocol-level',
  },
  {
    name: 'protocol name MQIsdp with level 4',
    opts: fresh,
    bytes: frame(0x10, str('MQIsdp'), 4, 2, u16(60), str('c')),
    reason: RC.UNSUPPORTED_PROTOCOL_VERSION,
    key: 'protocol-level',
  },
  {
    name: 'the reserved connect flag',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(4, 0x03, str('c'))),
    reason: RC.MALFORMED_PACKET,
    key: 'connect-reserved',
  },
  {
    name: 'will QoS without the will flag',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(4, 0x0a, str('c'))),
    reason: RC.MALFORMED_PACKET,
    key: 'will-flags',
  },
  {
    name: 'will retain without the will flag',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(5, 0x22, str('c'))),
    reason: RC.MALFORMED_PACKET,
    key: 'will-flags',
  },
  {
    name: 'will QoS 3',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(4, 0x1e, str('c'), str('w'), str('p'))),
    reason: RC.MALFORMED_PACKET,
    key: 'will-qos',
  },
  {
    name: 'a password without a user name in 3.1.1',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(4, 0x42, str('c'), str('pw'))),
    reason: RC.MALFORMED_PACKET,
    key: 'password-flag',
  },
  {
    name: 'a will topic with a wildcard',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(4, 0x06, str('c'), str('w/#'), str('p'))),
    reason: RC.TOPIC_NAME_INVALID,
    key: 'topic-wildcard',
  },
  {
    name: 'an empty will topic',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(4, 0x06, str('c'), str(''), str('p'))),
    reason: RC.PROTOCOL_ERROR,
    key: 'topic-empty',
  },
  {
    name: 'bytes after the last CONNECT field',
    opts: fresh,
    bytes: frame(0x10, ...connectBody(4, 0x02, str('c'), 0)),
    reason: RC.MALFORMED_PACKET,
    key: 'trailing-bytes',
  },

  // MQTT 5 properties (§2.2.2).
  {
    name: 'a property not allowed in the packet (Topic Alias in CONNECT)',
    opts: fresh,
    bytes: frame(0x10, str('MQTT'), 5, 2, u16(60), [3, 0x23, 0, 1], str('c')),
    reason: RC.MALFORMED_PACKET,
    key: 'property-id',
  },
  {
    name: 'an unknown property identifier',
    opts: connected(5),
    bytes: frame(0x30, str('t'), [2, 0x05, 0]),
    reason: RC.MALFORMED_PACKET,
    key: 'property-id',
  },
  {
    name: 'Session Expiry Interval twice',
    opts: fresh,
    bytes: frame(0x10, str('MQTT'), 5, 2, u16(60), [10, 0x11, ...u32(1), 0x11, ...u32(2)], str('c')),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-duplicate',
  },
  {
    name: 'Subscription Identifier twice in SUBSCRIBE',
    opts: connected(5),
    bytes: frame(0x82, u16(1), [4, 0x0b, 1, 0x0b, 2], str('a'), 0),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-duplicate',
  },
  {
    name: 'Reason String twice in PUBACK',
    opts: connected(5),
    bytes: frame(0x40, u16(1), 0, [8, 0x1f, ...str('a'), 0x1f, ...str('b')]),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-duplicate',
  },
  {
    name: 'Receive Maximum 0',
    opts: fresh,
    bytes: frame(0x10, str('MQTT'), 5, 2, u16(60), [3, 0x21, 0, 0], str('c')),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-value',
  },
  {
    name: 'Maximum Packet Size 0',
    opts: fresh,
    bytes: frame(0x10, str('MQTT'), 5, 2, u16(60), [5, 0x27, ...u32(0)], str('c')),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-value',
  },
  {
    name: 'Request Problem Information 2',
    opts: fresh,
    bytes: frame(0x10, str('MQTT'), 5, 2, u16(60), [2, 0x17, 2], str('c')),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-value',
  },
  {
    name: 'Payload Format Indicator 2',
    opts: connected(5),
    bytes: frame(0x30, str('t'), [2, 0x01, 2]),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-value',
  },
  {
    name: 'Subscription Identifier 0 in SUBSCRIBE',
    opts: connected(5),
    bytes: frame(0x82, u16(1), [2, 0x0b, 0], str('a'), 0),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-value',
  },
  {
    name: 'a Subscription Identifier in a PUBLISH from a client',
    opts: connected(5),
    bytes: frame(0x30, str('t'), [2, 0x0b, 1]),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-subid',
  },
  {
    name: 'a property length beyond the packet',
    opts: connected(5),
    bytes: frame(0x30, str('t'), [9, 0x01, 1]),
    reason: RC.MALFORMED_PACKET,
    key: 'property-length',
  },
  {
    name: 'a property value running past the property length',
    opts: connected(5),
    bytes: frame(0x30, str('t'), [3, 0x02, 0, 0], 0, 0, 0),
    reason: RC.MALFORMED_PACKET,
    key: 'truncated',
  },
  {
    name: 'Authentication Data without Authentication Method',
    opts: fresh,
    bytes: frame(0x10, str('MQTT'), 5, 2, u16(60), [4, 0x16, ...str('x')], str('c')),
    reason: RC.PROTOCOL_ERROR,
    key: 'property-auth-data',
  },

  // SUBSCRIBE and UNSUBSCRIBE (§3.8, §3.10).
  { name: '3.1.1 SUBSCRIBE without filters', opts: connected(4), bytes: frame(0x82, u16(1)), reason: RC.PROTOCOL_ERROR, key: 'no-filters' },
  {
    name: '5.0 SUBSCRIBE without filters',
    opts: connected(5),
    bytes: frame(0x82, u16(1), 0),
    reason: RC.PROTOCOL_ERROR,
    key: 'no-filters',
  },
  { name: 'UNSUBSCRIBE without filters', opts: connected(4), bytes: frame(0xa2, u16(1)), reason: RC.PROTOCOL_ERROR, key: 'no-filters' },
  {
    name: 'a 5.0 subscription option with a reserved bit',
    opts: connected(5),
    bytes: frame(0x82, u16(1), 0, str('a'), 0x40),
    reason: RC.MALFORMED_PACKET,
    key: 'subscription-options',
  },
  {
    name: 'a 3.1.1 subscription option beyond the QoS bits',
    opts: connected(4),
    bytes: frame(0x82, u16(1), str('a'), 0x04),
    reason: RC.MALFORMED_PACKET,
    key: 'subscription-options',
  },
  {
    name: 'subscription QoS 3',
    opts: connected(5),
    bytes: frame(0x82, u16(1), 0, str('a'), 0x03),
    reason: RC.MALFORMED_PACKET,
    key: 'qos3',
  },
  {
    name: 'retain handling 3',
    opts: connected(5),
    bytes: frame(0x82, u16(1), 0, str('a'), 0x30),
    reason: RC.MALFORMED_PACKET,
    key: 'retain-handling',
  },
  {
    name: 'a filter without its options byte',
    opts: connected(4),
    bytes: frame(0x82, u16(1), str('a')),
    reason: RC.MALFORMED_PACKET,
    key: 'truncated',
  },

  // Packet identifiers [MQTT-2.2.1-3].
  {
    name: '3.1.1 SUBSCRIBE with packet identifier 0',
    opts: connected(4),
    bytes: frame(0x82, u16(0), str('a'), 0),
    reason: RC.MALFORMED_PACKET,
    key: 'pid-zero',
  },
  {
    name: '5.0 SUBSCRIBE with packet identifier 0',
    opts: connected(5),
    bytes: frame(0x82, u16(0), 0, str('a'), 0),
    reason: RC.PROTOCOL_ERROR,
    key: 'pid-zero',
  },
  {
    name: 'PUBLISH QoS 1 with packet identifier 0',
    opts: connected(4),
    bytes: frame(0x32, str('t'), u16(0)),
    reason: RC.MALFORMED_PACKET,
    key: 'pid-zero',
  },
  { name: 'PUBACK with packet identifier 0', opts: connected(5), bytes: frame(0x40, u16(0)), reason: RC.PROTOCOL_ERROR, key: 'pid-zero' },
  {
    name: 'UNSUBSCRIBE with packet identifier 0',
    opts: connected(4),
    bytes: frame(0xa2, u16(0), str('a')),
    reason: RC.MALFORMED_PACKET,
    key: 'pid-zero',
  },

  // PUBLISH topic names (§3.3.2.1).
  {
    name: 'a topic name with +',
    opts: connected(4),
    bytes: frame(0x30, str('a/+/b')),
    reason: RC.TOPIC_NAME_INVALID,
    key: 'topic-wildcard',
  },
  {
    name: 'a topic name with #',
    opts: connected(5),
    bytes: frame(0x30, str('a/#'), 0),
    reason: RC.TOPIC_NAME_INVALID,
    key: 'topic-wildcard',
  },
  {
    name: 'an empty topic name in 3.1.1',
    opts: connected(4),
    bytes: frame(0x30, str(''), 1),
    reason: RC.PROTOCOL_ERROR,
    key: 'topic-empty',
  },
  {
    name: 'an empty topic name in 5.0 without a Topic Alias',
    opts: connected(5),
    bytes: frame(0x30, str(''), 0, 1),
    reason: RC.PROTOCOL_ERROR,
    key: 'topic-empty',
  },

  // Reason codes that the packet type does not allow.
  {
    name: 'PUBACK with a PUBREL-only reason code',
    opts: connected(5),
    bytes: frame(0x40, u16(1), 0x92),
    reason: RC.PROTOCOL_ERROR,
    key: 'reason-code',
  },
  {
    name: 'DISCONNECT with an unknown reason code',
    opts: connected(5),
    bytes: frame(0xe0, 0x05),
    reason: RC.PROTOCOL_ERROR,
    key: 'reason-code',
  },
  { name: 'AUTH with reason code 0x80', opts: connected(5), bytes: frame(0xf0, 0x80, 0), reason: RC.PROTOCOL_ERROR, key: 'reason-code' },
  { name: '3.1.1 CONNACK with return code 6', opts: asClient(4), bytes: frame(0x20, 0, 6), reason: RC.PROTOCOL_ERROR, key: 'reason-code' },
  {
    name: 'CONNACK with reserved acknowledge flags',
    opts: asClient(5),
    bytes: frame(0x20, 2, 0, 0),
    reason: RC.MALFORMED_PACKET,
    key: 'connack-flags',
  },
];

describe('decoder refusals', { timeout: 30_000 }, () => {
  for (const c of cases) {
    it(`refuses ${c.name} (${c.key})`, () => {
      const r = new Decoder(c.opts).feed(c.bytes);
      assert.deepStrictEqual(r.packets, []);
      assert.ok(r.error !== null, 'an error');
      assert.equal(r.error.key, c.key);
      assert.equal(r.error.reason, c.reason, `reason 0x${r.error.reason.toString(16)}`);
      assert.ok(r.error.message.length > 0);
    });
  }

  it('accepts a password without a user name in 5.0, where the specification allows it', () => {
    const r = new Decoder(fresh).feed(frame(0x10, ...connectBody(5, 0x42, str('c'), str('pw'))));
    assert.equal(r.error, null);
    assert.equal(r.packets.length, 1);
    assert.deepStrictEqual((r.packets[0] as { password: unknown }).password, Buffer.from('pw'));
  });

  it('refuses an oversize remaining length from the fixed header alone, before any body byte', () => {
    // Packet of 1 + 2 + 128 = 131 bytes against a limit of 130: the third byte decides.
    const d = new Decoder({ maxPacketSize: 130, level: 4 });
    assert.deepStrictEqual(d.feed(Buffer.from([0x30, 0x80])), { packets: [], error: null });
    const r = d.feed(Buffer.from([0x01]));
    assert.equal(r.error?.reason, RC.PACKET_TOO_LARGE);
    assert.equal(r.error?.key, 'packet-too-large');
  });

  it('refuses a 256 MB remaining length at once instead of waiting for the body', () => {
    const d = new Decoder({ maxPacketSize: MAX, level: 5 });
    const r = d.feed(Buffer.from([0x30, 0xff, 0xff, 0xff, 0x7f]));
    assert.equal(r.error?.reason, RC.PACKET_TOO_LARGE);
  });

  it('accepts a packet of exactly the maximum size', () => {
    const payload = Buffer.alloc(128 - 3, 7);
    const bytes = frame(0x30, str('t'), [...payload]);
    assert.equal(bytes.length, 131);
    const r = new Decoder({ maxPacketSize: 131, level: 4 }).feed(bytes);
    assert.equal(r.error, null);
    assert.equal(r.packets.length, 1);
  });

  it('refuses a non-CONNECT first packet on its first byte', () => {
    const r = new Decoder(fresh).feed(Buffer.from([0x30]));
    assert.equal(r.error?.key, 'first-packet');
  });

  it('returns the packets before an error in the same chunk, then only the error', () => {
    const good = frame(0xc0);
    const bad = frame(0x30, str('a/#'));
    const d = new Decoder(connected(4));
    const r = d.feed(Buffer.concat([good, good, bad, good]));
    assert.deepStrictEqual(r.packets, [{ type: 'pingreq' }, { type: 'pingreq' }]);
    assert.equal(r.error?.key, 'topic-wildcard');
    assert.deepStrictEqual(d.feed(good), { packets: [], error: r.error });
  });

  it('decodes later packets at the level the CONNECT named', () => {
    const d = new Decoder(fresh);
    const connect = frame(0x10, ...connectBody(5, 0x02, str('c')));
    // A PUBACK with a reason code: a 5.0 form that 3.1.1 would refuse as trailing bytes.
    const r = d.feed(Buffer.concat([connect, frame(0x40, u16(1), 0x10)]));
    assert.equal(r.error, null);
    assert.equal(d.level, 5);
    assert.deepStrictEqual(r.packets[1], { type: 'puback', pid: 1, code: 0x10, props: {} });
  });

  it('does not keep a reference to a chunk that held a whole PUBLISH', () => {
    const chunk = frame(0x30, str('t'), [1, 2, 3]);
    const r = new Decoder(connected(4)).feed(chunk);
    chunk.fill(0);
    assert.deepStrictEqual((r.packets[0] as { payload: unknown }).payload, Buffer.from([1, 2, 3]));
  });
});
