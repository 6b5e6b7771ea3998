// Raft messages on the wire (docs/raft.md "Wire layout"). The hot messages (append, append-response,
// heartbeat, heartbeat-response) go in a fixed binary layout under frame version 2, entries' data as
// raw bytes; every other message, and any hot one this layout cannot carry exactly (a configuration
// entry, a field of an unexpected type, a string that is not well-formed UTF-16), goes as msgpackr
// under frame version 1, which every decoder still reads.
//
// Decoding reads untrusted bytes: every length and count is checked against the bytes left and the
// bounds (entriesPerAppendMax, ids of at most STRING_BYTES_MAX bytes) before anything is read or
// allocated, and a body that does not fit is refused as 'body-malformed'. Nothing is judged here
// beyond the layout: the decoded object goes through validateMessage like a msgpackr one.
import type { Append, AppendResponse, Heartbeat, HeartbeatResponse, LogEntry, Message } from '../core/messages.js';
import { entriesPerAppendMaxDefault } from '../core/raft.js';
import { type BodyCodec, type BodyDecoder, BodyRefusal, type EncodedBody, newUnpacker, packBody, unpackBody } from '../transport/codec.js';
import { allocFrame, encodeFrame, FRAME_HEADER_BYTES, FRAME_PREFIX_BYTES, FRAME_VERSION } from '../transport/frame.js';

export const WIRE_VERSION_MSGPACK = FRAME_VERSION;
export const WIRE_VERSION_RAFT = 2;

export const TAG_APPEND = 1;
export const TAG_APPEND_RESPONSE = 2;
export const TAG_HEARTBEAT = 3;
export const TAG_HEARTBEAT_RESPONSE = 4;

/** An id (cluster, epoch id, incarnation) is at most 128 UTF-16 units, so at most 384 UTF-8 bytes. */
export const STRING_BYTES_MAX = 512;
/** Tag, then from, to, term, epoch. */
const ENVELOPE_NUMBERS_END = 1 + 4 * 8;
/** index, term, time, data length. */
export const ENTRY_FIXED_BYTES = 3 * 8 + 4;
/** The data length of an entry whose data is null. */
const NULL_DATA = 0xffff_ffff;
/** Distinct strings whose UTF-8 bytes the encoder keeps (ids repeat in every message). */
const STRINGS_CACHED_MAX = 256;

type Hot = Append | AppendResponse | Heartbeat | HeartbeatResponse;

const isWellFormed = (s: string): boolean => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

export interface EntryCacheStats {
  hits: number;
  misses: number;
}

/** Views of one ArrayBuffer, kept while frames keep coming from it (the transport's frame slab). */
class Memory {
  buffer: ArrayBufferLike = new ArrayBuffer(0);
  u8: Uint8Array = new Uint8Array(0);
  dv: DataView = new DataView(this.u8.buffer);

  of(frame: Uint8Array): void {
    if (frame.buffer === this.buffer) return;
    this.buffer = frame.buffer;
    this.u8 = new Uint8Array(frame.buffer);
    this.dv = new DataView(frame.buffer);
  }
}

/** The entries of one append already encoded, and where their bytes lie in its frame. */
interface EncodedRun {
  entries: readonly LogEntry[]; // the objects as they were encoded
  firstIndex: number;
  u8: Uint8Array; // all of the frame's ArrayBuffer
  offsets: Int32Array; // absolute start of entry k's bytes in u8; [entries.length]: the end
}

/** Appends whose entries the encoder remembers: a leader streams up to inflightAppendsMax appends
 * to one follower (the driver's default is 32), then the same ones to the other. */
export const ENCODED_RUNS_CACHED = 32;
/** Larger entry sections are not remembered: their cost is copying the data, which a hit does too,
 * and they would keep big frames alive. */
const ENCODED_RUN_BYTES_MAX = 64 * 1024;

