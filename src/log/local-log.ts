import type { Command, Entry, Settings } from '../broker/commands.js';
import type { BrokerLog, LogListener } from './broker-log.js';
import { decodeCommand, encodeCommand } from './command-codec.js';

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

/** What an entry counts against a commit turn's budget. */
export function entryCost(cmd: Command): number {
  return cmd.t === 'connect' ? CONNECT_COST : 1;
}

/** The single-node log: commits what was proposed in one event-loop turn in the next turn, at
 * most entriesPerTurnMax entries per turn and the rest in the turns after, in order. Time is
 * max(last, clock()) per commit turn, so it never decreases. It commits serve-start at start, so
 * one node serves through the same code path as a cluster leader. */
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
  private readonly flushBound = (): void => this.flush();
  private flushScheduled = false;
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
  }

  get accepting(): boolean {
    return !this.blocked;
  }

  get serving(): boolean {
    return this.period !== 0;
  }

  get servePeriod(): number {
    return this.period;
  }

  now(): number {
    return Math.max(this.lastTime, Math.floor(this.clock()));
  }

  start(listener: LogListener): void {
    if (this.listener !== null) throw new Error('LocalLog already started');
    this.listener = listener;
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
    this.stopped = true;
    this.period = 0;
    this.pending = [];
    this.pendingBytes = 0;
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
}
