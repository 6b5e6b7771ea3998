// The names of shards as the replicated state holds them (forwarded messages' origins, the shard
// outboxes' destinations), and so as every layer above checks them (src/scale/placement.ts).

/** A shard name: lower-case letters, digits and inner dashes, 1 to 32 characters. The name goes
 * into NATS subjects and stream names (no `.`, `*`, `>` or spaces), HAProxy backend names and
 * arguments, metric labels and $SYS payloads unescaped, so the alphabet is kept to what is safe in
 * all of them, and to one case, since DNS and HAProxy users read names case-blind. */
export const SHARD_NAME = /^[a-z0-9](?:[a-z0-9-]{0,30}[a-z0-9])?$/;
/** Shards in a list at most: each CONNECT computes one weight per shard. */
export const SHARDS_MAX = 256;
