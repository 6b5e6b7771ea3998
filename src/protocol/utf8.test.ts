// The UTF-8 rules of [MQTT-1.5.3], checked on raw bytes and on strings about to be encoded.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isMqttString, isMqttUtf8 } from './utf8.js';

const ok = (bytes: number[]): boolean => isMqttUtf8(Uint8Array.from(bytes), 0, bytes.length);

describe('MQTT UTF-8 strings', { timeout: 10_000 }, () => {
  it('accepts ASCII, multi-byte characters, characters beyond the BMP and U+FEFF', () => {
    assert.equal(ok([...Buffer.from('a/b')]), true);
    assert.equal(ok([...Buffer.from('€/домой/😀')]), true);
    assert.equal(ok([0xef, 0xbb, 0xbf, 0x61]), true);
    assert.equal(ok([]), true);
  });

  it('refuses U+0000 [MQTT-1.5.3-2]', () => {
    assert.equal(ok([0x61, 0x00]), false);
    assert.equal(ok([0x00, 0xc3, 0xa9]), false);
  });

  it('refuses encoded surrogates, overlong forms, stray continuation bytes and truncated sequences [MQTT-1.5.3-1]', () => {
    assert.equal(ok([0xed, 0xa0, 0x80]), false, 'U+D800');
    assert.equal(ok([0xed, 0xbf, 0xbf]), false, 'U+DFFF');
    assert.equal(ok([0xc0, 0x80]), false, 'overlong U+0000');
    assert.equal(ok([0xe0, 0x80, 0xaf]), false, 'overlong "/"');
    assert.equal(ok([0x80]), false);
    assert.equal(ok([0xe2, 0x82]), false);
    assert.equal(ok([0xf4, 0x90, 0x80, 0x80]), false, 'beyond U+10FFFF');
  });

  it('checks only the given range of a larger buffer', () => {
    const buf = Uint8Array.from([0x00, 0x61, 0x62, 0xff]);
    assert.equal(isMqttUtf8(buf, 1, 3), true);
    assert.equal(isMqttUtf8(buf, 1, 4), false);
  });

  it('refuses strings with U+0000 or lone surrogates before they are encoded', () => {
    assert.equal(isMqttString('a/😀/\uFEFF'), true);
    assert.equal(isMqttString('a\0'), false);
    assert.equal(isMqttString('\uD800x'), false);
    assert.equal(isMqttString('x\uDC00'), false);
  });
});