/**
 * Encodes raft messages, each straight into the frame the transport sends (allocFrame).
 *
 * The entries of an append are encoded once: the encoder remembers the LogEntry objects of the
 * last ENCODED_RUNS_CACHED appends it encoded and where their bytes lie in those appends' frames
 * (frames are never written after they are made), and an append whose entries are the same
 * objects, or a run of them (the same turn's appends to the other follower, most often), copies
 * those bytes instead of encoding them again. Log entries are immutable, so the identity of the
 * objects is the identity of the bytes.
 */
export class RaftWireEncoder {
  readonly cacheEntries: boolean;
  readonly entryCache: EntryCacheStats = { hits: 0, misses: 0 };
  private readonly strings = new Map<string, Uint8Array | null>();
  private readonly mem = new Memory();
  private readonly runs: EncodedRun[] = [];
  private nextRun = 0; // the slot of runs the next remembered append takes

  constructor(opts: { cacheEntries?: boolean } = {}) {
    this.cacheEntries = opts.cacheEntries ?? true;
  }

  /** The message's body and its frame version (a view of the frame encodeFrame makes). */
  encode(msg: Message): EncodedBody {
    const frame = this.encodeFrame(msg);
    return { version: frame[FRAME_PREFIX_BYTES] as number, body: frame.subarray(FRAME_HEADER_BYTES) };
  }

  /** The whole frame: version 2 in the layout, or version 1 with msgpackr. */
  encodeFrame(msg: Message): Uint8Array {
    let frame: Uint8Array | null = null;
    switch (msg.type) {
      case 'append':
        frame = this.append(msg);
        break;
      case 'append-response':
        frame = this.appendResponse(msg);
        break;
      case 'heartbeat':
        frame = this.heartbeat(msg);
        break;
      case 'heartbeat-response':
        frame = this.heartbeatResponse(msg);
        break;
      default:
        break;
    }
    return frame ?? encodeFrame(packBody(msg), WIRE_VERSION_MSGPACK);
  }

  /** The UTF-8 bytes of an id, or null when the layout cannot carry it exactly. */
  private utf8(s: unknown): Uint8Array | null {
    if (typeof s !== 'string') return null;
    let bytes = this.strings.get(s);
    if (bytes === undefined) {
      bytes = null;
      if (s.length <= STRING_BYTES_MAX && isWellFormed(s)) {
        const b = Buffer.from(s, 'utf8');
        if (b.length <= STRING_BYTES_MAX) bytes = new Uint8Array(b);
      }
      if (this.strings.size >= STRINGS_CACHED_MAX) this.strings.clear();
      this.strings.set(s, bytes);
    }
    return bytes;
  }

  /** Makes the frame for a body of `tail` bytes after the envelope, writes tag and envelope, and
   * answers the frame and the absolute position after the envelope in this.mem; or null when the
   * envelope cannot be carried exactly (msgpackr then). */
  private begin(m: Hot, tag: number, tail: number): { frame: Uint8Array; at: number } | null {
    if (typeof m.from !== 'number' || typeof m.to !== 'number' || typeof m.term !== 'number' || typeof m.epoch !== 'number') {
      return null;
    }
    const cluster = this.utf8(m.cluster);
    const epochId = this.utf8(m.epochId);
    const fromInc = this.utf8(m.fromInc);
    const toInc = this.utf8(m.toInc);
    if (cluster === null || epochId === null || fromInc === null || toInc === null) return null;
    const size = ENVELOPE_NUMBERS_END + 8 + cluster.length + epochId.length + fromInc.length + toInc.length + tail;
    const frame = allocFrame(size, WIRE_VERSION_RAFT);
    const mem = this.mem;
    mem.of(frame);
    const { u8, dv } = mem;
    const at = frame.byteOffset + FRAME_HEADER_BYTES;
    u8[at] = tag;
    dv.setFloat64(at + 1, m.from, true);
    dv.setFloat64(at + 9, m.to, true);
    dv.setFloat64(at + 17, m.term, true);
    dv.setFloat64(at + 25, m.epoch, true);
    let p = putString(u8, dv, at + ENVELOPE_NUMBERS_END, cluster);
    p = putString(u8, dv, p, epochId);
    p = putString(u8, dv, p, fromInc);
    p = putString(u8, dv, p, toInc);
    return { frame, at: p };
  }

