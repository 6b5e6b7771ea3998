import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { PROXY_V1_MAX_BYTES, PROXY_V2_MAX_BYTES, parseProxyHeader } from './proxy-protocol.js';

const SIG = [0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a];

function v2(cmd: number, fam: number, block: number[]): Buffer {
  return Buffer.from([...SIG, 0x20 | cmd, fam, block.length >> 8, block.length & 0xff, ...block]);
}

describe('PROXY protocol header', { timeout: 10_000 }, () => {
  it('reads a v1 TCP4 line and reports the bytes it took, leaving the MQTT bytes behind it', () => {
    const buf = Buffer.concat([Buffer.from('PROXY TCP4 192.0.2.7 198.51.100.1 51000 1883\r\n'), Buffer.from([0x10, 0x00])]);
    const r = parseProxyHeader(buf, 1);
    assert.deepEqual(r, { k: 'done', consumed: buf.length - 2, source: { address: '192.0.2.7', port: 51000 } });
  });

  it('reads v1 TCP6 and UNKNOWN', () => {
    const sixLine = 'PROXY TCP6 2001:db8::1 ::1 443 1883\r\n';
    const six = parseProxyHeader(Buffer.from(`${sixLine}rest`), 1);
    assert.deepEqual(six, { k: 'done', consumed: sixLine.length, source: { address: '2001:db8::1', port: 443 } });
    const unknownLine = 'PROXY UNKNOWN whatever\r\n';
    const unknown = parseProxyHeader(Buffer.from(unknownLine), 1);
    assert.deepEqual(unknown, { k: 'done', consumed: unknownLine.length, source: null });
  });

  it('asks for more bytes at every split of a valid v1 line, and never errs on a prefix', () => {
    const line = Buffer.from('PROXY TCP4 10.0.0.1 10.0.0.2 1 2\r\n');
    for (let i = 0; i < line.length; i++) assert.deepEqual(parseProxyHeader(line.subarray(0, i), 1), { k: 'more' }, `prefix ${i}`);
  });

  it('refuses malformed v1 lines: wrong start, bad address, port, field count, and an over-long line', () => {
    for (const text of [
      'GET / HTTP/1.1\r\n',
      'PROXY TCP4 300.0.0.1 10.0.0.2 1 2\r\n',
      'PROXY TCP4 10.0.0.1 10.0.0.2 01 2\r\n',
      'PROXY TCP4 10.0.0.1 10.0.0.2 70000 2\r\n',
      'PROXY TCP4 10.0.0.1 10.0.0.2 1\r\n',
      'PROXY UDP4 10.0.0.1 10.0.0.2 1 2\r\n',
      'PROXY TCP6 10.0.0.1 ::1 1 2\r\n',
    ]) {
      assert.equal(parseProxyHeader(Buffer.from(text), 1).k, 'error', text);
    }
    assert.equal(parseProxyHeader(Buffer.from(`PROXY ${'x'.repeat(PROXY_V1_MAX_BYTES)}`), 1).k, 'error');
  });

  it('refuses v1 IPv6 text that is not an address, and a bad destination (found by fuzz/targets/proxy-protocol.ts)', () => {
    // The group count ignored empty groups, so a trailing single colon passed as an address.
    assert.deepEqual(parseProxyHeader(Buffer.from('PROXY TCP6 0000::0: ::1 0 0\r\nMQTT'), 1), {
      k: 'error',
      reason: 'PROXY v1 source address',
    });
    for (const src of [':1::', '1:2:3:4:5:6:7:', '::1::', '1::2:3:4:5:6:7:8', 'fe80::1%eth0']) {
      assert.equal(parseProxyHeader(Buffer.from(`PROXY TCP6 ${src} ::1 1 2\r\n`), 1).k, 'error', src);
    }
    assert.deepEqual(parseProxyHeader(Buffer.from('PROXY TCP6 ::1 0.0.0.0 1 2\r\n'), 1), {
      k: 'error',
      reason: 'PROXY v1 destination address',
    });
    assert.deepEqual(parseProxyHeader(Buffer.from('PROXY TCP4 10.0.0.1 10.0.0 1 2\r\n'), 1), {
      k: 'error',
      reason: 'PROXY v1 destination address',
    });
    assert.equal(parseProxyHeader(Buffer.from('PROXY TCP6 ::ffff:192.0.2.1 2001:db8::2 1 2\r\n'), 1).k, 'done');
  });

  it('reads v2 PROXY over TCP4 and TCP6, and LOCAL without an address', () => {
    const four = v2(1, 0x11, [192, 0, 2, 9, 10, 0, 0, 1, 0xc3, 0x50, 0x07, 0x5b]);
    assert.deepEqual(parseProxyHeader(four, 2), { k: 'done', consumed: 28, source: { address: '192.0.2.9', port: 50000 } });
    const addr6 = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5];
    const six = v2(1, 0x21, [...addr6, ...new Array<number>(16).fill(0), 0x01, 0xbb, 0x07, 0x5b]);
    assert.deepEqual(parseProxyHeader(six, 2), { k: 'done', consumed: 52, source: { address: '2001:db8:0:0:0:0:0:5', port: 443 } });
    assert.deepEqual(parseProxyHeader(v2(0, 0x00, []), 2), { k: 'done', consumed: 16, source: null });
  });

  it('skips v2 TLVs after the address block, and accepts UNSPEC without an address', () => {
    const withTlv = v2(1, 0x11, [1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2, 0x04, 0x00, 0x01, 0xaa]);
    assert.deepEqual(parseProxyHeader(withTlv, 2), { k: 'done', consumed: 32, source: { address: '1.2.3.4', port: 1 } });
    assert.deepEqual(parseProxyHeader(v2(1, 0x00, []), 2), { k: 'done', consumed: 16, source: null });
  });

  it('refuses v2 with a wrong signature, version, command, a short address block or a length past the bound', () => {
    assert.equal(parseProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4 1.2.3.4 1 2\r\n'), 2).k, 'error');
    const badVersion = v2(1, 0x11, new Array<number>(12).fill(0));
    badVersion[12] = 0x11;
    assert.equal(parseProxyHeader(badVersion, 2).k, 'error');
    assert.equal(parseProxyHeader(v2(2, 0x11, new Array<number>(12).fill(0)), 2).k, 'error');
    assert.equal(parseProxyHeader(v2(1, 0x11, [1, 2, 3]), 2).k, 'error');
    const huge = Buffer.from([...SIG, 0x21, 0x11, 0xff, 0xff]);
    assert.equal(parseProxyHeader(huge, 2).k, 'error');
    assert.ok(PROXY_V2_MAX_BYTES < 0xffff);
  });

  it('never throws and never claims more bytes than it was given, on arbitrary input', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.constantFrom(1 as const, 2 as const), fc.boolean(), (bytes, version, prefixed) => {
        const head = version === 1 ? Buffer.from('PROXY ') : Buffer.from(SIG);
        const buf = prefixed ? Buffer.concat([head, bytes]) : Buffer.from(bytes);
        const r = parseProxyHeader(buf, version);
        if (r.k === 'done') assert.ok(r.consumed <= buf.length);
        if (r.k === 'more') assert.ok(buf.length < (version === 1 ? PROXY_V1_MAX_BYTES : PROXY_V2_MAX_BYTES));
      }),
      { numRuns: 2000 },
    );
  });
});
