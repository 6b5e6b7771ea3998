import type { Command, Entry, Settings } from '../broker/commands.js';
import type { BrokerLog, LogListener } from './broker-log.js';
import { decodeCommand, encodeCommand } from './command-codec.js';
import type { WalEntry } from './wal/segment.js';
import type { SnapshotStats, Wal } from './wal/wal.js';

/** What recovery read back from a data directory (src/log/wal/recover.ts). */
export interface Recovered {
  wal: Wal;
  /** Entries of the log after the restored snapshot, applied before this process's serve-start. */
  replay: readonly Entry[];
  /** Index and time of the last entry recovered (snapshot or log); 0 for an empty directory. */
  lastIndex: number;
  lastTime: number;
}

/** A LocalLog with --data-dir: the WAL comes later, with recovered(), before start(). */
export interface DurableOptions {
  /** A write, fsync or snapshot failed: the node must stop. The failed call is never retried: an
   * fsync retried after EIO can report success for pages the kernel dropped. */
  onFatal(err: Error): void;
  /** A snapshot was written and older files removed. */
  onSnapshot?(stats: SnapshotStats): void;
}

/** A snapshot of the state: chunks consistent at `index`, the last entry applied. */
export type SnapshotSource = () => (Iterator<Uint8Array> & { readonly index: number }) | null;

/** An entry on disk, not yet handed to the listener: new ones carry their bytes, replayed ones
 * their decoded command. */
interface Ready {
  index: number;
  time: number;
  data: Uint8Array | null;
  cmd: Command | null;
}

export interface LocalLogOptions {
  /** Node id recorded in serve-start. */
  node: number;
  settings: Settings;
  /** Wall clock in ms; injectable for tests. */
  clock?: () => number;
  /** Bound on proposed but not yet committed bytes; over it, accepting turns false. */
  pendingBytesMax?: number;
  /** Work committed in one turn at most, in entries, a connect counting CONNECT_COST (default
   * ENTRIES_PER_TURN_MAX); a turn commits at least one entry. */
  entriesPerTurnMax?: number;
  /** --data-dir: an entry commits only once its batch is on disk. Absent: in memory. */
  durable?: DurableOptions;
}

/** Entries handed to the listener in one event-loop turn. Applying and executing an entry costs
 * up to about 30 µs (a disconnect that ends a session and closes its socket), so 1,024 keep a turn
 * well under E/10 = 50 ms (docs/design.md "Performance principles"); measured: 10,000 clients
 * disconnecting at once were one 10,000-entry turn and stalled the event loop for 340 ms. */
export const ENTRIES_PER_TURN_MAX = 1024;

/** What a connect counts against ENTRIES_PER_TURN_MAX: applying it may resume a session and send
 * its CONNACK with up to maxInflight queued messages, each encoded and written, several times the
 * cost of other entries. Measured with bench/disconnect-storm.ts (10,000 clients reconnecting, 5
 * messages queued per persistent session): 1,024 connects were one commit turn. */
export const CONNECT_COST = 8;

/** What an entry counts against a commit turn's budget: a `publishes` as many as it carries. */
export function entryCost(cmd: Command): number {
  if (cmd.t === 'publishes') return cmd.pubs.length;
  return cmd.t === 'connect' ? CONNECT_COST : 1;
}

/** The single-node log: commits what was proposed in one event-loop turn in the next turn, at
 * most entriesPerTurnMax entries per turn and the rest in the turns after, in order. Time is
 * max(last, clock()) per commit turn, so it never decreases. It commits serve-start at start, so
 * one node serves through the same code path as a cluster leader.
 *
 * Durable (with a WAL): an entry commits only once it is on disk, so no effect of it (an ack, a
 * CONNACK, a delivery) leaves before. Group commit: what was proposed in one turn, or while the
 * previous batch was being written and synced, is one batch, one write and one fdatasync; once
 * synced its entries are handed to the listener, entriesPerTurnMax per turn as above. Replayed
 * entries go first, before this process's serve-start, to a listener that does not serve yet. In
 * memory the code path is the one above, untouched. */
export class LocalLog implements BrokerLog {
  private readonly node: number;
  private settings: Settings;
  private readonly clock: () => number;
  private readonly pendingBytesMax: number;
  private listener: LogListener | null = null;
  /** Encoded commands not yet committed, in proposal order. */
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
  private readonly entriesPerTurnMax: number;
  private readonly flushBound: () => void;
  private flushScheduled = false;
  private readonly durable: DurableOptions | null;
  /** A batch is being written and synced. */
  private writing = false;
  /** On disk, not yet committed to the listener; `readyHead` is the next. */
  private ready: Ready[] = [];
  private readyHead = 0;
  private deliverScheduled = false;
  private readonly deliverBound = (): void => this.deliver();
  /** Index of this process's serve-start: serve-starts of replayed entries are history. */
  private firstOwnIndex = 1;
  private snapshots: SnapshotSource | null = null;
  private wal: Wal | null = null;
  private lastIndex = 0;
  private lastTime = 0;
  private period = 0;
  private stopped = false;
  private blocked = false;

