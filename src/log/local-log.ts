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
}

/** The single-node log: commits everything proposed in one event-loop turn as one append in the
 * next turn. Time is max(last, clock()) per append, so it never decreases. It commits serve-start
 * at start, so one node serves through the same code path as a cluster leader. */
export class LocalLog implements BrokerLog {
  private readonly node: number;
  private readonly settings: Settings;
  private readonly clock: () => number;
  private readonly pendingBytesMax: number;
  private listener: LogListener | null = null;
  private pending: Uint8Array[] = [];
  private pendingBytes = 0;
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
    if (!this.flushScheduled) {
      this.flushScheduled = true;
      setImmediate(() => this.flush());
    }
  }

  private flush(): void {
    this.flushScheduled = false;
    const listener = this.listener;
    if (this.stopped || listener === null || this.pending.length === 0) return;
    const batch = this.pending;
    this.pending = [];
    this.pendingBytes = 0;
    // One time per append: every entry of this batch carries the same stamp.
    const time = this.now();
    this.lastTime = time;
    const entries: Entry[] = new Array(batch.length);
    let serveStart = 0;
    for (let i = 0; i < batch.length; i++) {
      const index = ++this.lastIndex;
      const cmd = decodeCommand(batch[i] as Uint8Array);
      if (cmd.t === 'serve-start') serveStart = index;
      entries[i] = { index, time, cmd };
    }
    listener.committed(entries);
    if (serveStart !== 0 && !this.stopped) {
      this.period = serveStart;
      listener.serving(true, serveStart);
    }
    if (this.blocked) {
      this.blocked = false;
      listener.drain();
    }
  }
}
