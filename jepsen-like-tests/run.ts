// node build/jepsen-like-tests/run.js --seed S --duration-s N --faults kill,pause,partition [--mutant M]
// npm run jepsen -- --time N --seed S --faults ... --mutant M   (--time is --duration-s)
//
// --mutant runs a copy of the build with one planted bug (jepsen-like-tests/mutants.ts); the run
// is then expected to fail, and its report names the checker that caught it.
//
// Starts three raftmq nodes behind relays, runs the MQTT.js workload, injects the seeded fault
// schedule (kills and restarts start the process again with the same flags), heals everything, lets
// subscribers drain, stops the nodes and checks the history and the audit logs of every process.
// Writes report.md and report.json; exits 1 on a violation or an anomaly (a SIGTERM without exit 0,
// a node that does not start again or a cluster not redundant again within the bound), 2 on bad
// arguments, 3 if the harness itself failed or overran its bound.
import { mkdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Prng } from '../raft/core/prng.js';
import { hostMonotonicMs } from '../src/cluster/audit-log.js';
import type { ClusterNode } from '../test/support/cluster.js';
import { sleep } from '../test/support/wait.js';
import { type AuditSource, checkAll } from './checker.js';
import { JepsenCluster, livePids } from './cluster.js';
import { buildMutant, isJepsenMutant, JEPSEN_MUTANTS } from './mutants.js';
import { type AppliedFault, type RunReport, writeReport } from './report.js';
import {
  describeFault,
  FAULT_CLASSES,
  type FaultClass,
  makeSchedule,
  parseClasses,
  stopsProcesses,
  type Target,
  type Window,
} from './schedule.js';
import type { History } from './workload.js';
import { Workload } from './workload.js';

export interface RunOptions {
  seed: number;
  durationS: number;
  faults: FaultClass[];
  electionTimeoutMs: number;
  dir: string;
  /** Exactly these faults in a seeded order (the slow test); see ScheduleOptions.plan. */
  plan?: FaultClass[];
  /** The raftmq CLI to run (a mutant's); default this build's. */
  cli?: string;
  log?: (line: string) => void;
}

const START_TIMEOUT_MS = 20_000;
const DRAIN_TIMEOUT_MS = 30_000;
const STOP_TIMEOUT_MS = 5_000;
/** A SIGTERM'd node must exit within this (its own --shutdown-timeout-ms is 3 s by default). */
const TERM_EXIT_TIMEOUT_MS = 10_000;
const KILL_EXIT_TIMEOUT_MS = 5_000;
/** The most the runner waits for `redundant` before a fault that stops a process, and the most a
 * restart's time to `redundant` is measured for. */
export const REDUNDANT_WAIT_MS = 30_000;
const REDUNDANT_POLL_MS = 50;
const HEALTH_TIMEOUT_MS = 250;
/** Beyond twice the workload's own duration (faults that stop processes shift the schedule by the
 * waits for `redundant`), the most the whole run may take. */
const OVERHEAD_BOUND_MS = 120_000;

const CLI = join(process.cwd(), 'build', 'src', 'cli.js');

