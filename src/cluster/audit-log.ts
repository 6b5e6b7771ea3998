// The audit stream (docs/operations.md "The audit stream"): with --audit-log FILE, every ack, every delivery write
// and every lease renewal becomes one JSON line, so an outside checker can prove that serving
// periods never overlapped and that nothing went out beyond a lease (jepsen-like-tests/).
//
// Clock: `mono` and `leaseEnd` are host-wide monotonic milliseconds, comparable between processes
// of one host. Node's process.hrtime reads libuv's uv_hrtime, which is clock_gettime(CLOCK_MONOTONIC)
// on Linux: one clock per host (per boot), unlike performance.now(), which counts from each
// process's own start. performance.now() is that same clock minus the process's time origin, so the
// driver's lease end (a performance.now() value) converts with one offset taken at load.
//
// Writing: records are buffered and written asynchronously, at most one write per event-loop turn
// and one in flight, so a slow disk never blocks the loop. The buffer is bounded; records beyond it
// are dropped and counted, and the count is written as an `audit-dropped` record once the disk keeps
// up again, so a checker knows the stream has a hole.
import { closeSync, openSync, write, writeSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { OutPacket } from '../broker/commands.js';
import { CONFIG_ERROR, ConfigError } from '../errors.js';
import type { AuditSink } from '../server/audit-sink.js';

/** The lease as the log sees it now. */
export interface LeaseView {
  readonly currentTerm: number;
  /** Monotonic ms of performance.now() at which the lease ends; 0 without one. */
  leaseUntil(): number;
}

export interface AuditLogOptions {
  file: string;
  node: number;
  lease: LeaseView;
  /** Records buffered while a write is in flight beyond which new ones are dropped. */
  bufferedRecordsMax?: number;
  /** Called once per failed write (the stream goes on, counting what it lost). */
  onError?: (err: Error) => void;
}

export const AUDIT_BUFFERED_RECORDS_MAX_DEFAULT = 100_000;

/** performance.now() + this = host CLOCK_MONOTONIC in ms. */
const perfToHostMs = Number(process.hrtime.bigint()) / 1e6 - performance.now();

/** Host-wide monotonic ms (CLOCK_MONOTONIC on Linux). */
export function hostMonotonicMs(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

/** A performance.now() value of this process on the host-wide monotonic clock. */
export function perfToHost(perfMs: number): number {
  return perfMs + perfToHostMs;
}

export class AuditLog implements AuditSink {
  readonly file: string;
  private readonly opts: AuditLogOptions;
  private readonly max: number;
  private fd: number;
  private lines: string[] = [];
  private writing = false;
  private scheduled = false;
  private closed = false;
  private idleWaiters: (() => void)[] = [];
  /** Records dropped since the last `audit-dropped` record, and in all. */
  private droppedPending = 0;
  dropped = 0;
  written = 0;

  /** Opens FILE for appending; throws the open error with the flag and file named. */
  constructor(opts: AuditLogOptions) {
    this.opts = opts;
    this.file = opts.file;
    this.max = opts.bufferedRecordsMax ?? AUDIT_BUFFERED_RECORDS_MAX_DEFAULT;
    try {
      this.fd = openSync(opts.file, 'a');
    } catch (err) {
      throw new ConfigError(CONFIG_ERROR.UNWRITABLE_FILE, `--audit-log ${opts.file}: cannot open for appending: ${(err as Error).message}`);
    }
  }

  packet(p: OutPacket, clientId: string | null): void {
    const pid = p.type === 'connack' ? null : (p.pid ?? null);
    const extra = p.type === 'publish' ? `,"qos":${p.qos},"dup":${p.dup}` : p.type === 'connack' ? `,"code":${p.code}` : '';
    this.record(p.type, `,"clientId":${JSON.stringify(clientId)},"pid":${pid}${extra}`);
  }

  /** A renewal reported by the driver: the lease now runs to `leaseEnd` (performance.now() ms). */
  leaseRenewed(leaseEnd: number, term: number): void {
    this.push(`{"evt":"lease","mono":${hostMonotonicMs()},"term":${term},"leaseEnd":${perfToHost(leaseEnd)},"node":${this.opts.node}}`);
  }

  /** A leader handing over gave its lease up before TimeoutNow (thesis §3.10): no write of this
   * process is covered by a lease from here until a later renewal. */
  leaseReleased(): void {
    this.record('lease-released', '');
  }

  /** Serving began (period > 0) or ended (period 0). */
  serving(period: number): void {
    this.record(period === 0 ? 'serve-end' : 'serve-start', `,"period":${period}`);
  }

  private record(evt: string, rest: string): void {
    const l = this.opts.lease;
    const until = l.leaseUntil();
    const leaseEnd = until === 0 ? null : perfToHost(until);
    this.push(
      `{"evt":"${evt}","mono":${hostMonotonicMs()},"term":${l.currentTerm},"leaseEnd":${leaseEnd},"node":${this.opts.node}${rest}}`,
    );
  }

  private push(line: string): void {
    if (this.closed) return;
    if (this.lines.length >= this.max) {
      this.dropped++;
      this.droppedPending++;
      return;
    }
    this.lines.push(line);
    if (!this.scheduled && !this.writing) {
      this.scheduled = true;
      setImmediate(this.flush);
    }
  }

  private readonly flush = (): void => {
    this.scheduled = false;
    if (this.writing || this.lines.length === 0 || this.closed) {
      this.notifyIdle();
      return;
    }
    const buf = Buffer.from(this.takeText(), 'utf8');
    this.writing = true;
    write(this.fd, buf, 0, buf.length, null, (err) => {
      this.writing = false;
      if (err !== null) {
        this.opts.onError?.(err);
      } else {
        this.written += buf.length;
      }
      if (this.lines.length > 0 && !this.closed) {
        this.scheduled = true;
        setImmediate(this.flush);
      } else {
        this.notifyIdle();
      }
    });
  };

  private takeText(): string {
    if (this.droppedPending > 0) {
      this.lines.push(`{"evt":"audit-dropped","mono":${hostMonotonicMs()},"node":${this.opts.node},"count":${this.droppedPending}}`);
      this.droppedPending = 0;
    }
    const text = `${this.lines.join('\n')}\n`;
    this.lines = [];
    return text;
  }

  private notifyIdle(): void {
    if (this.writing || this.scheduled) return;
    const w = this.idleWaiters;
    this.idleWaiters = [];
    for (const fn of w) fn();
  }

  /** Waits for the write in flight, writes what is buffered, and closes the file. */
  async close(): Promise<void> {
    if (this.closed) return;
    if (this.writing) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    this.closed = true;
    try {
      if (this.lines.length > 0 || this.droppedPending > 0) writeSync(this.fd, this.takeText());
    } catch (err) {
      this.opts.onError?.(err as Error);
    }
    closeSync(this.fd);
  }
}
