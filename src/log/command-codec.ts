import { Buffer } from 'node:buffer';
import { Packr } from 'msgpackr';
import {
  ACKS_PER_COMMAND_MAX,
  type AckItem,
  type Command,
  PUBLISHES_PER_COMMAND_MAX,
  type PublishCommand,
  type PublishesCommand,
  type PubrelCommand,
} from '../broker/commands.js';

// Commands are encoded once, without saved record structures, so the bytes depend on nothing but
// the command (docs/design.md "Encoding"). Both logs apply decoded bytes, never the proposer's object,
// so single-node and cluster mode apply exactly the same values.
//
// The bulk of the log, a publish without MQTT 5 properties and a subscriber's ack, has a
// hand-written layout; everything else is msgpackr. Measured under fan-in QoS 1, msgpackr's pack
// and unpack took about 15 % of the broker's busy time. A hand-written record starts with 0xc1,
// the one byte msgpack never uses, so the decoder tells the two apart by the first byte, and it
// decodes to the same values msgpackr gives (payload: a Buffer view of the encoded bytes):
//
//   publish: c1 01 flags(1: pid present, 2: retain) qos pid:u16 connLen:u16 conn topicLen:u16 topic payload…
//   ack:     c1 02 kind(0 puback, 1 pubrec, 2 pubcomp) pid:u16 conn…
//   acks:    c1 03 count:u16 (kind pid:u16)×count conn…   (count 1 to ACKS_PER_COMMAND_MAX)
//   publishes: c1 04 count:u16 connLen:u16 conn item×count   (count 2 to PUBLISHES_PER_COMMAND_MAX)
//     a publish: flags qos pid:u16 topicLen:u16 topic payloadLen:u32 payload   (flags and qos as in publish)
//     a pubrel:  04 pid:u16
const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });

const COMMAND_TYPES: ReadonlySet<string> = new Set<Command['t']>([
  'serve-start',
  'settings',
  'connect',
  'disconnect',
  'subscribe',
  'unsubscribe',
  'publish',
  'publishes',
  'pubrel',
  'ack',
  'acks',
  'tick',
  'check',
  'bridge-position',
  'bridge-pubrec',
  'bridge-in',
  'bridge-in-rel',
  'bridge-in-reset',
  'shard-position',
  'shard-in',
]);

const HAND = 0xc1;
const HAND_PUBLISH = 1;
const HAND_ACK = 2;
const HAND_ACKS = 3;
const HAND_PUBLISHES = 4;
const PUBLISHES_HEADER = 6;
const PUBLISHES_ITEM = 10;
const PUBREL_ITEM = 3;
const ITEM_PUBREL = 4;
const ACKS_HEADER = 4;
const ACKS_ITEM = 3;
const FLAG_PID = 1;
const FLAG_RETAIN = 2;
const PUBLISH_HEADER = 10;
const ACK_HEADER = 5;
const U16_MAX = 0xffff;
const U32_MAX = 0xffff_ffff;
const ACK_KINDS = ['puback', 'pubrec', 'pubcomp'] as const;

export function encodeCommand(cmd: Command): Uint8Array {
  if (cmd.t === 'publish') return encodePublish(cmd) ?? packr.pack(cmd);
  if (cmd.t === 'ack') return encodeAck(cmd.conn, cmd.pid, cmd.kind) ?? packr.pack(cmd);
  if (cmd.t === 'acks') return encodeAcks(cmd.conn, cmd.acks) ?? packr.pack(cmd);
  if (cmd.t === 'publishes') return encodePublishes(cmd) ?? packr.pack(cmd);
  return packr.pack(cmd);
}

const isU16 = (n: unknown): n is number => typeof n === 'number' && Number.isInteger(n) && n >= 0 && n <= U16_MAX;

/** Whether the hand-written layout expresses `cmd` exactly: no MQTT 5 properties, quotaExceeded
 * or fwd, and every field of the expected type and range. */
function handPublish(cmd: PublishCommand): boolean {
  const { conn, msg } = cmd;
  const hasPid = cmd.pid !== undefined;
  if ((!hasPid && 'pid' in cmd) || (hasPid && !isU16(cmd.pid)) || 'props' in msg || 'quotaExceeded' in cmd || 'fwd' in cmd) return false;
  const { topic, payload, qos, retain } = msg;
  if (typeof conn !== 'string' || typeof topic !== 'string' || !(payload instanceof Uint8Array)) return false;
  return (qos === 0 || qos === 1 || qos === 2) && typeof retain === 'boolean';
}

/** The hand-written layout, or null for a publish it cannot express exactly (handPublish): msgpackr
 * takes those, so they decode as before. */
