// The PROXY protocol header a load balancer puts in front of a TCP stream, so the broker learns the
// device's address (haproxy.org proxy-protocol.txt, versions 1 and 2). Pure: bytes in, a verdict
// out; the listener buffers, times out and closes.
import { isIPv6 as netIsIPv6 } from 'node:net';

export type ProxyVersion = 1 | 2;

/** The original source of a proxied connection; null for LOCAL (v2), UNKNOWN (v1) or an address
 * family other than TCP over IPv4/IPv6, where the socket's own address stays. */
export interface ProxySource {
  address: string;
  port: number;
}

export type ProxyParse = { k: 'more' } | { k: 'done'; consumed: number; source: ProxySource | null } | { k: 'error'; reason: string };

/** v1: "PROXY" + up to 102 more bytes including CRLF (proxy-protocol.txt §2.1). */
export const PROXY_V1_MAX_BYTES = 107;
/** v2: 16 fixed bytes and an address block; TLVs beyond this bound are refused, not buffered. */
export const PROXY_V2_MAX_BYTES = 16 + 1024;

const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
const V1_PREFIX = Buffer.from('PROXY ', 'latin1');
const V2_VERSION = 0x20;
const V2_CMD_LOCAL = 0x00;
const V2_CMD_PROXY = 0x01;
const V2_TCP4 = 0x11;
const V2_TCP6 = 0x21;
const V2_TCP4_ADDR_BYTES = 12;
const V2_TCP6_ADDR_BYTES = 36;

/** Parses the header of `version` at the start of `buf` (all bytes received so far). */
export function parseProxyHeader(buf: Uint8Array, version: ProxyVersion): ProxyParse {
  return version === 1 ? parseV1(buf) : parseV2(buf);
}

function prefixMismatch(buf: Uint8Array, prefix: Uint8Array): boolean {
  const n = Math.min(buf.length, prefix.length);
  for (let i = 0; i < n; i++) if (buf[i] !== prefix[i]) return true;
  return false;
}

function parseV1(buf: Uint8Array): ProxyParse {
  if (prefixMismatch(buf, V1_PREFIX)) return { k: 'error', reason: 'not a PROXY v1 header' };
  const limit = Math.min(buf.length, PROXY_V1_MAX_BYTES);
  let end = -1;
  for (let i = 0; i + 1 < limit; i++) {
    if (buf[i] === 0x0d && buf[i + 1] === 0x0a) {
      end = i;
      break;
    }
  }
  if (end < 0) return buf.length >= PROXY_V1_MAX_BYTES ? { k: 'error', reason: 'PROXY v1 line longer than 107 bytes' } : { k: 'more' };
  const line = Buffer.from(buf.buffer, buf.byteOffset, end).toString('latin1');
  const parts = line.split(' ');
  const consumed = end + 2;
  // "PROXY UNKNOWN" may carry anything after it; the receiver ignores it (§2.1).
  if (parts[1] === 'UNKNOWN') return { k: 'done', consumed, source: null };
  if (parts.length !== 6) return { k: 'error', reason: 'PROXY v1 line needs 6 fields' };
  const [, proto, src, dst, srcPort, dstPort] = parts as [string, string, string, string, string, string];
  if (proto !== 'TCP4' && proto !== 'TCP6') return { k: 'error', reason: `PROXY v1 protocol ${proto}` };
  const isAddress = proto === 'TCP4' ? isIPv4 : isIPv6;
  if (!isAddress(src)) return { k: 'error', reason: 'PROXY v1 source address' };
  if (!isAddress(dst)) return { k: 'error', reason: 'PROXY v1 destination address' };
  const port = parsePort(srcPort);
  if (port === null || parsePort(dstPort) === null) return { k: 'error', reason: 'PROXY v1 port' };
  return { k: 'done', consumed, source: { address: src, port } };
}

function parsePort(s: string): number | null {
  // No leading zeros, 0..65535 (§2.1).
  if (!/^(0|[1-9]\d{0,4})$/.test(s)) return null;
  const n = Number(s);
  return n <= 65535 ? n : null;
}

function isIPv4(s: string): boolean {
  const parts = s.split('.');
  return parts.length === 4 && parts.every((p) => /^(0|[1-9]\d{0,2})$/.test(p) && Number(p) <= 255);
}

/** Text of an IPv6 address as RFC 4291 §2.2 writes it, no zone: Node's own check, after a filter
 * that keeps it to those characters (a hand-rolled count let "0000::0:" through). */
function isIPv6(s: string): boolean {
  return /^[0-9a-fA-F:.]{2,45}$/.test(s) && netIsIPv6(s);
}

function parseV2(buf: Uint8Array): ProxyParse {
  if (prefixMismatch(buf, V2_SIGNATURE)) return { k: 'error', reason: 'not a PROXY v2 signature' };
  if (buf.length < 16) return { k: 'more' };
  const verCmd = buf[12] as number;
  if ((verCmd & 0xf0) !== V2_VERSION) return { k: 'error', reason: 'PROXY v2 version' };
  const cmd = verCmd & 0x0f;
  if (cmd !== V2_CMD_LOCAL && cmd !== V2_CMD_PROXY) return { k: 'error', reason: 'PROXY v2 command' };
  const fam = buf[13] as number;
  const len = ((buf[14] as number) << 8) | (buf[15] as number);
  if (16 + len > PROXY_V2_MAX_BYTES) return { k: 'error', reason: 'PROXY v2 header too long' };
  if (buf.length < 16 + len) return { k: 'more' };
  const consumed = 16 + len;
  // LOCAL: a health check from the proxy itself; the socket's own address stays (§2.2).
  if (cmd === V2_CMD_LOCAL) return { k: 'done', consumed, source: null };
  if (fam === V2_TCP4) {
    if (len < V2_TCP4_ADDR_BYTES) return { k: 'error', reason: 'PROXY v2 TCP4 block too short' };
    const address = `${buf[16]}.${buf[17]}.${buf[18]}.${buf[19]}`;
    return { k: 'done', consumed, source: { address, port: ((buf[24] as number) << 8) | (buf[25] as number) } };
  }
  if (fam === V2_TCP6) {
    if (len < V2_TCP6_ADDR_BYTES) return { k: 'error', reason: 'PROXY v2 TCP6 block too short' };
    const groups: string[] = [];
    for (let i = 0; i < 8; i++) groups.push((((buf[16 + 2 * i] as number) << 8) | (buf[17 + 2 * i] as number)).toString(16));
    return { k: 'done', consumed, source: { address: groups.join(':'), port: ((buf[48] as number) << 8) | (buf[49] as number) } };
  }
  // UNSPEC, UDP or unix sockets: accepted, the address is not usable as a TCP peer (§2.2).
  return { k: 'done', consumed, source: null };
}
