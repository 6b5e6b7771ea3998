// Packets to bytes for MQTT 3.1, 3.1.1 and 5.0. PUBLISH and the short acks are written straight
// into an exactly sized buffer (the fan-out path); the rest go through a growable Writer.
import { PT } from './codec-rules.js';
import { VBI_MAX, vbiSize, Writer, writeVbi } from './codec-writer.js';
import type {
  AuthPacket,
  ConnackPacket,
  ConnectPacket,
  DisconnectPacket,
  Packet,
  PubAckPacket,
  PublishPacket,
  SubackPacket,
  SubscribePacket,
  UnsubackPacket,
  UnsubscribePacket,
} from './packets.js';
import { PropKind, writeProps } from './properties.js';

/** The bytes of `p` in the format of protocol `level`. For levels below 5, properties and reason
 * codes that 3.1.1 has no place for are left out. Throws RangeError for a packet that cannot be
 * represented (a string over 65535 bytes, AUTH below level 5): those are bugs, not input. */
export function encode(p: Packet, level: 3 | 4 | 5): Buffer {
  switch (p.type) {
    case 'publish':
      return encodePublish(p, level);
    case 'puback':
    case 'pubrec':
    case 'pubrel':
    case 'pubcomp':
      return encodeAck(p, level);
    case 'connect':
      return encodeConnect(p, level);
    case 'connack':
      return encodeConnack(p, level);
    case 'subscribe':
      return encodeSubscribe(p, level);
    case 'suback':
      return encodeSuback(p, level);
    case 'unsubscribe':
      return encodeUnsubscribe(p, level);
    case 'unsuback':
      return encodeUnsuback(p, level);
    case 'pingreq':
      return Buffer.from([PT.PINGREQ << 4, 0]);
    case 'pingresp':
      return Buffer.from([PT.PINGRESP << 4, 0]);
    case 'disconnect':
      return encodeDisconnect(p, level);
    case 'auth':
      return encodeAuth(p, level);
    default: {
      const _: never = p;
      return _;
    }
  }
}

/** True when a props object would write no property at all. */
function noProps(props: object): boolean {
  const bag = props as Record<string, unknown>;
  for (const k in bag) {
    const v = bag[k];
    if (v !== undefined && !(Array.isArray(v) && v.length === 0)) return false;
  }
  return true;
}

const EMPTY_PROPS = Buffer.from([0]);

/** A property block (length prefix included) on its own. */
function propsBlock(kind: PropKind, props: object): Buffer {
  if (noProps(props)) return EMPTY_PROPS;
  const w = new Writer(64, 0);
  writeProps(w, kind, props);
  return w.buf.subarray(0, w.pos);
}

function encodePublish(p: PublishPacket, level: 3 | 4 | 5): Buffer {
  const topicLen = Buffer.byteLength(p.topic);
  if (topicLen > 0xffff) throw new RangeError(`topic of ${topicLen} bytes exceeds 65535`);
  const props = level === 5 ? propsBlock(PropKind.publish, p.props) : null;
  const hasPid = p.qos > 0;
  const rl = 2 + topicLen + (hasPid ? 2 : 0) + (props === null ? 0 : props.length) + p.payload.length;
  if (rl > VBI_MAX) throw new RangeError(`remaining length ${rl} exceeds ${VBI_MAX}`);
  const buf = Buffer.allocUnsafe(1 + vbiSize(rl) + rl);
  // DUP MUST be 0 for QoS 0 [MQTT-3.3.1-2].
  buf[0] = (PT.PUBLISH << 4) | (p.dup && hasPid ? 8 : 0) | (p.qos << 1) | (p.retain ? 1 : 0);
  let pos = writeVbi(buf, 1, rl);
  buf.writeUInt16BE(topicLen, pos);
  pos += 2 + buf.write(p.topic, pos + 2, 'utf8');
  if (hasPid) {
    buf.writeUInt16BE(p.pid ?? 0, pos);
    pos += 2;
  }
  if (props !== null) {
    buf.set(props, pos);
    pos += props.length;
  }
  buf.set(p.payload, pos);
  return buf;
}

const ACK_TYPE = { puback: PT.PUBACK, pubrec: PT.PUBREC, pubrel: PT.PUBREL, pubcomp: PT.PUBCOMP } as const;

function encodeAck(p: PubAckPacket, level: 3 | 4 | 5): Buffer {
  // PUBREL's fixed header flags are 0b0010 [MQTT-3.6.1-1].
  const byte0 = (ACK_TYPE[p.type] << 4) | (p.type === 'pubrel' ? 2 : 0);
  const bare = noProps(p.props);
  // The reason code and properties may be left out when the code is 0 and there are no
  // properties; a property length of 0 may be left out likewise (§3.4.2.1).
  if (level < 5 || (p.code === 0 && bare)) {
    const buf = Buffer.allocUnsafe(4);
    buf[0] = byte0;
    buf[1] = 2;
    buf.writeUInt16BE(p.pid, 2);
    return buf;
  }
  const w = new Writer(16);
  w.u16(p.pid);
  w.u8(p.code);
  if (!bare) writeProps(w, PropKind.ack, p.props);
  return w.finish(byte0);
}

