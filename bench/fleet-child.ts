// The fleet scenarios inside the broker bench: each (scenario, target) runs `node build/bench/fleet.js`
// (bench/fleet.ts) as a child process of its own, which starts the broker, its load workers and
// writes its result file. The child leads a process group of its own (it, its workers and the
// brokers it started), so a child that outlives its deadline is killed as a whole, by its PID.
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import type { Row as FleetRow } from './fleet/common.js';
import { REPO, TARGET_NAMES, type TargetName } from './targets.js';

export type { FleetRow };

export const FLEET_JS = join(REPO, 'build', 'bench', 'fleet.js');

export type FleetScenario = 'fleet-failover' | 'fleet' | 'connect-tls';
export const FLEET_SCENARIOS: readonly FleetScenario[] = ['fleet-failover', 'fleet', 'connect-tls'];

/** The targets a fleet scenario runs on. fleet-failover: the cluster fails over; Mosquitto, restarted
 * in place, is the anchor for the cost of a mass reconnect. */
const SUPPORTED: Record<FleetScenario, readonly TargetName[]> = {
  'fleet-failover': ['raftmq-cluster', 'mosquitto'],
  fleet: TARGET_NAMES,
  'connect-tls': TARGET_NAMES,
};

/** Why a target is skipped, or null when the scenario runs on it. */
export function fleetSkip(s: FleetScenario, t: TargetName): string | null {
  if (SUPPORTED[s].includes(t)) return null;
  return 'one node in memory has nothing to fail over to (mosquitto restarted in place is the anchor row)';
}

export interface FleetOptions {
  clients: number;
  /** --rate-per-device of fleet; null: fleet.ts's default. */
  ratePerDevice: number | null;
  findMax: boolean;
  /** --detect of fleet-failover; null: fleet.ts's default (rst). */
  detect: 'rst' | 'keepalive' | null;
  /** Deadline of one child; null: fleetTimeoutS. */
  timeoutS: number | null;
  /** fleet.ts's results folder; null: its default, bench/results. */
  outDir: string | null;
}

/** What bench/fleet.ts writes to its result file (the fields read here; the rest is kept as is). */
export interface FleetResult {
  scenario: string;
  target: string;
  options: Record<string, unknown>;
  host: Record<string, unknown>;
  rows: FleetRow[];
  failures: string[];
  notes: string[];
  [k: string]: unknown;
}

export interface FleetRun {
  scenario: FleetScenario;
  target: TargetName;
  /** fleet.js's arguments. */
  args: string[];
  pid: number;
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  timeoutS: number;
  elapsedS: number;
  resultFile: string | null;
  /** The child's result file, embedded. */
  result: FleetResult | null;
  /** The child's FAIL lines, or why it has no result: any makes the row failed. */
  failures: string[];
  /** The end of the child's stderr, when it failed. */
  stderrTail: string;
}

export function fleetArgs(s: FleetScenario, t: TargetName, o: FleetOptions): string[] {
  const args = ['--scenario', s, '--target', t, '--clients', String(o.clients)];
  if (o.outDir !== null) args.push('--out', o.outDir);
  if (s === 'fleet' && o.ratePerDevice !== null) args.push('--rate-per-device', String(o.ratePerDevice));
  if (s === 'fleet' && o.findMax) args.push('--find-max');
  if (s === 'fleet-failover' && o.detect !== null) args.push('--detect', o.detect);
  return args;
}

/** Twice the longest a child should take at fleet.ts's defaults: start and stop of broker and
 * workers, setup at 100 connects/s, then the scenario's own bounded phases. */
export function fleetTimeoutS(s: FleetScenario, o: FleetOptions): number {
  if (o.timeoutS !== null) return o.timeoutS;
  const setupS = o.clients / 100;
  const base = 120;
  const own =
    s === 'fleet-failover'
      ? // keep-alive settle, reconnect deadline and attempt, commands and their delivery
        setupS + (o.detect === 'keepalive' ? 10 : 0) + 60 + 10 + 25
      : s === 'fleet'
        ? // per step: warm-up, window, drain, the serving check
          setupS + (o.findMax ? 6 : 1) * 40
        : // TCP then TLS, a fresh broker each
          2 * (setupS + 30);
  return Math.ceil(2 * (base + own));
}

const TAIL_CHARS = 64 * 1024;

/** The child running now, for a signal to the bench. */
let running: number | null = null;

/** Kills the child's whole process group (its PID is the group's id). The child is not reaped
 * before its exit event, so the group id cannot have been reused. */
function killGroup(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    // gone already
  }
}

/** Ctrl-C or SIGTERM to the bench: the child's group is not in the terminal's foreground group. */
export function killRunningFleetChild(): void {
  if (running !== null) killGroup(running);
}

