// The brokers the benchmark measures, each started fresh for one scenario run: raftmq on one node (in
// memory), raftmq as a three-node cluster on loopback (state files in a folder of its own; mqttload
// goes to the serving leader), and Mosquitto configured for throughput. Every process is started
// here and signalled only by its PID; every wait is bounded.
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { freePort, httpGet, portOpen } from '../test/support/net.js';
import { sleep } from '../test/support/wait.js';

export const REPO = resolve(dirname(new URL(import.meta.url).pathname), '..', '..');
/** The raftmq CLI the bench runs; RAFTMQ_BENCH_CLI names another build's (a before/after run of
 * two commits with the same bench). */
export const CLI = process.env.RAFTMQ_BENCH_CLI ?? join(REPO, 'build', 'src', 'cli.js');
export const MOSQUITTO = '/usr/sbin/mosquitto';
export const HOST = '127.0.0.1';

export type TargetName = 'raftmq' | 'raftmq-cluster' | 'mosquitto' | 'raftmq-disk' | 'mosquitto-disk' | 'raftmq-cluster-disk';
/** The default targets (and the fleet scenarios'). */
export const TARGET_NAMES: readonly TargetName[] = ['raftmq', 'raftmq-cluster', 'mosquitto'];
/** On request (--brokers): one raftmq node with --data-dir (every ack after its fdatasync), and
 * Mosquitto with persistence on (its PUBACK does not wait for the disk: it saves the whole state
 * every autosave_interval and at a clean stop). */
export const DISK_TARGET_NAMES: readonly TargetName[] = ['raftmq-disk', 'mosquitto-disk', 'raftmq-cluster-disk'];
export const BENCH_TARGET_NAMES: readonly TargetName[] = [...TARGET_NAMES, ...DISK_TARGET_NAMES];

/** A single broker listens within this; a cluster elects a serving leader within this. */
const START_WAIT_MS = 20_000;
/** SIGTERM, then SIGKILL after this; then at most this again for the exit to be seen. */
const STOP_WAIT_MS = 10_000;
const POLL_MS = 50;
/** One GET /health. */
const HEALTH_TIMEOUT_MS = 1_000;

export type Role = 'broker' | 'leader' | 'follower';

export interface LoopDelay {
  on: string;
  p50Ms: number;
  p99Ms: number;
  p999Ms: number;
  maxMs: number;
  resolutionMs: number;
  samples: number;
  /** The garbage collector's pauses over the same window (absent from builds before it was logged). */
  gc?: { minor: GcTally; major: GcTally };
}

export interface GcTally {
  count: number;
  ms: number;
  maxMs: number;
}

/** The status of GET /health on `port`; 0 when it does not answer. */
function healthCode(port: number): Promise<number> {
  return httpGet(port, '/health', HEALTH_TIMEOUT_MS).then(
    (r) => r.code,
    () => 0,
  );
}

/** One broker process this run started. */
export class BrokerProcess {
  stdout = '';
  stderr = '';
  /** How it ended ("exit 1", "signal SIGKILL"), null while it runs. */
  ended: string | null = null;
  /** Set once the bench asked it to stop: an end after that is not a failure. */
  stopping = false;
  private readonly exited: Promise<unknown>;

  constructor(
    readonly label: string,
    readonly proc: ChildProcess,
  ) {
    this.exited = once(proc, 'exit');
    proc.on('exit', (code, sig) => {
      this.ended = sig !== null ? `signal ${sig}` : `exit ${String(code)}`;
    });
    proc.on('error', (err) => {
      this.stderr += `${err.message}\n`;
    });
    proc.stdout?.setEncoding('utf8').on('data', (c: string) => {
      this.stdout += c;
    });
    proc.stderr?.setEncoding('utf8').on('data', (c: string) => {
      this.stderr += c;
    });
  }

  get pid(): number {
    return this.proc.pid ?? 0;
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null && this.pid !== 0;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.alive) this.proc.kill(sig);
  }

  /** SIGTERM, SIGKILL after STOP_WAIT_MS; resolves once it exited (or after another bound, with a note). */
  async stop(): Promise<void> {
    this.stopping = true;
    if (!this.alive) return;
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.signal('SIGKILL'), STOP_WAIT_MS);
    const gaveUp = sleep(2 * STOP_WAIT_MS).then(() => 'gave up');
    const r = await Promise.race([this.exited, gaveUp]);
    clearTimeout(timer);
    if (r === 'gave up') process.stderr.write(`bench: ${this.label} (PID ${this.pid}) did not exit after SIGKILL\n`);
  }

  /** The event-loop-delay reports raftmq logged (src/cli.ts), oldest first. */
  loopDelays(): LoopDelay[] {
    const out: LoopDelay[] = [];
    for (const line of this.stdout.split('\n')) {
      if (!line.includes('"event-loop-delay"')) continue;
      try {
        out.push(JSON.parse(line) as LoopDelay);
      } catch {
        // a torn line says nothing
      }
    }
    return out;
  }

  /** The last lines of output (event-loop-delay reports left out), for an error message. */
  tail(): string {
    const lines = `${this.stderr}\n${this.stdout}`.split('\n').filter((l) => l.trim() !== '' && !l.includes('"event-loop-delay"'));
    return lines.slice(-3).join(' | ') || 'no output';
  }
}