const CF_USERNAME = 0x80;
const CF_PASSWORD = 0x40;
const CF_WILL_RETAIN = 0x20;
const CF_WILL = 0x04;
const CF_CLEAN = 0x02;

function connectFlags(p: ConnectPacket): number {
  let f = p.clean ? CF_CLEAN : 0;
  if (p.will !== null) f |= CF_WILL | (p.will.qos << 3) | (p.will.retain ? CF_WILL_RETAIN : 0);
  if (p.username !== null) f |= CF_USERNAME;
  if (p.password !== null) f |= CF_PASSWORD;
  return f;
}

function encodeConnect(p: ConnectPacket, level: 3 | 4 | 5): Buffer {
  const w = new Writer(64 + p.clientId.length);
  w.utf8(p.protocolName);
  w.u8(p.level);
  w.u8(connectFlags(p));
  w.u16(p.keepAlive);
  if (level === 5) writeProps(w, PropKind.connect, p.props);
  w.utf8(p.clientId);
  if (p.will !== null) {
    if (level === 5) writeProps(w, PropKind.will, p.will.props);
    w.utf8(p.will.topic);
    w.binary(p.will.payload);
  }
  if (p.username !== null) w.utf8(p.username);
  if (p.password !== null) w.binary(p.password);
  return w.finish(PT.CONNECT << 4);
}

/** For level < 5 `code` is taken as a 3.1.1 return code (see connackReturnCode). */
function encodeConnack(p: ConnackPacket, level: 3 | 4 | 5): Buffer {
  const w = new Writer(level === 5 ? 64 : 2);
  w.u8(p.sessionPresent ? 1 : 0);
  w.u8(p.code);
  if (level === 5) writeProps(w, PropKind.connack, p.props);
  return w.finish(PT.CONNACK << 4);
}

function encodeSubscribe(p: SubscribePacket, level: 3 | 4 | 5): Buffer {
  const w = new Writer(64);
  w.u16(p.pid);
  if (level === 5) writeProps(w, PropKind.subscribe, p.props);
  for (const s of p.subs) {
    w.utf8(s.filter);
    // Only the QoS bits exist before MQTT 5 [MQTT-3.8.3-4].
    w.u8(level === 5 ? s.qos | (s.nl ? 4 : 0) | (s.rap ? 8 : 0) | (s.rh << 4) : s.qos);
  }
  return w.finish((PT.SUBSCRIBE << 4) | 2);
}

function encodeSuback(p: SubackPacket, level: 3 | 4 | 5): Buffer {
  const w = new Writer(8 + p.codes.length);
  w.u16(p.pid);
  if (level === 5) writeProps(w, PropKind.suback, p.props);
  for (const c of p.codes) w.u8(c);
  return w.finish(PT.SUBACK << 4);
}

function encodeUnsubscribe(p: UnsubscribePacket, level: 3 | 4 | 5): Buffer {
  const w = new Writer(64);
  w.u16(p.pid);
  if (level === 5) writeProps(w, PropKind.unsubscribe, p.props);
  for (const f of p.filters) w.utf8(f);
  return w.finish((PT.UNSUBSCRIBE << 4) | 2);
}

/** 3.1.1's UNSUBACK is the packet identifier alone. */
function encodeUnsuback(p: UnsubackPacket, level: 3 | 4 | 5): Buffer {
  const w = new Writer(8 + p.codes.length);
  w.u16(p.pid);
  if (level === 5) {
    writeProps(w, PropKind.unsuback, p.props);
    for (const c of p.codes) w.u8(c);
  }
  return w.finish(PT.UNSUBACK << 4);
}

/** Before MQTT 5 a DISCONNECT is empty (and a server never sends one; encoded anyway if asked). */
function encodeDisconnect(p: DisconnectPacket, level: 3 | 4 | 5): Buffer {
  const bare = noProps(p.props);
  if (level < 5 || (p.code === 0 && bare)) return Buffer.from([PT.DISCONNECT << 4, 0]);
  const w = new Writer(16);
  w.u8(p.code);
  if (!bare) writeProps(w, PropKind.disconnect, p.props);
  return w.finish(PT.DISCONNECT << 4);
}

/** Remaining length 0 means Success with no properties (§3.15.2.1). */
function encodeAuth(p: AuthPacket, level: 3 | 4 | 5): Buffer {
  if (level !== 5) throw new RangeError('AUTH exists only in MQTT 5');
  if (p.code === 0 && noProps(p.props)) return Buffer.from([PT.AUTH << 4, 0]);
  const w = new Writer(32);
  w.u8(p.code);
  writeProps(w, PropKind.auth, p.props);
  return w.finish(PT.AUTH << 4);
}
