// Local limits of the serving node (docs/design.md "The seam": rate limits are connection-scoped state):
// token buckets for publish and connect rates, and a bounded table of per-key state so that a storm
// of distinct addresses or usernames costs at most `entriesMax` entries. Time is a parameter
// (monotonic milliseconds), so the module is tested without a clock.
import { Buffer } from 'node:buffer';

/** The limits a node enforces on its own, each from a setting of src/config.ts. */
export interface NodeLimits {
  /** Connections past CONNECT; the CONNECT beyond it is refused (v5 0x97, 3.1.1 code 3). 0: none. */
  maxConnections: number;
  /** Sockets accepted that have not yet sent CONNECT; the socket beyond it is closed at accept. */
  maxPendingConnections: number;
  /** Each listener's accept queue (listen(2) backlog). */
  listenBacklog: number;
  /** A socket that has not sent CONNECT within this time is closed. */
  connectTimeoutMs: number;
  /** Topic levels in a topic name or filter (v5 0x90 / 0x8F). 0: none. */
  maxTopicLevels: number;
  /** Bytes in a topic name or filter (v5 0x90 / 0x8F). */
  maxTopicLength: number;
  /** PUBLISH packets per second per connection, burst the same; 0: none. Over it: v5 PUBACK/PUBREC
   * 0x97; more than twice it: DISCONNECT 0x96 (withinPublishRate, inbound-publish.ts). */
  publishRate: number;
  /** CONNECTs per second per source address, burst the same; 0: none (v5 CONNACK 0x9F). */
  connectRatePerAddress: number;
}

export const DEFAULT_NODE_LIMITS: NodeLimits = {
  maxConnections: 100_000,
  maxPendingConnections: 20_000,
  listenBacklog: 4_096,
  connectTimeoutMs: 10_000,
  maxTopicLevels: 128,
  maxTopicLength: 65_535,
  publishRate: 0,
  connectRatePerAddress: 0,
};

/** --max-write-buffer-bytes: output waiting for one socket above which its QoS 0 deliveries are
 * dropped and reading from it pauses. */
export const WRITE_BUFFER_BYTES_DEFAULT = 1024 * 1024;

/** Entries of each per-address or per-username table (connect rate, failed-login backoff). The
 * least recently touched entry is evicted beyond it, so memory stays flat under any storm. */
export const RATE_TABLE_ENTRIES_MAX = 10_000;

/** A token bucket of `ratePerS` tokens per second holding at most `burst`. */
export class TokenBucket {
  private tokens: number;
  private atMs: number;

  constructor(
    private readonly ratePerS: number,
    private readonly burst: number,
    nowMs: number,
  ) {
    this.tokens = burst;
    this.atMs = nowMs;
  }

  /** Takes one token; false when the bucket is empty. */
  take(nowMs: number): boolean {
    const elapsed = nowMs - this.atMs;
    if (elapsed > 0) {
      this.tokens = Math.min(this.burst, this.tokens + (elapsed * this.ratePerS) / 1000);
      this.atMs = nowMs;
    }
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/** A map bounded to `max` entries that evicts the least recently touched one. */
export class BoundedTable<V> {
  private readonly map = new Map<string, V>();
  /** Entries evicted to stay within the bound, ever. */
  evicted = 0;

  constructor(readonly max: number) {}

  get size(): number {
    return this.map.size;
  }

  /** The entry for `key`, moved to most recently touched; created by `make` when absent. */
  touch(key: string, make: () => V): V {
    let v = this.map.get(key);
    if (v !== undefined) this.map.delete(key);
    else {
      v = make();
      if (this.map.size >= this.max) {
        const oldest = this.map.keys().next();
        if (oldest.done !== true) this.map.delete(oldest.value);
        this.evicted++;
      }
    }
    this.map.set(key, v);
    return v;
  }

  peek(key: string): V | undefined {
    return this.map.get(key);
  }

  delete(key: string): void {
    this.map.delete(key);
  }
}

/** Per-source-address connect rate over a bounded table. */
export class ConnectRateLimiter {
  readonly table = new BoundedTable<TokenBucket>(RATE_TABLE_ENTRIES_MAX);

  constructor(private readonly ratePerS: number) {}

  /** True when a CONNECT from `address` is within its rate (always, when the rate is 0). */
  admit(address: string, nowMs: number): boolean {
    if (this.ratePerS <= 0) return true;
    return this.table.touch(address, () => new TokenBucket(this.ratePerS, this.ratePerS, nowMs)).take(nowMs);
  }
}

/** The first level count or length problem of a topic name or filter, or null. */
export function topicLimitProblem(topic: string, limits: Pick<NodeLimits, 'maxTopicLevels' | 'maxTopicLength'>): string | null {
  // A UTF-16 code unit is at most 3 UTF-8 bytes, so short topics skip the byte count.
  if (topic.length * 3 > limits.maxTopicLength && Buffer.byteLength(topic, 'utf8') > limits.maxTopicLength) {
    return `topic longer than ${limits.maxTopicLength} bytes`;
  }
  if (limits.maxTopicLevels > 0 && topic.length >= limits.maxTopicLevels) {
    let levels = 1;
    for (let i = 0; i < topic.length; i++) if (topic.charCodeAt(i) === 0x2f) levels++;
    if (levels > limits.maxTopicLevels) return `more than ${limits.maxTopicLevels} topic levels`;
  }
  return null;
}
