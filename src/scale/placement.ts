// Placement of client ids on shards (docs/scale-out.md "Placement"): rendezvous (highest random
// weight) hashing over the shard list. A client id belongs to the shard whose weight for it is
// highest, the weight being XXH32 of the id's UTF-8 bytes, an `@` and the shard's name; equal
// weights go to the name that sorts first. Adding a shard moves to it only the ids it now wins
// (about 1/K of them), and removing one moves only its own ids; nothing else changes owner. The
// owner depends on the set of names, never on their order in --shards. Pure.
import { Buffer } from 'node:buffer';
import { SHARD_NAME, SHARDS_MAX } from '../broker/shard-name.js';
import { xxh32 } from './xxh32.js';

export { SHARD_NAME, SHARDS_MAX };

/** Byte between the client id and the shard name in a weight's input; not in SHARD_NAME, so
 * (id, shard) → bytes is one-to-one (the shard is what follows the last `@`). */
const SEPARATOR = 0x40;
/** Candidates an assignment tries per shard of the list (see assignedIdHere). */
export const ASSIGN_TRIES_PER_SHARD = 64;

/** Why a shard list cannot be used, or null. `where` names the flag or key. */
export function shardListProblem(names: readonly string[]): string | null {
  if (names.length === 0) return 'no shard named';
  if (names.length > SHARDS_MAX) return `at most ${SHARDS_MAX} shards (got ${names.length})`;
  const seen = new Set<string>();
  for (const n of names) {
    if (n === '') return 'an empty shard name';
    if (!SHARD_NAME.test(n)) {
      return `shard name ${JSON.stringify(n)} is not 1 to 32 of a-z, 0-9 and inner dashes`;
    }
    if (seen.has(n)) return `shard ${n} is listed twice`;
    seen.add(n);
  }
  return null;
}

/** The weight of `shard` for `clientId`: XXH32 (seed 0) of utf8(clientId) ‖ `@` ‖ shard. */
export function shardWeight(clientId: string, shard: string): number {
  return xxh32(Buffer.from(`${clientId}@${shard}`, 'utf8'));
}

export class Placement {
  /** The names in code-unit order: the order ties are broken in. */
  readonly shards: readonly string[];
  private readonly suffixes: readonly Buffer[];
  private readonly suffixMax: number;

  /** `shards` must pass shardListProblem (checked by the configuration); throws otherwise. */
  constructor(shards: readonly string[]) {
    const problem = shardListProblem(shards);
    if (problem !== null) throw new RangeError(`bad shard list: ${problem}`);
    this.shards = [...shards].sort();
    this.suffixes = this.shards.map((s) => Buffer.from(s, 'ascii'));
    this.suffixMax = Math.max(...this.suffixes.map((b) => b.length));
  }

  /** The shard `clientId` belongs to. */
  owner(clientId: string): string {
    const idLen = Buffer.byteLength(clientId, 'utf8');
    const buf = Buffer.allocUnsafe(idLen + 1 + this.suffixMax);
    buf.write(clientId, 0, 'utf8');
    buf[idLen] = SEPARATOR;
    let best = '';
    let bestWeight = -1;
    for (let i = 0; i < this.shards.length; i++) {
      const suffix = this.suffixes[i] as Buffer;
      suffix.copy(buf, idLen + 1);
      const w = xxh32(buf.subarray(0, idLen + 1 + suffix.length));
      // Strictly greater: of equal weights the first name in order keeps it.
      if (w > bestWeight) {
        bestWeight = w;
        best = this.shards[i] as string;
      }
    }
    return best;
  }
}

/** The client id a shard assigns to a client that sent none: `base` if it belongs to `shard`,
 * else the first of `base-1`, `base-2`, … that does, trying ASSIGN_TRIES_PER_SHARD per shard of
 * the list; null when none did (about e^-64 for any base). Derived from `base` (the connection's
 * own assigned id, unique on this shard) and nothing random, so it is unique here too, and no other
 * shard ever serves it. */
export function assignedIdHere(base: string, shard: string, placement: Placement): string | null {
  const tries = ASSIGN_TRIES_PER_SHARD * placement.shards.length;
  for (let k = 0; k < tries; k++) {
    const id = k === 0 ? base : `${base}-${k}`;
    if (placement.owner(id) === shard) return id;
  }
  return null;
}