  private append(m: Append): Uint8Array | null {
    if (!numbers4(m.prevIndex, m.prevTerm, m.commit, m.sentAt) || !Array.isArray(m.entries)) return null;
    const entries = m.entries;
    const n = entries.length;
    const hit = n > 0 && this.cacheEntries ? this.encodedRun(entries) : null;
    const from = hit === null ? 0 : (hit.run.offsets[hit.k0] as number);
    const sectionBytes = hit === null ? entriesBytes(entries) : (hit.run.offsets[hit.k0 + n] as number) - from;
    if (sectionBytes < 0) return null;
    const b = this.begin(m, TAG_APPEND, 4 * 8 + 4 + sectionBytes);
    if (b === null) return null;
    const { u8, dv } = this.mem;
    const at = b.at;
    dv.setFloat64(at, m.prevIndex, true);
    dv.setFloat64(at + 8, m.prevTerm, true);
    dv.setFloat64(at + 16, m.commit, true);
    dv.setFloat64(at + 24, m.sentAt, true);
    dv.setUint32(at + 32, n, true);
    const section = at + 36;
    if (hit !== null) {
      this.entryCache.hits++;
      if (hit.run.u8.buffer === u8.buffer) u8.copyWithin(section, from, from + sectionBytes);
      else u8.set(hit.run.u8.subarray(from, from + sectionBytes), section);
    } else if (n > 0 && this.cacheEntries && sectionBytes <= ENCODED_RUN_BYTES_MAX) {
      this.entryCache.misses++;
      putEntries(u8, dv, section, entries, this.remember(entries, u8));
    } else {
      putEntries(u8, dv, section, entries, undefined);
    }
    return b.frame;
  }

  /** The remembered append whose entries hold `entries` as a run, and where. The log hands out a
   * new LogEntry object each time (raft/core/log.ts keeps columns), so an entry is the same when its
   * numbers are and its data (or configuration) is the very bytes encoded before. */
  private encodedRun(entries: readonly LogEntry[]): { run: EncodedRun; k0: number } | null {
    const first = (entries[0] as LogEntry | null)?.index;
    if (typeof first !== 'number') return null;
    const n = entries.length;
    for (const run of this.runs) {
      const k0 = first - run.firstIndex;
      if (!(k0 >= 0 && k0 + n <= run.entries.length) || !sameEntry(run.entries[k0] as LogEntry, entries[0] as LogEntry)) continue;
      let k = 1;
      while (k < n && sameEntry(run.entries[k0 + k] as LogEntry, entries[k] as LogEntry)) k++;
      if (k === n) return { run, k0 };
    }
    return null;
  }

  /** Takes the next slot for entries about to be encoded into u8; answers the offsets to fill. */
  private remember(entries: readonly LogEntry[], u8: Uint8Array): Int32Array {
    let run = this.runs[this.nextRun];
    const copy = entries.slice(); // the objects as they are encoded, whatever becomes of the array
    const firstIndex = (entries[0] as LogEntry).index;
    if (run === undefined) {
      run = { entries: copy, firstIndex, u8, offsets: new Int32Array(entries.length + 1) };
      this.runs.push(run);
    } else {
      run.entries = copy;
      run.firstIndex = firstIndex;
      run.u8 = u8;
      if (run.offsets.length <= entries.length) run.offsets = new Int32Array(entries.length + 1);
    }
    this.nextRun = (this.nextRun + 1) % ENCODED_RUNS_CACHED;
    return run.offsets;
  }

  private appendResponse(m: AppendResponse): Uint8Array | null {
    if (typeof m.success !== 'boolean' || typeof m.index !== 'number' || typeof m.hint !== 'number' || typeof m.sentAt !== 'number') {
      return null;
    }
    const b = this.begin(m, TAG_APPEND_RESPONSE, 1 + 3 * 8);
    if (b === null) return null;
    const { u8, dv } = this.mem;
    u8[b.at] = m.success ? 1 : 0;
    dv.setFloat64(b.at + 1, m.index, true);
    dv.setFloat64(b.at + 9, m.hint, true);
    dv.setFloat64(b.at + 17, m.sentAt, true);
    return b.frame;
  }