export interface DiskCounters {
  atMs: number;
  fsyncs: number;
  entries: number;
}

/** Group commits over a window from the counters at its start and end: fdatasync calls per second,
 * and entries made durable per call (null when no fsync happened). Null without both readings. */
export function diskRates(a: DiskCounters | null, b: DiskCounters | null): { fsyncsPerS: number; entriesPerFsync: number | null } | null {
  if (a === null || b === null || b.atMs <= a.atMs) return null;
  const fsyncs = b.fsyncs - a.fsyncs;
  return { fsyncsPerS: (fsyncs * 1000) / (b.atMs - a.atMs), entriesPerFsync: fsyncs > 0 ? (b.entries - a.entries) / fsyncs : null };
}

/** A started broker: one process, or three cluster nodes of which `procs[0]` serves. */
export class Target {
  constructor(
    readonly name: TargetName,
    /** The MQTT port of the serving process. */
    readonly port: number,
    /** Every process of the target, the serving one first. */
    readonly procs: BrokerProcess[],
    readonly roles: Role[],
    private readonly healthPorts: number[],
    private readonly dir: string | null,
    /** raftmq-disk, and raftmq-cluster-disk's leader: the health port whose /health carries the
     * data directory's counters. */
    readonly dataDirHealthPort: number | null = null,
  ) {}

  get serving(): BrokerProcess {
    return this.procs[0] as BrokerProcess;
  }

  /** raftmq reports its event-loop delay on SIGUSR2; Mosquitto is not signalled. */
  get raftmq(): boolean {
    return !this.name.startsWith('mosquitto');
  }

  /** The group-commit counters now (src/server/durable-node.ts DataDirStatus) of raftmq-disk, or of
   * raftmq-cluster-disk's leader (raft entries; each commit also waits for one follower's sync, as
   * many as the leader's); null for other targets or when /health does not answer. */
  async diskCounters(): Promise<DiskCounters | null> {
    if (this.dataDirHealthPort === null) return null;
    try {
      const r = await httpGet(this.dataDirHealthPort, '/health', HEALTH_TIMEOUT_MS);
      const d = (JSON.parse(r.text) as { dataDir?: { fsyncs?: unknown; entriesWritten?: unknown } }).dataDir;
      if (typeof d?.fsyncs !== 'number' || typeof d.entriesWritten !== 'number') return null;
      return { atMs: performance.now(), fsyncs: d.fsyncs, entries: d.entriesWritten };
    } catch {
      return null;
    }
  }

  /** Problems seen after a run: a process that exited, a cluster whose serving node changed. */
  async problems(): Promise<string[]> {
    const out: string[] = [];
    for (const p of this.procs) if (p.ended !== null && !p.stopping) out.push(`${p.label} ${p.ended}: ${p.tail()}`);
    if (this.healthPorts.length > 1) {
      const codes = await Promise.all(this.healthPorts.map(healthCode));
      const serving = this.procs.filter((_, i) => codes[i] === 200).map((p) => p.label);
      if (serving.length !== 1 || serving[0] !== this.serving.label) {
        out.push(`serving node moved from ${this.serving.label} to ${serving.join(', ') || 'none'}`);
      }
    }
    return out;
  }

  async stop(): Promise<void> {
    await Promise.all(this.procs.map((p) => p.stop()));
    if (this.dir !== null) rmSync(this.dir, { recursive: true, force: true });
  }
}

function startRaftmq(label: string, args: string[], profDir: string | null): BrokerProcess {
  const prof = profDir === null ? [] : ['--cpu-prof', '--cpu-prof-dir', profDir];
  return new BrokerProcess(
    label,
    spawn(process.execPath, [...prof, CLI, ...args, '--log-level', 'warn'], { stdio: ['ignore', 'pipe', 'pipe'] }),
  );
}

/** Mosquitto configured for throughput rather than with raftmq's limits: no inflight limit, a deep
 * queue per client, no persistence; or, for mosquitto-disk, persistence in `persistDir` with its
 * defaults (the in-memory state saved every 1800 s and at a clean stop; no write per message). */
function mosquittoConf(port: number, persistDir: string | null = null): string {
  return [
    `listener ${port} ${HOST}`,
    'allow_anonymous true',
    ...(persistDir === null ? ['persistence false'] : ['persistence true', `persistence_location ${persistDir}/`]),
    'max_inflight_messages 0',
    'max_queued_messages 100000',
    'log_dest stderr',
    'log_type error',
    'log_type warning',
    '',
  ].join('\n');
}

