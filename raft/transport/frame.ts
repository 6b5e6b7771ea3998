// Peer link framing: a 4-byte big-endian length, then a version byte, then a body. The version
// byte names the body's layout: FRAME_VERSION is msgpackr (every handshake frame, and every message
// under the default codec); a codec may read others (codec.ts). The length counts the version byte
// and the body (everything after the prefix), so the smallest valid length is 1. The reader refuses an oversize length as soon as the prefix is complete, before any
// of the body is buffered: a peer cannot make us hold more than maxFrameBytes plus one socket chunk.

export const FRAME_VERSION = 1;
export const FRAME_PREFIX_BYTES = 4;
export const FRAME_HEADER_BYTES = FRAME_PREFIX_BYTES + 1;
/** Default bound on the length field (version byte and body), in bytes. */
export const FRAME_BYTES_MAX_DEFAULT = 64 * 1024 * 1024;
/** The length field is a uint32; larger bounds would be meaningless. */
export const FRAME_BYTES_LIMIT = 0xffff_ffff;

export type FrameErrorCode = 'frame-oversize' | 'frame-empty' | 'frame-version';

export type FrameRead =
  | { t: 'frame'; version: number; body: Uint8Array }
  | { t: 'more' }
  | { t: 'error'; code: FrameErrorCode; detail: string };

const MORE: FrameRead = { t: 'more' };

/** Frames up to this size are cut from a shared slab, as Buffer.allocUnsafe does for small buffers
 * (a separate allocation of a few KiB costs several times the copy into it); larger ones get their own. */
const POOLED_FRAME_BYTES_MAX = 64 * 1024;
const FRAME_SLAB_BYTES = 512 * 1024;
let slab = Buffer.allocUnsafeSlow(FRAME_SLAB_BYTES);
let slabAt = 0;

/** A frame of `bodyLength` body bytes with its prefix and version byte written; the caller writes
 * every byte of the body at FRAME_HEADER_BYTES. Its memory may be shared with other frames (never
 * overlapping): write only within it. */
export function allocFrame(bodyLength: number, version: number): Buffer {
  const n = FRAME_HEADER_BYTES + bodyLength;
  let frame: Buffer;
  if (n > POOLED_FRAME_BYTES_MAX) {
    frame = Buffer.allocUnsafe(n);
  } else {
    if (slabAt + n > FRAME_SLAB_BYTES) {
      slab = Buffer.allocUnsafeSlow(FRAME_SLAB_BYTES);
      slabAt = 0;
    }
    frame = Buffer.from(slab.buffer, slab.byteOffset + slabAt, n);
    slabAt = (slabAt + n + 7) & ~7; // 8-byte aligned, like the Buffer pool
  }
  frame.writeUInt32BE(bodyLength + 1, 0);
  frame[FRAME_PREFIX_BYTES] = version;
  return frame;
}

/** Wraps an encoded body in one buffer (prefix, version, body), ready for a single write. */
export function encodeFrame(body: Uint8Array, version: number = FRAME_VERSION): Buffer {
  const frame = allocFrame(body.length, version);
  frame.set(body, FRAME_HEADER_BYTES);
  return frame;
}

/**
 * Reassembles frames from a byte stream split anywhere. Feed chunks with push(), then call next()
 * until it answers 'more'. After an error the stream cannot be resynchronised, so every later
 * next() answers the same error and the caller closes the link.
 */
export class FrameReader {
  private chunks: Uint8Array[] = [];
  private offset = 0; // consumed bytes of chunks[0]
  private buffered = 0; // unconsumed bytes over all chunks
  private pendingLength = -1; // length of the frame whose prefix is read, or -1
  private failure: FrameRead | undefined;
  private maxFrameBytes: number;
  private accepted: Uint8Array = versionTable([FRAME_VERSION]); // 1 at each accepted version byte
  private acceptedText = String(FRAME_VERSION);

