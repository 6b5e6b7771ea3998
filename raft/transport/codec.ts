// Frame bodies: how a message becomes the bytes after a frame's version byte, and back. The
// transport stays generic: a BodyCodec names the versions it reads, encodes a message under one of
// them, and gives each link its own decoder. The default codec is msgpackr under FRAME_VERSION; a
// caller may add layouts of its own under other version bytes (raft/driver/wire-codec.ts does).
// Handshake frames are always msgpackr under FRAME_VERSION, whatever the codec.
import { Packr } from 'msgpackr';
import { FRAME_VERSION } from './frame.js';

/** A message's frame body and the version byte it goes under. `body` may be a view of the codec's
 * scratch memory: it is valid until the codec's next encode(), and the transport copies it into a
 * frame at once. */
export interface EncodedBody {
  readonly version: number;
  readonly body: Uint8Array;
}

export type BodyRefusalCode = 'body-not-msgpack' | 'body-malformed';

/** What a decoder answers for a body it refuses; the link closes with `code`. A decoder never
 * throws on what a peer sends (a throw is caught anyway and taken as 'body-not-msgpack'). */
export class BodyRefusal {
  readonly code: BodyRefusalCode;
  readonly detail: string;
  constructor(code: BodyRefusalCode, detail: string) {
    this.code = code;
    this.detail = detail;
  }
}

/** Decodes the body of a frame whose version byte is one of the codec's versions: the decoded
 * value (still to be judged by the transport's validate), or a BodyRefusal. */
export type BodyDecoder = (version: number, body: Uint8Array) => unknown;

export interface BodyCodec<M> {
  /** Version bytes a link accepts once its handshake is done; any other closes it (frame-version). */
  readonly versions: readonly number[];
  /** May throw on a value it cannot encode: the transport drops the message and counts it. */
  encode(msg: M): EncodedBody;
  /** Optional, and then what the transport calls instead of encode(): the whole frame, as
   * encodeFrame(body, version) would make it of encode()'s answer, built in place (allocFrame) to
   * save the copy. The transport never writes into it. */
  encodeFrame?(msg: M): Uint8Array;
  /** A decoder for one link: a decoder may keep state (msgpackr's, caches) that one peer's bytes
   * must not share with another's. */
  newDecoder(): BodyDecoder;
}

/** Encodes without saved record structures, so the bytes depend only on the value. */
const packer = new Packr({ useRecords: false, mapsAsObjects: true });

export function packBody(value: unknown): Uint8Array {
  return packer.pack(value);
}

/** A msgpackr unpacker for one link: msgpackr keeps record definitions it decodes, and one peer's
 * definitions must not change how another peer's bytes decode. */
export function newUnpacker(): Packr {
  return new Packr({ useRecords: false, mapsAsObjects: true });
}

/** Unpacks a msgpackr body; a body msgpackr cannot read is refused, never thrown. */
export function unpackBody(unpacker: Packr, body: Uint8Array): unknown {
  try {
    return unpacker.unpack(body);
  } catch (err) {
    return new BodyRefusal('body-not-msgpack', (err as Error).message);
  }
}

/** Every message a msgpackr body under FRAME_VERSION: the transport's default. */
export const msgpackCodec: BodyCodec<unknown> = {
  versions: [FRAME_VERSION],
  encode: (msg) => ({ version: FRAME_VERSION, body: packBody(msg) }),
  newDecoder: () => {
    const unpacker = newUnpacker();
    return (_version, body) => unpackBody(unpacker, body);
  },
};
