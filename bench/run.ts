// The broker benchmark: raftmq on one node, raftmq as a three-node cluster and Mosquitto side by side
// in one run, driven by mqttload (an independent C load generator, its source given by --mqttload
// DIR) with the same scenarios, one broker after the other, each on fresh processes.
// CPU and RSS of every broker process and of mqttload come from /proc over the measurement window.
// The fleet scenarios (fleet-failover, fleet, connect-tls), when named, run after them: one
// `node build/bench/fleet.js` child per scenario and target (bench/fleet-child.ts).
// Writes bench/results/<stamp>.json (every run), .md (the median run of each scenario and broker) and
// .svg (its throughput as bar charts); node build/bench/report-from.js remakes .md and .svg from a .json.
// Usage: npm run build && npm run bench -- [--quick] [--brokers a,b] [--runs N] [--scenarios a,b|all] [--help]
import { spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import {
  FLEET_JS,
  FLEET_SCENARIOS,
  type FleetOptions,
  type FleetScenario,
  fleetArgs,
  fleetSkip,
  fleetSummaryLine,
  fleetTimeoutS,
  killRunningFleetChild,
  runFleetChild,
} from './fleet-child.js';
import type { FleetSection } from './fleet-report.js';
import { argsFor, mergeResults, splittable } from './loadgens.js';
import { clockTicks, type ProcSample, sampleProc, windowOf } from './proc.js';
import { LOADGEN_RATIO_MAX_PCT, markdown, type ProcResult, type Row, type RunResult, rowsOf, summaryLine } from './report.js';
import { svg } from './svg.js';
import {
  BENCH_TARGET_NAMES,
  CLI,
  type DiskCounters,
  diskRates,
  HOST,
  MOSQUITTO,
  REPO,
  startTarget,
  TARGET_NAMES,
  type Target,
  type TargetName,
} from './targets.js';

/** host_other_pct above this means other processes took a visible share of the machine. */
const HOST_OTHER_WARN_PCT = 20;
/** Beyond mqttload's own phases: setup, drain, close and its overall deadline. */
const RUN_SLACK_S = 90;

export interface Scenario {
  name: string;
  args: string[];
  idle: boolean;
  /** Total publishes/s of a fixed-rate scenario; 0 for closed loop. */
  rate: number;
}

interface Options {
  quick: boolean;
  cpuProf: boolean;
  durationS: number;
  warmupS: number;
  rate: number;
  rate2: number;
  /** mqttload processes per fan-in run (the publishers and the rate split among them). */
  loadgens: number;
  runs: number;
  idleConns: number;
  idleHoldS: number;
  mqttloadSrc: string;
  brokers: TargetName[];
  /** The mqttload scenarios to run; null: all of them. */
  only: string[] | null;
  /** The fleet scenarios to run, in the order named. */
  fleet: FleetScenario[];
  fleetOptions: FleetOptions;
  outDir: string;
}

const MQTTLOAD_SCENARIOS = ['fanin-q0', 'fanin-q1', 'fanin-q2', 'fanout-q0', 'fanout-q1', 'latency-q1', 'rate-q1-half', 'idle'];
const SCENARIO_NAMES = MQTTLOAD_SCENARIOS.join(',');

const HELP = `npm run bench -- [options]
  --quick              about a two-minute smoke run (short windows, 1000 idle connections;
                       1000 fleet devices)
  --duration S         measurement window per scenario (default 5)
  --warmup S           warm-up before the window (default 1)
  --rate N             total publishes/s of latency-q1, below every broker's saturation (default 5000)
  --rate2 N            total publishes/s of rate-q1-half: set it to half the one-node maximum of
                       fanin-q1 on this machine (default 50000)
  --loadgens K         run each fan-in (fanin-*, latency-q1, rate-q1-half) as K mqttload
                       processes, each with 8/K publishers, its own subscriber and topic prefix, and
                       1/K of the rate (K of 1, 2, 4 or 8; default 1): one process used most of a
                       core against a broker that writes once per PUBLISH
  --runs N             run each scenario and broker N times; the table shows the median run (default 1)
  --idle-conns N       idle connections (default 10000)
  --scenarios a,b|all  only these scenarios; all: every one. mqttload scenarios (the default):
                       ${SCENARIO_NAMES}
                       fleet scenarios, run after those: ${FLEET_SCENARIOS.join(',')}
  --brokers a,b        ${BENCH_TARGET_NAMES.join(',')} (default ${TARGET_NAMES.join(',')}; raftmq-disk:
                       one node with --data-dir, reporting fsyncs/s and messages per fsync;
                       mosquitto-disk: persistence on, which does not tie PUBACK to the disk;
                       raftmq-cluster-disk: three nodes, each with --data-dir, reporting
                       the leader's fsyncs/s and raft entries per fsync)
  --cpu-prof           run raftmq under node --cpu-prof; profiles go to the results folder
  --mqttload DIR       mqttload source folder (default ../shared/tools/mqttload beside the repository)
  --out DIR            results folder (default bench/results)
 environment: RAFTMQ_BENCH_CLI=PATH runs that raftmq CLI (e.g. an older build's build/src/cli.js)
 fleet scenarios: one node build/bench/fleet.js per scenario and broker, once (not --runs);
 fleet-failover runs on raftmq-cluster and on mosquitto (restarted in place, the anchor row)
  --clients N          devices / connections (default 10000; --quick: 1000)
  --rate-per-device R  fleet: telemetry msg/s per device (default 1)
  --find-max           fleet: step the rate up until p99 or loss does not hold
  --detect rst|keepalive  fleet-failover: devices notice the kill by the reset (default) or keep-alive
  --fleet-timeout S    deadline of one fleet child, killed with its processes after it (default
                       twice the longest it should take, from --clients and the scenario)
Exit status 1 when a broker failed to start, died, refused connections or lost messages, or a fleet
child failed (exit status not 0: its FAIL lines) or passed its deadline.`;

function fail(message: string): never {
  process.stderr.write(`bench: ${message}\n`);
  process.exit(1);
}

function num(v: string | undefined, flag: string, dflt: number): number {
  if (v === undefined) return dflt;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) fail(`${flag} must be a positive number, got ${JSON.stringify(v)}`);
  return n;
}

