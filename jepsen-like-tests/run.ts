// node build/jepsen-like-tests/run.js --seed S --duration-s N --faults kill,pause,partition
//
// Starts three raftmq nodes behind relays, runs the MQTT.js workload, injects the seeded fault
// schedule, heals everything, lets subscribers drain, stops the nodes and checks the history and
// the audit logs. Writes report.md and report.json; exits 1 on a violation, 2 on bad arguments, 3
// if the harness itself failed or overran its bound.
import { mkdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Prng } from '../raft/core/prng.js';
import { hostMonotonicMs } from '../src/cluster/audit-log.js';
import { type AuditSource, checkAll } from './checker.js';
import { JepsenCluster, livePids, type NodeProcess } from './cluster.js';
import { type AppliedFault, type RunReport, writeReport } from './report.js';
import { describeFault, type FaultClass, makeSchedule, parseClasses, type Window } from './schedule.js';
import type { History } from './workload.js';
import { Workload } from './workload.js';

export interface RunOptions {
  seed: number;
  durationS: number;
  faults: FaultClass[];
  electionTimeoutMs: number;
  dir: string;
  /** Each fault class exactly once (the slow test). */
  eachOnce?: boolean;
  log?: (line: string) => void;
}

const START_TIMEOUT_MS = 20_000;
const DRAIN_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 5_000;
/** Beyond the workload's own duration, the most the whole run may take. */
const OVERHEAD_BOUND_MS = 120_000;

const CLI = join(process.cwd(), 'build', 'src', 'cli.js');

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, Math.max(0, ms)));
}

/** The node a fault hits: the serving one, or a live one that does not serve. */
async function pickTarget(cluster: JepsenCluster, want: 'leader' | 'follower', r: Prng): Promise<{ node: NodeProcess | null; serving: boolean }> {
  const serving = await cluster.servingNode(300);
  const live = cluster.nodes.filter((n) => n.state === 'running');
  if (want === 'leader' && serving !== null) return { node: serving, serving: true };
  const others = live.filter((n) => n !== serving);
  if (others.length === 0) return { node: serving, serving: serving !== null };
  return { node: others[r.int(others.length)]!, serving: false };
}

function linksOf(cluster: JepsenCluster, id: number, direction: 'both' | 'out') {
  return [...cluster.relays.values()].filter((r) => r.from === id || (direction === 'both' && r.to === id));
}

function inject(cluster: JepsenCluster, w: Window, n: NodeProcess): void {
  const f = w.fault;
  switch (f.kind) {
    case 'kill':
      n.kill9();
      return;
    case 'pause':
      n.pause();
      return;
    case 'partition':
      for (const r of linksOf(cluster, n.id, 'both')) r.set('blackhole');
      return;
    case 'oneway':
      for (const r of linksOf(cluster, n.id, 'out')) r.set('blackhole');
      return;
    case 'delay':
      for (const r of linksOf(cluster, n.id, 'both')) r.set('pass', { delayMs: f.delayMs });
      return;
    case 'drop':
      for (const r of linksOf(cluster, n.id, 'both')) r.set('drop', { dropRate: f.dropRate });
      return;
    default: {
      const _: never = f;
      void _;
    }
  }
}

function heal(cluster: JepsenCluster, n: NodeProcess): void {
  n.resume();
  for (const r of linksOf(cluster, n.id, 'both')) r.heal();
}

/** Fault start → first CONNACK from a node other than the one hit, before the next fault. */
function failovers(applied: AppliedFault[], h: History): void {
  for (let i = 0; i < applied.length; i++) {
    const f = applied[i]!;
    if (!f.wasServing) continue;
    const until = applied[i + 1]?.startMono ?? Number.POSITIVE_INFINITY;
    const first = h.connacks.find((c) => c.mono > f.startMono && c.mono < until && c.node !== f.node && c.node !== 0);
    f.failoverMs = first === undefined ? null : first.mono - f.startMono;
  }
}

async function drain(w: Workload, log: (l: string) => void): Promise<void> {
  const deadline = performance.now() + DRAIN_TIMEOUT_MS;
  const h = w.history;
  for (;;) {
    const acked = h.publishes.filter((p) => p.ackMono !== null).map((p) => p.payload);
    const done = [...h.subscribedAt.keys()].every((s) => {
      const got = new Set(h.receipts.filter((r) => r.client === s).map((r) => r.payload));
      return acked.every((p) => got.has(p));
    });
    if (done && w.unacknowledged() === 0) return;
    if (performance.now() > deadline) {
      log(`drain: gave up after ${DRAIN_TIMEOUT_MS} ms (${w.unacknowledged()} publishes unacknowledged)`);
      return;
    }
    await sleep(250);
  }
}

