// MQTT 5 property blocks (§2.2.2), walked by our own code: the property length, which identifiers
// each packet may carry, duplicates, values out of range, and User Properties as an ordered list of
// pairs with duplicates kept. The same table drives encoding.
import { fail } from './codec-errors.js';
import type { Reader } from './codec-reader.js';
import type { Writer } from './codec-writer.js';
import { RC } from './reason-codes.js';

/** Where a property block sits; a bit each, so the table can say where an identifier is allowed. */
export const PropKind = {
  connect: 1 << 0,
  will: 1 << 1,
  connack: 1 << 2,
  publish: 1 << 3,
  /** PUBACK, PUBREC, PUBREL, PUBCOMP. */
  ack: 1 << 4,
  subscribe: 1 << 5,
  suback: 1 << 6,
  unsubscribe: 1 << 7,
  unsuback: 1 << 8,
  disconnect: 1 << 9,
  auth: 1 << 10,
} as const;
export type PropKind = (typeof PropKind)[keyof typeof PropKind];

type ValueType = 'byte01' | 'u16' | 'u32' | 'vbi' | 'utf8' | 'binary' | 'pair';

interface PropDef {
  id: number;
  /** The field of our props objects (packets.ts). */
  field: string;
  type: ValueType;
  kinds: number;
  /** Zero is a Protocol Error (Receive Maximum, Maximum Packet Size, Subscription Identifier). */
  nonZero?: boolean;
}

const K = PropKind;
const ACKS = K.ack | K.suback | K.unsuback;
/** User Property is allowed in every packet that has properties. */
const ALL_KINDS = (1 << 11) - 1;

/** §2.2.2.2, in identifier order but User Properties last; encoding writes them in this order. */
const DEFS: PropDef[] = [
  { id: 0x01, field: 'payloadFormat', type: 'byte01', kinds: K.publish | K.will },
  { id: 0x02, field: 'messageExpiry', type: 'u32', kinds: K.publish | K.will },
  { id: 0x03, field: 'contentType', type: 'utf8', kinds: K.publish | K.will },
  { id: 0x08, field: 'responseTopic', type: 'utf8', kinds: K.publish | K.will },
  { id: 0x09, field: 'correlationData', type: 'binary', kinds: K.publish | K.will },
  // Field 'subIds' (a list) in PUBLISH and 'subId' in SUBSCRIBE: see readProps.
  { id: 0x0b, field: 'subId', type: 'vbi', kinds: K.publish | K.subscribe, nonZero: true },
  { id: 0x11, field: 'sessionExpiry', type: 'u32', kinds: K.connect | K.connack | K.disconnect },
  { id: 0x12, field: 'assignedClientId', type: 'utf8', kinds: K.connack },
  { id: 0x13, field: 'serverKeepAlive', type: 'u16', kinds: K.connack },
  { id: 0x15, field: 'authMethod', type: 'utf8', kinds: K.connect | K.connack | K.auth },
  { id: 0x16, field: 'authData', type: 'binary', kinds: K.connect | K.connack | K.auth },
  { id: 0x17, field: 'requestProblemInfo', type: 'byte01', kinds: K.connect },
  { id: 0x18, field: 'willDelay', type: 'u32', kinds: K.will },
  { id: 0x19, field: 'requestResponseInfo', type: 'byte01', kinds: K.connect },
  { id: 0x1a, field: 'responseInfo', type: 'utf8', kinds: K.connack },
  { id: 0x1c, field: 'serverReference', type: 'utf8', kinds: K.connack | K.disconnect },
  { id: 0x1f, field: 'reasonString', type: 'utf8', kinds: K.connack | ACKS | K.disconnect | K.auth },
  { id: 0x21, field: 'receiveMax', type: 'u16', kinds: K.connect | K.connack, nonZero: true },
  { id: 0x22, field: 'topicAliasMax', type: 'u16', kinds: K.connect | K.connack },
  // Topic Alias 0 is refused by the connection, which answers 0x94 [MQTT-3.3.2-8].
  { id: 0x23, field: 'topicAlias', type: 'u16', kinds: K.publish },
  { id: 0x24, field: 'maxQos', type: 'byte01', kinds: K.connack },
  { id: 0x25, field: 'retainAvailable', type: 'byte01', kinds: K.connack },
  { id: 0x27, field: 'maxPacketSize', type: 'u32', kinds: K.connect | K.connack, nonZero: true },
  { id: 0x28, field: 'wildcardAvailable', type: 'byte01', kinds: K.connack },
  { id: 0x29, field: 'subIdAvailable', type: 'byte01', kinds: K.connack },
  { id: 0x2a, field: 'sharedAvailable', type: 'byte01', kinds: K.connack },
  // Last, so encoded blocks end with the User Properties in their given order.
  { id: 0x26, field: 'userProps', type: 'pair', kinds: ALL_KINDS },
];

const BY_ID: (PropDef | undefined)[] = [];
for (const d of DEFS) BY_ID[d.id] = d;
const ID_USER = 0x26;
const ID_SUB_ID = 0x0b;

/** Decoding options that depend on the direction of the packet. */
export interface PropsContext {
  /** Subscription Identifiers may repeat only in a PUBLISH to a client [MQTT-3.3.4-6]. */
  fromServer: boolean;
}