/** The node a fault hits: the serving one, or a live one that does not serve. */
async function pickTarget(cluster: JepsenCluster, want: Target, r: Prng): Promise<{ node: ClusterNode | null; serving: boolean }> {
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

/** Polls the leader's /health until it says `redundant`: the performance.now() at which it did, or
 * null past `boundMs` or once `cancelled()`. */
async function untilRedundant(cluster: JepsenCluster, boundMs: number, cancelled: () => boolean): Promise<number | null> {
  const deadline = performance.now() + boundMs;
  for (;;) {
    if (await cluster.redundant(HEALTH_TIMEOUT_MS)) return performance.now();
    if (performance.now() > deadline || cancelled()) return null;
    await sleep(REDUNDANT_POLL_MS);
  }
}

/** The run's state while faults are applied. */
interface FaultContext {
  cluster: JepsenCluster;
  log: (l: string) => void;
  /** Departures from the design that are not history violations: a SIGTERM without exit 0, a node
   * that did not start again, a cluster not redundant within the bound. */
  anomalies: string[];
  /** Measurements of the time to `redundant` still running. */
  measuring: Promise<void>[];
  done: boolean;
}

function label(w: Window): string {
  return `${(w.atMs / 1000).toFixed(1)} s ${describeFault(w.fault)}`;
}

/** Starts `nodes` again (same flags), then measures in the background the time from the spawn to
 * the leader's `redundant`. */
async function startAgain(ctx: FaultContext, f: AppliedFault, nodes: readonly ClusterNode[]): Promise<void> {
  const t0 = performance.now();
  const started = await Promise.all(
    nodes.map((n) =>
      n.start(START_TIMEOUT_MS).then(
        () => true,
        (err: unknown) => {
          ctx.anomalies.push(`${label(f.window)}: node ${n.id} did not start again: ${(err as Error).message}`);
          return false;
        },
      ),
    ),
  );
  f.healMono = hostMonotonicMs();
  if (!started.every(Boolean)) return;
  ctx.measuring.push(
    untilRedundant(ctx.cluster, REDUNDANT_WAIT_MS, () => ctx.done).then((at) => {
      f.redundantMs = at === null ? null : at - t0;
      if (at === null && !ctx.done) ctx.anomalies.push(`${label(f.window)}: not redundant within ${REDUNDANT_WAIT_MS} ms of the restart`);
    }),
  );
}

/** SIGTERM, and the exit code recorded; an exit other than 0 is an anomaly (docs/design.md "State file":
 * the stop writes the state file and exits). */
async function terminate(ctx: FaultContext, f: AppliedFault, n: ClusterNode): Promise<void> {
  let code: number | null;
  try {
    code = await n.terminate(TERM_EXIT_TIMEOUT_MS);
  } catch (err) {
    ctx.anomalies.push(`${label(f.window)}: ${(err as Error).message}; SIGKILL`);
    await n.kill9(KILL_EXIT_TIMEOUT_MS);
    code = null;
  }
  f.exitCodes.push(code);
  if (code !== 0) ctx.anomalies.push(`${label(f.window)}: node ${n.id} exited ${code} on SIGTERM`);
}

/** Applies one window and heals it; resolves once healed (for kill and restarts: started again).
 * `n` is null only for restart-all. */
async function apply(ctx: FaultContext, f: AppliedFault, n: ClusterNode | null): Promise<void> {
  const { cluster } = ctx;
  const w = f.window;
  const fault = w.fault;
  if (fault.kind === 'restart-all') {
    await Promise.all(cluster.nodes.map((x) => terminate(ctx, f, x)));
    await sleep(w.forMs);
    await startAgain(ctx, f, cluster.nodes);
    return;
  }
  if (n === null) return;
  switch (fault.kind) {
    case 'kill':
      await n.kill9(KILL_EXIT_TIMEOUT_MS);
      await sleep(w.forMs);
      await startAgain(ctx, f, [n]);
      return;
    case 'restart':
      await terminate(ctx, f, n);
      await sleep(w.forMs);
      await startAgain(ctx, f, [n]);
      return;
    case 'pause':
      n.pause();
      break;
    case 'pause-cut':
      n.pause();
      for (const r of linksOf(cluster, n.id, 'both')) r.set('blackhole');
      await sleep(w.forMs);
      n.resume();
      await sleep(fault.cutAfterMs);
      for (const r of linksOf(cluster, n.id, 'both')) r.heal();
      f.healMono = hostMonotonicMs();
      return;
    case 'partition':
      for (const r of linksOf(cluster, n.id, 'both')) r.set('blackhole');
      break;
    case 'oneway':
      for (const r of linksOf(cluster, n.id, 'out')) r.set('blackhole');
      break;
    case 'delay':
      for (const r of linksOf(cluster, n.id, 'both')) r.set('pass', { delayMs: fault.delayMs });
      break;
    case 'drop':
      for (const r of linksOf(cluster, n.id, 'both')) r.set('drop', { dropRate: fault.dropRate });
      break;
    default: {
      const _: never = fault;
      void _;
    }
  }
  await sleep(w.forMs);
  n.resume();
  for (const r of linksOf(cluster, n.id, 'both')) r.heal();
  f.healMono = hostMonotonicMs();
}

/** Fault start → first CONNACK from a node other than the one hit (any node after restart-all),
 * before the next fault. */
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

/** Runs the schedule. Before each fault that stops a process the runner waits (bounded) for
 * `redundant`, the model's condition for the next memory loss; that wait, and any time a stop and
 * start took beyond its window, shift the rest of the schedule and the end of the workload. */
async function runSchedule(ctx: FaultContext, schedule: readonly Window[], durationMs: number, r: Prng): Promise<AppliedFault[]> {
  const applied: AppliedFault[] = [];
  const t0 = performance.now();
  let shift = 0;
  for (const w of schedule) {
    await sleep(t0 + shift + w.atMs - performance.now());
    let waitedMs: number | null = null;
    if (stopsProcesses(w.fault.kind)) {
      const before = performance.now();
      const at = await untilRedundant(ctx.cluster, REDUNDANT_WAIT_MS, () => false);
      waitedMs = (at ?? performance.now()) - before;
      if (at === null) {
        ctx.anomalies.push(`${label(w)}: skipped, not redundant within ${REDUNDANT_WAIT_MS} ms`);
        ctx.log(`${label(w)}: skipped, the cluster is not redundant`);
        continue;
      }
    }
    const lateMs = performance.now() - t0 - w.atMs;
    shift = Math.max(shift, lateMs);
    const target = w.fault.kind === 'restart-all' ? null : w.fault.target;
    const { node, serving } = target === null ? { node: null, serving: true } : await pickTarget(ctx.cluster, target, r);
    const f: AppliedFault = {
      window: w,
      node: node?.id ?? 0,
      wasServing: serving,
      lateMs,
      startMono: hostMonotonicMs(),
      healMono: null,
      failoverMs: null,
      waitedMs,
      redundantMs: null,
      exitCodes: [],
    };
    if (target !== null && node === null) {
      ctx.log(`${label(w)}: no node to hit`);
      continue;
    }
    applied.push(f);
    const waited = waitedMs === null ? '' : ` (waited ${Math.round(waitedMs)} ms for redundant)`;
    ctx.log(`${label(w)}${node === null ? '' : ` → node ${node.id}${serving ? ' (serving)' : ''}`} for ${w.forMs} ms${waited}`);
    await apply(ctx, f, node);
    shift = Math.max(shift, performance.now() - t0 - w.atMs - w.forMs);
  }
  await sleep(t0 + shift + durationMs - performance.now());
  return applied;
}

export async function runJepsen(o: RunOptions): Promise<RunReport> {
  const log = o.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  mkdirSync(o.dir, { recursive: true });
  const schedule = makeSchedule({
    seed: o.seed,
    durationMs: o.durationS * 1000,
    classes: o.faults,
    electionTimeoutMs: o.electionTimeoutMs,
    plan: o.plan,
  });
  log(`seed ${o.seed}: ${schedule.length} faults; output in ${o.dir}`);
  const r = new Prng(o.seed ^ 0x7a46e7);
  const cluster = await JepsenCluster.start({
    cli: o.cli ?? CLI,
    dir: o.dir,
    electionTimeoutMs: o.electionTimeoutMs,
    seed: o.seed,
    startTimeoutMs: START_TIMEOUT_MS,
  });
  const workload = new Workload(cluster, { subscribers: 3, qos1Publishers: 2, qos2Publishers: 2, ratePerS: 20, outstandingMax: 8 });
  const ctx: FaultContext = { cluster, log, anomalies: [], measuring: [], done: false };
  let applied: AppliedFault[] = [];
  const startedAt = new Date().toISOString();
  try {
    await workload.start(START_TIMEOUT_MS);
    applied = await runSchedule(ctx, schedule, o.durationS * 1000, r);
    workload.stopPublishing();
    cluster.healAll();
    for (const n of cluster.nodes) n.resume();
    await drain(workload, log);
  } finally {
    ctx.done = true;
    await Promise.all(ctx.measuring);
    await workload.close();
    await cluster.stop(STOP_TIMEOUT_MS);
  }
  failovers(applied, workload.history);
  const audits: AuditSource[] = [];
  for (const n of cluster.nodes) {
    for (const run of n.runs) {
      let text = '';
      try {
        text = readFileSync(run.auditFile, 'utf8');
      } catch {
        // A process that died before opening its audit file wrote nothing.
      }
      audits.push({ node: n.id, run: run.index, text, termMono: run.end === 'term' ? run.signalMono : null });
    }
  }
  const result = checkAll(workload.history, audits, { slackMs: o.electionTimeoutMs });
  const report: RunReport = {
    seed: o.seed,
    durationS: o.durationS,
    faults: o.faults,
    plan: o.plan ?? null,
    electionTimeoutMs: o.electionTimeoutMs,
    dir: o.dir,
    startedAt,
    schedule: applied,
    result,
    anomalies: ctx.anomalies,
    clientErrors: workload.history.errors,
    ok: result.violations.length === 0 && ctx.anomalies.length === 0,
  };
  const files = writeReport(report);
  for (const f of applied) {
    if (f.redundantMs !== null) log(`${label(f.window)}: started again to redundant in ${Math.round(f.redundantMs)} ms`);
    if (f.failoverMs !== null)
      log(`${label(f.window)}: first CONNACK on ${f.node === 0 ? 'any' : 'another'} node after ${Math.round(f.failoverMs)} ms`);
  }
  log(
    `acknowledged ${result.counts.acknowledged} of ${result.counts.published}; delivered ${result.counts.delivered} of ${result.counts.expectedDeliveries}; QoS 1 duplicates ${result.counts.qos1Duplicates}`,
  );
  log(`violations: ${JSON.stringify(result.violationTotals)}; anomalies: ${ctx.anomalies.length}; report ${files.md}`);
  for (const a of ctx.anomalies) log(`anomaly: ${a}`);
  return report;
}

function usage(message: string): never {
  process.stderr.write(
    `run: ${message}\nusage: node build/jepsen-like-tests/run.js --seed S --time N --faults ${FAULT_CLASSES.join(',')} [--mutant ${Object.keys(JEPSEN_MUTANTS).join('|')}] [--election-timeout-ms E] [--out DIR]\n`,
  );
  process.exit(2);
}

async function main(): Promise<number> {
  let values: Record<string, string | boolean | undefined>;
  try {
    values = parseArgs({
      options: {
        seed: { type: 'string', default: '1' },
        'duration-s': { type: 'string' },
        time: { type: 'string' },
        mutant: { type: 'string' },
        faults: { type: 'string', default: 'kill,restart,pause,partition' },
        'election-timeout-ms': { type: 'string', default: '500' },
        out: { type: 'string' },
      },
      strict: true,
    }).values;
  } catch (err) {
    usage((err as Error).message);
  }
  const seed = Number(values.seed);
  if (values.time !== undefined && values['duration-s'] !== undefined) usage('--time and --duration-s are the same option: give one');
  const durationS = Number(values.time ?? values['duration-s'] ?? '60');
  const e = Number(values['election-timeout-ms']);
  if (!Number.isSafeInteger(seed) || seed < 0) usage(`--seed ${values.seed}: a whole number ≥ 0`);
  if (!Number.isSafeInteger(durationS) || durationS < 10 || durationS > 3600) usage(`--time ${durationS}: 10 to 3600 seconds`);
  const mutant = values.mutant;
  if (typeof mutant === 'string' && !isJepsenMutant(mutant)) usage(`--mutant ${mutant}: one of ${Object.keys(JEPSEN_MUTANTS).join(', ')}`);
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
      process.stderr.write(`run: overran its bound of 2 × ${durationS} s + ${OVERHEAD_BOUND_MS} ms\n`);
      for (const pid of livePids) process.kill(pid, 'SIGKILL');
      process.exit(3);
    },
    2 * durationS * 1000 + OVERHEAD_BOUND_MS,
  );
  bound.unref();
  let cli: string | undefined;
  if (typeof mutant === 'string' && isJepsenMutant(mutant)) {
    cli = buildMutant(mutant, join(process.cwd(), 'build'));
    process.stdout.write(`mutant ${mutant}: ${JEPSEN_MUTANTS[mutant].breaks}; running ${cli}\n`);
  }
  const report = await runJepsen({ seed, durationS, faults, electionTimeoutMs: e, dir, cli });
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
