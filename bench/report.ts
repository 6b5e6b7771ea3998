// The broker benchmark's results: one run's record, the median row of N runs of a scenario and
// broker, the cluster's CPU-per-message ratios, and the markdown tables.
import { type FleetSection, fleetMarkdown } from './fleet-report.js';
import type { LoopDelay, Role, TargetName } from './targets.js';

/** A load generator above this (% of one core) may have competed with the brokers for the two cores:
 * its row is flagged and does not count for a CPU-per-message ratio. */
export const LOADGEN_RATIO_MAX_PCT = 50;

/** One broker process over the measurement window, from /proc. */
export interface ProcResult {
  label: string;
  role: Role;
  pid: number;
  /** utime+stime over the window, in % of one core. */
  cpuPct: number | null;
  cpuS: number | null;
  windowS: number | null;
  /** VmRSS at the end of the window. */
  rssKb: number | null;
  /** CPU µs of this process per message published in the window (mqttload's `sent`). */
  cpuUsPerMsg: number | null;
  /** Write and read system calls (/proc/PID/io; socket writes and reads) per message published
   * in the window: at a fixed rate they, more than the work in each, set the CPU per message. */
  writesPerMsg?: number | null;
  readsPerMsg?: number | null;
  /** The event-loop-delay report covering the window (raftmq only). */
  loopDelay: LoopDelay | null;
}

export interface RunResult {
  scenario: string;
  broker: TargetName;
  run: number;
  args: string[];
  rate: number;
  idle: boolean;
  mqttload: Record<string, unknown> | null;
  /** The serving process first (the leader for the cluster). */
  procs: ProcResult[];
  /** mqttload itself over the window, from /proc. */
  /** With several processes (--loadgens), cpuPct is the highest one's and totalPct their sum. */
  loadgen: { cpuPct: number; rssKb: number; processes?: number; totalPct?: number } | null;
  /** CPU used by processes other than the target's and mqttload, in % of one core (from mqttload's
   * host_other_pct, less a cluster's followers). */
  hostOtherPct: number | null;
  cpuProfile: string | null;
  /** A failed run: the bench exits non-zero. */
  failures: string[];
  warnings: string[];
  /** raftmq-disk, and raftmq-cluster-disk's leader, over the window: fdatasync calls of group
   * commits per second, and log entries (messages, acks, connects) made durable per call; absent or
   * null for other targets. */
  disk?: { fsyncsPerS: number; entriesPerFsync: number | null } | null;
}

export interface ClusterRatios {
  leaderUsPerMsg: number | null;
  followerUsPerMsg: (number | null)[];
  followerOverLeader: (number | null)[];
  /** The one-node raftmq row of the same scenario in this run, when raftmq ran too. */
  oneNodeUsPerMsg: number | null;
  leaderOverOneNode: number | null;
  /** False when a row failed or its load generator used more than half a core. */
  followerRatioCounts: boolean;
  oneNodeRatioCounts: boolean;
}

export interface Row {
  scenario: string;
  broker: TargetName;
  runs: number;
  failedRuns: number;
  /** The median run (by the scenario's key figure), or the first failed run when one failed. */
  result: RunResult;
  cluster: ClusterRatios | null;
}

export function loadgenPct(r: RunResult): number | null {
  const own = r.mqttload?.lg_cpu_pct;
  return r.loadgen?.cpuPct ?? (typeof own === 'number' ? own : null);
}

/** The figure a median is taken over: memory per connection for idle, the serving process's CPU per
 * message at a fixed rate, deliveries per second in a closed loop. */
function keyOf(r: RunResult): number {
  const v = r.idle ? r.mqttload?.bytes_per_conn : r.rate > 0 ? r.procs[0]?.cpuUsPerMsg : r.mqttload?.delivered_per_s;
  return typeof v === 'number' && Number.isFinite(v) ? v : Number.NEGATIVE_INFINITY;
}

function ratio(a: number | null | undefined, b: number | null | undefined): number | null {
  return typeof a === 'number' && typeof b === 'number' && b > 0 ? a / b : null;
}

