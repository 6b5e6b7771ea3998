// Fleet benchmarks: many devices on raw mqtt-packet clients spread over load worker processes,
// against raftmq (one node), raftmq (three Raft nodes) or Mosquitto, each started by this run on
// loopback. Scenarios: fleet (telemetry in through a shared subscription, commands out),
// fleet-failover (kill -9 of the serving process, devices reconnect), connect-tls (connects/s and
// memory per connection, TLS and TCP). Every row carries the broker's and the load generator's CPU
// (/proc/PID/stat over the measured phase). Writes bench/results/fleet-*.json and prints a table;
// exits 1 naming what failed (dead broker, refused connections, lost messages or sessions).
// Usage: npm run build && node build/bench/fleet.js --scenario S --target T [options]
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { AuthHttpService } from './fleet/auth-http.js';
import { type Ctx, type Options, type Outcome, type Row, SCENARIOS, type Scenario } from './fleet/common.js';
import { runConnect } from './fleet/connect.js';
import { runFailover } from './fleet/failover.js';
import { makePki } from './fleet/pki.js';
import { Workers } from './fleet/pool.js';
import { MOSQUITTO, RAFTMQ_CLI, TARGETS, Target, type TargetKind } from './fleet/targets.js';
import { runFleet } from './fleet/telemetry.js';

const REPO = resolve(dirname(new URL(import.meta.url).pathname), '..', '..');

const HELP = `node build/bench/fleet.js --scenario fleet|fleet-failover|connect-tls --target raftmq|raftmq-cluster|mosquitto [options]
  --clients N              devices / connections (default 10000)
  --workers N              load worker processes (default 2)
  --mqtt 4|5               device protocol: 4 = 3.1.1 clean session 0, 5 = session expiry (default 5)
  --session-expiry S       MQTT 5 session expiry of devices (default 3600)
  --connect-window N       CONNECTs in flight during setup, all workers together (default 100)
  --keepalive S            device keep-alive (default 60; 5 with --detect keepalive)
 fleet-failover:
  --detect rst|keepalive   how devices notice the kill: the socket's reset (default), or only their
                           keep-alive (PINGREQ every keepalive s, dead after 1.5 x keepalive silent)
  --reconnect-deadline S   devices stop trying after this (default 60)
 fleet:
  --rate-per-device R      telemetry msg/s per device (default 1)
  --cmd-rate R             commands/s in total to every tenth device (default: that tenth x R)
  --warmup S               before the measured window (default 2)
  --window S               measured window (default 10)
  --find-max               step the rate up by --step-factor, at most --max-steps (default 1.5, 6),
                           stop at the first step with p99 > --p99-limit-ms (default 50) or loss
  --payload-bytes N        payload size (default 64, at least 24)
 all:
  --raftmq-arg FLAG        an extra raftmq flag for every node (repeatable, e.g. --raftmq-arg=--max-pending-connections=20000)
  --server-reference       three nodes: --cluster-server-reference with every node's address; devices
                           that get a CONNACK naming another node try it at once
  --auth-http              raftmq: every node asks a local HTTP service (started by this run, allowing
                           all) about each CONNECT (--auth-http-url); rows report its requests
  --out DIR                results folder (default bench/results)`;

function fail(message: string): never {
  process.stderr.write(`fleet: ${message}\n`);
  process.exit(2);
}

