// Reads the fields of one frame body; every read is bounds-checked against the frame's end, so a
// length that points past the frame is a Malformed Packet, never a read into the next frame.
import { fail } from './codec-errors.js';
import { RC } from './reason-codes.js';
import { isMqttUtf8 } from './utf8.js';

const EMPTY = Buffer.alloc(0);

export class Reader {
  buf: Buffer = EMPTY;
  pos = 0;
  end = 0;
  /** True when buf belongs to the decoder alone, so binary fields may share its memory. */
  owned = false;

  reset(buf: Buffer, pos: number, end: number, owned: boolean): void {
    this.buf = buf;
    this.pos = pos;
    this.end = end;
    this.owned = owned;
  }

  left(): number {
    return this.end - this.pos;
  }

  need(n: number, what: string): void {
    if (this.end - this.pos < n) fail(RC.MALFORMED_PACKET, 'truncated', `packet ends inside ${what}`);
  }

  u8(what: string): number {
    this.need(1, what);
    return this.buf[this.pos++] as number;
  }

  u16(what: string): number {
    this.need(2, what);
    const v = this.buf.readUInt16BE(this.pos);
    this.pos += 2;
    return v;
  }

  u32(what: string): number {
    this.need(4, what);
    const v = this.buf.readUInt32BE(this.pos);
    this.pos += 4;
    return v;
  }

  /** Variable Byte Integer: at most 4 bytes, minimal encoding [MQTT-1.5.5-1]. */
  vbi(what: string): number {
    let value = 0;
    let mul = 1;
    for (let i = 0; i < 4; i++) {
      const b = this.u8(what);
      value += (b & 0x7f) * mul;
      if ((b & 0x80) === 0) {
        if (b === 0 && i > 0) fail(RC.MALFORMED_PACKET, 'vbi', `${what} is not minimally encoded`);
        return value;
      }
      mul *= 128;
    }
    return fail(RC.MALFORMED_PACKET, 'vbi', `${what} is longer than 4 bytes`);
  }

  /** UTF-8 Encoded String, checked on the raw bytes [MQTT-1.5.3-1/2]. */
  utf8(what: string): string {
    const len = this.u16(what);
    this.need(len, what);
    const start = this.pos;
    this.pos += len;
    if (!isMqttUtf8(this.buf, start, this.pos)) {
      fail(RC.MALFORMED_PACKET, 'utf8', `${what} is not a valid MQTT UTF-8 string`);
    }
    return this.buf.toString('utf8', start, this.pos);
  }

  /** Binary Data: two-byte length and the bytes. */
  binary(what: string): Buffer {
    const len = this.u16(what);
    return this.take(len, what);
  }

  /** The rest of the frame (a PUBLISH payload). */
  rest(): Buffer {
    return this.take(this.end - this.pos, 'payload');
  }

  /** A copy unless the frame buffer is the decoder's own, so a queued payload never pins a socket
   * chunk that holds other packets. */
  private take(len: number, what: string): Buffer {
    this.need(len, what);
    const start = this.pos;
    this.pos += len;
    if (this.owned) return this.buf.subarray(start, this.pos);
    const out = Buffer.allocUnsafe(len);
    this.buf.copy(out, 0, start, this.pos);
    return out;
  }

  /** A frame must be consumed exactly. */
  done(what: string): void {
    if (this.pos !== this.end) {
      fail(RC.MALFORMED_PACKET, 'trailing-bytes', `${this.end - this.pos} unexpected bytes at the end of ${what}`);
    }
  }
}
