// Raft snapshot benchmark (issue 8): a follower that comes back after the leader compacted its log
// catches up by InstallSnapshot, while the leader keeps committing a light load. Reports the time
// to take the snapshot (the application's cursor, read in slices), the time until the follower has
// applied everything the leader had, and the leader's event-loop delay (p50, p99, max) under the
// same load in three phases: until the first compaction, while the follower catches up, and for
// 2 s afterwards, from perf_hooks.monitorEventLoopDelay.
//
//   node build/bench/raft/snapshot.js [--state-mb 64] [--election-timeout-ms 500]
//
// The leader (node 1) runs on the main thread; nodes 2 and 3 run in worker threads, each with its
// own event loop, so the leader's loop delay is the leader's alone (the followers still share the
// CPU cores). All three talk over loopback TCP. The application state is `--state-mb` MiB of bytes
// handed over as 64 KiB chunks (the broker's chunk size); raft cuts them to its own chunk bound.
import { type IntervalHistogram, monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import type { Message } from '../../raft/core/messages.js';
import type { Snapshot } from '../../raft/core/snapshot.js';
import { type DriverLogger, RaftDriver } from '../../raft/driver/driver.js';
import type { PeerAddress } from '../../raft/transport/transport.js';
import { Transport } from '../../raft/transport/transport.js';
import { sleep, until } from '../../test/support/wait.js';

const IDS = [1, 2, 3];
const LOOPBACK = '127.0.0.1';
const APP_CHUNK_BYTES = 64 * 1024;
/** Entries applied after the newest snapshot before the driver asks for another: the default.
 * With the load below that is a snapshot about every 3 s, and the leader keeps as many entries
 * before a snapshot for followers behind it, so a transfer shorter than that needs one snapshot. */
const LOG_ENTRIES_MAX = 10_000;
/** The light load kept on the leader throughout: a batch of 16 entries of 100 bytes every 5 ms. */
const LOAD_BATCH = 16;
const LOAD_EVERY_MS = 5;
const REST_MS = 2_000;
const WAIT_MS = 120_000;

interface Options {
  stateMb: number;
  electionTimeoutMs: number;
}

type ToWorker = { t: 'peers'; peers: Array<[number, PeerAddress]> } | { t: 'hand-over' } | { t: 'stop' };
type FromWorker =
  | { t: 'address'; id: number; address: PeerAddress }
  | { t: 'applied'; id: number; index: number; restored: number; restoredBytes: number; restoreMs: number };

interface NodeSetup {
  id: number;
  electionTimeoutMs: number;
  stateBytes: number;
}

const quiet: DriverLogger = { info: () => {}, warn: () => {}, error: (f, m) => console.error(m, f) };

/** The bench application: `stateBytes` of state, whatever the entries say; the cursor hands it
 * over in APP_CHUNK_BYTES pieces. */
function* stateChunks(state: Uint8Array): Generator<Uint8Array> {
  for (let at = 0; at < state.length; at += APP_CHUNK_BYTES) yield state.subarray(at, Math.min(state.length, at + APP_CHUNK_BYTES));
}

function makeDriver(
  setup: NodeSetup,
  logger: DriverLogger,
  onSnapshot: (s: Snapshot) => void,
): { driver: RaftDriver; transport: () => Transport<Message> } {
  let transport: Transport<Message> | undefined;
  const state = new Uint8Array(setup.stateBytes).fill(setup.id);
  const driver = new RaftDriver({
    id: setup.id,
    voters: IDS,
    electionTimeoutMs: setup.electionTimeoutMs,
    logger,
    onCommitted: () => {},
    snapshotSource: () => stateChunks(state),
    onSnapshot,
    core: { uncommittedEntriesMax: 100_000, logEntriesMax: LOG_ENTRIES_MAX },
    transport: (validate) => {
      transport = new Transport<Message>({
        nodeId: setup.id,
        incarnation: `bench-${setup.id}`,
        clusterId: 'raft-snapshot-bench',
        epoch: 1,
        listen: { host: LOOPBACK, port: 0 },
        peers: new Map(IDS.map((p) => [p, { host: LOOPBACK, port: 0 }])),
        logger: quiet,
        validate,
      });
      return transport;
    },
  });
  return { driver, transport: () => transport! };
}

// ---- worker: a follower ----

async function runWorker(setup: NodeSetup): Promise<void> {
  const port = parentPort!;
  let restored = 0;
  let restoredBytes = 0;
  let restoreMs = 0;
  const { driver, transport } = makeDriver(setup, quiet, (s) => {
    const t0 = performance.now();
    let bytes = 0;
    for (const c of s.chunks) bytes += c.length;
    restored++;
    if (process.env.RAFT_BENCH_DEBUG !== undefined) console.error(`node ${setup.id} restored the snapshot at ${s.index}`);
    restoredBytes = bytes;
    restoreMs = performance.now() - t0;
  });
  await driver.start();
  port.postMessage({ t: 'address', id: setup.id, address: transport().address() } satisfies FromWorker);
  const report = setInterval(() => {
    port.postMessage({ t: 'applied', id: setup.id, index: driver.appliedIndex, restored, restoredBytes, restoreMs } satisfies FromWorker);
  }, 20);
  port.on('message', (m: ToWorker) => {
    if (m.t === 'peers') for (const [id, a] of m.peers) transport().setPeerAddress(id, a);
    else if (m.t === 'hand-over') {
      if (driver.currentRole === 'leader') driver.transferLeadership(1);
    } else {
      clearInterval(report);
      void driver.stop().then(() => port.close());
    }
  });
}

// ---- main: the leader and the measurement ----

interface Follower {
  worker: Worker;
  address: PeerAddress;
  last: Extract<FromWorker, { t: 'applied' }> | null;
}

function startFollower(setup: NodeSetup): Promise<Follower> {
  const worker = new Worker(new URL(import.meta.url), { workerData: setup });
  return new Promise((resolve, reject) => {
    const f: Follower = { worker, address: { host: LOOPBACK, port: 0 }, last: null };
    worker.on('error', reject);
    worker.on('message', (m: FromWorker) => {
      if (m.t === 'address') {
        f.address = m.address;
        resolve(f);
      } else f.last = m;
    });
  });
}

interface Delay {
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** Runs `phase` with the leader's event-loop delay recorded at 1 ms resolution. */
async function measured<T>(phase: () => Promise<T>): Promise<{ value: T; delay: Delay; ms: number }> {
  const h: IntervalHistogram = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  const t0 = performance.now();
  const value = await phase();
  const ms = performance.now() - t0;
  h.disable();
  const delay = { p50Ms: h.percentile(50) / 1e6, p99Ms: h.percentile(99) / 1e6, maxMs: h.max / 1e6 };
  return { value, delay, ms };
}

/** Keeps a light load on the leader until stopped. */
function load(driver: RaftDriver): () => void {
  const payload = new Uint8Array(100).fill(0x61);
  const timer = setInterval(() => {
    if (driver.currentRole !== 'leader' || !driver.accepting) return;
    for (let k = 0; k < LOAD_BATCH; k++) driver.propose(payload);
  }, LOAD_EVERY_MS);
  return () => clearInterval(timer);
}

async function runMain(opts: Options): Promise<void> {
  const stateBytes = opts.stateMb * 1024 * 1024;
  const taken: Array<Record<string, unknown>> = [];
  const logger: DriverLogger = {
    info: (f, m) => {
      if (m === 'raft snapshot taken') taken.push(f);
    },
    warn: () => {},
    error: (f, m) => console.error(m, f),
  };
  const setup = (id: number): NodeSetup => ({ id, electionTimeoutMs: opts.electionTimeoutMs, stateBytes });
  const leader = makeDriver(setup(1), logger, () => {
    throw new Error('the leader restored a snapshot: node 1 did not keep leading');
  });
  await leader.driver.start();
  const f2 = await startFollower(setup(2));
  const peers = (list: Array<[number, PeerAddress]>) => ({ t: 'peers', peers: list }) satisfies ToWorker;
  leader.transport().setPeerAddress(2, f2.address);
  f2.worker.postMessage(peers([[1, leader.transport().address()]]));
  // Nodes 1 and 2 alone; node 1 must lead, so a node 2 that won hands leadership over.
  const handOver = setInterval(() => f2.worker.postMessage({ t: 'hand-over' } satisfies ToWorker), 4 * opts.electionTimeoutMs);
  await until('node 1 to lead', () => leader.driver.currentRole === 'leader' && leader.driver.hasLease(), WAIT_MS, {
    intervalMs: 5,
  }).finally(() => clearInterval(handOver));
  const stopLoad = load(leader.driver);
  let f3: Follower | undefined;
  try {
    const snap = await measured(() =>
      until('the leader to compact its log', () => leader.driver.status().snapshotIndex > 0, WAIT_MS, { intervalMs: 5 }),
    );
    f3 = await startFollower(setup(3));
    const follower = f3;
    const catchUp = await measured(async () => {
      leader.transport().setPeerAddress(3, follower.address);
      follower.worker.postMessage(
        peers([
          [1, leader.transport().address()],
          [2, f2.address],
        ]),
      );
      f2.worker.postMessage(peers([[3, follower.address]]));
      const target = leader.driver.commitIndex;
      await until('node 3 to catch up', () => (follower.last?.index ?? 0) >= target && (follower.last?.restored ?? 0) > 0, WAIT_MS, {
        intervalMs: 5,
      });
      return target;
    });
    const after = await measured(() => sleep(REST_MS));
    const result = {
      bench: 'raft-snapshot',
      topology: 'leader on the main thread, two followers in worker threads, loopback TCP',
      node: process.version,
      electionTimeoutMs: opts.electionTimeoutMs,
      stateBytes,
      load: `${LOAD_BATCH} entries of 100 bytes every ${LOAD_EVERY_MS} ms`,
      snapshotTaken: taken[0] ?? null,
      catchUpMs: Math.round(catchUp.ms),
      caughtUpTo: catchUp.value,
      restoredBytes: follower.last?.restoredBytes ?? 0,
      snapshotsRestored: follower.last?.restored ?? 0,
      leaderLoopDelay: { untilCompacted: snap.delay, whileFollowerCatchesUp: catchUp.delay, afterwards: after.delay },
    };
    printSummary(result);
    console.log(JSON.stringify(result));
  } finally {
    stopLoad();
    for (const f of [f2, f3]) f?.worker.postMessage({ t: 'stop' } satisfies ToWorker);
    await leader.driver.stop();
  }
}

function printSummary(r: {
  stateBytes: number;
  catchUpMs: number;
  leaderLoopDelay: Record<string, Delay>;
  snapshotTaken: Record<string, unknown> | null;
}): void {
  console.log(`state ${(r.stateBytes / 1048576).toFixed(0)} MiB; snapshot taken: ${JSON.stringify(r.snapshotTaken)}`);
  console.log(`follower caught up by snapshot in ${r.catchUpMs} ms`);
  console.log('leader event-loop delay   p50 ms  p99 ms  max ms');
  for (const [phase, d] of Object.entries(r.leaderLoopDelay)) {
    console.log(
      `${phase.padEnd(24)} ${d.p50Ms.toFixed(2).padStart(7)} ${d.p99Ms.toFixed(2).padStart(7)} ${d.maxMs.toFixed(2).padStart(7)}`,
    );
  }
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = { stateMb: 64, electionTimeoutMs: 500 };
  for (let k = 0; k < argv.length; k += 2) {
    const v = argv[k + 1];
    const n = Number(v);
    if (v === undefined || !Number.isFinite(n) || n <= 0) usage(`${argv[k]} needs a positive number`);
    if (argv[k] === '--state-mb') o.stateMb = n;
    else if (argv[k] === '--election-timeout-ms') o.electionTimeoutMs = n;
    else usage(`unknown flag ${argv[k]}`);
  }
  return o;
}

function usage(why: string): never {
  console.error(`raft snapshot bench: ${why}\nusage: node build/bench/raft/snapshot.js [--state-mb 64] [--election-timeout-ms 500]`);
  process.exit(2);
}

if (isMainThread) {
  runMain(parseArgs(process.argv.slice(2))).catch((err: Error) => {
    console.error(`raft snapshot bench failed: ${err.message}`);
    process.exit(1);
  });
} else {
  void runWorker(workerData as NodeSetup);
}
