// How the codec leaves a frame it refuses: decode functions throw a CodecFault, and Decoder.feed
// catches it and turns it into its DecodeError result. Nothing else is thrown for bad input.
import type { DecodeError } from './packets.js';

/** Not an Error: no stack is captured, since refusals are expected input, not bugs. */
export class CodecFault {
  readonly error: DecodeError;
  constructor(reason: number, key: string, message: string) {
    this.error = { reason, key, message };
  }
}

export function fail(reason: number, key: string, message: string): never {
  throw new CodecFault(reason, key, message);
}
