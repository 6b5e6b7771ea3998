// XXH32, the 32-bit xxHash (the published specification, doc/xxhash_spec.md of the xxHash
// project), over bytes with a seed. Placement weights use it because HAProxy computes the same
// function (its `xxh32` converter), so a load balancer can place a client id exactly as the broker
// does (docs/scale-out.md "The hash"). Pure; checked against the specification's test values.

const P1 = 0x9e3779b1;
const P2 = 0x85ebca77;
const P3 = 0xc2b2ae3d;
const P4 = 0x27d4eb2f;
const P5 = 0x165667b1;
const STRIPE = 16;

const rotl = (x: number, r: number): number => ((x << r) | (x >>> (32 - r))) >>> 0;
const mul = (a: number, b: number): number => Math.imul(a, b) >>> 0;

function u32le(b: Uint8Array, at: number): number {
  return ((b[at] as number) | ((b[at + 1] as number) << 8) | ((b[at + 2] as number) << 16) | ((b[at + 3] as number) << 24)) >>> 0;
}

function round(acc: number, lane: number): number {
  return mul(rotl((acc + mul(lane, P2)) >>> 0, 13), P1);
}

/** XXH32 of `bytes` with `seed` (an unsigned 32-bit integer), as an unsigned 32-bit integer. */
export function xxh32(bytes: Uint8Array, seed = 0): number {
  const len = bytes.length;
  let i = 0;
  let h: number;
  if (len >= STRIPE) {
    let v1 = (seed + P1 + P2) >>> 0;
    let v2 = (seed + P2) >>> 0;
    let v3 = seed >>> 0;
    let v4 = (seed - P1) >>> 0;
    for (; i + STRIPE <= len; i += STRIPE) {
      v1 = round(v1, u32le(bytes, i));
      v2 = round(v2, u32le(bytes, i + 4));
      v3 = round(v3, u32le(bytes, i + 8));
      v4 = round(v4, u32le(bytes, i + 12));
    }
    h = (rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18)) >>> 0;
  } else h = (seed + P5) >>> 0;
  h = (h + len) >>> 0;
  for (; i + 4 <= len; i += 4) h = mul(rotl((h + mul(u32le(bytes, i), P3)) >>> 0, 17), P4);
  for (; i < len; i++) h = mul(rotl((h + mul(bytes[i] as number, P5)) >>> 0, 11), P1);
  h ^= h >>> 15;
  h = mul(h, P2);
  h ^= h >>> 13;
  h = mul(h, P3);
  h ^= h >>> 16;
  return h >>> 0;
}
