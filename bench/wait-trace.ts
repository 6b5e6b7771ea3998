// Where a replicated message waits: a module each broker loads with
// `NODE_OPTIONS="--import ./build/bench/wait-trace.js"` and RAFTMQ_WAIT_TRACE_DIR set. It records,
// with a wall-clock time in ms, every socket write and read (local and remote port, bytes), the raft
// driver's proposals, the batches it hands to the core and the entries it applies, and every GC
// pause; at exit it writes them to DIR/trace-PID.bin (five float64 per event) with the main
// thread's context switches in DIR/trace-PID.txt. `node build/bench/wait-report.js DIR` reads them.
// A diagnostic only: it wraps private methods of RaftDriver, so it follows that class's shape.
import { readFileSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { join } from 'node:path';
import { PerformanceObserver, performance } from 'node:perf_hooks';
import { RaftDriver } from '../raft/driver/driver.js';

export const EV_WRITE = 1;
export const EV_READ = 2;
export const EV_PROPOSE = 3;
export const EV_BATCH = 4;
export const EV_APPLY = 5;
export const EV_GC = 6;
/** Float64 fields per event: time, kind, then three of the kind's own (see record's callers). */
export const FIELDS = 5;
/** Events kept: a 10 s window at 5,000 msg/s makes about 600,000 on the leader. */
const EVENTS_MAX = 4_000_000;

const dir = process.env.RAFTMQ_WAIT_TRACE_DIR;
if (dir !== undefined && dir !== '' && (process.argv[1] ?? '').endsWith('cli.js')) install(dir);

function install(out: string): void {
  const ev = new Float64Array(EVENTS_MAX * FIELDS);
  let n = 0;
  const origin = performance.timeOrigin;
  const record = (kind: number, a: number, b: number, c: number, at = origin + performance.now()): void => {
    if (n >= EVENTS_MAX) return;
    const o = n++ * FIELDS;
    ev[o] = at;
    ev[o + 1] = kind;
    ev[o + 2] = a;
    ev[o + 3] = b;
    ev[o + 4] = c;
  };
  type Writer = (this: net.Socket, writev: boolean, data: unknown, encoding: unknown, cb: unknown) => unknown;
  const sock = net.Socket.prototype as unknown as {
    _writeGeneric: Writer;
    push: (this: net.Socket, chunk: unknown, enc?: unknown) => boolean;
  };
  const write = sock._writeGeneric;
  sock._writeGeneric = function (writev, data, encoding, cb) {
    let bytes = 0;
    if (writev) for (const d of data as { chunk?: Uint8Array }[]) bytes += (d.chunk ?? (d as Uint8Array)).length;
    else bytes = (data as Uint8Array).length;
    record(EV_WRITE, this.localPort ?? 0, this.remotePort ?? 0, bytes);
    return write.call(this, writev, data, encoding, cb);
  };
  const push = sock.push;
  sock.push = function (chunk, enc) {
    if (chunk !== null && chunk !== undefined) record(EV_READ, this.localPort ?? 0, this.remotePort ?? 0, (chunk as Uint8Array).length);
    return push.call(this, chunk, enc);
  };
  type Ticket = { index: number };
  const d = RaftDriver.prototype as unknown as {
    propose: (this: unknown, data: Uint8Array) => unknown;
    proposeBatch: (this: { pendingTickets: Ticket[]; holdDue: boolean }) => void;
    deliver: (this: unknown, entries: readonly { index: number }[]) => void;
  };
  const propose = d.propose;
  d.propose = function (data) {
    const r = propose.call(this, data);
    if (typeof (r as Ticket).index === 'number') record(EV_PROPOSE, (r as Ticket).index, data.length, 0);
    return r;
  };
  const batch = d.proposeBatch;
  d.proposeBatch = function () {
    const t = this.pendingTickets;
    if (t.length > 0) record(EV_BATCH, (t[0] as Ticket).index, (t[t.length - 1] as Ticket).index, this.holdDue ? 1 : 0);
    batch.call(this);
  };
  const deliver = d.deliver;
  d.deliver = function (entries) {
    if (entries.length > 0) record(EV_APPLY, (entries[0] as Ticket).index, (entries[entries.length - 1] as Ticket).index, 0);
    deliver.call(this, entries);
  };
  // A pause is recorded at its start: [start, GC, duration ms, kind, 0].
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      record(EV_GC, e.duration, (e as { detail?: { kind?: number } }).detail?.kind ?? 0, 0, origin + e.startTime);
    }
  }).observe({ entryTypes: ['gc'] });
  process.on('exit', () => {
    writeFileSync(join(out, `trace-${process.pid}.bin`), Buffer.from(ev.buffer, 0, n * FIELDS * 8));
    const status = readFileSync('/proc/self/status', 'utf8');
    writeFileSync(
      join(out, `trace-${process.pid}.txt`),
      `${status
        .split('\n')
        .filter((l) => l.includes('ctxt_switches'))
        .join('\n')}\n`,
    );
  });
}