/** --loadgens: a divisor of the fan-in's 8 publishers. */
function loadgensOf(v: string | undefined): number {
  if (v === undefined) return 1;
  const k = Number(v);
  if (![1, 2, 4, 8].includes(k)) fail(`--loadgens must be 1, 2, 4 or 8 (a divisor of the fan-in's 8 publishers), got ${JSON.stringify(v)}`);
  return k;
}

/** The mqttload source: --mqttload, else shared/tools/mqttload in the folder that holds this
 * checkout, else in the one that holds the main checkout (a git worktree lives elsewhere but
 * shares the main checkout's .git). */
function defaultMqttloadSrc(): string {
  const candidates = [resolve(REPO, '..', 'shared', 'tools', 'mqttload')];
  const common = spawnSync('git', ['rev-parse', '--path-format=absolute', '--git-common-dir'], { cwd: REPO, encoding: 'utf8' });
  if (common.status === 0) candidates.push(resolve(common.stdout.trim(), '..', '..', 'shared', 'tools', 'mqttload'));
  return candidates.find((c) => existsSync(join(c, 'mqttload.c'))) ?? (candidates[0] as string);
}

function parseOptions(argv: string[]): Options {
  let v: ReturnType<typeof parseArgs>['values'];
  try {
    v = parseArgs({
      args: argv,
      options: {
        quick: { type: 'boolean' },
        'cpu-prof': { type: 'boolean' },
        duration: { type: 'string' },
        warmup: { type: 'string' },
        rate: { type: 'string' },
        rate2: { type: 'string' },
        loadgens: { type: 'string' },
        runs: { type: 'string' },
        'idle-conns': { type: 'string' },
        scenarios: { type: 'string' },
        brokers: { type: 'string' },
        clients: { type: 'string' },
        'rate-per-device': { type: 'string' },
        'find-max': { type: 'boolean' },
        detect: { type: 'string' },
        'fleet-timeout': { type: 'string' },
        mqttload: { type: 'string' },
        out: { type: 'string' },
        help: { type: 'boolean' },
      },
    }).values;
  } catch (err) {
    fail(`${(err as Error).message}\n${HELP}`);
  }
  if (v.help === true) {
    process.stdout.write(`${HELP}\n`);
    process.exit(0);
  }
  const quick = v.quick === true;
  const brokers = ((v.brokers as string | undefined) ?? TARGET_NAMES.join(',')).split(',') as TargetName[];
  for (const b of brokers) if (!BENCH_TARGET_NAMES.includes(b)) fail(`--brokers: unknown broker ${b} (${BENCH_TARGET_NAMES.join(', ')})`);
  const named = typeof v.scenarios === 'string' ? v.scenarios.split(',').filter((n) => n !== '') : null;
  const isFleet = (n: string): n is FleetScenario => (FLEET_SCENARIOS as readonly string[]).includes(n);
  for (const n of named ?? []) {
    if (n !== 'all' && !MQTTLOAD_SCENARIOS.includes(n) && !isFleet(n)) {
      fail(`--scenarios: unknown scenario ${n} (${SCENARIO_NAMES}, ${FLEET_SCENARIOS.join(',')} or all)`);
    }
  }
  const all = named === null || named.includes('all');
  const detect = v.detect as string | undefined;
  if (detect !== undefined && detect !== 'rst' && detect !== 'keepalive')
    fail(`--detect must be rst or keepalive, got ${JSON.stringify(detect)}`);
  const rpd = v['rate-per-device'] as string | undefined;
  const fleetTimeout = v['fleet-timeout'] as string | undefined;
  const outDir = resolve((v.out as string | undefined) ?? join(REPO, 'bench', 'results'));
  const defaultOut = outDir === resolve(REPO, 'bench', 'results');
  return {
    quick,
    cpuProf: v['cpu-prof'] === true,
    durationS: num(v.duration as string | undefined, '--duration', quick ? 1 : 5),
    warmupS: num(v.warmup as string | undefined, '--warmup', quick ? 0.5 : 1),
    rate: num(v.rate as string | undefined, '--rate', 5000),
    rate2: num(v.rate2 as string | undefined, '--rate2', 50_000),
    loadgens: loadgensOf(v.loadgens as string | undefined),
    runs: Math.floor(num(v.runs as string | undefined, '--runs', 1)),
    idleConns: Math.floor(num(v['idle-conns'] as string | undefined, '--idle-conns', quick ? 1000 : 10_000)),
    idleHoldS: quick ? 2 : 5,
    mqttloadSrc: resolve((v.mqttload as string | undefined) ?? defaultMqttloadSrc()),
    brokers: [...new Set(brokers)],
    only: all ? null : (named ?? []).filter((n) => MQTTLOAD_SCENARIOS.includes(n)),
    fleet: named === null ? [] : named.includes('all') ? [...FLEET_SCENARIOS] : [...new Set(named.filter(isFleet))],
    fleetOptions: {
      clients: Math.floor(num(v.clients as string | undefined, '--clients', quick ? 1000 : 10_000)),
      ratePerDevice: rpd === undefined ? null : num(rpd, '--rate-per-device', 1),
      findMax: v['find-max'] === true,
      detect: detect === undefined ? null : detect,
      timeoutS: fleetTimeout === undefined ? null : num(fleetTimeout, '--fleet-timeout', 1),
      outDir: defaultOut ? null : outDir,
    },
    outDir,
  };
}

