// CRC-32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the checksum of iSCSI (RFC 3720
// appendix B.4), ext4 and most write-ahead logs: it detects every burst error of up to 32 bits, so
// one flipped byte in a record is always found. Node 20's zlib has no CRC-32C (and its crc32, where
// present, is the other polynomial), so this is the table-driven algorithm, eight bytes per step
// ("slicing by 8"): about eight times the speed of one byte per step in V8.

const POLY = 0x82f63b78;

/** TABLES[k * 256 + b]: the CRC of byte b followed by k zero bytes. */
const TABLES = buildTables();

function buildTables(): Uint32Array {
  const t = new Uint32Array(8 * 256);
  for (let b = 0; b < 256; b++) {
    let c = b;
    for (let i = 0; i < 8; i++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
    t[b] = c >>> 0;
  }
  for (let k = 1; k < 8; k++) {
    for (let b = 0; b < 256; b++) {
      const prev = t[(k - 1) * 256 + b] as number;
      t[k * 256 + b] = ((prev >>> 8) ^ (t[prev & 0xff] as number)) >>> 0;
    }
  }
  return t;
}

/** CRC-32C of bytes[start, end). `crc` continues an earlier value: crc32c(b, crc32c(a)) is the CRC
 * of a followed by b. */
export function crc32c(bytes: Uint8Array, crc = 0, start = 0, end = bytes.length): number {
  const t = TABLES;
  let c = ~crc;
  let i = start;
  for (; i + 8 <= end; i += 8) {
    const lo =
      c ^ ((bytes[i] as number) | ((bytes[i + 1] as number) << 8) | ((bytes[i + 2] as number) << 16) | ((bytes[i + 3] as number) << 24));
    const hi =
      (bytes[i + 4] as number) | ((bytes[i + 5] as number) << 8) | ((bytes[i + 6] as number) << 16) | ((bytes[i + 7] as number) << 24);
    c =
      (t[1792 + (lo & 0xff)] as number) ^
      (t[1536 + ((lo >>> 8) & 0xff)] as number) ^
      (t[1280 + ((lo >>> 16) & 0xff)] as number) ^
      (t[1024 + (lo >>> 24)] as number) ^
      (t[768 + (hi & 0xff)] as number) ^
      (t[512 + ((hi >>> 8) & 0xff)] as number) ^
      (t[256 + ((hi >>> 16) & 0xff)] as number) ^
      (t[hi >>> 24] as number);
  }
  for (; i < end; i++) c = (t[(c ^ (bytes[i] as number)) & 0xff] as number) ^ (c >>> 8);
  return ~c >>> 0;
}