  constructor(opts: LocalLogOptions) {
    this.node = opts.node;
    this.settings = opts.settings;
    this.clock = opts.clock ?? Date.now;
    this.pendingBytesMax = opts.pendingBytesMax ?? 64 * 1024 * 1024;
    this.entriesPerTurnMax = Math.max(1, opts.entriesPerTurnMax ?? ENTRIES_PER_TURN_MAX);
    this.durable = opts.durable ?? null;
    this.flushBound = this.durable === null ? () => this.flush() : () => this.flushDurable();
  }

  /** Durable mode: the WAL and what was read back from it, before start(). */
  recovered(r: Recovered): void {
    if (this.durable === null || this.listener !== null || this.wal !== null)
      throw new Error('LocalLog.recovered() is for a durable log before start');
    this.wal = r.wal;
    this.lastIndex = r.lastIndex;
    this.lastTime = r.lastTime;
    this.firstOwnIndex = r.lastIndex + 1;
    this.ready = r.replay.map((e) => ({ index: e.index, time: e.time, data: null, cmd: e.cmd }));
  }

  /** A snapshot is being written (durable mode). */
  get snapshotRunning(): boolean {
    return this.wal?.snapshotRunning ?? false;
  }

  /** Where snapshots of the state come from (the broker node above); durable mode only. */
  attachSnapshots(source: SnapshotSource): void {
    this.snapshots = source;
  }

  get accepting(): boolean {
    return !this.blocked;
  }

  get serving(): boolean {
    return this.period !== 0;
  }

  /** The period of a single node ends only at stop(): nothing to schedule. */
  checkServing(): boolean {
    return this.serving;
  }

  get servePeriod(): number {
    return this.period;
  }

  now(): number {
    return Math.max(this.lastTime, Math.floor(this.clock()));
  }

  start(listener: LogListener): void {
    if (this.listener !== null) throw new Error('LocalLog already started');
    if (this.durable !== null && this.wal === null) throw new Error('a durable LocalLog starts after recovered()');
    this.listener = listener;
    if (this.ready.length > 0) this.scheduleDeliver();
    this.enqueue({ t: 'serve-start', node: this.node, settings: this.settings });
  }

  updateSettings(settings: Settings): void {
    this.settings = settings;
  }

  propose(cmd: Command): void {
    if (!this.serving || this.stopped) return;
    this.enqueue(cmd);
  }

  async stop(): Promise<void> {
    const clean = !this.stopped && this.wal !== null && this.listener !== null;
    this.stopped = true;
    this.period = 0;
    this.pending = [];
    this.pendingBytes = 0;
    // The batch being written finishes (it is replayed at the next start); nothing more is.
    if (clean) await this.snapshotAtStop();
    await this.wal?.close();
  }