function parseOptions(argv: string[]): Options {
  let v: ReturnType<typeof parseArgs>['values'];
  try {
    v = parseArgs({
      args: argv,
      options: {
        scenario: { type: 'string' },
        target: { type: 'string' },
        clients: { type: 'string' },
        workers: { type: 'string' },
        mqtt: { type: 'string' },
        'session-expiry': { type: 'string' },
        'connect-window': { type: 'string' },
        keepalive: { type: 'string' },
        detect: { type: 'string' },
        'reconnect-deadline': { type: 'string' },
        'rate-per-device': { type: 'string' },
        'cmd-rate': { type: 'string' },
        warmup: { type: 'string' },
        window: { type: 'string' },
        'find-max': { type: 'boolean' },
        'max-steps': { type: 'string' },
        'step-factor': { type: 'string' },
        'p99-limit-ms': { type: 'string' },
        'payload-bytes': { type: 'string' },
        'raftmq-arg': { type: 'string', multiple: true },
        'server-reference': { type: 'boolean' },
        'auth-http': { type: 'boolean' },
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
  const str = (k: string): string | undefined => v[k] as string | undefined;
  const num = (k: string, dflt: number, min: number, max: number, int = true): number => {
    const s = str(k);
    const n = s === undefined ? dflt : Number(s);
    if (!Number.isFinite(n) || n < min || n > max || (int && !Number.isInteger(n)))
      fail(`--${k} must be ${int ? 'an integer' : 'a number'} in [${min}, ${max}], got ${JSON.stringify(s)}`);
    return n;
  };
  const scenario = str('scenario') as Scenario | undefined;
  if (scenario === undefined || !SCENARIOS.includes(scenario)) fail(`--scenario must be one of ${SCENARIOS.join(', ')}\n${HELP}`);
  const target = str('target') as TargetKind | undefined;
  if (target === undefined || !TARGETS.includes(target)) fail(`--target must be one of ${TARGETS.join(', ')}`);
  const detect = str('detect') ?? 'rst';
  if (detect !== 'rst' && detect !== 'keepalive') fail('--detect must be rst or keepalive');
  const mqtt = num('mqtt', 5, 4, 5);
  return {
    scenario,
    target,
    clients: num('clients', 10_000, 1, 60_000),
    workers: num('workers', 2, 1, 16),
    mqtt: mqtt === 4 ? 4 : 5,
    sessionExpiryS: num('session-expiry', 3600, 1, 4_294_967_295),
    connectWindow: num('connect-window', 100, 1, 10_000),
    keepaliveS: num('keepalive', detect === 'keepalive' ? 5 : 60, 1, 65_535),
    detect,
    reconnectDeadlineS: num('reconnect-deadline', 60, 1, 600),
    ratePerDevice: num('rate-per-device', 1, 0.001, 1000, false),
    cmdRate: str('cmd-rate') === undefined ? null : num('cmd-rate', 0, 0, 1_000_000, false),
    warmupS: num('warmup', 2, 0, 600, false),
    windowS: num('window', 10, 1, 600, false),
    findMax: v['find-max'] === true,
    maxSteps: num('max-steps', 6, 1, 20),
    stepFactor: num('step-factor', 1.5, 1.05, 10, false),
    p99LimitMs: num('p99-limit-ms', 50, 1, 60_000, false),
    payloadBytes: num('payload-bytes', 64, 24, 1_000_000),
    raftmqArgs: (v['raftmq-arg'] as string[] | undefined) ?? [],
    serverReference: v['server-reference'] === true,
    authHttp: v['auth-http'] === true,
    outDir: resolve(str('out') ?? join(REPO, 'bench', 'results')),
  };
}

function nofileLimit(): string {
  try {
    const m = /Max open files\s+(\S+)\s+(\S+)/.exec(readFileSync('/proc/self/limits', 'utf8'));
    return m === null ? 'unknown' : `soft ${m[1]}, hard ${m[2]}`;
  } catch {
    return 'unknown';
  }
}

function table(rows: Row[]): string {
  if (rows.length === 0) return '(no rows)';
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))];
  const cell = (v: unknown): string => (v === null || v === undefined ? '-' : String(v));
  // Transposed when there are few rows and many columns: one line per figure.
  if (rows.length <= 3 && keys.length > 12) {
    const lines = [`| figure | ${rows.map((_, i) => `row ${i + 1}`).join(' | ')} |`, `|---|${rows.map(() => '--:').join('|')}|`];
    for (const k of keys) lines.push(`| ${k} | ${rows.map((r) => cell(r[k])).join(' | ')} |`);
    return lines.join('\n');
  }
  const lines = [`| ${keys.join(' | ')} |`, `|${keys.map(() => '--:').join('|')}|`];
  for (const r of rows) lines.push(`| ${keys.map((k) => cell(r[k])).join(' | ')} |`);
  return lines.join('\n');
}

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  if (o.authHttp && (o.target === 'mosquitto' || o.scenario === 'connect-tls'))
    fail('--auth-http is for the raftmq targets of fleet and fleet-failover (Mosquitto has no HTTP authentication of its own)');
  if (o.target === 'mosquitto' && spawnSync('test', ['-x', MOSQUITTO]).status !== 0)
    fail(`${MOSQUITTO} not found: install the Debian package mosquitto`);
  if (o.target !== 'mosquitto' && spawnSync('test', ['-f', RAFTMQ_CLI]).status !== 0)
    fail(`${RAFTMQ_CLI} not found: run npm run build first`);
  mkdirSync(o.outDir, { recursive: true });
  const dir = mkdtempSync(join(tmpdir(), 'raftmq-fleet-'));
  const startedAt = new Date().toISOString();
  const workers = Workers.start(o.workers);
  const ctx: Ctx = { o, workers, dir };
  let outcome: Outcome = { rows: [], failures: ['run did not finish'], notes: [], details: {} };
  let target: Target | null = null;
  let pkiDir: string | null = null;
  let auth: AuthHttpService | null = null;
  try {
    if (o.scenario === 'connect-tls') {
      const pki = makePki();
      pkiDir = pki.dir;
      outcome = await runConnect(ctx, pki);
    } else {
      auth = o.authHttp ? await AuthHttpService.start() : null;
      const raftmqArgs = auth === null ? o.raftmqArgs : [...o.raftmqArgs, `--auth-http-url=${auth.url}`];
      target = await Target.start({ kind: o.target, tls: null, dir, raftmqArgs, serverReference: o.serverReference });
      outcome = o.scenario === 'fleet' ? await runFleet(ctx, target) : await runFailover(ctx, target);
      if (auth !== null) {
        for (const r of outcome.rows) r.authHttpRequests = auth.requests;
        if (auth.malformed > 0)
          outcome.failures.push(`${auth.malformed} of ${auth.requests} auth requests were not a POST of a JSON object with a client id`);
      }
    }
  } catch (err) {
    outcome = { rows: [], failures: [`run aborted: ${(err as Error).stack ?? String(err)}`], notes: [], details: {} };
  } finally {
    if (target !== null && outcome.failures.length > 0) {
      outcome.details.brokerOutput = target.nodes.map((n) => ({ role: n.role, pid: n.pid, alive: n.alive, tail: n.tail }));
    }
    await workers.all('close-all', () => ({}), 20_000).catch(() => {});
    await workers.stop();
    if (target !== null) await target.stop();
    await auth?.stop();
    rmSync(dir, { recursive: true, force: true });
    if (pkiDir !== null) rmSync(pkiDir, { recursive: true, force: true });
  }
  const stamp = startedAt.replace(/[:.]/g, '-');
  const file = join(
    o.outDir,
    `fleet-${o.scenario}-${o.target}${o.detect === 'keepalive' && o.scenario === 'fleet-failover' ? '-keepalive' : ''}-${stamp}.json`,
  );
  const result = {
    scenario: o.scenario,
    target: o.target,
    startedAt,
    finishedAt: new Date().toISOString(),
    options: o,
    host: { cpus: cpus().length, loadavg: loadavg().map((l) => Math.round(l * 100) / 100), nofile: nofileLimit(), node: process.version },
    clock: 'latencies: process.hrtime.bigint() stamped in the payload (CLOCK_MONOTONIC, shared by all processes of this host)',
    cpu: '/proc/PID/stat utime+stime (CLK_TCK 100) over the measured phase; cpuPct is % of one core; load = bench parent + workers; otherCpuPct = host busy (/proc/stat) less broker and load: other work on the machine',
    rows: outcome.rows,
    failures: outcome.failures,
    notes: outcome.notes,
    details: outcome.details,
  };
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(
    `${o.scenario} on ${o.target} (${o.clients} clients, ${o.workers} load workers; load average ${result.host.loadavg.join(' ')})\n`,
  );
  process.stdout.write(`${table(outcome.rows)}\n`);
  for (const n of outcome.notes) process.stdout.write(`note: ${n}\n`);
  process.stdout.write(`result: ${file}\n`);
  if (outcome.failures.length > 0) {
    for (const f of outcome.failures) process.stderr.write(`FAIL: ${f}\n`);
    process.exit(1);
  }
}

await main();