export async function runFleetChild(s: FleetScenario, t: TargetName, o: FleetOptions, tmp: string): Promise<FleetRun> {
  const args = fleetArgs(s, t, o);
  const timeoutS = fleetTimeoutS(s, o);
  const run: FleetRun = {
    scenario: s,
    target: t,
    args,
    pid: 0,
    exitCode: null,
    signal: null,
    timedOut: false,
    timeoutS,
    elapsedS: 0,
    resultFile: null,
    result: null,
    failures: [],
    stderrTail: '',
  };
  const t0 = performance.now();
  // TMPDIR: the child's temporary folders (configs, state files, certificates) go into the bench's
  // own, removed at the end even when a killed child could not remove them.
  const child = spawn(process.execPath, [FLEET_JS, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
    env: { ...process.env, TMPDIR: tmp },
  });
  const exited = once(child, 'exit').catch((err: unknown) => [null, null, err]);
  let out = '';
  let err = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => {
    out = (out + c).slice(-TAIL_CHARS);
  });
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    err = (err + c).slice(-TAIL_CHARS);
  });
  run.pid = child.pid ?? 0;
  running = run.pid === 0 ? null : run.pid;
  const watchdog = setTimeout(() => {
    run.timedOut = true;
    if (run.pid !== 0) killGroup(run.pid);
  }, timeoutS * 1000);
  const [code, sig, spawnErr] = (await exited) as [number | null, NodeJS.Signals | null, unknown];
  clearTimeout(watchdog);
  running = null;
  run.elapsedS = Math.round((performance.now() - t0) / 100) / 10;
  run.exitCode = code;
  run.signal = sig;
  const file = /^result: (.+)$/m.exec(out)?.[1]?.trim() ?? null;
  if (file !== null) {
    run.resultFile = file;
    try {
      run.result = JSON.parse(readFileSync(file, 'utf8')) as FleetResult;
    } catch (e) {
      run.failures.push(`result file ${file}: ${(e as Error).message}`);
    }
  }
  const failLines = err
    .split('\n')
    .filter((l) => l.startsWith('FAIL: '))
    .map((l) => l.slice('FAIL: '.length));
  if (spawnErr !== undefined) run.failures.push(`cannot start ${FLEET_JS}: ${(spawnErr as Error).message}`);
  else if (run.timedOut) run.failures.push(`no result within ${timeoutS} s: killed with its process group (PID ${run.pid})`);
  else if (code !== 0) {
    run.failures.push(...(failLines.length > 0 ? failLines : [`exit ${code ?? sig}: ${lastLines(err)}`]));
  } else if (run.result === null && run.failures.length === 0) run.failures.push('exit 0 without a result file');
  else if (run.result !== null) run.failures.push(...run.result.failures.filter((f) => !run.failures.includes(f)));
  if (run.failures.length > 0) run.stderrTail = err.slice(-4000);
  return run;
}

function lastLines(s: string): string {
  const lines = s.split('\n').filter((l) => l.trim() !== '');
  return lines.slice(-3).join(' | ') || 'no output';
}

// ---- figures of a child's rows ----

export function num(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

/** The restarted-in-place anchor: no device has its session back, so the times are to any CONNACK. */
export function anchorTimes(row: FleetRow): boolean {
  return num(row.backWithSession) === 0 && (num(row.back) ?? 0) > 0;
}

/** fleet-failover p50, p99, max in ms: to a CONNACK with the session, or to any for the anchor. */
export function failoverTimes(row: FleetRow): { p50: number | null; p99: number | null; max: number | null; anyConnack: boolean } {
  const any = anchorTimes(row);
  return any
    ? { p50: num(row.allBackP50Ms), p99: num(row.allBackP99Ms), max: num(row.allBackMaxMs), anyConnack: true }
    : { p50: num(row.p50Ms), p99: num(row.p99Ms), max: num(row.maxMs), anyConnack: false };
}

/** The connect-tls row of one transport. */
export function transportRow(r: FleetRun, transport: 'tcp' | 'tls'): FleetRow | undefined {
  return r.result?.rows.find((row) => row.transport === transport);
}

function f(v: unknown, digits = 0): string {
  const n = num(v);
  return n === null ? '–' : n.toLocaleString('en-US', { maximumFractionDigits: digits });
}

/** One line to the console per finished child. */
export function fleetSummaryLine(r: FleetRun): string {
  const head = `${r.scenario.padEnd(14)} ${r.target.padEnd(14)}`;
  const failed = r.failures.length > 0 ? `  FAILED ${r.failures.join('; ')}` : '';
  const rows = r.result?.rows ?? [];
  const took = ` (${r.elapsedS} s)`;
  if (rows.length === 0) return `${head} no result${took}${failed}`;
  const parts = rows.map((row) => {
    if (r.scenario === 'fleet-failover') {
      const q = failoverTimes(row);
      return `back ${f(row.back)}/${f(row.clients)} with session ${f(row.backWithSession)} p50 ${f(q.p50)} p99 ${f(q.p99)} max ${f(q.max)} ms refused ${f(row.refused)} cpu ${f(row.brokerCpuPct, 1)}% load ${f(row.loadCpuPct, 1)}% other ${f(row.otherCpuPct)}%`;
    }
    if (r.scenario === 'fleet') {
      return `${f(row.ratePerDevice, 3)} msg/s/dev ${f(row.deliveredPerS)}/s p50 ${f(row.p50Ms, 2)} p99 ${f(row.p99Ms, 2)} ms cmd p99 ${f(row.cmdP99Ms, 2)} ms lost ${f(row.lost)} leader cpu ${f(row.leaderCpuPct, 1)}% load ${f(row.loadCpuPct, 1)}%`;
    }
    return `${String(row.transport)} ${f(row.connectsPerS)}/s ${f(row.bytesPerConn)} B/conn ${f(row.brokerCpuMsPerConn, 3)} ms/conn load ${f(row.loadCpuPct, 1)}%`;
  });
  return `${head} ${parts.join(' · ')}${took}${failed}`;
}
