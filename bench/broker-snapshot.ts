// The cost of the broker's snapshot cursor, digest and restore for a state of N persistent sessions
// with Q queued QoS 1 messages each (100-byte payloads), and what an open cursor costs apply:
// - drain: the cursor read to its end at once (what a synchronous snapshot cost);
// - sliced: the cursor read the way raft/driver/snapshot-taker.ts reads it, chunks for at most
//   sliceMs per turn (E/20 = 25 ms by default), with the longest single pull and slice;
// - cow: `publishes` QoS 1 publishes, one per session, applied with no cursor and with a cursor
//   open and not yet read (each publish then takes its session's pre-image), in alternating rounds;
// - digestRun: the digest of a `check` as a node computes it (src/server/digest-runner.ts): the
//   cursor opened in the apply turn, then hashed DIGEST_SLICE_MS per turn while `publishes`
//   publishes keep being applied between turns, 100 per turn; the longest turn is what the event
//   loop stalls for, against digestMs for the one-go digest that apply used to compute.
//   node build/bench/broker-snapshot.js [sessions=10000] [queuedPerSession=10] [sliceMs=25] [publishes=10000]
import { performance } from 'node:perf_hooks';
import { Broker } from '../src/broker/broker.js';
import type { Command, Effect, Settings } from '../src/broker/commands.js';
import { DIGEST_CURSOR, DIGEST_SLICE_MS, DigestRunner, type RunStats } from '../src/server/digest-runner.js';

const sessions = Number(process.argv[2] ?? 10_000);
const queued = Number(process.argv[3] ?? 10);
const sliceMs = Number(process.argv[4] ?? 25);
const publishes = Number(process.argv[5] ?? 10_000);
const rounds = 3;
const settings: Settings = {
  maxQueuedMessages: 10_000,
  maxQueuedBytes: 1 << 26,
  maxInflight: 32,
  maxQos: 2,
  retainAvailable: true,
  maxPacketSize: 1 << 20,
  willGraceS: 30,
  acl: null,
  maxSubscriptions: 0,
  bridgeRules: [],
  bridgeOutboxMessages: 10_000,
  bridgeOutboxBytes: 1 << 26,
};

const broker = new Broker();
const out: Effect[] = [];
const t0 = 1_700_000_000_000;
let index = 0;
const apply = (cmd: Command): void => {
  out.length = 0;
  broker.apply({ index: ++index, time: t0, cmd }, out);
};
const payload = new Uint8Array(100);
const publish = (i: number): void =>
  apply({ t: 'publish', conn: '1.0', pid: 1, msg: { topic: `dev/${i % sessions}/x`, payload, qos: 1, retain: false } });

apply({ t: 'serve-start', node: 1, settings });
for (let i = 0; i < sessions; i++) {
  const conn = `1.${i + 1}`;
  apply({
    t: 'connect',
    conn,
    clientId: `c${i}`,
    protocol: 4,
    clean: false,
    expiryS: 0xffffffff,
    will: null,
    username: null,
    receiveMax: 65_535,
    maxPacketSize: 0,
    problemInfo: true,
  });
  apply({ t: 'subscribe', conn, pid: 1, subs: [{ filter: `dev/${i}/#`, qos: 1, nl: false, rap: false, rh: 0 }] });
  apply({ t: 'disconnect', conn, reason: 0, publishWill: false });
}
for (let q = 0; q < queued; q++) for (let i = 0; i < sessions; i++) publish(i);

const bytesOf = (chunks: readonly Uint8Array[]): number => chunks.reduce((n, c) => n + c.length, 0);

function drain(): { ms: number; chunks: Uint8Array[] } {
  const start = performance.now();
  const chunks = [...broker.snapshot()];
  return { ms: performance.now() - start, chunks };
}

/** Reads a cursor as the driver does: each slice pulls until sliceMs has passed (at least once). */
function sliced(): Record<string, number> {
  let start = performance.now();
  const cursor = broker.snapshot()[Symbol.iterator]();
  const openMs = performance.now() - start;
  let pulls = 0;
  let slices = 0;
  let maxPullMs = 0;
  const pullMs: number[] = [];
  let maxSliceMs = 0;
  let workMs = 0;
  let bytes = 0;
  for (let done = false; !done; ) {
    const sliceStart = performance.now();
    do {
      start = performance.now();
      const r = cursor.next();
      const ms = performance.now() - start;
      maxPullMs = Math.max(maxPullMs, ms);
      pullMs.push(ms);
      pulls++;
      if (r.done === true) done = true;
      else bytes += r.value.length;
    } while (!done && performance.now() - sliceStart < sliceMs);
    const ms = performance.now() - sliceStart;
    maxSliceMs = Math.max(maxSliceMs, ms);
    workMs += ms;
    slices++;
  }
  const r2 = (x: number): number => Math.round(x * 100) / 100;
  pullMs.sort((a, b) => a - b);
  const p50PullMs = r2(pullMs[pullMs.length >> 1] ?? 0);
  return { bytes, openMs: r2(openMs), pulls, slices, p50PullMs, maxPullMs: r2(maxPullMs), maxSliceMs: r2(maxSliceMs), workMs: r2(workMs) };
}

