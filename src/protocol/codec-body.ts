// Decodes the body of one framed packet whose fixed header the decoder has already checked. Each
// function reads exactly the frame (Reader bounds) and throws a CodecFault on anything invalid.
import { fail } from './codec-errors.js';
import type { Reader } from './codec-reader.js';
import { CODES_V4, CODES_V5, PT } from './codec-rules.js';
import type {
  AuthPacket,
  ConnackPacket,
  ConnectPacket,
  DisconnectPacket,
  Packet,
  PubAckPacket,
  PublishPacket,
  QoS,
  SubackPacket,
  SubscribePacket,
  UnsubackPacket,
  UnsubscribePacket,
} from './packets.js';
import { PropKind, type PropsContext, readProps } from './properties.js';
import { RC } from './reason-codes.js';

/** What a body decoder needs besides the bytes. */
export interface BodyContext extends PropsContext {
  level: 3 | 4 | 5;
}

const ACK_TYPES = ['puback', 'pubrec', 'pubrel', 'pubcomp'] as const;

/** Decodes the body of a packet of type `byte0 >> 4` (never CONNECT: see decodeConnect). */
export function decodeBody(byte0: number, r: Reader, ctx: BodyContext): Packet {
  const type = byte0 >> 4;
  switch (type) {
    case PT.PUBLISH:
      return decodePublish(byte0, r, ctx);
    case PT.PUBACK:
    case PT.PUBREC:
    case PT.PUBREL:
    case PT.PUBCOMP:
      return decodeAck(type, r, ctx);
    case PT.SUBSCRIBE:
      return decodeSubscribe(r, ctx);
    case PT.UNSUBSCRIBE:
      return decodeUnsubscribe(r, ctx);
    case PT.PINGREQ:
    case PT.PINGRESP:
      r.done('PINGREQ/PINGRESP');
      return { type: type === PT.PINGREQ ? 'pingreq' : 'pingresp' };
    case PT.DISCONNECT:
      return decodeDisconnect(r, ctx);
    case PT.AUTH:
      return decodeAuth(r, ctx);
    case PT.CONNACK:
      return decodeConnack(r, ctx);
    case PT.SUBACK:
      return decodeSuback(r, ctx);
    case PT.UNSUBACK:
      return decodeUnsuback(r, ctx);
    default:
      // The fixed header check lets no other type through.
      return fail(RC.MALFORMED_PACKET, 'packet-type', `packet type ${type} is not expected here`);
  }
}

/** Packet Identifier: non-zero [MQTT-2.3.1-1]; MQTT 5 calls a zero one a Protocol Error. */
function readPid(r: Reader, ctx: BodyContext): number {
  const pid = r.u16('packet identifier');
  if (pid === 0) {
    fail(ctx.level === 5 ? RC.PROTOCOL_ERROR : RC.MALFORMED_PACKET, 'pid-zero', 'packet identifier 0');
  }
  return pid;
}

/** A Topic Name for PUBLISH or a will: no wildcards [MQTT-3.3.2-2]; empty only where allowed. */
function checkTopicName(topic: string, emptyAllowed: boolean): void {
  if (topic.length === 0) {
    if (!emptyAllowed) fail(RC.PROTOCOL_ERROR, 'topic-empty', 'empty topic name [MQTT-4.7.3-1]');
    return;
  }
  if (topic.includes('+') || topic.includes('#')) {
    fail(RC.TOPIC_NAME_INVALID, 'topic-wildcard', 'wildcard in a topic name [MQTT-3.3.2-2]');
  }
}

function checkCode(codes: ReadonlySet<number>, code: number, what: string): void {
  if (!codes.has(code)) fail(RC.PROTOCOL_ERROR, 'reason-code', `reason code 0x${code.toString(16)} not allowed in ${what}`);
}

function decodePublish(byte0: number, r: Reader, ctx: BodyContext): PublishPacket {
  const qos = ((byte0 >> 1) & 3) as QoS;
  const topic = r.utf8('topic name');
  const pid = qos > 0 ? readPid(r, ctx) : undefined;
  const props = ctx.level === 5 ? readProps(r, PropKind.publish, ctx) : {};
  // An empty topic is allowed only with a Topic Alias, which the connection resolves [MQTT-3.3.2-1].
  checkTopicName(topic, ctx.level === 5 && props.topicAlias !== undefined);
  const payload = r.rest();
  const dup = (byte0 & 8) !== 0;
  const retain = (byte0 & 1) !== 0;
  if (pid === undefined) return { type: 'publish', dup, qos, retain, topic, payload, props };
  return { type: 'publish', dup, qos, retain, topic, pid, payload, props };
}

