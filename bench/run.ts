// The broker benchmark: raftmq and Mosquitto side by side in one run, driven by mqttload (an
// independent C load generator, /work/shared/tools/mqttload) with the same scenarios, one broker
// after the other, each on a fresh process. Writes bench/results/<stamp>.json and .md.
// Usage: npm run build && npm run bench -- [--quick] [--cpu-prof] [--help]
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { freePort } from '../jepsen-like-tests/net.js';

const REPO = resolve(dirname(new URL(import.meta.url).pathname), '..', '..');
const CLI = join(REPO, 'build', 'src', 'cli.js');
const MOSQUITTO = '/usr/sbin/mosquitto';
const HOST = '127.0.0.1';
/** host_other_pct above this means other processes took a visible share of the machine. */
const HOST_OTHER_WARN_PCT = 20;
const START_WAIT_MS = 15_000;
const STOP_WAIT_MS = 10_000;
const POLL_MS = 50;
/** Beyond mqttload's own phases: setup, drain, close and its overall deadline. */
const RUN_SLACK_S = 90;
/** The broker's limits that matter to these scenarios, set alike on both (raftmq's defaults). */
const MAX_QUEUED_MESSAGES = 10_000;
const MAX_INFLIGHT = 32;

type BrokerName = 'raftmq' | 'mosquitto';

interface Scenario {
  name: string;
  args: string[];
  idle: boolean;
}

interface Options {
  quick: boolean;
  cpuProf: boolean;
  durationS: number;
  warmupS: number;
  rate: number;
  idleConns: number;
  idleHoldS: number;
  mqttloadSrc: string;
  brokers: BrokerName[];
  only: string[] | null;
  outDir: string;
}

interface LoopDelay {
  p50Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
  resolutionMs: number;
  samples: number;
}

interface Result {
  scenario: string;
  broker: BrokerName;
  args: string[];
  mqttload: Record<string, unknown> | null;
  loopDelay: LoopDelay | null;
  cpuProfile: string | null;
  warnings: string[];
}

const HELP = `npm run bench -- [options]
  --quick              about a one-minute smoke run (short windows, 1000 idle connections)
  --duration S         measurement window per scenario (default 5)
  --warmup S           warm-up before the window (default 1)
  --rate N             total publishes/s of the fixed-rate latency run (default 5000)
  --idle-conns N       idle connections (default 10000)
  --scenarios a,b      only these scenarios (${'fanin-q0,fanin-q1,fanin-q2,fanout-q0,fanout-q1,latency-q1,idle'})
  --brokers a,b        raftmq,mosquitto (default both)
  --cpu-prof           run raftmq under node --cpu-prof; profiles go to the results folder
  --mqttload DIR       mqttload source folder (default ../shared/tools/mqttload beside the repository)
  --out DIR            results folder (default bench/results)`;

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

/** The mqttload source: --mqttload, else tools/ beside this checkout, else beside the main
 * checkout (a git worktree lives elsewhere but shares the main checkout's .git). */
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
        'idle-conns': { type: 'string' },
        scenarios: { type: 'string' },
        brokers: { type: 'string' },
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
  const brokers = ((v.brokers as string | undefined) ?? 'raftmq,mosquitto').split(',') as BrokerName[];
  for (const b of brokers) if (b !== 'raftmq' && b !== 'mosquitto') fail(`--brokers: unknown broker ${b}`);
  return {
    quick,
    cpuProf: v['cpu-prof'] === true,
    durationS: num(v.duration as string | undefined, '--duration', quick ? 1 : 5),
    warmupS: num(v.warmup as string | undefined, '--warmup', quick ? 0.5 : 1),
    rate: num(v.rate as string | undefined, '--rate', 5000),
    idleConns: Math.floor(num(v['idle-conns'] as string | undefined, '--idle-conns', quick ? 1000 : 10_000)),
    idleHoldS: quick ? 2 : 5,
    mqttloadSrc: resolve((v.mqttload as string | undefined) ?? defaultMqttloadSrc()),
    brokers,
    only: typeof v.scenarios === 'string' ? v.scenarios.split(',') : null,
    outDir: resolve((v.out as string | undefined) ?? join(REPO, 'bench', 'results')),
  };
}

