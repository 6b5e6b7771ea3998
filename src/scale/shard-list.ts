// The deployment's shard list, kept in NATS (docs/scale-out.md "The shard list in NATS"): shards
// whose --shards lists differ disagree on which shard owns a client id, so a client could be
// refused by every shard it is sent to. The first node to connect stores its list under one key of
// a key-value bucket beside the route bucket; every later node compares its own list with it and,
// when they differ, does not join (no routes, no forwarding) and says why, naming both lists.
import { type KV, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import { shardListProblem } from './placement.js';

/** The key the list is stored under. */
export const SHARD_LIST_KEY = 'shards';
/** Bytes of a stored list read at most: 256 names of 32 bytes and their commas. */
const STORED_BYTES_MAX = 256 * 33;
/** Rounds of read-then-create when another node creates the key in between. */
const ROUNDS_MAX = 3;

/** The bucket of the shard list for route bucket `routeBucket`. */
export const shardListBucket = (routeBucket: string): string => `${routeBucket}-shards`;

/** The list as stored: the names sorted, comma-separated (the order of --shards does not matter). */
export const shardListText = (names: readonly string[]): string => [...names].sort().join(',');

/** Null when the list stored in NATS is this node's (storing it when none is); otherwise why the
 * node must not join. What NATS holds is untrusted: a value that is not a valid list is a refusal
 * naming it, never a crash. */
export async function checkShardList(nc: NatsConnection, routeBucket: string, names: readonly string[]): Promise<string | null> {
  const bucket = shardListBucket(routeBucket);
  const kv: KV = await new Kvm(nc).create(bucket, { history: 1 });
  const mine = shardListText(names);
  for (let round = 0; round < ROUNDS_MAX; round++) {
    const e = await kv.get(SHARD_LIST_KEY);
    if (e === null || e.operation !== 'PUT') {
      try {
        await kv.create(SHARD_LIST_KEY, mine);
        return null;
      } catch {
        // Another node stored a list first: read it.
        continue;
      }
    }
    if (e.value.length > STORED_BYTES_MAX)
      return `the shard list in NATS (bucket ${bucket}, key ${SHARD_LIST_KEY}) is ${e.value.length} bytes, more than any list`;
    const theirs = e.string();
    const problem = shardListProblem(theirs.split(','));
    if (problem !== null) return `the shard list in NATS (bucket ${bucket}, key ${SHARD_LIST_KEY}) is not a list: ${problem}`;
    if (shardListText(theirs.split(',')) === mine) return null;
    return `the shard list differs: NATS holds ${theirs} (bucket ${bucket}, key ${SHARD_LIST_KEY}), this node has --shards ${mine}`;
  }
  return `the shard list in NATS (bucket ${bucket}, key ${SHARD_LIST_KEY}) could not be read or stored`;
}