function decodeAck(type: number, r: Reader, ctx: BodyContext): PubAckPacket {
  const kind = ACK_TYPES[type - PT.PUBACK] as PubAckPacket['type'];
  const pid = readPid(r, ctx);
  let code = 0;
  let props = {};
  // MQTT 5 may omit the reason code (0) and the properties [MQTT-3.4.2.1].
  if (ctx.level === 5 && r.left() > 0) {
    code = r.u8('reason code');
    checkCode(kind === 'puback' || kind === 'pubrec' ? CODES_V5.puback : CODES_V5.pubrel, code, kind);
    if (r.left() > 0) props = readProps(r, PropKind.ack, ctx);
  }
  r.done(kind);
  return { type: kind, pid, code, props };
}

function decodeSubscribe(r: Reader, ctx: BodyContext): SubscribePacket {
  const pid = readPid(r, ctx);
  const props = ctx.level === 5 ? readProps(r, PropKind.subscribe, ctx) : {};
  const subs: SubscribePacket['subs'] = [];
  while (r.left() > 0) {
    const filter = r.utf8('topic filter');
    subs.push(subscription(filter, r.u8('subscription options'), ctx.level));
  }
  if (subs.length === 0) fail(RC.PROTOCOL_ERROR, 'no-filters', 'SUBSCRIBE without topic filters [MQTT-3.8.3-3]');
  return { type: 'subscribe', pid, subs, props };
}

/** Subscription Options (§3.8.3.1); 3.1.1 allows only the QoS bits [MQTT-3.8.3-4]. */
function subscription(filter: string, opts: number, level: 3 | 4 | 5): SubscribePacket['subs'][number] {
  if ((opts & (level === 5 ? 0xc0 : 0xfc)) !== 0) {
    fail(RC.MALFORMED_PACKET, 'subscription-options', `reserved subscription option bits set: 0x${opts.toString(16)}`);
  }
  const qos = opts & 3;
  if (qos === 3) fail(RC.MALFORMED_PACKET, 'qos3', 'subscription QoS 3 [MQTT-3.8.3-4]');
  const rh = (opts >> 4) & 3;
  if (rh === 3) fail(RC.MALFORMED_PACKET, 'retain-handling', 'retain handling 3 [MQTT-3.8.3-5]');
  return { filter, qos: qos as QoS, nl: (opts & 4) !== 0, rap: (opts & 8) !== 0, rh: rh as 0 | 1 | 2 };
}

function decodeUnsubscribe(r: Reader, ctx: BodyContext): UnsubscribePacket {
  const pid = readPid(r, ctx);
  const props = ctx.level === 5 ? readProps(r, PropKind.unsubscribe, ctx) : {};
  const filters: string[] = [];
  while (r.left() > 0) filters.push(r.utf8('topic filter'));
  if (filters.length === 0) {
    fail(RC.PROTOCOL_ERROR, 'no-filters', 'UNSUBSCRIBE without topic filters [MQTT-3.10.3-2]');
  }
  return { type: 'unsubscribe', pid, filters, props };
}

function decodeDisconnect(r: Reader, ctx: BodyContext): DisconnectPacket {
  let code = 0;
  let props = {};
  // MQTT 5: no reason code means 0, and no properties may follow it (§3.14.2.1).
  if (ctx.level === 5 && r.left() > 0) {
    code = r.u8('reason code');
    checkCode(CODES_V5.disconnect, code, 'DISCONNECT');
    if (r.left() > 0) props = readProps(r, PropKind.disconnect, ctx);
  }
  r.done('DISCONNECT');
  return { type: 'disconnect', code, props };
}

function decodeAuth(r: Reader, ctx: BodyContext): AuthPacket {
  let code = 0;
  let props = {};
  // Remaining length 0 means Success with no properties (§3.15.2.1).
  if (r.left() > 0) {
    code = r.u8('reason code');
    checkCode(CODES_V5.auth, code, 'AUTH');
    props = readProps(r, PropKind.auth, ctx);
  }
  r.done('AUTH');
  return { type: 'auth', code, props };
}

function decodeConnack(r: Reader, ctx: BodyContext): ConnackPacket {
  const flags = r.u8('acknowledge flags');
  if ((flags & 0xfe) !== 0) fail(RC.MALFORMED_PACKET, 'connack-flags', 'reserved CONNACK flag bits set [MQTT-3.2.2-1]');
  const code = r.u8('reason code');
  checkCode(ctx.level === 5 ? CODES_V5.connack : CODES_V4.connack, code, 'CONNACK');
  const props = ctx.level === 5 ? readProps(r, PropKind.connack, ctx) : {};
  r.done('CONNACK');
  return { type: 'connack', sessionPresent: flags === 1, code, props };
}

function decodeSuback(r: Reader, ctx: BodyContext): SubackPacket {
  const pid = readPid(r, ctx);
  const props = ctx.level === 5 ? readProps(r, PropKind.suback, ctx) : {};
  const allowed = ctx.level === 5 ? CODES_V5.suback : CODES_V4.suback;
  const codes: number[] = [];
  while (r.left() > 0) {
    const code = r.u8('reason code');
    checkCode(allowed, code, 'SUBACK');
    codes.push(code);
  }
  if (codes.length === 0) fail(RC.PROTOCOL_ERROR, 'no-codes', 'SUBACK without reason codes');
  return { type: 'suback', pid, codes, props };
}