export async function runJepsen(o: RunOptions): Promise<RunReport> {
  const log = o.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  mkdirSync(o.dir, { recursive: true });
  const schedule = makeSchedule({
    seed: o.seed,
    durationMs: o.durationS * 1000,
    classes: o.faults,
    electionTimeoutMs: o.electionTimeoutMs,
    eachOnce: o.eachOnce,
  });
  log(`seed ${o.seed}: ${schedule.length} faults; output in ${o.dir}`);
  const r = new Prng(o.seed ^ 0x7a46e7);
  const cluster = await JepsenCluster.start({ cli: CLI, dir: o.dir, electionTimeoutMs: o.electionTimeoutMs, seed: o.seed, startTimeoutMs: START_TIMEOUT_MS });
  const workload = new Workload(cluster, { subscribers: 3, qos1Publishers: 2, qos2Publishers: 2, ratePerS: 20, outstandingMax: 8 });
  const applied: AppliedFault[] = [];
  const startedAt = new Date().toISOString();
  try {
    await workload.start(START_TIMEOUT_MS);
    const t0 = performance.now();
    for (const w of schedule) {
      await sleep(t0 + w.atMs - performance.now());
      const { node, serving } = await pickTarget(cluster, w.fault.target, r);
      const f: AppliedFault = { window: w, node: node?.id ?? 0, wasServing: serving, startMono: hostMonotonicMs(), healMono: null, failoverMs: null };
      applied.push(f);
      if (node === null) {
        log(`${(w.atMs / 1000).toFixed(1)} s: ${describeFault(w.fault)}: no node to hit`);
        continue;
      }
      inject(cluster, w, node);
      log(`${(w.atMs / 1000).toFixed(1)} s: ${describeFault(w.fault)} → node ${node.id}${serving ? ' (serving)' : ''}${w.forMs > 0 ? ` for ${w.forMs} ms` : ''}`);
      if (w.forMs > 0) {
        await sleep(w.forMs);
        heal(cluster, node);
        f.healMono = hostMonotonicMs();
      }
    }
    await sleep(t0 + o.durationS * 1000 - performance.now());
    workload.stopPublishing();
    cluster.healAll();
    for (const n of cluster.nodes) n.resume();
    await drain(workload, log);
  } finally {
    await workload.close();
    await cluster.stop(STOP_TIMEOUT_MS);
  }
  failovers(applied, workload.history);
  const audits: AuditSource[] = [];
  for (const n of cluster.nodes) {
    let text = '';
    try {
      text = readFileSync(n.auditFile, 'utf8');
    } catch {
      // A process that died before opening its audit file wrote nothing.
    }
    audits.push({ node: n.id, run: 0, text, termMono: null });
  }
  const result = checkAll(workload.history, audits);
  const report: RunReport = {
    seed: o.seed,
    durationS: o.durationS,
    faults: o.faults,
    electionTimeoutMs: o.electionTimeoutMs,
    dir: o.dir,
    startedAt,
    schedule: applied,
    result,
    clientErrors: workload.history.errors,
    ok: result.violations.length === 0,
  };
  const files = writeReport(report);
  log(`acknowledged ${result.counts.acknowledged} of ${result.counts.published}; delivered ${result.counts.delivered} of ${result.counts.expectedDeliveries}; QoS 1 duplicates ${result.counts.qos1Duplicates}`);
  log(`violations: ${JSON.stringify(result.violationTotals)}; report ${files.md}`);
  return report;
}

function usage(message: string): never {
  process.stderr.write(`run: ${message}\nusage: node build/jepsen-like-tests/run.js --seed S --duration-s N --faults kill,pause,partition,oneway,delay,drop [--election-timeout-ms E] [--out DIR]\n`);
  process.exit(2);
}

async function main(): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      options: {
        seed: { type: 'string', default: '1' },
        'duration-s': { type: 'string', default: '60' },
        faults: { type: 'string', default: 'kill,pause,partition' },
        'election-timeout-ms': { type: 'string', default: '500' },
        out: { type: 'string' },
      },
      strict: true,
    }).values;
  } catch (err) {
    usage((err as Error).message);
  }
  const seed = Number(values.seed);
  const durationS = Number(values['duration-s']);
  const e = Number(values['election-timeout-ms']);
  if (!Number.isSafeInteger(seed) || seed < 0) usage(`--seed ${values.seed}: a whole number ≥ 0`);
  if (!Number.isSafeInteger(durationS) || durationS < 10 || durationS > 3600) usage(`--duration-s ${values['duration-s']}: 10 to 3600`);
  if (!Number.isSafeInteger(e) || e < 50 || e > 10_000) usage(`--election-timeout-ms ${values['election-timeout-ms']}: 50 to 10000`);
  let faults: FaultClass[];
  try {
    faults = parseClasses(String(values.faults));
  } catch (err) {
    usage((err as Error).message);
  }
  const dir = typeof values.out === 'string' ? values.out : join(tmpdir(), `raftmq-jepsen-${seed}-${process.pid}`);
  const bound = setTimeout(
    () => {
      process.stderr.write(`run: overran its bound of ${durationS} s + ${OVERHEAD_BOUND_MS} ms\n`);
      for (const pid of livePids) process.kill(pid, 'SIGKILL');
      process.exit(3);
    },
    durationS * 1000 + OVERHEAD_BOUND_MS,
  );
  bound.unref();
  const report = await runJepsen({ seed, durationS, faults, electionTimeoutMs: e, dir });
  return report.ok ? 0 : 1;
}

if (process.argv[1] !== undefined && import.meta.url === `file://${process.argv[1]}`) {
  main().then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`run: ${(err as Error).stack ?? String(err)}\n`);
      process.exit(3);
    },
  );
}
