// A growable byte writer for the encoder. It keeps MAX_HEADER bytes free at the front so the fixed
// header can be written in front of the body once the remaining length is known, without a copy.
export const MAX_HEADER = 5;

/** Bytes a Variable Byte Integer takes. */
export function vbiSize(n: number): number {
  return n < 128 ? 1 : n < 16_384 ? 2 : n < 2_097_152 ? 3 : 4;
}

/** The largest value a Variable Byte Integer holds (remaining length, property length). */
export const VBI_MAX = 268_435_455;

export class Writer {
  buf: Buffer;
  pos: number;

  constructor(capacity = 64, front = MAX_HEADER) {
    this.buf = Buffer.allocUnsafe(capacity + front);
    this.pos = front;
  }

  private room(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    const next = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + n));
    this.buf.copy(next, 0, 0, this.pos);
    this.buf = next;
  }

  u8(v: number): void {
    this.room(1);
    this.buf[this.pos++] = v;
  }

  u16(v: number): void {
    this.room(2);
    this.buf.writeUInt16BE(v, this.pos);
    this.pos += 2;
  }

  u32(v: number): void {
    this.room(4);
    this.buf.writeUInt32BE(v, this.pos);
    this.pos += 4;
  }

  vbi(v: number): void {
    if (!(v >= 0 && v <= VBI_MAX)) throw new RangeError(`variable byte integer out of range: ${v}`);
    this.room(4);
    this.pos = writeVbi(this.buf, this.pos, v);
  }

  utf8(s: string): void {
    const len = Buffer.byteLength(s);
    if (len > 0xffff) throw new RangeError(`string of ${len} bytes exceeds 65535`);
    this.room(2 + len);
    this.buf.writeUInt16BE(len, this.pos);
    this.pos += 2 + this.buf.write(s, this.pos + 2, 'utf8');
  }

  binary(b: Uint8Array): void {
    if (b.length > 0xffff) throw new RangeError(`binary data of ${b.length} bytes exceeds 65535`);
    this.u16(b.length);
    this.bytes(b);
  }

  bytes(b: Uint8Array): void {
    this.room(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }

  /** Writes the fixed header in front of the body (which starts at MAX_HEADER) and returns the
   * whole packet. */
  finish(byte0: number): Buffer {
    const rl = this.pos - MAX_HEADER;
    if (rl > VBI_MAX) throw new RangeError(`remaining length ${rl} exceeds ${VBI_MAX}`);
    const start = MAX_HEADER - 1 - vbiSize(rl);
    this.buf[start] = byte0;
    writeVbi(this.buf, start + 1, rl);
    return this.buf.subarray(start, this.pos);
  }
}

/** Writes v as a Variable Byte Integer at pos; returns the position after it. */
export function writeVbi(buf: Buffer, pos: number, v: number): number {
  let n = v;
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    buf[pos++] = b;
  } while (n > 0);
  return pos;
}
