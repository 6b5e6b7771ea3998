// Free space on the file system of --data-dir (docs/operations.md "Disk trouble"). Below a bound
// the node refuses what would make its state grow (new QoS 1/2 messages and new persistent
// sessions, through the StorageGate that Connection consults) instead of running the disk full:
// acknowledgements, keep-alive ticks and session ends still write entries, and freeing space
// needs a snapshot, which needs room for itself. Free space is read at a fixed cadence, never per
// message; the refusal ends by itself once space returns.
import { readFile, statfs } from 'node:fs/promises';
import type { Logger } from 'pino';

/** What Connection consults before admitting a PUBLISH or CONNECT that would grow the state. */
export interface StorageGate {
  /** True while the data directory's free space is below its bound. */
  readonly low: boolean;
}

/** The gate of a node without --data-dir: never low. */
export const OPEN_STORAGE_GATE: StorageGate = { low: false };

/** Free space is read this often (ms). At 100,000 QoS 1 messages/s of 100 bytes, a second is about
 * 20 MB of log: well inside the 64 MiB floor. */
export const DISK_CHECK_INTERVAL_MS = 1_000;
/** The least free space the default bound keeps, whatever the snapshot size. */
export const MIN_FREE_FLOOR_BYTES = 64 * 1024 * 1024;
/** For tests only: a file holding a decimal byte count that replaces statfs's free space, so a
 * test reaches the low-space state without filling a disk (a tiny file system needs root). */
export const TEST_FREE_BYTES_ENV = 'RAFTMQ_TEST_FREE_BYTES_FILE';

/** Bytes available to this (unprivileged) process on the file system holding `path`. */
export type FreeSpaceProbe = () => Promise<number>;

export function statfsProbe(path: string): FreeSpaceProbe {
  return async () => {
    const s = await statfs(path);
    return s.bavail * s.bsize;
  };
}

/** The probe of TEST_FREE_BYTES_ENV: the number in `file`, read at every check. */
export function fileProbe(file: string): FreeSpaceProbe {
  return async () => {
    const text = (await readFile(file, 'utf8')).trim();
    const n = Number(text);
    if (text === '' || !Number.isSafeInteger(n) || n < 0)
      throw new Error(`${TEST_FREE_BYTES_ENV} ${file}: not a byte count: ${JSON.stringify(text)}`);
    return n;
  };
}

/** The bound: --data-dir-min-free-bytes when set (non-zero), else twice the last snapshot's size
 * with a floor of MIN_FREE_FLOOR_BYTES. */
export function minFreeBytes(configured: number, lastSnapshotBytes: number): number {
  return configured > 0 ? configured : Math.max(MIN_FREE_FLOOR_BYTES, 2 * lastSnapshotBytes);
}

export interface DiskWatchOptions {
  dir: string;
  probe: FreeSpaceProbe;
  /** --data-dir-min-free-bytes; 0: the default bound (minFreeBytes). */
  configuredMinFreeBytes: number;
  /** Image bytes of the newest snapshot on disk. */
  lastSnapshotBytes: () => number;
  logger: Logger;
  intervalMs?: number;
}

export class DiskWatch implements StorageGate {
  low = false;
  /** The last reading; null before the first or after a failed one. */
  freeBytes: number | null = null;
  /** Times the node went low, ever. */
  lowEpisodes = 0;
  private readonly opts: DiskWatchOptions;
  private timer: NodeJS.Timeout | null = null;
  private checking = false;
  private probeFailed = false;

  constructor(opts: DiskWatchOptions) {
    this.opts = opts;
  }

  get minFreeBytes(): number {
    return minFreeBytes(this.opts.configuredMinFreeBytes, this.opts.lastSnapshotBytes());
  }

  /** Reads free space once now, then every interval until stop(). */
  async start(): Promise<void> {
    await this.check();
    this.timer = setInterval(() => void this.check(), this.opts.intervalMs ?? DISK_CHECK_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
  }

  /** One reading, and the change of state it implies (a warning when the node goes low, an info
   * line when it resumes). A failed reading keeps the state it had, logged once per failure run. */
  async check(): Promise<void> {
    if (this.checking) return;
    this.checking = true;
    const log = this.opts.logger;
    try {
      let free: number;
      try {
        free = await this.opts.probe();
      } catch (err) {
        this.freeBytes = null;
        if (!this.probeFailed)
          log.warn({ dataDir: this.opts.dir, err: (err as Error).message }, 'cannot read the free space of the data directory');
        this.probeFailed = true;
        return;
      }
      this.probeFailed = false;
      this.freeBytes = free;
      const bound = this.minFreeBytes;
      if (!this.low && free < bound) {
        this.low = true;
        this.lowEpisodes++;
        log.warn(
          { dataDir: this.opts.dir, freeBytes: free, minFreeBytes: bound },
          'data directory low on space: new QoS 1/2 messages and new persistent sessions refused (quota exceeded) until space returns',
        );
      } else if (this.low && free >= bound) {
        this.low = false;
        log.info(
          { dataDir: this.opts.dir, freeBytes: free, minFreeBytes: bound },
          'data directory space returned: QoS 1/2 messages and persistent sessions accepted again',
        );
      }
    } finally {
      this.checking = false;
    }
  }
}