export function rowsOf(runs: RunResult[], loadgenMaxPct: number): Row[] {
  const groups = new Map<string, RunResult[]>();
  for (const r of runs) {
    const k = `${r.scenario}\0${r.broker}`;
    groups.set(k, [...(groups.get(k) ?? []), r]);
  }
  const rows: Row[] = [];
  for (const g of groups.values()) {
    const failed = g.filter((r) => r.failures.length > 0);
    const sorted = [...g].sort((a, b) => keyOf(a) - keyOf(b));
    const result = failed[0] ?? (sorted[Math.floor((sorted.length - 1) / 2)] as RunResult);
    rows.push({ scenario: result.scenario, broker: result.broker, runs: g.length, failedRuns: failed.length, result, cluster: null });
  }
  const counts = (row: Row | undefined): boolean => {
    const lg = row === undefined ? null : loadgenPct(row.result);
    return row !== undefined && row.failedRuns === 0 && (lg === null || lg <= loadgenMaxPct);
  };
  for (const row of rows) {
    if ((row.broker !== 'raftmq-cluster' && row.broker !== 'raftmq-cluster-disk') || row.result.idle) continue;
    // A cluster on disk is compared with one node on disk.
    const oneName = row.broker === 'raftmq-cluster-disk' ? 'raftmq-disk' : 'raftmq';
    const one = rows.find((o) => o.scenario === row.scenario && o.broker === oneName);
    const leader = row.result.procs[0]?.cpuUsPerMsg ?? null;
    const followers = row.result.procs.slice(1).map((p) => p.cpuUsPerMsg);
    const oneNode = one?.result.procs[0]?.cpuUsPerMsg ?? null;
    row.cluster = {
      leaderUsPerMsg: leader,
      followerUsPerMsg: followers,
      followerOverLeader: followers.map((f) => ratio(f, leader)),
      oneNodeUsPerMsg: oneNode,
      leaderOverOneNode: ratio(leader, oneNode),
      followerRatioCounts: counts(row),
      oneNodeRatioCounts: counts(row) && counts(one),
    };
  }
  return rows;
}

// ---- output ----

function f(v: unknown, digits = 0): string {
  return typeof v === 'number' && Number.isFinite(v)
    ? v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : '–';
}

/** One value per process, the serving process first: "leader / follower / follower". */
function perProc(r: RunResult, pick: (p: ProcResult) => unknown, digits = 0): string {
  return r.procs.length === 0 ? '–' : r.procs.map((p) => f(pick(p), digits)).join(' / ');
}

/** A ratio; in parentheses when it does not count. */
function ratioCell(v: number | null, counts: boolean): string {
  if (v === null) return '–';
  return counts ? f(v, 2) : `(${f(v, 2)})`;
}

/** Event-loop delay beyond the 10 ms sampling interval, in ms: p99 / p99.9 / max. */
function eld(d: LoopDelay | null): string {
  if (d === null) return '–';
  const beyond = (v: number): string => f(Math.max(0, v - d.resolutionMs), 1);
  return `${beyond(d.p99Ms)} / ${beyond(d.p999Ms)} / ${beyond(d.maxMs)}`;
}

/** GC pauses over the window: the longest minor and major pause in ms, with their counts and totals. */
function gcCell(d: LoopDelay | null): string {
  const g = d?.gc;
  if (g === undefined) return '–';
  return `${f(g.minor.maxMs, 1)} (${f(g.minor.count)}, ${f(g.minor.ms)}) / ${f(g.major.maxMs, 1)} (${f(g.major.count)}, ${f(g.major.ms)})`;
}

/** The load generator's CPU, /proc (own getrusage); with several processes the highest one's,
 * then how many and their sum. */
function lgCell(r: RunResult): string {
  const n = r.loadgen?.processes;
  const all = n === undefined ? '' : ` ×${n}, ${f(r.loadgen?.totalPct)} in all`;
  return `${f(r.loadgen?.cpuPct)} (${f(r.mqttload?.lg_cpu_pct)})${all}`;
}