function encodePublish(cmd: PublishCommand): Buffer | null {
  if (!handPublish(cmd)) return null;
  const { conn, msg } = cmd;
  const { topic, payload } = msg;
  const connLen = Buffer.byteLength(conn, 'utf8');
  const topicLen = Buffer.byteLength(topic, 'utf8');
  if (connLen > U16_MAX || topicLen > U16_MAX) return null;
  const buf = Buffer.allocUnsafe(PUBLISH_HEADER + connLen + topicLen + payload.length);
  buf[0] = HAND;
  buf[1] = HAND_PUBLISH;
  writeHead(buf, 2, cmd);
  buf.writeUInt16BE(connLen, 6);
  let off = 8 + buf.write(conn, 8, 'utf8');
  buf.writeUInt16BE(topicLen, off);
  off += 2;
  off += buf.write(topic, off, 'utf8');
  buf.set(payload, off);
  return buf;
}

function encodeAck(conn: string, pid: number, kind: string): Buffer | null {
  const k = ACK_KINDS.indexOf(kind as (typeof ACK_KINDS)[number]);
  if (k < 0 || !isU16(pid) || typeof conn !== 'string') return null;
  const buf = Buffer.allocUnsafe(ACK_HEADER + Buffer.byteLength(conn, 'utf8'));
  buf[0] = HAND;
  buf[1] = HAND_ACK;
  buf[2] = k;
  buf.writeUInt16BE(pid, 3);
  buf.write(conn, ACK_HEADER, 'utf8');
  return buf;
}

/** The hand-written layout of an `acks`, or null for one it cannot express (msgpackr takes it). */
function encodeAcks(conn: unknown, acks: readonly AckItem[]): Buffer | null {
  if (typeof conn !== 'string' || !Array.isArray(acks) || acks.length === 0 || acks.length > ACKS_PER_COMMAND_MAX) return null;
  const body = ACKS_HEADER + ACKS_ITEM * acks.length;
  const buf = Buffer.allocUnsafe(body + Buffer.byteLength(conn, 'utf8'));
  buf[0] = HAND;
  buf[1] = HAND_ACKS;
  buf.writeUInt16BE(acks.length, 2);
  for (let i = 0; i < acks.length; i++) {
    const a = acks[i] as AckItem;
    const kind = ACK_KINDS.indexOf(a.kind);
    if (kind < 0 || !isU16(a.pid)) return null;
    const at = ACKS_HEADER + ACKS_ITEM * i;
    buf[at] = kind;
    buf.writeUInt16BE(a.pid, at + 1);
  }
  buf.write(conn, body, 'utf8');
  return buf;
}

/** The hand-written layout of a `publishes`, or null for one it cannot express (an item that
 * handPublish refuses or of another conn, a count out of range): msgpackr takes it. */
function encodePublishes(cmd: PublishesCommand): Buffer | null {
  const { conn, pubs } = cmd;
  if (typeof conn !== 'string' || !Array.isArray(pubs) || pubs.length < 2 || pubs.length > PUBLISHES_PER_COMMAND_MAX) return null;
  const connLen = Buffer.byteLength(conn, 'utf8');
  if (connLen > U16_MAX) return null;
  let size = PUBLISHES_HEADER + connLen;
  for (let i = 0; i < pubs.length; i++) {
    const p = pubs[i] as PublishCommand | PubrelCommand;
    if (p.conn !== conn) return null;
    if (p.t === 'pubrel') {
      if (!isU16(p.pid) || Object.keys(p).length !== 3) return null;
      size += PUBREL_ITEM;
      continue;
    }
    if (p.t !== 'publish' || !handPublish(p)) return null;
    const topicLen = Buffer.byteLength(p.msg.topic, 'utf8');
    if (topicLen > U16_MAX || p.msg.payload.length > U32_MAX) return null;
    size += PUBLISHES_ITEM + topicLen + p.msg.payload.length;
  }
  const buf = Buffer.allocUnsafe(size);
  buf[0] = HAND;
  buf[1] = HAND_PUBLISHES;
  buf.writeUInt16BE(pubs.length, 2);
  buf.writeUInt16BE(connLen, 4);
  let off = PUBLISHES_HEADER + buf.write(conn, PUBLISHES_HEADER, 'utf8');
  for (let i = 0; i < pubs.length; i++) {
    const p = pubs[i] as PublishCommand | PubrelCommand;
    if (p.t === 'pubrel') {
      buf[off] = ITEM_PUBREL;
      buf.writeUInt16BE(p.pid, off + 1);
      off += PUBREL_ITEM;
      continue;
    }
    const { topic, payload } = p.msg;
    writeHead(buf, off, p);
    const topicLen = buf.write(topic, off + 6, 'utf8');
    buf.writeUInt16BE(topicLen, off + 4);
    buf.writeUInt32BE(payload.length, off + 6 + topicLen);
    off += PUBLISHES_ITEM + topicLen;
    buf.set(payload, off);
    off += payload.length;
  }
  return buf;
}

