// The PROXY protocol header parser (src/server/proxy-protocol.ts), fed as the listener feeds it
// (src/server/listeners/listener.ts readProxy): all bytes so far, after each chunk. The knob picks
// v1 or v2. Rules: it never throws; it answers 'more' only while the bytes are below the version's
// bound, so a peer cannot make the listener buffer more; it consumes no more than it was given;
// a source is a valid IP address and port; and the verdict does not depend on how the stream was
// cut.
import { isIP } from 'node:net';
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import { PROXY_V1_MAX_BYTES, PROXY_V2_MAX_BYTES, type ProxyParse, parseProxyHeader } from '../../src/server/proxy-protocol.js';
import { check, type FuzzInput, type FuzzTarget, onlyTyped, split, textTokens } from '../harness.js';

const V2_SIGNATURE = [0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a];

/** The first byte of a corpus file names the version: 1 or 2 (knob parity picks it otherwise). */
export function v2Header(cmd: number, fam: number, addr: readonly number[], tlv: readonly number[] = []): Uint8Array {
  const len = addr.length + tlv.length;
  return Uint8Array.from([...V2_SIGNATURE, 0x20 | cmd, fam, len >> 8, len & 0xff, ...addr, ...tlv]);
}

const ascii = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'latin1'));

function feed(chunks: readonly Uint8Array[], version: 1 | 2): ProxyParse {
  let buf = new Uint8Array(0);
  let r: ProxyParse = { k: 'more' };
  const max = version === 1 ? PROXY_V1_MAX_BYTES : PROXY_V2_MAX_BYTES;
  for (const chunk of chunks) {
    if (chunk.length === 0) continue;
    buf = new Uint8Array(Buffer.concat([buf, chunk]));
    r = onlyTyped(
      () => parseProxyHeader(buf, version),
      () => false,
      'parseProxyHeader',
    ) as ProxyParse;
    if (r.k === 'more') {
      check(buf.length < max, `'more' with ${buf.length} bytes buffered, bound ${max}`);
      continue;
    }
    if (r.k === 'done') {
      check(r.consumed > 0 && r.consumed <= buf.length && r.consumed <= max, `consumed ${r.consumed} of ${buf.length} bytes`);
      if (r.source !== null) {
        check(isIP(r.source.address) !== 0, `source address ${JSON.stringify(r.source.address)} is not an IP address`);
        check(Number.isInteger(r.source.port) && r.source.port >= 0 && r.source.port <= 65535, `source port ${r.source.port}`);
      }
      // What follows the header is the MQTT stream: the verdict is taken on the header alone.
      return { ...r };
    }
    check(typeof r.reason === 'string' && r.reason.length > 0, 'an error without a reason');
    return r;
  }
  return r;
}

export function runProxy(input: FuzzInput): void {
  const version: 1 | 2 = input.knob % 2 === 0 ? 1 : 2;
  const cut = feed(split(input.data, input.cuts), version);
  const whole = feed([input.data], version);
  check(
    isDeepStrictEqual(cut, whole),
    `the verdict depends on where the stream was cut: ${JSON.stringify(cut)} vs ${JSON.stringify(whole)}`,
  );
}

const v1Line = fc
  .tuple(
    fc.constantFrom('TCP4', 'TCP6', 'UNKNOWN', 'UDP'),
    fc.oneof(fc.ipV4(), fc.ipV6()),
    fc.oneof(fc.ipV4(), fc.ipV6()),
    fc.integer({ min: 0, max: 70000 }),
    fc.integer({ min: 0, max: 65535 }),
  )
  .map(([p, s, d, sp, dp]) => ascii(`PROXY ${p} ${s} ${d} ${sp} ${dp}\r\nMQTT`));
const v2 = fc
  .tuple(
    fc.constantFrom(0, 1, 2),
    fc.constantFrom(0x00, 0x11, 0x12, 0x21, 0x31),
    fc.uint8Array({ maxLength: 40 }),
    fc.uint8Array({ maxLength: 20 }),
  )
  .map(([cmd, fam, addr, tlv]) => v2Header(cmd, fam, [...addr], [...tlv]));

export const proxyProtocol: FuzzTarget = {
  name: 'proxy-protocol',
  modules: ['src/server/proxy-protocol.ts'],
  valid: fc.oneof(v1Line, v2),
  dictionary: [
    ...textTokens('PROXY ', 'TCP4 ', 'TCP6 ', 'UNKNOWN', 'UDP4 ', '\r\n', '::', ':', '.', ' ', '0', '65535', '255.255.255.255', '::ffff:'),
    Uint8Array.from(V2_SIGNATURE),
    Uint8Array.of(0x21, 0x11),
    Uint8Array.of(0x21, 0x21),
    Uint8Array.of(0x20, 0x00),
  ],
  maxBytes: 1200,
  run: runProxy,
};

/** Seed corpus: the headers of haproxy's proxy-protocol.txt examples, each version. */
export function proxyCorpus(): Uint8Array[] {
  const tcp4 = [192, 168, 0, 1, 192, 168, 0, 11, 0xdc, 0x04, 0x07, 0x5b];
  const tcp6 = [...new Array(15).fill(0), 1, ...new Array(15).fill(0), 2, 0x30, 0x39, 0x07, 0x5b];
  return [
    ascii('PROXY TCP4 192.168.0.1 192.168.0.11 56324 1883\r\n'),
    ascii('PROXY TCP6 ::1 ::1 56324 1883\r\n\x10\x00'),
    ascii('PROXY TCP6 2001:db8::ffff:192.0.2.1 2001:db8::2 1 2\r\n'),
    ascii('PROXY UNKNOWN\r\n'),
    v2Header(1, 0x11, tcp4),
    v2Header(1, 0x21, tcp6),
    v2Header(0, 0x00, []),
    v2Header(1, 0x11, tcp4, [0x04, 0x00, 0x02, 0xab, 0xcd]),
  ];
}