function scenarios(o: Options): Scenario[] {
  const timing = ['-d', String(o.durationS), '-w', String(o.warmupS), '-D', '10'];
  const fanin = (q: number) => ['-s', 'fanin', '-q', String(q), '-P', '8', '-N', '1', '-S', '64', ...timing];
  const fanout = (q: number) => ['-s', 'fanout', '-q', String(q), '-P', '1', '-N', '100', '-S', '64', ...timing];
  const load = (name: string, args: string[], rate = 0): Scenario => ({
    name,
    args: rate > 0 ? [...args, '-r', String(rate)] : args,
    idle: false,
    rate,
  });
  const all: Scenario[] = [
    load('fanin-q0', fanin(0)),
    load('fanin-q1', fanin(1)),
    load('fanin-q2', fanin(2)),
    load('fanout-q0', fanout(0)),
    load('fanout-q1', fanout(1)),
    load('latency-q1', fanin(1), o.rate),
    load('rate-q1-half', fanin(1), o.rate2),
    { name: 'idle', args: ['-s', 'idle', '-C', String(o.idleConns), '-T', String(o.idleHoldS)], idle: true, rate: 0 },
  ];
  if (o.only === null) return all;
  return all.filter((s) => o.only?.includes(s.name));
}

function buildMqttload(src: string, tmp: string): string {
  if (!existsSync(join(src, 'mqttload.c')) || !existsSync(join(src, 'Makefile'))) {
    fail(`mqttload source not found in ${src} (mqttload.c and Makefile); pass its folder with --mqttload DIR`);
  }
  const bin = join(tmp, 'mqttload');
  const r = spawnSync('make', ['-s', '-C', src, `BIN=${bin}`], { encoding: 'utf8' });
  if (r.error !== undefined) fail(`cannot run make (Debian packages make and gcc): ${r.error.message}`);
  if (r.status !== 0) fail(`building mqttload failed (Debian package gcc):\n${r.stderr}`);
  return bin;
}