/** The strings of the hand-written layouts (connection ids, topics) as decoded before, found by
 * their bytes. The same few repeat entry after entry (a publisher's connection, its topic), and
 * decoding each afresh took about a tenth of a follower's busy time under fan-in; a string found
 * here is also the very string the broker's maps already hashed. Direct-mapped: a slot per hash of
 * the bytes, the newest string of that hash wins. A pure memo of `toString('utf8')` (bytes that are
 * not UTF-8 decode with replacement characters either way), so what apply sees is unchanged. */
export class StringMemo {
  private readonly bytes: Array<Uint8Array | undefined>;
  private readonly strings: Array<string | undefined>;
  private readonly mask: number;

  /** `slots`: a power of two. */
  constructor(slots: number) {
    if (!Number.isInteger(Math.log2(slots))) throw new RangeError(`StringMemo slots ${slots} is not a power of two`);
    this.bytes = new Array<Uint8Array | undefined>(slots).fill(undefined);
    this.strings = new Array<string | undefined>(slots).fill(undefined);
    this.mask = slots - 1;
  }

  decode(buf: Buffer, start: number, end: number): string {
    const n = end - start;
    if (n > STRING_MEMO_BYTES_MAX) return buf.toString('utf8', start, end);
    let h = n;
    for (let i = start; i < end; i++) h = Math.imul(h ^ (buf[i] as number), 0x01000193);
    const slot = (h ^ (h >>> 15)) & this.mask;
    const seen = this.bytes[slot];
    if (seen !== undefined && seen.length === n) {
      let k = 0;
      while (k < n && seen[k] === buf[start + k]) k++;
      if (k === n) return this.strings[slot] as string;
    }
    const s = buf.toString('utf8', start, end);
    this.bytes[slot] = new Uint8Array(buf.subarray(start, end)); // a copy: a view would hold the entry's slab
    this.strings[slot] = s;
    return s;
  }
}

/** Longer strings are decoded every time (comparing them would cost what decoding does). */
const STRING_MEMO_BYTES_MAX = 256;
const strings = new StringMemo(1024);

export class CommandDecodeError extends Error {
  readonly code = 'ERR_COMMAND_DECODE';
}

/** Decodes bytes made by encodeCommand. Checks only the envelope: the command's content is judged
 * by apply, which never throws on it. */
