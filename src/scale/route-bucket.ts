// The route bucket (docs/scale-out.md "The route bucket"): every shard's routes in one JetStream
// key-value bucket, one key per (shard, filter as subscribed). A shard writes only its own keys, each
// write with an expected revision (create when absent, update against the revision it read) and
// refused when the stored stamp is newer than its own, so a deposed leader that still holds a NATS
// connection cannot overwrite what its successor wrote. Every shard watches the whole bucket into a
// RouteTable. Everything read from NATS is checked (src/scale/routes.ts): a key or value that does
// not decode, names an unknown shard, or carries an older stamp than one already applied is refused,
// logged with its key and counted, and never reaches the table.
import { Buffer } from 'node:buffer';
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { type KV, type KvEntry, Kvm } from '@nats-io/kv';
import type { NatsConnection } from '@nats-io/transport-node';
import type { QoS } from '../protocol/packets.js';
import type { Placement } from './placement.js';
import {
  compareStamps,
  decodeRouteValue,
  encodeRouteValue,
  parseRouteKey,
  type RouteStamp,
  type RouteTable,
  type RouteValue,
  routeKey,
} from './routes.js';

/** The bucket's name unless told: one per deployment. */
export const ROUTE_BUCKET = 'raftmq-routes';
/** Writes a write tries when other writes to its key come between its read and its write. Only
 * the shard's own serving node writes its keys, so more than one retry means two writers. */
const WRITE_TRIES = 3;

export type RouteWrite =
  | { readonly kind: 'written'; readonly revision: number }
  /** The stored stamp is newer: the write came from an older log position (a deposed leader). */
  | { readonly kind: 'stale'; readonly stored: RouteStamp }
  /** The stored value is this very one (a repeat of the same write). */
  | { readonly kind: 'unchanged' }
  /** Other writes came between each read and write, WRITE_TRIES times. */
  | { readonly kind: 'conflict' };

/** A refused key or value read from the bucket. */
export interface RouteRefusal {
  readonly event: 'route-refused';
  /** The bucket key as read (untrusted: for the log line only). */
  readonly key: string;
  readonly reason: string;
}

export interface RouteBucketOptions {
  /** This node's shard: the only shard whose keys it writes. */
  readonly shard: string;
  readonly placement: Placement;
  /** Where refusals go (a warn line); they are counted either way. */
  readonly log: (r: RouteRefusal) => void;
  readonly bucket?: string;
}

export class RouteBucket {
  /** Keys or values refused on read. */
  private refusedCount = 0;

  private constructor(
    private readonly kv: KV,
    private readonly o: RouteBucketOptions,
  ) {}

  /** Opens the bucket, making it when absent (history 1: only the newest value of a key counts). */
  static async open(nc: NatsConnection, o: RouteBucketOptions): Promise<RouteBucket> {
    const kv = await new Kvm(nc).create(o.bucket ?? ROUTE_BUCKET, { history: 1 });
    return new RouteBucket(kv, o);
  }

  /** Keys or values refused so far, by this bucket's reads and watchers. */
  get refused(): number {
    return this.refusedCount;
  }

  /** Writes this shard's route for `filter` (as subscribed), unless the stored stamp is newer. */
  put(filter: string, qos: QoS, stamp: RouteStamp): Promise<RouteWrite> {
    return this.write(filter, { removed: false, qos, stamp });
  }

  /** Marks this shard's route for `filter` removed, keeping the stamp (a tombstone), so that an
   * older write cannot bring it back. */
  remove(filter: string, stamp: RouteStamp): Promise<RouteWrite> {
    return this.write(filter, { removed: true, stamp });
  }

  /** The filters of this shard's routes stored in the bucket and not removed (a writer that
   * starts compares them with what its state holds); O(this shard's keys). Entries that do not
   * decode are refused and left out. */
  async ownFilters(): Promise<Set<string>> {
    const out = new Set<string>();
    const keys: string[] = [];
    for await (const key of await this.kv.keys(`${this.o.shard}.>`)) keys.push(key);
    for (const key of keys) {
      const k = parseRouteKey(key, this.o.placement);
      if (!k.ok || k.shard !== this.o.shard) continue;
      const e = await this.kv.get(key);
      if (e === null || e.operation !== 'PUT') continue;
      const v = decodeRouteValue(e.value);
      if (!v.ok) this.refuse(key, v.reason);
      else if (!v.value.removed) out.add(k.filter);
    }
    return out;
  }