function runDeadlineS(s: Scenario, o: Options): number {
  return s.idle ? o.idleHoldS + RUN_SLACK_S + 60 : o.warmupS + o.durationS + 10 + RUN_SLACK_S;
}

/** /proc readings of every broker process and of mqttload at one instant. */
interface Snapshot {
  procs: (ProcSample | null)[];
  /** Each mqttload process (one unless --loadgens). */
  loadgens: (ProcSample | null)[];
}

/** System calls of a window per published message (the window's rate over mqttload's). */
function perMsg(calls: number | null | undefined, wallS: number | undefined, sentPerS: number, idle: boolean): number | null {
  if (calls == null || wallS === undefined || wallS <= 0 || sentPerS <= 0 || idle) return null;
  return calls / wallS / sentPerS;
}

function snapshot(t: Target, loadgenPids: readonly number[]): Snapshot {
  return { procs: t.procs.map((p) => sampleProc(p.pid)), loadgens: loadgenPids.map((pid) => sampleProc(pid)) };
}

interface Load {
  mqttload: Record<string, unknown> | null;
  start: Snapshot | null;
  end: Snapshot | null;
  /** Why there is no result line, when there is none. */
  error: string | null;
  /** Window marks read late or not where planned. */
  notes: string[];
  /** The group-commit counters (raftmq-disk, raftmq-cluster-disk's leader) at the window's start and end. */
  disk: { start: Promise<DiskCounters | null> | null; end: Promise<DiskCounters | null> | null };
}

/** A window mark this much after its time is reported: the bench itself was starved of CPU. */
const MARK_LATE_WARN_MS = 100;

/** Runs mqttload once against `t`. At the start and at the end of the measurement window (timed from
 * mqttload's "setup done"; for idle, its spawn and "ramp done") the bench reads /proc of every broker
 * process and of mqttload, and sends raftmq's processes SIGUSR2 so the second event-loop-delay report
 * covers the window. */
