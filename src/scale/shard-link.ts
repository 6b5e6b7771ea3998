// A sharded node's link to NATS (docs/scale-out.md "The serving node's routes"): it connects to
// --nats, retrying with a bounded backoff and never failing the node; it watches the route bucket
// into the table of the other shards' routes; and, while its node serves, it writes its own shard's
// routes as subscriptions commit: one key per (shard, filter as subscribed), removed when the last
// subscription to the filter goes, none for a filter a placement rule covers. Each write carries the
// stamp (epoch, term, index) of the log position it reflects, so a deposed writer cannot overwrite
// a newer one (src/scale/route-bucket.ts). NATS being down never blocks local traffic: writes wait
// here, newest value per filter, and the whole set is written again on the next connection.
import { checkServerIdentity as checkServerIdentityOf, type PeerCertificate } from 'node:tls';
import { type ConnectionOptions, connect, credsAuthenticator, type NatsConnection, type TlsOptions } from '@nats-io/transport-node';
import type { Command, ConnId } from '../broker/commands.js';
import type { ShardOutbox } from '../broker/shard-outbox.js';
import type { EventKind } from '../events.js';
import type { QoS } from '../protocol/packets.js';
import { ShardForwarder } from './forwarder.js';
import type { Placement } from './placement.js';
import { ShardReceiver } from './receiver.js';
import { ROUTE_BUCKET, RouteBucket, type RouteWatcher, type RouteWrite } from './route-bucket.js';
import { ROUTE_FILTER_BYTES_MAX, type RouteRules, type RouteStamp, RouteTable } from './routes.js';
import type { NatsClientSettings } from './shard-config.js';
import { checkShardList } from './shard-list.js';

/** Reconnect backoff: the first delay, doubling per failure in a row, up to the last (ms); each
 * delay is drawn between half and all of it, so shards that lost one server do not return at once. */
export const NATS_BACKOFF_FIRST_MS = 500;
export const NATS_BACKOFF_MAX_MS = 30_000;
/** A connect not established within this is a failure (ms). */
export const NATS_CONNECT_TIMEOUT_MS = 5_000;
/** A route write that failed (NATS error, conflict) is tried again after this (ms). */
export const ROUTE_RETRY_MS = 1_000;

/** What the link needs of its node. */
export interface ShardLinkHost {
  /** Whether this node serves and its lease holds now: only then does it write routes. */
  mayWrite(): boolean;
  /** This shard's routes as its state holds them now, with the stamp of that position; null while
   * the node does not serve. Asked on each new connection, to write the whole set again. */
  ownRoutes(): { routes: ReadonlyMap<string, QoS>; stamp: RouteStamp } | null;
  /** Counts and logs (rate limited) an event. */
  event(kind: EventKind, fields?: Record<string, unknown>): void;
  /** The outbox of messages to forward to shard `dest` (in the replicated state). */
  outbox(dest: string): Readonly<ShardOutbox> | undefined;
  /** The shards with an outbox. */
  dests(): readonly string[];
  propose(cmd: Command): void;
  /** A connection id of this serving period (the receiver's, which apply's answers name). */
  newConnId(): ConnId;
  /** Bytes of a received message's payload at most. */
  readonly maxPayload: number;
}

export interface ShardLinkOptions {
  readonly shard: string;
  readonly placement: Placement;
  readonly rules: RouteRules;
  /** --nats URLs, tried in turn by the client. */
  readonly servers: readonly string[];
  /** The route bucket's name unless the default. */
  readonly bucket?: string;
  /** How to log in, and the TLS files (docs/scale-out.md "NATS login and TLS"). */
  readonly client?: NatsClientSettings;
}

/** The NATS client's options: one way to log in at most (checked at load) and, over TLS, the TLS
 * files as PEM. `servers`: the --nats URLs. The NATS client checks a server certificate against the
 * URL's host only for a DNS name; for an IP address it would check the name "localhost". So over TLS
 * the check is made here, the same for both: the certificate must name one of the configured hosts. */
export function natsClientOptions(c: NatsClientSettings | undefined, servers: readonly string[] = []): Partial<ConnectionOptions> {
  const hosts = servers.map((u) => new URL(u).hostname.replace(/^\[(.*)\]$/, '$1'));
  const overTls = c?.tls !== undefined || servers.some((u) => u.startsWith('tls://'));
  const checkServerIdentity = (_name: string, cert: PeerCertificate): Error | undefined => {
    let refused: Error | undefined;
    for (const host of hosts) {
      refused = checkServerIdentityOf(host, cert);
      if (refused === undefined) return undefined;
    }
    return refused ?? new Error('no --nats host to check the server certificate against');
  };
  return {
    ...(c?.user === undefined ? {} : { user: c.user, pass: c.password ?? '' }),
    ...(c?.token === undefined ? {} : { token: c.token }),
    ...(c?.creds === undefined ? {} : { authenticator: credsAuthenticator(c.creds) }),
    // The client hands its tls object to tls.connect as it is; an object means TLS is required.
    ...(overTls && hosts.length > 0 ? { tls: { ...c?.tls, checkServerIdentity } as TlsOptions } : {}),
  };
}