function scenarios(o: Options): Scenario[] {
  const timing = ['-d', String(o.durationS), '-w', String(o.warmupS), '-D', '10'];
  const fanin = (q: number) => ['-s', 'fanin', '-q', String(q), '-P', '8', '-N', '1', '-S', '64', ...timing];
  const fanout = (q: number) => ['-s', 'fanout', '-q', String(q), '-P', '1', '-N', '100', '-S', '64', ...timing];
  const all: Scenario[] = [
    { name: 'fanin-q0', args: fanin(0), idle: false },
    { name: 'fanin-q1', args: fanin(1), idle: false },
    { name: 'fanin-q2', args: fanin(2), idle: false },
    { name: 'fanout-q0', args: fanout(0), idle: false },
    { name: 'fanout-q1', args: fanout(1), idle: false },
    { name: 'latency-q1', args: [...fanin(1), '-r', String(o.rate)], idle: false },
    { name: 'idle', args: ['-s', 'idle', '-C', String(o.idleConns), '-T', String(o.idleHoldS)], idle: true },
  ];
  if (o.only === null) return all;
  for (const n of o.only) if (!all.some((s) => s.name === n)) fail(`--scenarios: unknown scenario ${n}`);
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

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

async function portOpen(port: number): Promise<boolean> {
  return new Promise((resolveOpen) => {
    const s = connect(port, HOST);
    s.once('connect', () => {
      s.destroy();
      resolveOpen(true);
    });
    s.once('error', () => resolveOpen(false));
  });
}

/** A broker process this run started; stopped only by its PID. */
class Broker {
  stdout = '';
  stderr = '';
  private constructor(
    readonly name: BrokerName,
    readonly proc: ChildProcess,
    readonly port: number,
  ) {
    proc.stdout?.setEncoding('utf8').on('data', (c: string) => {
      this.stdout += c;
    });
    proc.stderr?.setEncoding('utf8').on('data', (c: string) => {
      this.stderr += c;
    });
  }

  static async start(name: BrokerName, tmp: string, profDir: string | null): Promise<Broker> {
    const port = await freePort();
    let proc: ChildProcess;
    if (name === 'raftmq') {
      const prof = profDir === null ? [] : ['--cpu-prof', '--cpu-prof-dir', profDir];
      proc = spawn(process.execPath, [...prof, CLI, '--host', HOST, '--port', String(port), '--log-level', 'warn'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } else {
      const conf = join(tmp, `mosquitto-${port}.conf`);
      writeFileSync(
        conf,
        [
          `listener ${port} ${HOST}`,
          'allow_anonymous true',
          'persistence false',
          `max_queued_messages ${MAX_QUEUED_MESSAGES}`,
          `max_inflight_messages ${MAX_INFLIGHT}`,
          'log_dest stderr',
          'log_type error',
          'log_type warning',
          '',
        ].join('\n'),
      );
      proc = spawn(MOSQUITTO, ['-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] });
    }
    const b = new Broker(name, proc, port);
    const deadline = Date.now() + START_WAIT_MS;
    while (!(await portOpen(port))) {
      if (proc.exitCode !== null) fail(`${name} exited with ${proc.exitCode} at start: ${b.stderr}${b.stdout}`);
      if (Date.now() > deadline) {
        await b.stop();
        fail(`${name} did not listen on ${HOST}:${port} within ${START_WAIT_MS} ms`);
      }
      await sleep(POLL_MS);
    }
    // raftmq installs its SIGUSR2 handler right after its listener opens.
    await sleep(POLL_MS * 4);
    return b;
  }

  get pid(): number {
    return this.proc.pid as number;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(sig);
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = once(this.proc, 'exit');
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), STOP_WAIT_MS);
    await exited;
    clearTimeout(timer);
  }

  /** The event-loop-delay reports raftmq logged (src/cli.ts), oldest first. */
  loopDelays(): (LoopDelay & { on: string })[] {
    const out: (LoopDelay & { on: string })[] = [];
    for (const line of this.stdout.split('\n')) {
      if (!line.includes('"event-loop-delay"')) continue;
      try {
        out.push(JSON.parse(line) as LoopDelay & { on: string });
      } catch {
        // a torn line says nothing
      }
    }
    return out;
  }
}

function runDeadlineS(s: Scenario, o: Options): number {
  return s.idle ? o.idleHoldS + RUN_SLACK_S + 60 : o.warmupS + o.durationS + 10 + RUN_SLACK_S;
}

/** Runs mqttload once against `b`. For raftmq, SIGUSR2 at the start and at the end of the
 * measurement window (timed from mqttload's "setup done"), so the second report covers the window. */
async function runLoad(bin: string, s: Scenario, b: Broker, o: Options): Promise<Record<string, unknown> | null> {
  const args = [...s.args, '-H', HOST, '-p', String(b.port), '-b', String(b.pid), '-l', `${s.name}/${b.name}`, '-v'];
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const timers: NodeJS.Timeout[] = [];
  const raft = b.name === 'raftmq';
  if (raft && s.idle) b.signal('SIGUSR2');
  child.stdout.setEncoding('utf8').on('data', (c: string) => {
    out += c;
  });
  child.stderr.setEncoding('utf8').on('data', (c: string) => {
    const fresh = !err.includes('setup done') && c.includes('setup done');
    err += c;
    if (raft && fresh) {
      timers.push(setTimeout(() => b.signal('SIGUSR2'), o.warmupS * 1000));
      timers.push(setTimeout(() => b.signal('SIGUSR2'), (o.warmupS + o.durationS) * 1000));
    }
  });
  const exited = once(child, 'exit');
  const watchdog = setTimeout(() => child.kill('SIGKILL'), runDeadlineS(s, o) * 1000);
  const [code] = (await exited) as [number | null];
  clearTimeout(watchdog);
  for (const t of timers) clearTimeout(t);
  if (raft && s.idle) b.signal('SIGUSR2');
  const line = out.trim().split('\n').pop() ?? '';
  try {
    return JSON.parse(line) as Record<string, unknown>;
  } catch {
    process.stderr.write(`bench: mqttload ${s.name}/${b.name} exited ${code} without a result: ${err.slice(-500)}\n`);
    return null;
  }
}

function warningsOf(r: Record<string, unknown> | null, s: Scenario): string[] {
  if (r === null) return ['no result'];
  const w: string[] = [];
  // An idle run measures CPU over its ramp only.
  const other = (s.idle ? r.ramp_host_other_pct : r.host_other_pct) as number | undefined;
  if (other !== undefined && other > HOST_OTHER_WARN_PCT) w.push(`host_other_pct ${other.toFixed(0)} > ${HOST_OTHER_WARN_PCT}`);
  const lg = r.lg_cpu_pct as number | undefined;
  if (lg !== undefined && lg > 90) w.push(`load generator at ${lg.toFixed(0)}% CPU: it may have set the pace`);
  if (r.ok !== true) w.push(`mqttload not ok: ${String(r.error ?? '')}`);
  if (!s.idle && (r.lag_forgiven as number) > 0) w.push(`lag forgiven ${String(r.lag_forgiven)} times`);
  if (s.name.startsWith('latency') && (r.rate_skipped as number) > 0) w.push(`rate not held: ${String(r.rate_skipped)} skipped`);
  return w;
}

async function runOne(bin: string, s: Scenario, name: BrokerName, o: Options, tmp: string): Promise<Result> {
  const profDir = o.cpuProf && name === 'raftmq' ? join(o.outDir, `cpu-${stamp}-${s.name}`) : null;
  const b = await Broker.start(name, tmp, profDir);
  let r: Record<string, unknown> | null;
  try {
    r = await runLoad(bin, s, b, o);
  } finally {
    await b.stop();
  }
  const reports = b.loopDelays().filter((d) => d.on === 'SIGUSR2');
  const loopDelay = reports.length >= 2 ? (reports[1] as LoopDelay) : null;
  const warnings = warningsOf(r, s);
  if (name === 'raftmq' && loopDelay === null) warnings.push('no event-loop-delay report');
  const res: Result = { scenario: s.name, broker: name, args: s.args, mqttload: r, loopDelay, cpuProfile: profDir, warnings };
  process.stdout.write(`${summaryLine(res)}\n`);
  return res;
}

// ---- output ----

function f(v: unknown, digits = 0): string {
  return typeof v === 'number' && Number.isFinite(v)
    ? v.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits })
    : '–';
}

/** Event-loop delay beyond the 10 ms sampling interval, in ms. */
function eldExcess(d: LoopDelay | null, key: 'p99Ms' | 'maxMs'): string {
  return d === null ? '–' : f(Math.max(0, d[key] - d.resolutionMs), 1);
}

function summaryLine(r: Result): string {
  const m = r.mqttload ?? {};
  const head = `${r.scenario.padEnd(11)} ${r.broker.padEnd(10)}`;
  const warn = r.warnings.length > 0 ? `  WARN ${r.warnings.join('; ')}` : '';
  if (r.scenario === 'idle') {
    return `${head} ${f(m.connected)} conns ${f(m.bytes_per_conn)} B/conn ramp cpu ${f(m.ramp_broker_cpu_pct)}% other ${f(m.ramp_host_other_pct)}%${warn}`;
  }
  return `${head} ${f(m.delivered_per_s).padStart(9)}/s p50 ${f(m.lat_p50_us)} us p99 ${f(m.lat_p99_us)} us cpu ${f(m.broker_cpu_pct)}% other ${f(m.host_other_pct)}%${warn}`;
}

function markdown(results: Result[], meta: Record<string, unknown>): string {
  const rows = [
    '| scenario | broker | delivered/s | p50 µs | p99 µs | p99.9 µs | lost | dup | broker CPU % | RSS MiB | loadgen CPU % | host_other % | ELD p99 / max ms |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  const idle = [
    '| scenario | broker | connections | connects/s | bytes/conn | bytes/conn at end | RSS MiB | ramp broker CPU % | ramp host_other % | ELD p99 / max ms |',
    '|---|---|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  for (const r of results) {
    const m = r.mqttload ?? {};
    const eld = r.broker === 'raftmq' ? `${eldExcess(r.loopDelay, 'p99Ms')} / ${eldExcess(r.loopDelay, 'maxMs')}` : 'n/a';
    const rss =
      typeof m.broker_rss_kb === 'number'
        ? f(m.broker_rss_kb / 1024, 1)
        : typeof m.rss_after_kb === 'number'
          ? f(m.rss_after_kb / 1024, 1)
          : '–';
    const warn = r.warnings.length > 0 ? ' ⚠' : '';
    if (r.scenario === 'idle') {
      idle.push(
        `| ${r.scenario} | ${r.broker}${warn} | ${f(m.connected)} | ${f(m.connects_per_s)} | ${f(m.bytes_per_conn)} | ${f(m.bytes_per_conn_end)} | ${rss} | ${f(m.ramp_broker_cpu_pct)} | ${f(m.ramp_host_other_pct)} | ${eld} |`,
      );
      continue;
    }
    rows.push(
      `| ${r.scenario} | ${r.broker}${warn} | ${f(m.delivered_per_s)} | ${f(m.lat_p50_us)} | ${f(m.lat_p99_us)} | ${f(m.lat_p999_us)} | ${f(m.lost)} | ${f(m.duplicates)} | ${f(m.broker_cpu_pct)} | ${rss} | ${f(m.lg_cpu_pct)} | ${f(m.host_other_pct)} | ${eld} |`,
    );
  }
  const warnings = results.filter((r) => r.warnings.length > 0).map((r) => `- ${r.scenario}/${r.broker}: ${r.warnings.join('; ')}`);
  return [
    `Run ${String(meta.date)}: ${String(meta.cpus)} × ${String(meta.cpuModel)}, Node ${String(meta.node)}, ${String(meta.mosquitto)}, window ${String(meta.durationS)} s after ${String(meta.warmupS)} s warm-up${meta.quick === true ? ' (--quick)' : ''}.`,
    '',
    ...rows,
    '',
    ...idle,
    '',
    ...(warnings.length > 0 ? ['Warnings (⚠):', '', ...warnings, ''] : []),
  ].join('\n');
}

function mosquittoVersion(): string {
  const r = spawnSync(MOSQUITTO, ['-h'], { encoding: 'utf8' });
  return (`${r.stdout ?? ''}`.split('\n')[0] ?? '').trim() || 'mosquitto (version unknown)';
}

const stamp = new Date().toISOString().replace(/[:.]/g, '-');

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  if (o.brokers.includes('mosquitto') && !existsSync(MOSQUITTO)) fail(`${MOSQUITTO} not found: install the Debian package mosquitto`);
  if (o.brokers.includes('raftmq') && !existsSync(CLI)) fail(`${CLI} not found: run npm run build first`);
  const tmp = mkdtempSync(join(tmpdir(), 'raftmq-bench-'));
  const bin = buildMqttload(o.mqttloadSrc, tmp);
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
    cpuProf: o.cpuProf,
  };
  const results: Result[] = [];
  for (const s of scenarios(o)) {
    for (const name of o.brokers) results.push(await runOne(bin, s, name, o, tmp));
  }
  const base = join(o.outDir, stamp);
  writeFileSync(`${base}.json`, `${JSON.stringify({ meta, results }, null, 2)}\n`);
  writeFileSync(`${base}.md`, `${markdown(results, meta)}\n`);
  process.stdout.write(`\n${markdown(results, meta)}\nbench: wrote ${base}.json and ${base}.md\n`);
}

main().catch((err: unknown) => fail((err as Error).stack ?? String(err)));
