// Raft micro-benchmark (issue 6): three RaftDrivers over loopback TCP, committed entries per second
// and commit latency p50/p99 for batches of 1, 16 and 256 entries of 100 bytes.
//
//   node build/bench/raft/run.js [--seconds 3] [--election-timeout-ms 500] [--batches 1,16,256]
//                                [--wire layout|msgpack] [--entry-cache on|off]
//
// --wire msgpack makes every node write msgpackr bodies only (as before the hand layout); the entry
// cache reuses an append's encoded entries for the other follower (docs/raft.md "Wire layout").
//
// The three nodes run in this one process (one event loop, real TCP sockets between them), so the
// figures include the followers' work on the same CPU thread. The loop is closed with one batch in
// flight: the leader proposes a batch in one event-loop turn (one core.propose()), and the latency
// is from that turn to the leader handing the batch's last entry to its application, measured in
// microseconds with hdr-histogram-js. CPU is the process's (user + system, all three nodes) over the
// measured window, per committed entry and per raft message sent (frames handed to a socket by the
// three transports). Prints a table, then one JSON line.
import { performance } from 'node:perf_hooks';
import * as hdr from 'hdr-histogram-js';
import type { LogEntry, Message } from '../../raft/core/messages.js';
import { type DriverLogger, RaftDriver } from '../../raft/driver/driver.js';
import { type RaftWireCodec, raftWireCodec } from '../../raft/driver/wire-codec.js';
import { Transport } from '../../raft/transport/transport.js';
import { sleep } from '../../test/support/wait.js';

const ENTRY_BYTES = 100;
const IDS = [1, 2, 3];
const LOOPBACK = '127.0.0.1';
const WARMUP_MS = 500;
const LEADER_WAIT_MS = 30_000;
/** A batch not committed by then is lost (its leader was deposed before it replicated): fail, not hang. */
const BATCH_WAIT_MS = 10_000;

interface Options {
  seconds: number;
  electionTimeoutMs: number;
  batches: number[];
  wire: 'layout' | 'msgpack';
  entryCache: boolean;
}

interface Row {
  batch: number;
  batchesCommitted: number;
  entriesPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  messages: number;
  cpuUsPerEntry: number;
  cpuUsPerMessage: number;
  entryCacheHits: number;
  entryCacheMisses: number;
}

const quiet: DriverLogger = { info: () => {}, warn: () => {}, error: (f, m) => console.error(m, f) };

class Node {
  readonly driver: RaftDriver;
  readonly codec: RaftWireCodec;
  transport!: Transport<Message>;
  /** Resolves when an entry at or above `target` has been handed to the application here. */
  private target = Number.POSITIVE_INFINITY;
  private onReached: (() => void) | undefined;

  constructor(id: number, opts: Options) {
    const { electionTimeoutMs } = opts;
    this.codec = raftWireCodec({ layout: opts.wire === 'layout', cacheEntries: opts.entryCache });
    this.driver = new RaftDriver({
      id,
      voters: IDS,
      electionTimeoutMs,
      logger: quiet,
      onCommitted: (entries) => this.committed(entries),
      core: { uncommittedEntriesMax: 100_000 },
      transport: (validate) => {
        this.transport = new Transport<Message>({
          nodeId: id,
          incarnation: `bench-${id}`,
          clusterId: 'raft-bench',
          epoch: 1,
          listen: { host: LOOPBACK, port: 0 },
          peers: new Map(IDS.map((p) => [p, { host: LOOPBACK, port: 0 }])),
          logger: quiet,
          validate,
          codec: this.codec,
        });
        return this.transport;
      },
    });
  }

  waitFor(index: number): Promise<void> {
    if (this.driver.appliedIndex >= index) return Promise.resolve();
    this.target = index;
    return new Promise((resolve) => {
      this.onReached = resolve;
    });
  }

  private committed(entries: readonly LogEntry[]): void {
    if (entries[entries.length - 1]!.index < this.target) return;
    this.target = Number.POSITIVE_INFINITY;
    const done = this.onReached;
    this.onReached = undefined;
    done?.();
  }
}

function parseArgs(argv: readonly string[]): Options {
  const o: Options = { seconds: 3, electionTimeoutMs: 500, batches: [1, 16, 256], wire: 'layout', entryCache: true };
  for (let k = 0; k < argv.length; k += 2) {
    const v = argv[k + 1];
    if (v === undefined) usage(`${argv[k]} needs a value`);
    if (argv[k] === '--seconds') o.seconds = positive(v, '--seconds');
    else if (argv[k] === '--election-timeout-ms') o.electionTimeoutMs = positive(v, '--election-timeout-ms');
    else if (argv[k] === '--batches') o.batches = v.split(',').map((b) => positive(b, '--batches'));
    else if (argv[k] === '--wire' && (v === 'layout' || v === 'msgpack')) o.wire = v;
    else if (argv[k] === '--entry-cache' && (v === 'on' || v === 'off')) o.entryCache = v === 'on';
    else usage(`unknown flag or value: ${argv[k]} ${v}`);
  }
  return o;
}

function positive(v: string, flag: string): number {
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) usage(`${flag} "${v}" is not a positive number`);
  return n;
}

function usage(why: string): never {
  console.error(
    `raft bench: ${why}\nusage: node build/bench/raft/run.js [--seconds 3] [--election-timeout-ms 500] [--batches 1,16,256] [--wire layout|msgpack] [--entry-cache on|off]`,
  );
  process.exit(2);
}