type Bag = Record<string, unknown>;

/** Reads a property block (length and properties) into a fresh props object. */
export function readProps(r: Reader, kind: PropKind, ctx: PropsContext): Bag {
  const len = r.vbi('property length');
  if (len > r.left()) fail(RC.MALFORMED_PACKET, 'property-length', 'property length exceeds the packet');
  const out: Bag = {};
  if (len === 0) return out;
  const end = r.pos + len;
  const outerEnd = r.end;
  // Confine reads to the block, so a value cannot run past the property length.
  r.end = end;
  while (r.pos < end) readOne(r, kind, ctx, out);
  r.end = outerEnd;
  return out;
}

function readOne(r: Reader, kind: PropKind, ctx: PropsContext, out: Bag): void {
  // Identifiers are Variable Byte Integers, but every defined one fits in one byte.
  const id = r.vbi('property identifier');
  const def = BY_ID[id];
  // §2.2.2.2: an identifier not valid for the packet type is a Malformed Packet.
  if (def === undefined || (def.kinds & kind) === 0) {
    fail(RC.MALFORMED_PACKET, 'property-id', `property 0x${id.toString(16)} is not allowed here`);
  }
  const value = readValue(r, def);
  if (def.nonZero === true && value === 0) {
    fail(RC.PROTOCOL_ERROR, 'property-value', `property ${def.field} must not be 0`);
  }
  if (id === ID_USER) {
    appendTo(out, 'userProps', value);
  } else if (id === ID_SUB_ID && kind === PropKind.publish) {
    if (!ctx.fromServer) {
      fail(RC.PROTOCOL_ERROR, 'property-subid', 'a client must not send a Subscription Identifier [MQTT-3.3.4-6]');
    }
    appendTo(out, 'subIds', value);
  } else {
    if (out[def.field] !== undefined) {
      fail(RC.PROTOCOL_ERROR, 'property-duplicate', `property ${def.field} appears more than once`);
    }
    out[def.field] = value;
  }
}

/** The properties that may repeat are kept as lists, in wire order. */
function appendTo(out: Bag, field: string, value: unknown): void {
  const list = out[field] as unknown[] | undefined;
  if (list === undefined) out[field] = [value];
  else list.push(value);
}

function readValue(r: Reader, def: PropDef): unknown {
  switch (def.type) {
    case 'byte01': {
      const v = r.u8(def.field);
      if (v > 1) fail(RC.PROTOCOL_ERROR, 'property-value', `property ${def.field} must be 0 or 1, got ${v}`);
      return v;
    }
    case 'u16':
      return r.u16(def.field);
    case 'u32':
      return r.u32(def.field);
    case 'vbi':
      return r.vbi(def.field);
    case 'utf8':
      return r.utf8(def.field);
    case 'binary':
      return r.binary(def.field);
    case 'pair':
      return [r.utf8('user property name'), r.utf8('user property value')];
    default: {
      const _: never = def.type;
      return _;
    }
  }
}

/** Writes a property block (length and properties) for the given kind; fields not allowed for the
 * kind are not written. */
export function writeProps(w: Writer, kind: PropKind, props: object): void {
  const bag = props as Bag;
  const start = w.pos;
  // The length prefix is at most 4 bytes; write the properties after a 1-byte guess and move them
  // if the block turns out longer (rare: only blocks of 128 bytes or more).
  w.u8(0);
  for (const def of DEFS) {
    if ((def.kinds & kind) === 0) continue;
    writeField(w, def, kind, bag);
  }
  const len = w.pos - start - 1;
  if (len < 128) {
    w.buf[start] = len;
    return;
  }
  const body = Buffer.from(w.buf.subarray(start + 1, w.pos));
  w.pos = start;
  w.vbi(len);
  w.bytes(body);
}

function writeField(w: Writer, def: PropDef, kind: PropKind, bag: Bag): void {
  if (def.id === ID_USER) {
    const pairs = bag.userProps as [string, string][] | undefined;
    if (pairs === undefined) return;
    for (const [k, v] of pairs) {
      w.u8(ID_USER);
      w.utf8(k);
      w.utf8(v);
    }
    return;
  }
  if (def.id === ID_SUB_ID && kind === PropKind.publish) {
    const ids = bag.subIds as number[] | undefined;
    if (ids === undefined) return;
    for (const id of ids) {
      w.u8(ID_SUB_ID);
      w.vbi(id);
    }
    return;
  }
  const v = bag[def.field];
  if (v === undefined) return;
  w.u8(def.id);
  writeValue(w, def.type, v);
}

function writeValue(w: Writer, type: ValueType, v: unknown): void {
  switch (type) {
    case 'byte01':
      w.u8(v as number);
      return;
    case 'u16':
      w.u16(v as number);
      return;
    case 'u32':
      w.u32(v as number);
      return;
    case 'vbi':
      w.vbi(v as number);
      return;
    case 'utf8':
      w.utf8(v as string);
      return;
    case 'binary':
      w.binary(v as Uint8Array);
      return;
    case 'pair':
      throw new TypeError('user properties are written by writeField');
    default: {
      const _: never = type;
      throw new TypeError(`unknown property type ${String(_)}`);
    }
  }
}
