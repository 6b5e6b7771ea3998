// Incremental MQTT decoder: frames packets itself, refuses an oversize remaining length before it
// buffers the body, and hands each complete frame to the body decoders (codec-body.ts).
import { type BodyContext, decodeBody, decodeConnect } from './codec-body.js';
import { CodecFault, fail } from './codec-errors.js';
import { Reader } from './codec-reader.js';
import { PT, TO_CLIENT, TO_SERVER } from './codec-rules.js';
import type { DecodeError, Packet, ProtocolLevel } from './packets.js';
import { RC } from './reason-codes.js';

export interface DecoderOptions {
  /** Largest whole packet (fixed header included) accepted, in bytes. */
  maxPacketSize: number;
  /** 'server' (default) decodes what clients send; 'client' what servers send (tests, bridges). */
  role?: 'server' | 'client';
  /** Start as if a CONNECT of this level had been decoded. Required for role 'client' (default 5). */
  level?: ProtocolLevel;
}

export interface FeedResult {
  packets: Packet[];
  error: DecodeError | null;
}

const EMPTY = Buffer.alloc(0);
/** A remaining length takes at most 4 bytes (§1.5.5). */
const REMAINING_LENGTH_BYTES_MAX = 4;

export class Decoder {
  /** 0 until a CONNECT was decoded; then the level it named. */
  level: 0 | ProtocolLevel;
  private readonly maxPacketSize: number;
  private readonly fromServer: boolean;
  private readonly allowed: number;
  private readonly reader = new Reader();
  /** What the body decoders see; its level follows `level` once a CONNECT was decoded. */
  private readonly ctx: BodyContext;
  private error: DecodeError | null = null;

  // Frame state: byte0 < 0 means no frame started.
  private byte0 = -1;
  private remaining = 0;
  private lengthBytes = 0;
  private multiplier = 1;
  /** The body being assembled across chunks, or null. */
  private body: Buffer | null = null;
  private bodyFilled = 0;

  constructor(opts: DecoderOptions) {
    this.maxPacketSize = opts.maxPacketSize;
    this.fromServer = opts.role === 'client';
    this.allowed = this.fromServer ? TO_CLIENT : TO_SERVER;
    this.level = opts.level ?? (this.fromServer ? 5 : 0);
    this.ctx = { level: this.level === 0 ? 5 : this.level, fromServer: this.fromServer };
  }

  /** Bytes allocated for a frame whose body is still arriving: below maxPacketSize, since an
   * oversize remaining length is refused before its body is buffered. */
  get bufferedBytes(): number {
    return this.body === null ? 0 : this.body.length;
  }

  /** Decodes every complete packet in order; keeps a partial frame for the next call. After an
   * error, every call returns that error and no packets. */
  feed(chunk: Buffer): FeedResult {
    const packets: Packet[] = [];
    if (this.error !== null) return { packets, error: this.error };
    try {
      this.consume(chunk, packets);
    } catch (e) {
      if (!(e instanceof CodecFault)) throw e;
      this.error = e.error;
      this.body = null;
    }
    return { packets, error: this.error };
  }

  private consume(chunk: Buffer, out: Packet[]): void {
    let off = 0;
    const n = chunk.length;
    while (off < n) {
      if (this.body !== null) {
        off = this.fillBody(chunk, off, out);
      } else if (this.byte0 < 0) {
        const b = chunk[off++] as number;
        this.checkFirstByte(b);
        this.byte0 = b;
      } else if (!this.readLengthByte(chunk[off++] as number)) {
        // The remaining length goes on.
      } else if (this.remaining === 0) {
        this.emit(EMPTY, 0, 0, false, out);
      } else if (n - off >= this.remaining) {
        // The whole body is in this chunk: decode it in place.
        const end = off + this.remaining;
        this.emit(chunk, off, end, false, out);
        off = end;
      } else {
        this.body = Buffer.allocUnsafe(this.remaining);
        this.bodyFilled = 0;
      }
    }
  }