export function summaryLine(r: RunResult): string {
  const m = r.mqttload ?? {};
  const head = `${r.scenario.padEnd(12)} ${r.broker.padEnd(14)} #${r.run}`;
  const warn = r.warnings.length > 0 ? `  WARN ${r.warnings.join('; ')}` : '';
  const failed = r.failures.length > 0 ? `  FAILED ${r.failures.join('; ')}` : '';
  if (r.mqttload === null) return `${head} no result${failed}${warn}`;
  if (r.idle) {
    return `${head} ${f(m.connected)} conns ${f(m.bytes_per_conn)} B/conn ramp cpu ${perProc(r, (p) => p.cpuPct)}% other ${f(r.hostOtherPct)}%${failed}${warn}`;
  }
  const disk = r.disk == null ? '' : ` fsync ${f(r.disk.fsyncsPerS)}/s ${f(r.disk.entriesPerFsync, 1)} entries/fsync`;
  return (
    `${head} ${f(m.delivered_per_s).padStart(9)}/s p50 ${f(m.lat_p50_us)} us p99 ${f(m.lat_p99_us)} us` +
    ` cpu ${perProc(r, (p) => p.cpuPct)}% ${perProc(r, (p) => p.cpuUsPerMsg, 2)} us/msg w/r ${perProc(r, (p) => p.writesPerMsg, 2)} · ${perProc(r, (p) => p.readsPerMsg, 2)} /msg lg ${lgCell(r)}% other ${f(r.hostOtherPct)}%${disk}${failed}${warn}`
  );
}

