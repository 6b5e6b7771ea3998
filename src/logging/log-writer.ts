// The log destination of the raftmq command: lines are queued in memory, at most `maxQueuedBytes`
// of them, and written one chunk at a time without ever blocking the event loop. A destination
// that does not keep up (a pipe nobody reads, a paused pager, a full disk) makes new lines drop,
// counted; one that is gone (EPIPE) drops every later line, counted. A stalled event loop would
// lose a cluster leader its lease, and a blocked write would keep a stop from ending, so neither
// may come from logging.
//
// Why not pino's default or pino.destination({ sync: false }) (sonic-boom): the default writes with
// writeSync, which blocks the whole loop on a full pipe (stdio pipes are blocking in a child), and
// sleeps and retries on EAGAIN; the asynchronous mode writes from libuv's thread pool, where a
// blocking write holds a thread the process joins at exit, and pino flushes it with writeSync at
// exit. Here a pipe, a socket or a terminal is written through libuv's non-blocking stream (the
// loop polls it; no thread, no syscall that waits), a file through fs.write, and nothing runs at
// exit: what has not left by the deadline is dropped with the process.
import { fstatSync, write as fsWrite } from 'node:fs';
import { isatty } from 'node:tty';

/** Where the chunks go. At most one write is in flight; `done` comes once the chunk left the
 * process or failed. */
export interface LogSink {
  write(chunk: string, done: (err: NodeJS.ErrnoException | null) => void): void;
}

export interface LogWriterOptions {
  sink: LogSink | null;
  /** Queued and in-flight bytes above which a new line is dropped. */
  maxQueuedBytes?: number;
  /** Bytes joined into one write. */
  maxChunkBytes?: number;
  /** Wait before a chunk refused with EAGAIN is tried again (ms). */
  retryMs?: number;
  /** Lines were dropped and the destination has caught up again: told the count since the last call. */
  onCaughtUp?: (dropped: number) => void;
}

export const LOG_QUEUE_BYTES_DEFAULT = 1024 * 1024;
/** Errors of a destination that may take lines again later; any other error ends it. */
const NO_ROOM = new Set(['ENOSPC', 'EDQUOT']);
const CHUNK_BYTES_DEFAULT = 64 * 1024;
const RETRY_MS_DEFAULT = 20;

export class BoundedLogWriter {
  /** Lines dropped since the start: the queue was full, or the destination is gone. */
  dropped = 0;
  /** Lines handed to the destination. */
  written = 0;
  /** The destination failed for good (EPIPE, EBADF, ...): every later line is dropped. A full
   * disk (ENOSPC) drops the lines of the failed write and tries the next ones. */
  failure: string | null = null;
  private readonly sink: LogSink | null;
  private readonly maxQueued: number;
  private readonly maxChunk: number;
  private readonly retryMs: number;
  private readonly onCaughtUp: ((dropped: number) => void) | undefined;
  private queue: string[] = [];
  private queueBytes: number[] = [];
  /** Bytes queued plus bytes in flight. */
  private bytes = 0;
  private inFlight = false;
  private scheduled: NodeJS.Immediate | NodeJS.Timeout | undefined;
  private droppedSinceReport = 0;
  private idleWaiters: (() => void)[] = [];

  constructor(o: LogWriterOptions) {
    this.sink = o.sink;
    this.maxQueued = o.maxQueuedBytes ?? LOG_QUEUE_BYTES_DEFAULT;
    this.maxChunk = o.maxChunkBytes ?? CHUNK_BYTES_DEFAULT;
    this.retryMs = o.retryMs ?? RETRY_MS_DEFAULT;
    this.onCaughtUp = o.onCaughtUp;
    if (this.sink === null) this.failure = 'no log destination';
  }

  /** pino's destination interface: one line, ending in a newline. Never blocks, never throws. */
  write(line: string): boolean {
    if (this.failure !== null) {
      this.dropped++;
      return false;
    }
    const n = Buffer.byteLength(line);
    if (this.bytes + n > this.maxQueued) {
      this.dropped++;
      this.droppedSinceReport++;
      return false;
    }
    this.queue.push(line);
    this.queueBytes.push(n);
    this.bytes += n;
    if (!this.inFlight && this.scheduled === undefined) this.scheduled = setImmediate(this.pump);
    return true;
  }

  /** Bytes queued or in flight. */
  get pendingBytes(): number {
    return this.bytes;
  }