  private fillBody(chunk: Buffer, off: number, out: Packet[]): number {
    const body = this.body as Buffer;
    const take = Math.min(body.length - this.bodyFilled, chunk.length - off);
    chunk.copy(body, this.bodyFilled, off, off + take);
    this.bodyFilled += take;
    if (this.bodyFilled === body.length) {
      this.body = null;
      this.emit(body, 0, body.length, true, out);
    }
    return off + take;
  }

  /** Adds one remaining-length byte; true when the length is complete and within bounds. */
  private readLengthByte(b: number): boolean {
    this.remaining += (b & 0x7f) * this.multiplier;
    this.multiplier *= 128;
    this.lengthBytes++;
    if ((b & 0x80) !== 0) {
      if (this.lengthBytes === REMAINING_LENGTH_BYTES_MAX) {
        fail(RC.MALFORMED_PACKET, 'remaining-length', 'remaining length longer than 4 bytes');
      }
      return false;
    }
    if (b === 0 && this.lengthBytes > 1) {
      fail(RC.MALFORMED_PACKET, 'remaining-length', 'remaining length not minimally encoded [MQTT-1.5.5-1]');
    }
    const total = 1 + this.lengthBytes + this.remaining;
    if (total > this.maxPacketSize) {
      fail(RC.PACKET_TOO_LARGE, 'packet-too-large', `packet of ${total} bytes exceeds ${this.maxPacketSize}`);
    }
    return true;
  }

  /** Everything the first byte alone can refuse, before any more of the frame is read. */
  private checkFirstByte(b: number): void {
    const type = b >> 4;
    const flags = b & 0x0f;
    if (!this.fromServer) checkOrder(type, this.level);
    if (type === 0 || (type === PT.AUTH && this.level !== 5)) {
      fail(RC.MALFORMED_PACKET, 'packet-type', `reserved packet type ${type}`);
    }
    if ((this.allowed & (1 << type)) === 0) {
      fail(RC.PROTOCOL_ERROR, 'direction', `packet type ${type} does not travel in this direction`);
    }
    if (type === PT.PUBLISH) {
      checkPublishFlags(flags);
      return;
    }
    // [MQTT-2.2.2-1/2]: fixed flags, 0b0010 for PUBREL, SUBSCRIBE and UNSUBSCRIBE.
    const expected = type === PT.PUBREL || type === PT.SUBSCRIBE || type === PT.UNSUBSCRIBE ? 2 : 0;
    if (flags !== expected) fail(RC.MALFORMED_PACKET, 'header-flags', `invalid fixed header flags for type ${type}`);
  }

  private emit(buf: Buffer, start: number, end: number, owned: boolean, out: Packet[]): void {
    const byte0 = this.byte0;
    this.byte0 = -1;
    this.remaining = 0;
    this.lengthBytes = 0;
    this.multiplier = 1;
    const r = this.reader;
    r.reset(buf, start, end, owned);
    if (this.level === 0) {
      const connect = decodeConnect(r, this.ctx);
      this.level = connect.level;
      this.ctx.level = connect.level;
      out.push(connect);
    } else {
      out.push(decodeBody(byte0, r, this.ctx));
    }
    r.reset(EMPTY, 0, 0, false);
  }
}

/** The first packet must be CONNECT [MQTT-3.1.0-1], and only the first [MQTT-3.1.0-2]. */
function checkOrder(type: number, level: number): void {
  if (level === 0 && type !== PT.CONNECT) fail(RC.PROTOCOL_ERROR, 'first-packet', 'the first packet must be CONNECT');
  if (level !== 0 && type === PT.CONNECT) fail(RC.PROTOCOL_ERROR, 'second-connect', 'a second CONNECT');
}

function checkPublishFlags(flags: number): void {
  const qos = (flags >> 1) & 3;
  if (qos === 3) fail(RC.MALFORMED_PACKET, 'qos3', 'PUBLISH with QoS 3 [MQTT-3.3.1-4]');
  if (qos === 0 && (flags & 8) !== 0) fail(RC.MALFORMED_PACKET, 'dup-qos0', 'DUP set on QoS 0 [MQTT-3.3.1-2]');
}