async function runLoad(bin: string, s: Scenario, t: Target, o: Options): Promise<Load> {
  const base = [...s.args, '-H', HOST, '-p', String(t.port), '-b', String(t.serving.pid), '-v'];
  const label = `${s.name}/${t.name}`;
  const k = splittable(s.args, o.loadgens) ? o.loadgens : 1;
  const argsOf = (j: number) => (k === 1 ? [...base, '-l', label] : argsFor(base, j, k, label));
  const children = Array.from({ length: k }, (_, j) => spawn(bin, argsOf(j), { stdio: ['ignore', 'pipe', 'pipe'] }));
  const pids = children.map((c) => c.pid ?? 0);
  const load: Load = { mqttload: null, start: null, end: null, error: null, notes: [], disk: { start: null, end: null } };
  const outs = children.map(() => '');
  const errs = children.map(() => '');
  let setups = 0;
  const timers: NodeJS.Timeout[] = [];
  const usr2 = (): void => {
    if (t.raftmq) for (const p of t.procs) p.signal('SIGUSR2');
  };
  const mark = (which: 'start' | 'end', dueMs: number | null = null): void => {
    load[which] = snapshot(t, pids);
    load.disk[which] = t.diskCounters();
    usr2();
    const late = dueMs === null ? 0 : performance.now() - dueMs;
    if (late > MARK_LATE_WARN_MS) load.notes.push(`window ${which} read ${late.toFixed(0)} ms late`);
  };
  const markAt = (which: 'start' | 'end', afterS: number): void => {
    const due = performance.now() + afterS * 1000;
    timers.push(setTimeout(() => mark(which, due), afterS * 1000));
  };
  if (s.idle) mark('start');
  children.forEach((child, j) => {
    child.stdout.setEncoding('utf8').on('data', (c: string) => {
      outs[j] += c;
    });
    child.stderr.setEncoding('utf8').on('data', (c: string) => {
      const err = errs[j] as string;
      const seen = (what: string) => !err.includes(what) && `${err.slice(-64)}${c}`.includes(what);
      const setup = !s.idle && seen('setup done');
      const ramp = s.idle && seen('ramp done');
      errs[j] += c;
      // Several processes: the window is timed from the first one's setup (the others' windows
      // start a few ms later; timed from the last one's, the first could be gone at the end mark).
      if (setup && ++setups === 1) {
        markAt('start', o.warmupS);
        markAt('end', o.warmupS + o.durationS);
      }
      if (ramp) load.end = snapshot(t, pids);
    });
  });
  const exits = children.map((child) => once(child, 'exit'));
  const watchdog = setTimeout(() => {
    for (const child of children) child.kill('SIGKILL');
  }, runDeadlineS(s, o) * 1000);
  const codes = ((await Promise.all(exits)) as [number | null][]).map(([c]) => c);
  const code = codes.find((c) => c !== 0) ?? 0;
  clearTimeout(watchdog);
  for (const tm of timers) clearTimeout(tm);
  // A window end not read yet (the bench was late, or mqttload ended early): the brokers' figures
  // up to now; mqttload's own /proc is gone once it was reaped.
  if (load.start !== null && load.end === null && code === 0) {
    load.notes.push('window end read at mqttload exit (drain and close included)');
    mark('end');
  } else if (s.idle) usr2();
  const lines: Record<string, unknown>[] = [];
  children.forEach((_, j) => {
    const line = (outs[j] as string).trim().split('\n').pop() ?? '';
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      const which = k === 1 ? 'mqttload' : `mqttload #${j}`;
      load.error ??= `${which} exited ${codes[j]} without a result: ${(errs[j] as string).slice(-500).trim()}`;
    }
  });
  if (load.error === null) load.mqttload = mergeResults(lines);
  return load;
}

