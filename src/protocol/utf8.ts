// UTF-8 Encoded String checks on the raw bytes, before any decoding replaces bad sequences.
import { isUtf8 } from 'node:buffer';

/**
 * True when bytes [start, end) are a valid MQTT UTF-8 string: well-formed UTF-8 with no
 * surrogate code points [MQTT-1.5.3-1] (isUtf8 refuses those and overlong forms) and no U+0000
 * [MQTT-1.5.3-2]. U+0000 can only appear as byte 0x00 once overlong forms are refused.
 * U+FEFF is valid and kept [MQTT-1.5.3-3].
 */
export function isMqttUtf8(buf: Uint8Array, start: number, end: number): boolean {
  let high = false;
  for (let i = start; i < end; i++) {
    const b = buf[i] as number;
    if (b === 0) return false;
    if (b >= 0x80) high = true;
  }
  // Pure ASCII without NUL (the usual topic) needs no further check.
  return !high || isUtf8(buf.subarray(start, end));
}

/** The same check for a string about to be encoded (lone surrogates would become U+FFFD). */
export function isMqttString(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === 0) return false;
    if (c >= 0xd800 && c <= 0xdfff) {
      const next = s.charCodeAt(i + 1);
      if (c > 0xdbff || !(next >= 0xdc00 && next <= 0xdfff)) return false;
      i++;
    }
  }
  return true;
}