  /** A clean stop writes a snapshot at the last applied entry, so the next start replays little
   * (docs/operations.md "A single node's data directory"); a background snapshot being written finishes first. A
   * stop cut short by --shutdown-timeout-ms leaves at worst a temporary file, removed at start. */
  private async snapshotAtStop(): Promise<void> {
    const wal = this.wal as Wal;
    await wal.snapshotSettled();
    const cursor = this.snapshots?.() ?? null;
    if (cursor === null || cursor.index <= wal.lastSnapshot.index) return;
    try {
      const stats = await wal.writeSnapshot(cursor.index, cursor);
      if (stats !== null) this.durable?.onSnapshot?.(stats);
    } catch (err) {
      (this.durable as DurableOptions).onFatal(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private enqueue(cmd: Command): void {
    const bytes = encodeCommand(cmd);
    this.pending.push(bytes);
    this.pendingBytes += bytes.length;
    if (this.pendingBytes > this.pendingBytesMax) this.blocked = true;
    this.scheduleFlush();
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flushBound);
  }

  private flush(): void {
    this.flushScheduled = false;
    const listener = this.listener;
    const pending = this.pending;
    if (this.stopped || listener === null || pending.length === 0) return;
    // One time per commit turn: every entry of this slice carries the same stamp.
    const time = this.now();
    this.lastTime = time;
    const entries: Entry[] = [];
    let serveStart = 0;
    let cost = 0;
    let count = 0;
    while (count < pending.length) {
      const bytes = pending[count] as Uint8Array;
      const cmd = decodeCommand(bytes);
      cost += entryCost(cmd);
      if (cost > this.entriesPerTurnMax && count > 0) break;
      count++;
      this.pendingBytes -= bytes.length;
      const index = ++this.lastIndex;
      if (cmd.t === 'serve-start') serveStart = index;
      entries.push({ index, time, cmd });
    }
    // Proposals made by the listener below go after the ones left for the next turn.
    this.pending = count === pending.length ? [] : pending.slice(count);
    if (this.pending.length > 0) this.scheduleFlush();
    this.commit(listener, entries, serveStart);
  }

  /** Hands a turn's committed entries over; serving starts at this node's serve-start among them,
   * and reads resume once what waits is back under its bound. */
  private commit(listener: LogListener, entries: Entry[], serveStart: number): void {
    listener.committed(entries);
    if (serveStart !== 0 && !this.stopped) {
      this.period = serveStart;
      listener.serving(true, serveStart);
    }
    if (this.blocked && this.pendingBytes <= this.pendingBytesMax) {
      this.blocked = false;
      listener.drain();
    }
  }

  // ---- durable mode ----

  /** Writes everything proposed so far as one batch, unless a batch is being written: then what
   * arrives meanwhile waits, and goes as the next batch once that one is synced. */
  private flushDurable(): void {
    this.flushScheduled = false;
    const wal = this.wal as Wal;
    if (this.stopped || this.listener === null || this.writing || this.pending.length === 0) return;
    const time = this.now();
    this.lastTime = time;
    const pending = this.pending;
    this.pending = [];
    const batch: WalEntry[] = new Array(pending.length);
    for (let i = 0; i < pending.length; i++) batch[i] = { index: ++this.lastIndex, time, data: pending[i] as Uint8Array };
    this.writing = true;
    wal.append(batch).then(
      () => {
        this.writing = false;
        if (this.stopped) return;
        for (const e of batch) this.ready.push({ index: e.index, time: e.time, data: e.data, cmd: null });
        this.scheduleDeliver();
        this.flushDurable();
      },
      (err: unknown) => this.fatal(err),
    );
  }

  private scheduleDeliver(): void {
    if (this.deliverScheduled) return;
    this.deliverScheduled = true;
    setImmediate(this.deliverBound);
  }

  /** Commits entries that are on disk, entriesPerTurnMax per turn, in order. */
  private deliver(): void {
    this.deliverScheduled = false;
    const listener = this.listener;
    if (this.stopped || listener === null || this.readyHead >= this.ready.length) return;
    const entries: Entry[] = [];
    let serveStart = 0;
    let cost = 0;
    while (this.readyHead < this.ready.length) {
      const r = this.ready[this.readyHead] as Ready;
      r.cmd ??= decodeCommand(r.data as Uint8Array);
      cost += entryCost(r.cmd);
      if (cost > this.entriesPerTurnMax && entries.length > 0) break;
      this.readyHead++;
      if (r.data !== null) this.pendingBytes -= r.data.length;
      if (r.cmd.t === 'serve-start' && r.index >= this.firstOwnIndex) serveStart = r.index;
      entries.push({ index: r.index, time: r.time, cmd: r.cmd });
    }
    if (this.readyHead === this.ready.length) {
      this.ready = [];
      this.readyHead = 0;
    } else {
      // Dropped once the delivered part is the larger half, so each entry is copied O(1) times:
      // a replay of millions delivers a slice per turn, and copying the rest every few turns
      // made it quadratic.
      if (this.readyHead > 4096 && this.readyHead * 2 > this.ready.length) {
        this.ready = this.ready.slice(this.readyHead);
        this.readyHead = 0;
      }
      this.scheduleDeliver();
    }
    this.commit(listener, entries, serveStart);
    this.maybeSnapshot();
  }

  /** Starts a snapshot in the background once the log grew enough since the last one. */
  private maybeSnapshot(): void {
    const wal = this.wal as Wal;
    if (this.period === 0 || this.stopped || this.snapshots === null || !wal.snapshotDue) return;
    const cursor = this.snapshots();
    if (cursor === null) return;
    wal.writeSnapshot(cursor.index, cursor).then(
      (stats) => {
        if (stats !== null) this.durable?.onSnapshot?.(stats);
      },
      (err: unknown) => this.fatal(err),
    );
  }

  private fatal(err: unknown): void {
    if (this.stopped) return;
    this.stopped = true;
    this.period = 0;
    this.pending = [];
    (this.durable as DurableOptions).onFatal(err instanceof Error ? err : new Error(String(err)));
  }
}