  /** Resolves true once everything queued has left, false when `timeoutMs` passes first or the
   * destination failed; never waits longer. */
  drain(timeoutMs: number): Promise<boolean> {
    if (this.idle()) return Promise.resolve(this.failure === null);
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        this.idleWaiters = this.idleWaiters.filter((w) => w !== done);
        resolve(false);
      }, timeoutMs);
      const done = (): void => {
        clearTimeout(timer);
        resolve(this.failure === null);
      };
      this.idleWaiters.push(done);
    });
  }

  private idle(): boolean {
    return this.failure !== null || (this.bytes === 0 && !this.inFlight);
  }

  private readonly pump = (): void => {
    this.scheduled = undefined;
    if (this.inFlight || this.failure !== null || this.queue.length === 0 || this.sink === null) return;
    let take = 0;
    let size = 0;
    while (take < this.queue.length && (take === 0 || size + (this.queueBytes[take] as number) <= this.maxChunk)) {
      size += this.queueBytes[take] as number;
      take++;
    }
    const lines = this.queue.splice(0, take);
    this.queueBytes.splice(0, take);
    const chunk = lines.length === 1 ? (lines[0] as string) : lines.join('');
    this.inFlight = true;
    let called = false;
    try {
      this.sink.write(chunk, (err) => {
        if (called) return;
        called = true;
        this.settle(chunk, take, size, err);
      });
    } catch (err) {
      called = true;
      this.settle(chunk, take, size, err as NodeJS.ErrnoException);
    }
  };

  private settle(chunk: string, lines: number, size: number, err: NodeJS.ErrnoException | null): void {
    this.inFlight = false;
    if (err !== null && (err.code === 'EAGAIN' || err.code === 'EWOULDBLOCK')) {
      // Not taken yet: put back in front and try again shortly, new lines keep dropping meanwhile.
      this.queue.unshift(chunk);
      this.queueBytes.unshift(size);
      this.scheduled = setTimeout(this.pump, this.retryMs);
      this.scheduled.unref();
      return;
    }
    this.bytes -= size;
    if (err !== null && NO_ROOM.has(err.code ?? '')) {
      // A full disk may have room again later: these lines are lost, the next ones are tried.
      this.dropped += lines;
      this.droppedSinceReport += lines;
    } else if (err !== null) {
      this.fail(err, lines);
      return;
    } else this.written += lines;
    if (this.queue.length > 0) {
      this.pump();
      return;
    }
    const dropped = this.droppedSinceReport;
    this.droppedSinceReport = 0;
    if (dropped > 0) this.onCaughtUp?.(dropped);
    if (this.idle()) this.wakeIdle();
  }

  private fail(err: NodeJS.ErrnoException, lines: number): void {
    this.failure = err.code ?? err.message;
    this.dropped += lines + this.queue.length;
    this.queue = [];
    this.queueBytes = [];
    this.bytes = 0;
    this.wakeIdle();
  }

  private wakeIdle(): void {
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const w of waiters) w();
  }
}

/** A libuv stream (net.Socket of a pipe or socket, tty.WriteStream) as a sink. Its 'error' (EPIPE
 * when the reader went away) is taken here, so it never becomes an uncaught exception. */
export function streamSink(stream: NodeJS.WritableStream & { on(e: 'error', f: (err: Error) => void): unknown }): LogSink {
  stream.on('error', () => {});
  return {
    write(chunk, done) {
      stream.write(chunk, (err?: Error | null) => done((err ?? null) as NodeJS.ErrnoException | null));
    },
  };
}

/** A file or a character device such as /dev/null, through fs.write; a short write continues. */
export function fdSink(fd: number): LogSink {
  const writeFrom = (buf: Buffer, from: number, done: (err: NodeJS.ErrnoException | null) => void): void => {
    fsWrite(fd, buf, from, buf.length - from, null, (err, n) => {
      if (err !== null) done(err);
      else if (from + n < buf.length) writeFrom(buf, from + n, done);
      else done(null);
    });
  };
  return { write: (chunk, done) => writeFrom(Buffer.from(chunk), 0, done) };
}

/** The process's stdout as a sink that never blocks: a pipe or socket through process.stdout
 * (libuv opens it non-blocking); a terminal through process.stdout made non-blocking (Node makes
 * terminals blocking); a file through fs.write; null when fd 1 is not open. */
export function stdoutSink(): LogSink | null {
  let st: ReturnType<typeof fstatSync>;
  try {
    st = fstatSync(1);
  } catch {
    return null;
  }
  if (isatty(1)) {
    const out = process.stdout as NodeJS.WriteStream & { _handle?: { setBlocking?(on: boolean): number } };
    // Node sets terminals blocking so output does not interleave; a paused terminal (Ctrl-S) would
    // then stall the loop. Lines are whole here, so non-blocking costs nothing.
    out._handle?.setBlocking?.(false);
    return streamSink(out);
  }
  if (st.isFIFO() || st.isSocket()) return streamSink(process.stdout);
  return fdSink(1);
}