async function startSingle(
  name: Exclude<TargetName, 'raftmq-cluster' | 'raftmq-cluster-disk'>,
  tmp: string,
  profDir: string | null,
): Promise<Target> {
  const port = await freePort();
  let p: BrokerProcess;
  let dir: string | null = null;
  let health: number | null = null;
  if (name === 'raftmq') {
    p = startRaftmq('raftmq', ['--host', HOST, '--port', String(port)], profDir);
  } else if (name === 'raftmq-disk') {
    dir = mkdtempSync(join(tmp, 'raftmq-data-'));
    health = await freePort();
    p = startRaftmq(
      'raftmq-disk',
      ['--host', HOST, '--port', String(port), '--health-port', String(health), '--data-dir', join(dir, 'data')],
      profDir,
    );
  } else {
    if (name === 'mosquitto-disk') dir = mkdtempSync(join(tmp, 'mosquitto-data-'));
    const conf = join(tmp, `mosquitto-${port}.conf`);
    writeFileSync(conf, mosquittoConf(port, dir));
    p = new BrokerProcess(name, spawn(MOSQUITTO, ['-c', conf], { stdio: ['ignore', 'pipe', 'pipe'] }));
  }
  const t = new Target(name, port, [p], ['broker'], [], dir, health);
  const deadline = Date.now() + START_WAIT_MS;
  while (!(await portOpen(port, HOST))) {
    if (!p.alive) throw new Error(`${name} ended at start (${p.ended ?? 'no PID'}): ${p.tail()}`);
    if (Date.now() > deadline) {
      await t.stop();
      throw new Error(`${name} did not listen on ${HOST}:${port} within ${START_WAIT_MS} ms`);
    }
    await sleep(POLL_MS);
  }
  // raftmq installs its SIGUSR2 handler right after its listener opens.
  await sleep(POLL_MS * 4);
  return t;
}

/** Three raftmq nodes on loopback, each with a state file, peer, MQTT and health port of its own
 * (picked free just before), and with raftmq-cluster-disk a data directory each; resolves once
 * exactly one node answers /health with 200 and accepts MQTT connections, with that node first. */
async function startCluster(name: 'raftmq-cluster' | 'raftmq-cluster-disk', tmp: string, profDir: string | null): Promise<Target> {
  const ids = [1, 2, 3];
  const peerPorts: number[] = [];
  const mqtt: number[] = [];
  const health: number[] = [];
  for (const _ of ids) {
    peerPorts.push(await freePort());
    mqtt.push(await freePort());
    health.push(await freePort());
  }
  const peers = ids.map((id, i) => `${id}=${HOST}:${peerPorts[i]}`).join(',');
  const dir = mkdtempSync(join(tmp, 'cluster-'));
  const secret = randomBytes(16).toString('hex');
  const procs = ids.map((id, i) =>
    startRaftmq(
      `node${id}`,
      [
        ...['--host', HOST, '--port', String(mqtt[i]), '--health-port', String(health[i])],
        ...['--cluster-node', String(id), '--cluster-peers', peers, '--cluster-secret', secret],
        ...['--state-file', join(dir, `node${id}.state`)],
        ...(name === 'raftmq-cluster-disk' ? ['--data-dir', join(dir, `node${id}.data`)] : []),
      ],
      profDir,
    ),
  );
  const all = new Target(name, 0, procs, ['follower', 'follower', 'follower'], health, dir);
  const deadline = Date.now() + START_WAIT_MS;
  let codes: number[] = [];
  for (;;) {
    const gone = procs.find((p) => !p.alive);
    if (gone !== undefined) {
      await all.stop();
      throw new Error(`${name}: ${gone.label} ended at start (${gone.ended ?? 'no PID'}): ${gone.tail()}`);
    }
    codes = await Promise.all(health.map(healthCode));
    const up = ids.map((_, i) => i).filter((i) => codes[i] === 200);
    // Every node answers /health once its raft runs, right before it installs its SIGUSR2 handler.
    if (up.length === 1 && codes.every((c) => c !== 0) && (await portOpen(mqtt[up[0] as number] as number))) {
      const l = up[0] as number;
      const order = [l, ...ids.map((_, i) => i).filter((i) => i !== l)];
      await sleep(POLL_MS * 4);
      return new Target(
        name,
        mqtt[l] as number,
        order.map((i) => procs[i] as BrokerProcess),
        ['leader', 'follower', 'follower'],
        order.map((i) => health[i] as number),
        dir,
        name === 'raftmq-cluster-disk' ? (health[l] as number) : null,
      );
    }
    if (up.length > 1 || Date.now() > deadline) {
      await all.stop();
      throw new Error(
        up.length > 1
          ? `${name}: nodes ${up.map((i) => i + 1).join(', ')} answer /health 200 at once`
          : `${name}: no serving leader within ${START_WAIT_MS} ms; /health ${codes.join(', ')}`,
      );
    }
    await sleep(POLL_MS * 2);
  }
}

/** Starts `name` fresh; throws (after stopping whatever it started) when it does not come up. */
export function startTarget(name: TargetName, tmp: string, profDir: string | null): Promise<Target> {
  return name === 'raftmq-cluster' || name === 'raftmq-cluster-disk' ? startCluster(name, tmp, profDir) : startSingle(name, tmp, profDir);
}