async function startNodes(opts: Options): Promise<Node[]> {
  const nodes = IDS.map((id) => new Node(id, opts));
  for (const n of nodes) await n.driver.start();
  for (const n of nodes) for (const o of nodes) if (o !== n) n.transport.setPeerAddress(o.driver.id, o.transport.address());
  return nodes;
}

async function waitLeader(nodes: readonly Node[]): Promise<Node> {
  const deadline = Date.now() + LEADER_WAIT_MS;
  for (;;) {
    const leaders = nodes.filter((n) => n.driver.currentRole === 'leader');
    if (leaders.length === 1 && nodes.every((n) => n.driver.leader === leaders[0]!.driver.id)) return leaders[0]!;
    if (Date.now() > deadline) throw new Error(`no leader within ${LEADER_WAIT_MS} ms`);
    await sleep(10);
  }
}

/** Proposes `batch` entries in one turn and resolves with the commit latency in ms. */
async function oneBatch(leader: Node, batch: number, payload: Uint8Array): Promise<number> {
  const t0 = performance.now();
  let last = 0;
  for (let k = 0; k < batch; k++) {
    const r = leader.driver.propose(payload);
    if (r instanceof Error) throw r;
    last = r.index;
  }
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const why = `batch not committed within ${BATCH_WAIT_MS} ms; node ${leader.driver.id} is ${leader.driver.currentRole}`;
      reject(new Error(why));
    }, BATCH_WAIT_MS);
  });
  try {
    await Promise.race([leader.waitFor(last), late]);
  } finally {
    clearTimeout(timer);
  }
  return performance.now() - t0;
}

function framesOut(nodes: readonly Node[]): number {
  let n = 0;
  for (const node of nodes) n += node.transport.stats().framesOut;
  return n;
}

function entryCache(nodes: readonly Node[]): { hits: number; misses: number } {
  const sum = { hits: 0, misses: 0 };
  for (const node of nodes) {
    sum.hits += node.codec.encoder.entryCache.hits;
    sum.misses += node.codec.encoder.entryCache.misses;
  }
  return sum;
}

async function measure(nodes: readonly Node[], leader: Node, batch: number, seconds: number): Promise<Row> {
  const payload = new Uint8Array(ENTRY_BYTES).fill(0x61);
  const warmEnd = performance.now() + WARMUP_MS;
  while (performance.now() < warmEnd) await oneBatch(leader, batch, payload);
  const histogram = hdr.build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
  const start = performance.now();
  const end = start + seconds * 1000;
  const cpu0 = process.cpuUsage();
  const frames0 = framesOut(nodes);
  const cache0 = entryCache(nodes);
  let batches = 0;
  while (performance.now() < end) {
    histogram.recordValue(Math.max(1, Math.round((await oneBatch(leader, batch, payload)) * 1000)));
    batches++;
  }
  const elapsedS = (performance.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const cpuUs = cpu.user + cpu.system;
  const messages = framesOut(nodes) - frames0;
  const cache = entryCache(nodes);
  const row: Row = {
    batch,
    batchesCommitted: batches,
    entriesPerSecond: Math.round((batches * batch) / elapsedS),
    p50Ms: histogram.getValueAtPercentile(50) / 1000,
    p99Ms: histogram.getValueAtPercentile(99) / 1000,
    maxMs: histogram.maxValue / 1000,
    messages,
    cpuUsPerEntry: round2(cpuUs / (batches * batch)),
    cpuUsPerMessage: round2(cpuUs / Math.max(1, messages)),
    entryCacheHits: cache.hits - cache0.hits,
    entryCacheMisses: cache.misses - cache0.misses,
  };
  histogram.destroy();
  return row;
}

const round2 = (x: number): number => Math.round(x * 100) / 100;

function printTable(rows: readonly Row[]): void {
  console.log('batch  entries/s  p50 ms  p99 ms  max ms  batches  messages  cpu µs/entry  cpu µs/msg');
  for (const r of rows) {
    const cells = [
      String(r.batch).padStart(5),
      String(r.entriesPerSecond).padStart(10),
      r.p50Ms.toFixed(3).padStart(7),
      r.p99Ms.toFixed(3).padStart(7),
      r.maxMs.toFixed(3).padStart(7),
      String(r.batchesCommitted).padStart(8),
      String(r.messages).padStart(8),
      r.cpuUsPerEntry.toFixed(2).padStart(12),
      r.cpuUsPerMessage.toFixed(2).padStart(10),
    ];
    console.log(cells.join('  '));
  }
}

async function main(): Promise<void> {
  const opts = parseArgs(process.argv.slice(2));
  const nodes = await startNodes(opts);
  try {
    const leader = await waitLeader(nodes);
    const rows: Row[] = [];
    for (const b of opts.batches) rows.push(await measure(nodes, leader, b, opts.seconds));
    printTable(rows);
    const env = {
      node: process.version,
      entryBytes: ENTRY_BYTES,
      seconds: opts.seconds,
      electionTimeoutMs: opts.electionTimeoutMs,
      wire: opts.wire,
      entryCache: opts.entryCache,
      badFrames: nodes.reduce((n, node) => n + node.transport.stats().badFrames, 0),
    };
    console.log(JSON.stringify({ bench: 'raft', topology: 'three drivers, one process, loopback TCP', ...env, rows }));
  } finally {
    await Promise.all(nodes.map((n) => n.driver.stop()));
  }
}

main().catch((err: Error) => {
  console.error(`raft bench failed: ${err.message}`);
  process.exit(1);
});