  constructor(maxFrameBytes: number = FRAME_BYTES_MAX_DEFAULT) {
    this.maxFrameBytes = checkBound(maxFrameBytes);
  }

  /** Changes the version bytes accepted from the next frame returned on (by default FRAME_VERSION
   * only: the handshake's; a link accepts its codec's once the handshake is done). */
  setVersions(versions: readonly number[]): void {
    this.accepted = versionTable(versions);
    this.acceptedText = versions.join(' or ');
  }

  /** Changes the bound for frames whose prefix has not been read yet (the handshake uses a small one). */
  setMaxFrameBytes(maxFrameBytes: number): void {
    this.maxFrameBytes = checkBound(maxFrameBytes);
  }

  get bufferedBytes(): number {
    return this.buffered;
  }

  push(chunk: Uint8Array): void {
    if (this.failure !== undefined || chunk.length === 0) return;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
  }

  next(): FrameRead {
    if (this.failure !== undefined) return this.failure;
    if (this.pendingLength < 0) {
      if (this.buffered < FRAME_PREFIX_BYTES) return MORE;
      const length = this.take(FRAME_PREFIX_BYTES);
      const n = ((length[0] << 24) >>> 0) + (length[1] << 16) + (length[2] << 8) + length[3];
      if (n === 0) return this.fail('frame-empty', 'frame length 0 leaves no room for the version byte');
      if (n > this.maxFrameBytes) {
        return this.fail('frame-oversize', `frame length ${n} exceeds the bound of ${this.maxFrameBytes} bytes`);
      }
      this.pendingLength = n;
    }
    if (this.buffered < this.pendingLength) return MORE;
    const bytes = this.take(this.pendingLength);
    this.pendingLength = -1;
    const version = bytes[0];
    if (this.accepted[version] !== 1) {
      return this.fail('frame-version', `frame version ${version} (expected ${this.acceptedText})`);
    }
    return { t: 'frame', version, body: bytes.subarray(1) };
  }

  private fail(code: FrameErrorCode, detail: string): FrameRead {
    this.failure = { t: 'error', code, detail };
    this.chunks = [];
    this.buffered = 0;
    return this.failure;
  }

  /** Removes n ≤ buffered bytes from the front; no copy when they lie in one chunk. A frame fed a
   * byte at a time is gathered in one pass, then its chunks are dropped with one splice. */
  private take(n: number): Uint8Array {
    const first = this.chunks[0];
    if (first.length - this.offset >= n) {
      const out = first.subarray(this.offset, this.offset + n);
      this.offset += n;
      this.buffered -= n;
      if (this.offset === first.length) {
        this.chunks.shift();
        this.offset = 0;
      }
      return out;
    }
    const out = new Uint8Array(n);
    let filled = 0;
    let index = 0;
    let offset = this.offset;
    while (filled < n) {
      const chunk = this.chunks[index];
      const count = Math.min(n - filled, chunk.length - offset);
      out.set(chunk.subarray(offset, offset + count), filled);
      filled += count;
      offset += count;
      if (offset === chunk.length) {
        index++;
        offset = 0;
      }
    }
    this.chunks.splice(0, index);
    this.offset = offset;
    this.buffered -= n;
    return out;
  }
}

function versionTable(versions: readonly number[]): Uint8Array {
  const table = new Uint8Array(256);
  for (const v of versions) {
    if (!Number.isInteger(v) || v < 0 || v > 255) throw new RangeError(`a frame version is a byte, got ${v}`);
    table[v] = 1;
  }
  return table;
}

function checkBound(maxFrameBytes: number): number {
  if (!Number.isInteger(maxFrameBytes) || maxFrameBytes < 1 || maxFrameBytes > FRAME_BYTES_LIMIT) {
    throw new RangeError(`maxFrameBytes must be an integer in [1, ${FRAME_BYTES_LIMIT}], got ${maxFrameBytes}`);
  }
  return maxFrameBytes;
}
