import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { BoundedLogWriter, type LogSink } from './log-writer.js';

/** A sink whose writes complete only when the test says so. */
class HeldSink implements LogSink {
  readonly chunks: string[] = [];
  private pending: ((err: NodeJS.ErrnoException | null) => void)[] = [];
  write(chunk: string, done: (err: NodeJS.ErrnoException | null) => void): void {
    this.chunks.push(chunk);
    this.pending.push(done);
  }
  get waiting(): number {
    return this.pending.length;
  }
  complete(err: NodeJS.ErrnoException | null = null): void {
    const done = this.pending.shift();
    assert.ok(done !== undefined, 'a write in flight');
    done(err);
  }
}

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));
const errno = (code: string): NodeJS.ErrnoException => Object.assign(new Error(code), { code });

describe('BoundedLogWriter', { timeout: 30_000 }, () => {
  it('writes the lines of a turn as one chunk, in order, one write in flight', async () => {
    const sink = new HeldSink();
    const w = new BoundedLogWriter({ sink });
    w.write('a\n');
    w.write('b\n');
    await turn();
    w.write('c\n');
    await turn();
    assert.deepEqual(sink.chunks, ['a\nb\n'], 'the second chunk waits for the first');
    assert.equal(sink.waiting, 1);
    sink.complete();
    assert.deepEqual(sink.chunks, ['a\nb\n', 'c\n']);
    sink.complete();
    assert.equal(w.written, 3);
    assert.equal(w.pendingBytes, 0);
  });

  it('drops and counts lines past the bound while the destination does not take them', async () => {
    const sink = new HeldSink();
    const w = new BoundedLogWriter({ sink, maxQueuedBytes: 100 });
    const line = `${'x'.repeat(9)}\n`;
    for (let i = 0; i < 50; i++) assert.equal(typeof w.write(line), 'boolean');
    await turn();
    assert.equal(w.pendingBytes, 100, 'ten lines fit');
    assert.equal(w.dropped, 40);
    assert.equal(await w.drain(50), false, 'drain gives up at its timeout');
  });

  it('reports the lines dropped once the destination has caught up', async () => {
    const sink = new HeldSink();
    const reports: number[] = [];
    const w = new BoundedLogWriter({ sink, maxQueuedBytes: 20, onCaughtUp: (n) => reports.push(n) });
    for (let i = 0; i < 5; i++) w.write('123456789\n');
    await turn();
    sink.complete();
    assert.deepEqual(reports, [3]);
    w.write('again\n');
    await turn();
    sink.complete();
    assert.deepEqual(reports, [3], 'no report without new drops');
  });

  it('after EPIPE drops every line, counted, and drain resolves at once', async () => {
    const sink = new HeldSink();
    const w = new BoundedLogWriter({ sink });
    w.write('a\n');
    await turn();
    w.write('b\n');
    sink.complete(errno('EPIPE'));
    assert.equal(w.failure, 'EPIPE');
    assert.equal(w.dropped, 2, 'the chunk in flight and the queued line');
    w.write('c\n');
    assert.equal(w.dropped, 3);
    assert.equal(await w.drain(10_000), false);
    assert.equal(sink.chunks.length, 1, 'nothing written after the failure');
  });

  it('a full disk (ENOSPC) drops that write, counted, and the next lines are tried', async () => {
    const sink = new HeldSink();
    const reports: number[] = [];
    const w = new BoundedLogWriter({ sink, onCaughtUp: (n) => reports.push(n) });
    w.write('a\n');
    w.write('b\n');
    await turn();
    sink.complete(errno('ENOSPC'));
    assert.equal(w.failure, null);
    assert.equal(w.dropped, 2);
    w.write('c\n');
    await turn();
    sink.complete();
    assert.deepEqual(sink.chunks, ['a\nb\n', 'c\n']);
    assert.equal(w.written, 1);
    assert.deepEqual(reports, [2], 'reported once the disk takes lines again');
  });

  it('tries a chunk refused with EAGAIN again', async () => {
    const sink = new HeldSink();
    const w = new BoundedLogWriter({ sink, retryMs: 1 });
    w.write('a\n');
    await turn();
    sink.complete(errno('EAGAIN'));
    const deadline = Date.now() + 5_000;
    while (sink.waiting === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 2));
    sink.complete();
    assert.deepEqual(sink.chunks, ['a\n', 'a\n']);
    assert.equal(w.written, 1);
    assert.equal(await w.drain(1_000), true);
  });

  it('a sink that throws counts as failed, never as an exception to the caller', async () => {
    const w = new BoundedLogWriter({
      sink: {
        write() {
          throw errno('EBADF');
        },
      },
    });
    w.write('a\n');
    await turn();
    assert.equal(w.failure, 'EBADF');
    assert.equal(w.dropped, 1);
  });

  it('without a destination counts every line as dropped', () => {
    const w = new BoundedLogWriter({ sink: null });
    w.write('a\n');
    assert.equal(w.dropped, 1);
  });

  it('never holds more than the bound; every line is written, dropped or pending', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.oneof(fc.integer({ min: 1, max: 40 }), fc.constant(0)), { maxLength: 60 }),
        fc.integer({ min: 1, max: 120 }),
        async (steps, max) => {
          const sink = new HeldSink();
          const w = new BoundedLogWriter({ sink, maxQueuedBytes: max, maxChunkBytes: 30 });
          let lines = 0;
          for (const s of steps) {
            // 0: the destination takes one chunk; n: a line of n bytes.
            if (s === 0) {
              if (sink.waiting > 0) sink.complete();
            } else {
              w.write(`${'y'.repeat(s - 1)}\n`);
              lines++;
            }
            assert.ok(w.pendingBytes <= max, `${w.pendingBytes} <= ${max}`);
            await turn();
          }
          while (sink.waiting > 0) sink.complete();
          assert.equal(w.written + w.dropped, lines);
        },
      ),
      { numRuns: 100 },
    );
  });
});