/** Conditions under which a run's figures are not a broker's capacity, but still reported. */
function warningsOf(r: Record<string, unknown> | null, s: Scenario, loadgenPct: number | null, other: number | null): string[] {
  if (r === null) return [];
  const w: string[] = [];
  if (other !== null && other > HOST_OTHER_WARN_PCT) w.push(`host_other_pct ${other.toFixed(0)} > ${HOST_OTHER_WARN_PCT}`);
  const lg = loadgenPct ?? (r.lg_cpu_pct as number | undefined);
  const noRatio = s.idle ? '' : ', not counted for a ratio';
  if (lg !== undefined && lg > 90) w.push(`load generator at ${lg.toFixed(0)}% CPU: it may have set the pace${noRatio}`);
  else if (!s.idle && lg !== undefined && lg > LOADGEN_RATIO_MAX_PCT) {
    w.push(`load generator at ${lg.toFixed(0)}% CPU (> ${LOADGEN_RATIO_MAX_PCT})${noRatio}`);
  }
  if (!s.idle && (r.lag_forgiven as number) > 0) w.push(`lag forgiven ${String(r.lag_forgiven)} times`);
  if (s.rate > 0 && (r.rate_skipped as number) > 0) w.push(`rate not held: ${String(r.rate_skipped)} skipped`);
  return w;
}

/** mqttload's host_other_pct (CPU of neither the serving broker nor mqttload, % of one core; over the
 * ramp for idle) less the other processes of the target: a cluster's followers are not "other". */
function hostOther(r: Record<string, unknown> | null, s: Scenario, procs: ProcResult[]): number | null {
  const other = r?.[s.idle ? 'ramp_host_other_pct' : 'host_other_pct'];
  if (typeof other !== 'number') return null;
  return procs.slice(1).reduce((sum, p) => sum - (p.cpuPct ?? 0), other);
}

/** Conditions that make a run a failure: the bench exits non-zero. */
function failuresOf(r: Record<string, unknown> | null, s: Scenario): string[] {
  if (r === null) return [];
  const f: string[] = [];
  if (r.ok !== true) f.push(`mqttload not ok: ${String(r.error ?? '')}`);
  if (typeof r.lost === 'number' && r.lost > 0) f.push(`lost ${r.lost} messages`);
  if (s.idle && typeof r.failed === 'number' && r.failed > 0) f.push(`${r.failed} connections failed`);
  return f;
}

function profDirOf(o: Options, s: Scenario, name: TargetName, run: number): string | null {
  if (!o.cpuProf || name.startsWith('mosquitto')) return null;
  return join(o.outDir, `cpu-${stamp}-${s.name}-${name}${o.runs > 1 ? `-${run}` : ''}`);
}

/** fdatasync calls per second of group commits over the window, and entries made durable per
 * call (raftmq-disk, raftmq-cluster-disk's leader); null for other targets or a window without
 * both readings. */
async function windowDiskRates(load: Load): Promise<RunResult['disk']> {
  const [a, b] = await Promise.all([load.disk.start, load.disk.end]);
  return diskRates(a ?? null, b ?? null);
}