  private heartbeat(m: Heartbeat): Uint8Array | null {
    if (typeof m.commit !== 'number' || typeof m.sentAt !== 'number') return null;
    const b = this.begin(m, TAG_HEARTBEAT, 2 * 8);
    if (b === null) return null;
    this.mem.dv.setFloat64(b.at, m.commit, true);
    this.mem.dv.setFloat64(b.at + 8, m.sentAt, true);
    return b.frame;
  }

  private heartbeatResponse(m: HeartbeatResponse): Uint8Array | null {
    if (typeof m.sentAt !== 'number' || typeof m.wall !== 'number') return null;
    const b = this.begin(m, TAG_HEARTBEAT_RESPONSE, 2 * 8);
    if (b === null) return null;
    this.mem.dv.setFloat64(b.at, m.sentAt, true);
    this.mem.dv.setFloat64(b.at + 8, m.wall, true);
    return b.frame;
  }
}

function numbers4(a: unknown, b: unknown, c: unknown, d: unknown): boolean {
  return typeof a === 'number' && typeof b === 'number' && typeof c === 'number' && typeof d === 'number';
}

function putString(u8: Uint8Array, dv: DataView, at: number, bytes: Uint8Array): number {
  dv.setUint16(at, bytes.length, true);
  u8.set(bytes, at + 2);
  return at + 2 + bytes.length;
}

/** The bytes the entries take in the layout, or -1 when one cannot be carried exactly (a
 * configuration entry, a field of another type): the whole append goes as msgpackr then. */
function entriesBytes(entries: readonly LogEntry[]): number {
  let size = 0;
  for (let k = 0; k < entries.length; k++) {
    const e = entries[k] as LogEntry | null;
    if (typeof e !== 'object' || e === null || e.config !== undefined) return -1;
    if (typeof e.index !== 'number' || typeof e.term !== 'number' || typeof e.time !== 'number') return -1;
    const data = e.data;
    if (data === null) size += ENTRY_FIXED_BYTES;
    else if (data instanceof Uint8Array && data.length < NULL_DATA) size += ENTRY_FIXED_BYTES + data.length;
    else return -1;
  }
  return size;
}

/** Writes entries already checked by entriesBytes from `at`; fills `offsets` (length + 1) if given. */
function putEntries(u8: Uint8Array, dv: DataView, at: number, entries: readonly LogEntry[], offsets: Int32Array | undefined): void {
  for (let k = 0; k < entries.length; k++) {
    const e = entries[k] as LogEntry;
    if (offsets !== undefined) offsets[k] = at;
    dv.setFloat64(at, e.index, true);
    dv.setFloat64(at + 8, e.term, true);
    dv.setFloat64(at + 16, e.time, true);
    const data = e.data;
    if (data === null) {
      dv.setUint32(at + 24, NULL_DATA, true);
      at += ENTRY_FIXED_BYTES;
    } else {
      dv.setUint32(at + 24, data.length, true);
      u8.set(data, at + ENTRY_FIXED_BYTES);
      at += ENTRY_FIXED_BYTES + data.length;
    }
  }
  if (offsets !== undefined) offsets[entries.length] = at;
}

/** Thrown inside the decoder only, and always caught there: a body that does not fit the layout. */
class Malformed {
  readonly detail: string;
  constructor(detail: string) {
    this.detail = detail;
  }
}