export type NatsState = 'stopped' | 'connecting' | 'up' | 'backoff';

/** A route value waiting to be written: a QoS, or null for a removal. */
interface Pending {
  readonly qos: QoS | null;
  readonly stamp: RouteStamp;
}

export class ShardLink {
  state: NatsState = 'stopped';
  /** The last connection failure; null while up. */
  lastError: string | null = null;
  /** The other shards' routes, as the newest watch delivered them. Kept while NATS is down (the
   * last known routes), replaced by a fresh watch on each connection. */
  table: RouteTable;
  /** Route writes the bucket acknowledged, since this process started. */
  routesWritten = 0;
  private nc: NatsConnection | null = null;
  private bucket: RouteBucket | null = null;
  private watcher: RouteWatcher | null = null;
  private timer: NodeJS.Timeout | null = null;
  private failures = 0;
  /** Bumped by stop() and each new connection, so that a late callback of an old one does nothing. */
  private gen = 0;
  /** Newest unwritten value per filter, in the order they were queued. */
  private readonly pending = new Map<string, Pending>();
  private writing = false;
  private retryTimer: NodeJS.Timeout | null = null;
  /** Filters too long for a key already reported, so each is logged once. */
  private readonly tooLong = new Set<string>();
  /** Forwards the shard outboxes over the current connection. */
  readonly forwarder: ShardForwarder;
  /** Pulls what other shards forward to this one, while serving. */
  readonly receiver: ShardReceiver;

  constructor(
    private readonly o: ShardLinkOptions,
    private readonly host: ShardLinkHost,
  ) {
    this.table = new RouteTable(o.shard);
    this.forwarder = new ShardForwarder(o.shard, host);
    this.receiver = new ShardReceiver(o.shard, o.placement, host);
  }

  /** Serving began: write the routes again, forward what the outboxes hold (a restored state may
   * hold some) and start receiving. */
  serve(): void {
    this.resync();
    this.forwarder.pump();
    this.receiver.start();
  }

  /** The other shards a QoS 1 message on `topic` goes to, sorted; null for none: the owner a
   * placement rule names, and every shard with a route (not of a shared group: groups across shards
   * are not built) whose filter matches, as far as this node knows the routes now. */
  destinationsOf(topic: string): string[] | null {
    const owner = this.o.rules.ownerOf(topic);
    const found = new Set<string>();
    if (owner !== null && owner !== this.o.shard) found.add(owner);
    for (const r of this.table.match(topic)) if (r.group === null && r.shard !== this.o.shard) found.add(r.shard);
    return found.size === 0 ? null : [...found].sort();
  }

  get connected(): boolean {
    return this.state === 'up';
  }

  /** Route writes waiting (for NATS, or for the current one to finish). */
  get pendingWrites(): number {
    return this.pending.size;
  }

  /** Bucket entries the watchers refused (bad key or value, older stamp). */
  get routesRefused(): number {
    return this.bucket?.refused ?? 0;
  }

  /** Connects, and keeps connecting until stop(). */
  start(): void {
    if (this.state !== 'stopped') return;
    this.connectNow(this.gen);
  }

  async stop(): Promise<void> {
    this.gen++;
    this.state = 'stopped';
    if (this.timer !== null) clearTimeout(this.timer);
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    this.timer = null;
    this.retryTimer = null;
    this.pending.clear();
    this.forwarder.detach();
    this.receiver.detach();
    this.watcher?.stop();
    this.watcher = null;
    const nc = this.nc;
    this.nc = null;
    this.bucket = null;
    if (nc !== null) await nc.close().catch(() => undefined);
  }

  /** The subscriptions to `filter` (as subscribed) changed in the entry stamped `stamp`: `qos` is
   * the highest QoS they now hold, null when none is left. Written while the node serves. */
  changed(filter: string, qos: QoS | null, stamp: RouteStamp): void {
    if (this.state === 'stopped' || this.o.rules.coveredOn(filter, this.o.shard)) return;
    if (Buffer.byteLength(filter, 'utf8') > ROUTE_FILTER_BYTES_MAX) {
      if (!this.tooLong.has(filter)) {
        this.tooLong.add(filter);
        this.host.event('route-too-long', { filter: filter.slice(0, 100), bytes: Buffer.byteLength(filter, 'utf8') });
      }
      return;
    }
    this.pending.delete(filter);
    this.pending.set(filter, { qos, stamp });
    this.pump();
  }

  /** Serving began (or the connection came back): write every route the state holds, and remove
   * this shard's routes in the bucket that it no longer holds (a state that lost them, such as a
   * single node started without a data directory). */
  resync(): void {
    const bucket = this.bucket;
    const own = this.host.ownRoutes();
    if (bucket === null || own === null) return;
    const gen = this.gen;
    for (const [filter, qos] of own.routes) this.changed(filter, qos, own.stamp);
    void bucket.ownFilters().then(
      (stored) => {
        // The state as it is now, not as it was before the listing: a subscription committed
        // meanwhile may already be written, and must not be removed.
        const now = this.host.ownRoutes();
        if (gen !== this.gen || now === null) return;
        for (const f of stored) if (!now.routes.has(f) && !this.pending.has(f)) this.changed(f, null, now.stamp);
      },
      (err: unknown) => this.host.event('route-write-failed', { op: 'list', err: message(err) }),
    );
  }