function decodeUnsuback(r: Reader, ctx: BodyContext): UnsubackPacket {
  const pid = readPid(r, ctx);
  const codes: number[] = [];
  let props = {};
  if (ctx.level === 5) {
    props = readProps(r, PropKind.unsuback, ctx);
    while (r.left() > 0) {
      const code = r.u8('reason code');
      checkCode(CODES_V5.unsuback, code, 'UNSUBACK');
      codes.push(code);
    }
    if (codes.length === 0) fail(RC.PROTOCOL_ERROR, 'no-codes', 'UNSUBACK without reason codes');
  }
  r.done('UNSUBACK');
  return { type: 'unsuback', pid, codes, props };
}

const FLAG_USERNAME = 0x80;
const FLAG_PASSWORD = 0x40;
const FLAG_WILL_RETAIN = 0x20;
const FLAG_WILL = 0x04;
const FLAG_CLEAN = 0x02;
const FLAG_RESERVED = 0x01;

/** CONNECT (§3.1); the level it names governs the rest of the connection. */
export function decodeConnect(r: Reader, ctx: PropsContext): ConnectPacket {
  const { protocolName, level } = readProtocol(r);
  const flags = r.u8('connect flags');
  checkConnectFlags(flags, level);
  const keepAlive = r.u16('keep alive');
  const props = level === 5 ? readProps(r, PropKind.connect, ctx) : {};
  // A Protocol Error to include Authentication Data without an Authentication Method (§3.1.2.11.10).
  if (props.authData !== undefined && props.authMethod === undefined) {
    fail(RC.PROTOCOL_ERROR, 'property-auth-data', 'Authentication Data without Authentication Method');
  }
  const clientId = r.utf8('client identifier');
  const will = (flags & FLAG_WILL) !== 0 ? readWill(r, flags, level, ctx) : null;
  const username = (flags & FLAG_USERNAME) !== 0 ? r.utf8('user name') : null;
  const password = (flags & FLAG_PASSWORD) !== 0 ? r.binary('password') : null;
  r.done('CONNECT');
  const clean = (flags & FLAG_CLEAN) !== 0;
  return { type: 'connect', protocolName, level, clean, keepAlive, clientId, will, username, password, props };
}

function readProtocol(r: Reader): { protocolName: 'MQTT' | 'MQIsdp'; level: 3 | 4 | 5 } {
  const name = r.utf8('protocol name');
  if (name !== 'MQTT' && name !== 'MQIsdp') {
    fail(RC.PROTOCOL_ERROR, 'protocol-name', `unknown protocol name [MQTT-3.1.2-1]`);
  }
  const level = r.u8('protocol level');
  const known = name === 'MQTT' ? level === 4 || level === 5 : level === 3;
  // The connection answers CONNACK 0x01 (3.1.1) or 0x84 (5.0) and closes [MQTT-3.1.2-2].
  if (!known) fail(RC.UNSUPPORTED_PROTOCOL_VERSION, 'protocol-level', `unsupported protocol level ${level} for ${name}`);
  return { protocolName: name, level: level as 3 | 4 | 5 };
}

function checkConnectFlags(flags: number, level: 3 | 4 | 5): void {
  if ((flags & FLAG_RESERVED) !== 0) fail(RC.MALFORMED_PACKET, 'connect-reserved', 'reserved connect flag set [MQTT-3.1.2-3]');
  const willQos = (flags >> 3) & 3;
  if ((flags & FLAG_WILL) === 0 && (willQos !== 0 || (flags & FLAG_WILL_RETAIN) !== 0)) {
    fail(RC.MALFORMED_PACKET, 'will-flags', 'will QoS or retain without the will flag [MQTT-3.1.2-11/13/15]');
  }
  if (willQos === 3) fail(RC.MALFORMED_PACKET, 'will-qos', 'will QoS 3 [MQTT-3.1.2-14]');
  if (level < 5 && (flags & FLAG_PASSWORD) !== 0 && (flags & FLAG_USERNAME) === 0) {
    fail(RC.MALFORMED_PACKET, 'password-flag', 'password without user name [MQTT-3.1.2-22]');
  }
}

function readWill(r: Reader, flags: number, level: 3 | 4 | 5, ctx: PropsContext): ConnectPacket['will'] {
  const props = level === 5 ? readProps(r, PropKind.will, ctx) : {};
  const topic = r.utf8('will topic');
  checkTopicName(topic, false);
  const payload = r.binary('will payload');
  const qos = ((flags >> 3) & 3) as QoS;
  return { topic, payload, qos, retain: (flags & FLAG_WILL_RETAIN) !== 0, props };
}