async function runOne(bin: string, s: Scenario, name: TargetName, run: number, o: Options, tmp: string): Promise<RunResult> {
  const profDir = profDirOf(o, s, name, run);
  const res: RunResult = {
    scenario: s.name,
    broker: name,
    run,
    args: s.args,
    rate: s.rate,
    idle: s.idle,
    mqttload: null,
    procs: [],
    loadgen: null,
    hostOtherPct: null,
    cpuProfile: profDir,
    failures: [],
    warnings: [],
  };
  let t: Target;
  try {
    t = await startTarget(name, tmp, profDir);
  } catch (err) {
    res.failures.push(`start: ${(err as Error).message}`);
    process.stdout.write(`${summaryLine(res)}\n`);
    return res;
  }
  let load: Load = { mqttload: null, start: null, end: null, error: null, notes: [], disk: { start: null, end: null } };
  const died = new Set<string>();
  try {
    load = await runLoad(bin, s, t, o);
    res.failures.push(...(await t.problems()));
    for (const p of t.procs) if (p.ended !== null) died.add(p.label);
  } catch (err) {
    res.failures.push(`run: ${(err as Error).message}`);
  } finally {
    await t.stop();
  }
  res.disk = await windowDiskRates(load);
  const r = load.mqttload;
  res.mqttload = r;
  if (load.error !== null) res.failures.push(load.error);
  res.warnings.push(...load.notes);
  // Messages published per second of mqttload's window: CPU per message = CPU rate / message rate,
  // so the bench's window (a few ms off mqttload's) cancels out.
  const sentPerS =
    r !== null && typeof r.sent === 'number' && typeof r.duration_s === 'number' && r.duration_s > 0 ? r.sent / r.duration_s : 0;
  t.procs.forEach((p, i) => {
    const w = windowOf(load.start?.procs[i] ?? null, load.end?.procs[i] ?? null);
    const reports = p.loopDelays().filter((d) => d.on === 'SIGUSR2');
    const pr: ProcResult = {
      label: p.label,
      role: t.roles[i] ?? 'broker',
      pid: p.pid,
      cpuPct: w?.cpuPct ?? null,
      cpuS: w?.cpuS ?? null,
      windowS: w?.wallS ?? null,
      rssKb: w?.rssKb ?? null,
      cpuUsPerMsg: w !== null && sentPerS > 0 && !s.idle ? (w.cpuPct * 1e4) / sentPerS : null,
      writesPerMsg: perMsg(w?.writes, w?.wallS, sentPerS, s.idle),
      readsPerMsg: perMsg(w?.reads, w?.wallS, sentPerS, s.idle),
      loopDelay: t.raftmq && reports.length >= 2 ? (reports[1] ?? null) : null,
    };
    res.procs.push(pr);
    // A process that died is a failure already.
    if (t.raftmq && pr.loopDelay === null && !died.has(p.label)) res.warnings.push(`${p.label}: no event-loop-delay report`);
    if (w === null && load.error === null && !died.has(p.label)) res.warnings.push(`${p.label}: no /proc window`);
  });
  // Several load generators: the highest one's CPU is what may set the pace; the others count as
  // neither "other" nor broker.
  const lws = (load.start?.loadgens ?? []).map((a, j) => windowOf(a, load.end?.loadgens[j] ?? null));
  const lw = lws.every((w) => w !== null) && lws.length > 0 ? lws : null;
  res.loadgen =
    lw === null
      ? null
      : {
          cpuPct: Math.max(...lw.map((w) => w.cpuPct)),
          rssKb: lw.reduce((a, w) => a + w.rssKb, 0),
          ...(lw.length > 1 ? { processes: lw.length, totalPct: lw.reduce((a, w) => a + w.cpuPct, 0) } : {}),
        };
  res.hostOtherPct = hostOther(r, s, res.procs);
  res.warnings.unshift(...warningsOf(r, s, res.loadgen?.cpuPct ?? null, res.hostOtherPct));
  res.failures.push(...failuresOf(r, s));
  process.stdout.write(`${summaryLine(res)}\n`);
  return res;
}

function mosquittoVersion(): string {
  const r = spawnSync(MOSQUITTO, ['-h'], { encoding: 'utf8' });
  return (`${r.stdout ?? ''}`.split('\n')[0] ?? '').trim() || 'mosquitto (version unknown)';
}