/** µs per publish, applied with or without a cursor open; the cursor is then read to its end and
 * restored, and must give the digest of its opening index. */
function applyCost(withCursor: boolean): { usPerPublish: number; consistent: boolean } {
  const before = withCursor ? broker.digest() : '';
  const cursor = withCursor ? broker.snapshot() : null;
  const start = performance.now();
  for (let i = 0; i < publishes; i++) publish(i);
  const usPerPublish = ((performance.now() - start) * 1000) / publishes;
  if (cursor === null) return { usPerPublish, consistent: true };
  const copy = new Broker();
  copy.restore(cursor);
  return { usPerPublish, consistent: copy.digest() === before };
}

/** Publishes applied between two turns of the digest run, as entries keep committing. */
const PUBLISHES_PER_TURN = 100;

function digestRun(): Promise<Record<string, number | boolean>> {
  const expected = broker.digest();
  const at = broker.appliedIndex;
  return new Promise((resolve) => {
    let applied = 0;
    let openMs = 0;
    // Each turn of the run, in wall time and in the process's CPU time: on a loaded machine the
    // wall time of a turn includes the time the OS ran other processes.
    const wallMs: number[] = [];
    const cpuMs: number[] = [];
    const schedule = (step: () => void): void => {
      setImmediate(() => {
        const t = performance.now();
        const c = process.cpuUsage();
        step();
        const dc = process.cpuUsage(c);
        wallMs.push(performance.now() - t);
        cpuMs.push((dc.user + dc.system) / 1000);
      });
    };
    const done = (stats: RunStats, digest: string): void => {
      const r2 = (x: number): number => Math.round(x * 100) / 100;
      const sorted = (xs: number[]): number[] => [...xs].sort((a, b) => a - b);
      const p90 = (xs: number[]): number => sorted(xs)[Math.floor(xs.length * 0.9)] ?? 0;
      resolve({
        sliceMs: DIGEST_SLICE_MS,
        openMs: r2(openMs),
        longestSliceMs: r2(stats.longestSliceMs),
        longestTurnMs: r2(Math.max(openMs, stats.longestSliceMs)),
        p90TurnMs: r2(p90(wallMs)),
        longestTurnCpuMs: r2(Math.max(0, ...cpuMs)),
        p90TurnCpuMs: r2(p90(cpuMs)),
        turns: stats.turns,
        ms: Math.round(stats.ms),
        bytes: stats.bytes,
        publishesBetween: applied,
        equalsDigestAtIndex: digest === expected,
      });
    };
    const runner = new DigestRunner({
      sliceMs: DIGEST_SLICE_MS,
      clock: () => performance.now(),
      schedule,
      onRun: done,
      onVerdict: () => {},
    });
    const load = (): void => {
      if (runner.running === null || applied >= publishes) return;
      for (let k = 0; k < PUBLISHES_PER_TURN && applied < publishes; k++) publish(applied++);
      setImmediate(load);
    };
    const start = performance.now();
    runner.open(at, broker.snapshotCursor(process.env.REUSE === '0' ? undefined : DIGEST_CURSOR));
    openMs = performance.now() - start;
    setImmediate(load);
  });
}

// First, while the heap holds only the state: later phases leave copies whose major collections
// would land in the run's turns.
const run = await digestRun();
// A tick, so that digest() below hashes instead of returning the value cached in digestRun().
apply({ t: 'tick' });
const whole = drain();
let start = performance.now();
const digest = broker.digest();
const digestMs = performance.now() - start;
const copy = new Broker();
start = performance.now();
copy.restore(whole.chunks);
const restoreMs = performance.now() - start;
const slicing = sliced();
const plain: number[] = [];
const cow: number[] = [];
let consistent = true;
for (let r = 0; r < rounds; r++) {
  plain.push(applyCost(false).usPerPublish);
  const c = applyCost(true);
  cow.push(c.usPerPublish);
  consistent &&= c.consistent;
}
const median = (xs: number[]): number => Math.round([...xs].sort((a, b) => a - b)[xs.length >> 1]! * 100) / 100;
console.log(
  JSON.stringify({
    sessions,
    queuedPerSession: queued,
    snapshotBytes: bytesOf(whole.chunks),
    chunks: whole.chunks.length,
    drainMs: Math.round(whole.ms),
    digestMs: Math.round(digestMs),
    restoreMs: Math.round(restoreMs),
    restoredDigestEqual: copy.digest() === digest,
    sliceMs,
    sliced: slicing,
    publishes,
    applyUsPerPublish: { noCursor: median(plain), cursorOpen: median(cow), rounds },
    cursorRestoresOpeningDigest: consistent,
    digestRun: run,
  }),
);