/** The run's .md: the mqttload tables of `rows`, then the fleet scenarios' tables when they ran. */
export function markdown(rows: Row[], meta: Record<string, unknown>, loadgenMaxPct: number, fleet: FleetSection | null = null): string {
  const flags = (row: Row): string => `${row.failedRuns > 0 ? ' ✗' : ''}${row.result.warnings.length > 0 ? ' ⚠' : ''}`;
  const load = [
    '| scenario | broker | delivered/s | p50 µs | p99 µs | p99.9 µs | lost | dup | CPU % | RSS MiB | CPU µs/msg | writes · reads /msg | loadgen CPU % /proc (own) | host_other % | ELD p99 / p99.9 / max ms | GC max ms (n, total ms), minor / major |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  const cluster = [
    '| scenario | leader µs/msg | follower µs/msg | follower / leader | one-node µs/msg | leader / one-node | ELD p99 / p99.9 / max ms, leader · followers | GC max ms (n, total ms), minor / major, leader · followers |',
    '|---|--:|--:|--:|--:|--:|--:|--:|',
  ];
  const disk = ['| scenario | broker | fsyncs/s | entries per fsync |', '|---|---|--:|--:|'];
  const idle = [
    '| scenario | broker | connections | connects/s | bytes/conn | bytes/conn at end | RSS MiB | ramp CPU % /proc | ramp host_other % | ELD p99 / p99.9 / max ms |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const row of rows) {
    const r = row.result;
    const m = r.mqttload ?? {};
    const e = r.broker.startsWith('mosquitto') ? 'n/a' : eld(r.procs[0]?.loopDelay ?? null);
    const gc = r.broker.startsWith('mosquitto') ? 'n/a' : gcCell(r.procs[0]?.loopDelay ?? null);
    if (r.disk != null)
      disk.push(`| ${r.scenario} | ${r.broker}${flags(row)} | ${f(r.disk.fsyncsPerS)} | ${f(r.disk.entriesPerFsync, 1)} |`);
    const rss = perProc(r, (p) => (p.rssKb === null ? null : p.rssKb / 1024), 1);
    if (r.idle) {
      idle.push(
        `| ${r.scenario} | ${r.broker}${flags(row)} | ${f(m.connected)} | ${f(m.connects_per_s)} | ${f(m.bytes_per_conn)} | ${f(m.bytes_per_conn_end)} | ${rss} | ${perProc(r, (p) => p.cpuPct)} | ${f(r.hostOtherPct)} | ${e} |`,
      );
      continue;
    }
    load.push(
      `| ${r.scenario} | ${r.broker}${flags(row)} | ${f(m.delivered_per_s)} | ${f(m.lat_p50_us)} | ${f(m.lat_p99_us)} | ${f(m.lat_p999_us)} | ${f(m.lost)} | ${f(m.duplicates)} | ${perProc(r, (p) => p.cpuPct)} | ${rss} | ${perProc(r, (p) => p.cpuUsPerMsg, 2)} | ${perProc(r, (p) => p.writesPerMsg, 2)} · ${perProc(r, (p) => p.readsPerMsg, 2)} | ${lgCell(r)} | ${f(r.hostOtherPct)} | ${e} | ${gc} |`,
    );
    const c = row.cluster;
    if (c !== null) {
      cluster.push(
        `| ${r.scenario}${flags(row)} | ${f(c.leaderUsPerMsg, 2)} | ${c.followerUsPerMsg.map((v) => f(v, 2)).join(' / ')} | ${c.followerOverLeader.map((v) => ratioCell(v, c.followerRatioCounts)).join(' / ')} | ${f(c.oneNodeUsPerMsg, 2)} | ${ratioCell(c.leaderOverOneNode, c.oneNodeRatioCounts)} | ${eld(r.procs[0]?.loopDelay ?? null)} · ${r.procs
          .slice(1)
          .map((p) => eld(p.loopDelay))
          .join(' · ')} | ${r.procs.map((p) => gcCell(p.loopDelay)).join(' · ')} |`,
      );
    }
  }
  const failures = rows
    .filter((row) => row.failedRuns > 0)
    .map(
      (row) =>
        `- ${row.scenario}/${row.broker}: ${row.failedRuns} of ${row.runs} runs failed; run ${row.result.run}: ${row.result.failures.join('; ')}`,
    );
  const warnings = rows
    .filter((row) => row.result.warnings.length > 0)
    .map((row) => `- ${row.scenario}/${row.broker}: ${row.result.warnings.join('; ')}`);
  const runs = Number(meta.runs);
  const mqttload = rows.length > 0 || fleet === null;
  const window = mqttload ? `, window ${String(meta.durationS)} s after ${String(meta.warmupS)} s warm-up` : '';
  const median = mqttload && runs > 1 ? `, median of ${runs} runs` : '';
  const k = Number(meta.loadgens ?? 1);
  const split = mqttload && k > 1 ? `, each fan-in as ${k} mqttload processes of ${8 / k} publishers and 1 subscriber each` : '';
  return [
    `Run ${String(meta.date)} at ${String(meta.commit)}: ${String(meta.cpus)} × ${String(meta.cpuModel)}, Node ${String(meta.node)}, ${String(meta.mosquitto)}${window}${meta.quick === true ? ' (--quick)' : ''}${median}${split}.`,
    '',
    ...(mqttload
      ? [
          'CPU %, RSS and CPU µs/msg are per broker process from /proc over the window; a cluster row lists leader / follower / follower.',
          'CPU µs/msg: CPU time of that process per message published in the window (mqttload `sent`; fan-out delivers each to 100 subscribers).',
          'writes · reads /msg: write and read system calls of that process (/proc/PID/io syscw, syscr: socket writes and reads) per message published in the window.',
          "loadgen CPU %: mqttload from /proc (its own getrusage figure in parentheses); with several mqttload processes (--loadgens) the highest one's, then ×K and their sum. host_other %: CPU of neither the broker processes nor mqttload.",
          '',
          ...load,
          '',
        ]
      : []),
    ...(cluster.length > 2
      ? [
          `Cluster CPU per published message; a ratio in parentheses does not count (a row failed, or its load generator used more than ${loadgenMaxPct} % of a core).`,
          '',
          ...cluster,
          '',
        ]
      : []),
    ...(idle.length > 2 ? [...idle, ''] : []),
    ...(disk.length > 2
      ? [
          "Group commits over the window: fdatasync calls per second, and log entries (messages, acks, connects) made durable per call; for raftmq-cluster-disk the leader's own (raft entries; each commit also waits for one follower's fdatasync).",
          '',
          ...disk,
          '',
        ]
      : []),
    ...(failures.length > 0 ? ['Failed (✗):', '', ...failures, ''] : []),
    ...(warnings.length > 0 ? ['Warnings (⚠):', '', ...warnings, ''] : []),
    ...fleetMarkdown(fleet),
  ].join('\n');
}