  /** Serving ended: nothing more is written; what waits is dropped (the next serving node writes
   * the whole set from its own state). */
  servingEnded(): void {
    this.pending.clear();
    this.forwarder.servingEnded();
    this.receiver.stop();
  }

  private connectNow(gen: number): void {
    this.state = 'connecting';
    void this.connectOnce(gen);
  }

  private async connectOnce(gen: number): Promise<void> {
    let nc: NatsConnection | null = null;
    try {
      // The client's own reconnection is off: a lost connection ends here and the loop below makes a
      // new one, with a fresh watch, so the table never follows a half-resumed one.
      nc = await connect({
        servers: [...this.o.servers],
        reconnect: false,
        timeout: NATS_CONNECT_TIMEOUT_MS,
        name: `raftmq-${this.o.shard}`,
        ...natsClientOptions(this.o.client, this.o.servers),
      });
      if (gen !== this.gen) {
        await nc.close().catch(() => undefined);
        return;
      }
      // docs/scale-out.md "The shard list in NATS": a node whose --shards differs does not join.
      const differs = await checkShardList(nc, this.o.bucket ?? ROUTE_BUCKET, this.o.placement.shards);
      if (differs !== null) {
        this.host.event('shard-list-differs', { reason: differs });
        throw new Error(differs);
      }
      const bucket = await RouteBucket.open(nc, {
        shard: this.o.shard,
        placement: this.o.placement,
        log: (r) => this.host.event('route-refused', { key: r.key, reason: r.reason }),
        ...(this.o.bucket === undefined ? {} : { bucket: this.o.bucket }),
      });
      const table = new RouteTable(this.o.shard);
      const watcher = await bucket.watch(table);
      if (gen !== this.gen) {
        watcher.stop();
        await nc.close().catch(() => undefined);
        return;
      }
      this.nc = nc;
      this.bucket = bucket;
      this.watcher = watcher;
      this.table = table;
      this.state = 'up';
      this.lastError = null;
      this.failures = 0;
      this.resync();
      this.pump();
      this.forwarder.attach(nc);
      this.receiver.attach(nc);
      const closed = await nc.closed();
      if (gen !== this.gen) return;
      this.lost(gen, closed instanceof Error ? closed.message : 'connection closed');
    } catch (err) {
      if (nc !== null) await nc.close().catch(() => undefined);
      if (gen !== this.gen) return;
      this.lost(gen, message(err));
    }
  }

  private lost(gen: number, reason: string): void {
    const wasUp = this.state === 'up';
    this.forwarder.detach();
    this.receiver.detach();
    this.watcher?.stop();
    this.watcher = null;
    this.nc = null;
    this.bucket = null;
    this.lastError = reason;
    this.state = 'backoff';
    this.host.event(wasUp ? 'nats-disconnected' : 'nats-connect-failed', { nats: this.o.servers.join(','), err: reason });
    const ceiling = Math.min(NATS_BACKOFF_MAX_MS, NATS_BACKOFF_FIRST_MS * 2 ** Math.min(this.failures, 16));
    this.failures++;
    const delay = ceiling / 2 + Math.random() * (ceiling / 2);
    this.timer = setTimeout(() => {
      this.timer = null;
      if (gen === this.gen) this.connectNow(++this.gen);
    }, delay);
    this.timer.unref();
  }

  /** Writes what waits, one key at a time, while connected and serving. */
  private pump(): void {
    if (this.writing || this.retryTimer !== null) return;
    const bucket = this.bucket;
    if (bucket === null || this.pending.size === 0) return;
    if (!this.host.mayWrite()) {
      this.pending.clear();
      return;
    }
    const [filter, p] = this.pending.entries().next().value as [string, Pending];
    this.pending.delete(filter);
    this.writing = true;
    const gen = this.gen;
    const write: Promise<RouteWrite> = p.qos === null ? bucket.remove(filter, p.stamp) : bucket.put(filter, p.qos, p.stamp);
    write.then(
      (r) => {
        this.writing = false;
        if (gen !== this.gen) return;
        if (r.kind === 'written') this.routesWritten++;
        else if (r.kind === 'stale') this.host.event('route-stale', { filter, stamp: p.stamp, stored: r.stored });
        else if (r.kind === 'conflict') this.retry(filter, p, 'conflict');
        this.pump();
      },
      (err: unknown) => {
        this.writing = false;
        if (gen !== this.gen) return;
        this.retry(filter, p, message(err));
      },
    );
  }

  private retry(filter: string, p: Pending, reason: string): void {
    this.host.event('route-write-failed', { filter, err: reason });
    // A newer value queued meanwhile supersedes this one.
    if (!this.pending.has(filter)) {
      const rest = [...this.pending];
      this.pending.clear();
      this.pending.set(filter, p);
      for (const [f, v] of rest) this.pending.set(f, v);
    }
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.pump();
    }, ROUTE_RETRY_MS);
    this.retryTimer.unref();
  }
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