const EMPTY: Uint8Array = new Uint8Array(0);
const utf8Decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * Decodes the bodies of one link: version 2 in the layout, version 1 with msgpackr. It keeps the
 * last bytes and string of each id field (a link's ids rarely change), and msgpackr's state, so
 * one decoder serves one link. An entry's data is a view of the body, as msgpackr's would be.
 */
export class RaftWireDecoder {
  private readonly entriesPerAppendMax: number;
  private readonly unpacker = newUnpacker();
  private readonly idBytes: Uint8Array[] = [EMPTY, EMPTY, EMPTY, EMPTY];
  private readonly idStrings: string[] = ['', '', '', ''];
  private readonly mem = new Memory();
  private at = 0; // absolute position in mem of the next byte to read
  private end = 0; // absolute position in mem after the body

  constructor(opts: { entriesPerAppendMax?: number } = {}) {
    this.entriesPerAppendMax = opts.entriesPerAppendMax ?? entriesPerAppendMaxDefault;
  }

  readonly decode: BodyDecoder = (version, body) => {
    if (version !== WIRE_VERSION_RAFT) return unpackBody(this.unpacker, body);
    try {
      return this.layout(body);
    } catch (err) {
      if (err instanceof Malformed) return new BodyRefusal('body-malformed', err.detail);
      return new BodyRefusal('body-malformed', String(err)); // not reached: every read is checked first
    }
  };

  private layout(body: Uint8Array): Message {
    if (body.length < ENVELOPE_NUMBERS_END) throw new Malformed(`body of ${body.length} bytes is shorter than an envelope`);
    const mem = this.mem;
    mem.of(body);
    const dv = mem.dv;
    const start = body.byteOffset;
    this.end = start + body.length;
    const tag = body[0];
    const from = dv.getFloat64(start + 1, true);
    const to = dv.getFloat64(start + 9, true);
    const term = dv.getFloat64(start + 17, true);
    const epoch = dv.getFloat64(start + 25, true);
    this.at = start + ENVELOPE_NUMBERS_END;
    const cluster = this.string(0);
    const epochId = this.string(1);
    const fromInc = this.string(2);
    const toInc = this.string(3);
    let m: Message;
    switch (tag) {
      case TAG_APPEND: {
        const prevIndex = this.f64();
        const prevTerm = this.f64();
        const commit = this.f64();
        const sentAt = this.f64();
        const entries = this.entries();
        m = { type: 'append', from, to, term, prevIndex, prevTerm, entries, commit, sentAt, cluster, epoch, epochId, fromInc, toInc };
        break;
      }
      case TAG_APPEND_RESPONSE: {
        const success = this.bool();
        const index = this.f64();
        const hint = this.f64();
        const sentAt = this.f64();
        m = { type: 'append-response', from, to, term, success, index, hint, sentAt, cluster, epoch, epochId, fromInc, toInc };
        break;
      }
      case TAG_HEARTBEAT: {
        const commit = this.f64();
        const sentAt = this.f64();
        m = { type: 'heartbeat', from, to, term, commit, sentAt, cluster, epoch, epochId, fromInc, toInc };
        break;
      }
      case TAG_HEARTBEAT_RESPONSE: {
        const sentAt = this.f64();
        const wall = this.f64();
        m = { type: 'heartbeat-response', from, to, term, sentAt, wall, cluster, epoch, epochId, fromInc, toInc };
        break;
      }
      default:
        throw new Malformed(`unknown message tag ${tag}`);
    }
    if (this.at !== this.end) throw new Malformed(`${this.end - this.at} bytes after the message`);
    return m;
  }

  private need(bytes: number, what: string): void {
    if (bytes > this.end - this.at) throw new Malformed(`${what} past the end of the body`);
  }

  private f64(): number {
    this.need(8, 'number');
    const v = this.mem.dv.getFloat64(this.at, true);
    this.at += 8;
    return v;
  }

  private bool(): boolean {
    this.need(1, 'boolean');
    const b = this.mem.u8[this.at++] as number;
    if (b > 1) throw new Malformed(`boolean byte ${b}`);
    return b === 1;
  }

  private string(slot: number): string {
    this.need(2, 'string length');
    const u8 = this.mem.u8;
    const length = this.mem.dv.getUint16(this.at, true);
    if (length > STRING_BYTES_MAX) throw new Malformed(`string of ${length} bytes, above ${STRING_BYTES_MAX}`);
    this.at += 2;
    this.need(length, 'string');
    const start = this.at;
    this.at = start + length;
    const seen = this.idBytes[slot] as Uint8Array;
    if (seen.length === length) {
      let k = 0;
      while (k < length && seen[k] === u8[start + k]) k++;
      if (k === length) return this.idStrings[slot] as string;
    }
    let s: string;
    try {
      s = utf8Decoder.decode(u8.subarray(start, start + length));
    } catch {
      throw new Malformed('string is not UTF-8');
    }
    this.idBytes[slot] = u8.slice(start, start + length);
    this.idStrings[slot] = s;
    return s;
  }

  private entries(): LogEntry[] {
    this.need(4, 'entry count');
    const { dv, buffer } = this.mem;
    const count = dv.getUint32(this.at, true);
    this.at += 4;
    const end = this.end;
    if (count > this.entriesPerAppendMax) throw new Malformed(`${count} entries, above the bound of ${this.entriesPerAppendMax}`);
    if (count > Math.floor((end - this.at) / ENTRY_FIXED_BYTES)) throw new Malformed(`${count} entries past the end of the body`);
    const entries: LogEntry[] = [];
    let at = this.at;
    for (let k = 0; k < count; k++) {
      if (ENTRY_FIXED_BYTES > end - at) throw new Malformed(`entry ${k} past the end of the body`);
      const index = dv.getFloat64(at, true);
      const term = dv.getFloat64(at + 8, true);
      const time = dv.getFloat64(at + 16, true);
      const length = dv.getUint32(at + 24, true);
      at += ENTRY_FIXED_BYTES;
      let data: Uint8Array | null = null;
      if (length !== NULL_DATA) {
        if (length > end - at) throw new Malformed(`entry ${k} data of ${length} bytes past the end of the body`);
        data = new Uint8Array(buffer, at, length);
        at += length;
      }
      entries.push({ index, term, time, data });
    }
    this.at = at;
    return entries;
  }
}

function sameEntry(a: LogEntry, b: LogEntry): boolean {
  return a === b || (a.index === b.index && a.term === b.term && a.time === b.time && sameBytes(a.data, b.data) && a.config === b.config);
}

/** The very bytes: the same object, or views of the same region of one buffer. The log hands out a
 * new view of its slab at each read and never writes a slab's bytes twice (raft/core/log.ts). */
function sameBytes(a: Uint8Array | null, b: Uint8Array | null): boolean {
  if (a === b) return true;
  return a !== null && b !== null && a.buffer === b.buffer && a.byteOffset === b.byteOffset && a.byteLength === b.byteLength;
}

export interface RaftWireOptions {
  /** The count bound an append's entries are checked against; the core's entriesPerAppendMax. */
  entriesPerAppendMax?: number;
  /** Encode the hot messages in the layout (default); false: msgpackr for every message, as
   * before the layout (decoders read both either way). */
  layout?: boolean;
  /** Reuse the bytes of entries already encoded (default true). */
  cacheEntries?: boolean;
}

export interface RaftWireCodec extends BodyCodec<Message> {
  /** The encoder behind encode(), for its entry-cache counters. */
  readonly encoder: RaftWireEncoder;
}

/** The body codec for raft's Transport<Message>: reads frame versions 1 and 2. */
export function raftWireCodec(opts: RaftWireOptions = {}): RaftWireCodec {
  const encoder = new RaftWireEncoder({ cacheEntries: opts.cacheEntries ?? true });
  const layout = opts.layout ?? true;
  const decoderOpts = opts.entriesPerAppendMax === undefined ? {} : { entriesPerAppendMax: opts.entriesPerAppendMax };
  return {
    versions: [WIRE_VERSION_MSGPACK, WIRE_VERSION_RAFT],
    encoder,
    encode: layout ? (msg) => encoder.encode(msg) : (msg) => ({ version: WIRE_VERSION_MSGPACK, body: packBody(msg) }),
    encodeFrame: layout ? (msg) => encoder.encodeFrame(msg) : (msg) => encodeFrame(packBody(msg), WIRE_VERSION_MSGPACK),
    newDecoder: () => new RaftWireDecoder(decoderOpts).decode,
  };
}