export function decodeCommand(bytes: Uint8Array): Command {
  // The cluster's log hands out Buffers already (raft/driver/driver.ts newSlab).
  if (bytes[0] === HAND) return decodeHand(bytes instanceof Buffer ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  let value: unknown;
  try {
    value = packr.unpack(bytes);
  } catch (err) {
    throw new CommandDecodeError(`command is not valid msgpack: ${(err as Error).message}`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new CommandDecodeError('command is not a map');
  }
  const t = (value as { t?: unknown }).t;
  if (typeof t !== 'string' || !COMMAND_TYPES.has(t)) {
    throw new CommandDecodeError(`unknown command type ${typeof t === 'string' ? JSON.stringify(t) : `of type ${typeof t}`}`);
  }
  return value as Command;
}

function decodeHand(buf: Buffer): Command {
  if (buf[1] === HAND_PUBLISH) return decodePublish(buf);
  if (buf[1] === HAND_ACK) return decodeAck(buf);
  if (buf[1] === HAND_ACKS) return decodeAcks(buf);
  if (buf[1] === HAND_PUBLISHES) return decodePublishes(buf);
  throw new CommandDecodeError(`unknown hand-written command ${String(buf[1])}`);
}

function decodePublish(buf: Buffer): Command {
  if (buf.length < PUBLISH_HEADER) throw new CommandDecodeError('publish command truncated');
  if (!headInRange(buf, 2)) throw new CommandDecodeError('publish command flags or qos out of range');
  const connEnd = 8 + buf.readUInt16BE(6);
  if (connEnd + 2 > buf.length) throw new CommandDecodeError('publish command truncated');
  const topicEnd = connEnd + 2 + buf.readUInt16BE(connEnd);
  if (topicEnd > buf.length) throw new CommandDecodeError('publish command truncated');
  return publishAt(buf, 2, strings.decode(buf, 8, connEnd), connEnd + 2, topicEnd, buf.subarray(topicEnd));
}

// A publish of either layout starts with the same head: flags qos pid:u16.

function writeHead(buf: Buffer, at: number, cmd: PublishCommand): void {
  buf[at] = (cmd.pid !== undefined ? FLAG_PID : 0) | (cmd.msg.retain ? FLAG_RETAIN : 0);
  buf[at + 1] = cmd.msg.qos;
  buf.writeUInt16BE(cmd.pid ?? 0, at + 2);
}

const headInRange = (buf: Buffer, at: number): boolean => (buf[at] as number) <= (FLAG_PID | FLAG_RETAIN) && (buf[at + 1] as number) <= 2;

/** The publish whose head is at `at`, its topic at topicStart..topicEnd. */
function publishAt(buf: Buffer, at: number, conn: string, topicStart: number, topicEnd: number, payload: Buffer): PublishCommand {
  const flags = buf[at] as number;
  const msg = {
    topic: strings.decode(buf, topicStart, topicEnd),
    payload,
    qos: buf[at + 1] as 0 | 1 | 2,
    retain: (flags & FLAG_RETAIN) !== 0,
  };
  return (flags & FLAG_PID) !== 0 ? { t: 'publish', conn, pid: buf.readUInt16BE(at + 2), msg } : { t: 'publish', conn, msg };
}

function decodeAck(buf: Buffer): Command {
  if (buf.length < ACK_HEADER) throw new CommandDecodeError('ack command truncated');
  const kind = ACK_KINDS[buf[2] as number];
  if (kind === undefined) throw new CommandDecodeError('ack command kind out of range');
  return { t: 'ack', conn: strings.decode(buf, ACK_HEADER, buf.length), pid: buf.readUInt16BE(3), kind };
}

function decodeAcks(buf: Buffer): Command {
  if (buf.length < ACKS_HEADER) throw new CommandDecodeError('acks command truncated');
  const count = buf.readUInt16BE(2);
  if (count === 0 || count > ACKS_PER_COMMAND_MAX) throw new CommandDecodeError(`acks command count ${count} out of range`);
  const body = ACKS_HEADER + ACKS_ITEM * count;
  if (body > buf.length) throw new CommandDecodeError('acks command truncated');
  const acks: AckItem[] = new Array(count);
  for (let i = 0; i < count; i++) {
    const at = ACKS_HEADER + ACKS_ITEM * i;
    const kind = ACK_KINDS[buf[at] as number];
    if (kind === undefined) throw new CommandDecodeError('acks command kind out of range');
    acks[i] = { pid: buf.readUInt16BE(at + 1), kind };
  }
  return { t: 'acks', conn: strings.decode(buf, body, buf.length), acks };
}

function decodePublishes(buf: Buffer): Command {
  if (buf.length < PUBLISHES_HEADER) throw new CommandDecodeError('publishes command truncated');
  const count = buf.readUInt16BE(2);
  if (count < 2 || count > PUBLISHES_PER_COMMAND_MAX) throw new CommandDecodeError(`publishes command count ${count} out of range`);
  let off = PUBLISHES_HEADER + buf.readUInt16BE(4);
  if (off > buf.length) throw new CommandDecodeError('publishes command truncated');
  const conn = strings.decode(buf, PUBLISHES_HEADER, off);
  const pubs: (PublishCommand | PubrelCommand)[] = new Array(count);
  for (let i = 0; i < count; i++) {
    if (buf[off] === ITEM_PUBREL) {
      if (off + PUBREL_ITEM > buf.length) throw new CommandDecodeError('publishes command truncated');
      pubs[i] = { t: 'pubrel', conn, pid: buf.readUInt16BE(off + 1) };
      off += PUBREL_ITEM;
      continue;
    }
    if (off + PUBLISHES_ITEM > buf.length) throw new CommandDecodeError('publishes command truncated');
    if (!headInRange(buf, off)) throw new CommandDecodeError('publishes command flags or qos out of range');
    const topicStart = off + 6;
    const topicEnd = topicStart + buf.readUInt16BE(off + 4);
    if (topicEnd + 4 > buf.length) throw new CommandDecodeError('publishes command truncated');
    const payloadStart = topicEnd + 4;
    const payloadEnd = payloadStart + buf.readUInt32BE(topicEnd);
    if (payloadEnd > buf.length) throw new CommandDecodeError('publishes command truncated');
    pubs[i] = publishAt(buf, off, conn, topicStart, topicEnd, buf.subarray(payloadStart, payloadEnd));
    off = payloadEnd;
  }
  if (off !== buf.length) throw new CommandDecodeError('publishes command has bytes after its last item');
  return { t: 'publishes', conn, pubs };
}