const stamp = new Date().toISOString().replace(/[:.]/g, '-');

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  if (o.brokers.some((b) => b.startsWith('mosquitto')) && !existsSync(MOSQUITTO))
    fail(`${MOSQUITTO} not found: install the Debian package mosquitto`);
  if (o.brokers.some((b) => !b.startsWith('mosquitto')) && !existsSync(CLI)) fail(`${CLI} not found: run npm run build first`);
  if (o.fleet.length > 0 && !existsSync(FLEET_JS)) fail(`${FLEET_JS} not found: run npm run build first`);
  const loads = scenarios(o);
  const tmp = mkdtempSync(join(tmpdir(), 'raftmq-bench-'));
  const bin = loads.length > 0 ? buildMqttload(o.mqttloadSrc, tmp) : '';
  mkdirSync(o.outDir, { recursive: true });
  const meta = {
    date: new Date().toISOString(),
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? 'unknown',
    node: process.version,
    raftmq: (JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as { version: string }).version,
    commit: spawnSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: REPO, encoding: 'utf8' }).stdout.trim(),
    mosquitto: mosquittoVersion(),
    quick: o.quick,
    durationS: o.durationS,
    warmupS: o.warmupS,
    rate: o.rate,
    rate2: o.rate2,
    loadgens: o.loadgens,
    runs: o.runs,
    clockTicks: clockTicks(),
    cpuProf: o.cpuProf,
    ...(o.fleet.length > 0 ? { fleet: { scenarios: o.fleet, ...o.fleetOptions } } : {}),
  };
  const runs: RunResult[] = [];
  // Runs of one scenario alternate between the brokers, so a slow drift of the machine spreads over all.
  for (const s of loads) {
    for (let run = 1; run <= o.runs; run++) {
      for (const name of o.brokers) runs.push(await runOne(bin, s, name, run, o, tmp));
    }
  }
  const fleet = o.fleet.length > 0 ? await runFleet(o, tmp) : null;
  rmSync(tmp, { recursive: true, force: true });
  const rows: Row[] = rowsOf(runs, LOADGEN_RATIO_MAX_PCT);
  const base = join(o.outDir, stamp);
  const md = markdown(rows, meta, LOADGEN_RATIO_MAX_PCT, fleet);
  const fleetJson = fleet === null ? {} : { fleet: fleet.runs, fleetSkipped: fleet.skipped };
  writeFileSync(`${base}.json`, `${JSON.stringify({ meta, rows, runs, ...fleetJson }, null, 2)}\n`);
  writeFileSync(`${base}.md`, `${md}\n`);
  writeFileSync(`${base}.svg`, svg(rows, meta, LOADGEN_RATIO_MAX_PCT, fleet));
  process.stdout.write(`\n${md}\nbench: wrote ${base}.json, ${base}.md and ${base}.svg\n`);
  const failed = runs.filter((r) => r.failures.length > 0);
  const fleetFailed = fleet?.runs.filter((r) => r.failures.length > 0) ?? [];
  if (failed.length > 0 || fleetFailed.length > 0) {
    for (const r of failed) process.stderr.write(`bench: FAILED ${r.scenario}/${r.broker} run ${r.run}: ${r.failures.join('; ')}\n`);
    for (const r of fleetFailed) process.stderr.write(`bench: FAILED ${r.scenario}/${r.target}: ${r.failures.join('; ')}\n`);
    process.exitCode = 1;
  }
}

/** The fleet scenarios, one child after the other: each scenario on every broker it supports. */
async function runFleet(o: Options, tmp: string): Promise<FleetSection> {
  const section: FleetSection = { runs: [], skipped: [] };
  // A fleet child leads a process group of its own, out of the terminal's reach: take it down too.
  const onSignal = (sig: NodeJS.Signals): void => {
    killRunningFleetChild();
    rmSync(tmp, { recursive: true, force: true });
    process.stderr.write(`bench: ${sig}: stopped\n`);
    process.exit(sig === 'SIGINT' ? 130 : 143);
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    for (const s of o.fleet) {
      for (const name of o.brokers) {
        const skip = fleetSkip(s, name);
        if (skip !== null) {
          section.skipped.push(`${s}/${name}: ${skip}`);
          process.stdout.write(`${s}/${name} skipped: ${skip}\n`);
          continue;
        }
        const args = fleetArgs(s, name, o.fleetOptions).join(' ');
        process.stdout.write(`${s}/${name}: node build/bench/fleet.js ${args} (deadline ${fleetTimeoutS(s, o.fleetOptions)} s)\n`);
        const r = await runFleetChild(s, name, o.fleetOptions, tmp);
        section.runs.push(r);
        process.stdout.write(`${fleetSummaryLine(r)}\n`);
      }
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
  return section;
}

main().catch((err: unknown) => fail((err as Error).stack ?? String(err)));