  private async write(filter: string, value: RouteValue): Promise<RouteWrite> {
    const key = routeKey(this.o.shard, filter);
    const bytes = encodeRouteValue(value);
    for (let i = 0; i < WRITE_TRIES; i++) {
      const current = await this.kv.get(key);
      const stored = current === null || current.operation !== 'PUT' ? null : decodeRouteValue(current.value);
      // A stored value that does not decode is refused by every reader, so overwriting it can only
      // help; it is counted and logged here as it would be there.
      if (stored !== null && !stored.ok) this.refuse(key, stored.reason);
      if (stored?.ok === true) {
        const order = compareStamps(stored.value.stamp, value.stamp);
        if (order > 0) return { kind: 'stale', stored: stored.value.stamp };
        if (order === 0 && Buffer.from(current?.value ?? []).equals(bytes)) return { kind: 'unchanged' };
      }
      try {
        const revision = current === null ? await this.kv.create(key, bytes) : await this.kv.update(key, bytes, current.revision);
        return { kind: 'written', revision };
      } catch (err) {
        if (!isWrongLastSequence(err)) throw err;
      }
    }
    return { kind: 'conflict' };
  }

  /** Watches the whole bucket into `table`: the current routes first, then every change, for as
   * long as the watcher runs. Resolves once the routes present at the start are in the table. */
  async watch(table: RouteTable): Promise<RouteWatcher> {
    const status = await this.kv.status();
    const iter = await this.kv.watch();
    const w = new RouteWatcher(
      table,
      this.o.placement,
      (key, reason) => this.refuse(key, reason),
      () => iter.stop(),
    );
    let caughtUp: () => void = () => undefined;
    const ready = new Promise<void>((resolve) => {
      caughtUp = resolve;
    });
    if (status.values === 0) caughtUp();
    void (async () => {
      try {
        for await (const e of iter) {
          w.apply(e);
          // delta: the entries the watch's consumer still holds; 0 once it has delivered all it had.
          if (e.delta === 0) caughtUp();
        }
        w.ended = 'stopped';
      } catch (err) {
        w.ended = err instanceof Error ? err.message : String(err);
      } finally {
        caughtUp();
      }
    })();
    await ready;
    return w;
  }

  private refuse(key: string, reason: string): void {
    this.refusedCount++;
    this.o.log({ event: 'route-refused', key: printable(key), reason });
  }
}

/** Applies bucket entries to a RouteTable, newest stamp per key only. */
export class RouteWatcher {
  /** The newest stamp applied per key, a removal's included, so an older value cannot come back
   * after a newer one (whoever wrote it, and however the bucket was changed). */
  private readonly stamps = new Map<string, RouteStamp>();
  /** Entries applied to the table (set or removed). */
  applied = 0;
  /** Null while the watch runs; why it ended otherwise (the table then no longer follows the
   * bucket). */
  ended: string | null = null;

  constructor(
    readonly table: RouteTable,
    private readonly placement: Placement,
    private readonly refuse: (key: string, reason: string) => void,
    private readonly stopWatch: () => void,
  ) {}

  /** One entry of the bucket, checked; refused entries leave the table as it was. */
  apply(e: Pick<KvEntry, 'key' | 'value' | 'operation'>): void {
    const k = parseRouteKey(e.key, this.placement);
    if (!k.ok) {
      this.refuse(e.key, k.reason);
      return;
    }
    if (e.operation !== 'PUT') {
      // Deleted or purged by an operator: the route is gone, and so is its stamp.
      this.stamps.delete(e.key);
      if (this.table.delete(k.shard, k.filter)) this.applied++;
      return;
    }
    const v = decodeRouteValue(e.value);
    if (!v.ok) {
      this.refuse(e.key, v.reason);
      return;
    }
    const held = this.stamps.get(e.key);
    if (held !== undefined && compareStamps(v.value.stamp, held) < 0) {
      this.refuse(e.key, `stamp ${stampText(v.value.stamp)} older than ${stampText(held)}`);
      return;
    }
    this.stamps.set(e.key, v.value.stamp);
    if (v.value.removed) this.table.delete(k.shard, k.filter);
    else this.table.set({ shard: k.shard, filter: k.filter, qos: v.value.qos, stamp: v.value.stamp });
    this.applied++;
  }

  stop(): void {
    this.stopWatch();
  }
}

function isWrongLastSequence(err: unknown): boolean {
  return (
    err instanceof JetStreamApiError &&
    (err.code === JetStreamApiCodes.StreamWrongLastSequence || err.code === JetStreamApiCodes.StreamWrongLastSequenceUnknown)
  );
}

const stampText = (s: RouteStamp): string => `(${s.epoch}, ${s.term}, ${s.index})`;

/** A key for a log line: at most 200 characters, control characters escaped. */
function printable(key: string): string {
  const short = key.length > 200 ? `${key.slice(0, 200)}…` : key;
  return JSON.stringify(short).slice(1, -1);
}
