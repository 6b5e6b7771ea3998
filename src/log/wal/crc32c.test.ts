import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { crc32c } from './crc32c.js';

/** One byte per step, straight from the definition: the reference the fast path must match. */
function reference(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) {
    c ^= b;
    for (let i = 0; i < 8; i++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
  }
  return (c ^ 0xffffffff) >>> 0;
}

describe('crc32c', () => {
  it('gives the check value of the CRC catalogue: "123456789" is 0xE3069283', () => {
    assert.equal(crc32c(new TextEncoder().encode('123456789')), 0xe3069283);
    assert.equal(crc32c(new Uint8Array(0)), 0);
  });

  it('gives the test vectors of RFC 3720 appendix B.4', () => {
    assert.equal(crc32c(new Uint8Array(32)), 0x8a9136aa);
    assert.equal(crc32c(new Uint8Array(32).fill(0xff)), 0x62a8ab43);
    assert.equal(crc32c(Uint8Array.from({ length: 32 }, (_, i) => i)), 0x46dd794e);
    assert.equal(crc32c(Uint8Array.from({ length: 32 }, (_, i) => 31 - i)), 0x113fdb5c);
    // An iSCSI read command PDU.
    const pdu = Uint8Array.from([
      0x01, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x14, 0, 0, 0, 0, 0, 0x04, 0, 0, 0, 0, 0x14, 0, 0, 0, 0x18, 0x28, 0, 0, 0, 0, 0,
      0, 0, 0x02, 0, 0, 0, 0, 0, 0, 0,
    ]);
    assert.equal(crc32c(pdu), 0xd9963a56);
  });

  it('matches the bytewise definition, and continues across any split', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.nat(), (bytes, at) => {
        const whole = crc32c(bytes);
        assert.equal(whole, reference(bytes));
        const cut = bytes.length === 0 ? 0 : at % (bytes.length + 1);
        assert.equal(crc32c(bytes.subarray(cut), crc32c(bytes.subarray(0, cut))), whole);
        assert.equal(crc32c(bytes, crc32c(bytes, 0, 0, cut), cut), whole);
      }),
      { numRuns: 500 },
    );
  });
});
