// Three raftmq processes on loopback as one cluster: the one launcher of the cluster tests and the
// fault-injection harness (jepsen-like-tests/). Peer ports must be known up front (each node dials
// the others at the addresses of --cluster-peers), so they are picked by binding port 0 and closing:
// a small race with other programs, acceptable here. MQTT and health ports are 0, read back from
// each node's log. With `link`, node i names node j in its peer list by an address the caller
// chooses (a relay that can cut the link) and listens on its own port with --cluster-listen. A node
// id may be started again after a kill or a SIGTERM (its ports come back from its new log; its
// listen port and state file stay). Every signal goes to a PID started here; every wait is bounded.
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, rmSync, type WriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { hostMonotonicMs } from '../../src/cluster/audit-log.js';
import type { HealthBody } from '../../src/cluster/health.js';
import { CLI, type LogLine } from '../broker-process.js';
import { freePort, httpGet, LOOPBACK } from './net.js';
import { sleep } from './wait.js';

export const NODE_IDS = [1, 2, 3] as const;

/** PIDs this process spawned and has not seen exit, for a last-resort SIGKILL when a run overruns. */
export const livePids = new Set<number>();

export interface Health {
  code: number;
  body: HealthBody;
}

export type NodeState = 'running' | 'paused' | 'killed' | 'exited';

/** How a process ended: SIGKILL by a fault (its memory is lost), SIGTERM (it wrote its state file,
 * if it exited 0), or still running. */
export type RunEnd = 'kill' | 'term' | null;

/** One process of a node id, from spawn to exit. With `auditDir` each has its own audit file, so a
 * checker can tell the lease of an old process from a new one of the same node id. */
export interface ProcessRun {
  /** 0 for the first start of this node id, +1 per restart. */
  index: number;
  pid: number;
  /** '' without `auditDir`. */
  auditFile: string;
  startMono: number;
  /** When the harness sent the signal that ended it; null while running or for the final stop. */
  signalMono: number | null;
  end: RunEnd;
  exitCode: number | null;
}

export interface NodeOptions {
  /** The raftmq CLI (default: this build's). */
  cli?: string;
  /** Environment added to the process's (e.g. a wall clock moved with libfaketime). */
  env?: Record<string, string> | undefined;
  /** Every byte of stdout is appended here as well. */
  logFile?: string;
  /** Each run is given `--audit-log DIR/audit-ID-RUN.jsonl`. */
  auditDir?: string;
  /** Keep every log line in `logs` (default true); a long fault run only keeps its log file. */
  keepLogs?: boolean;
}

/** Bound on the stderr kept of one process. */
const STDERR_KEPT_MAX = 64 * 1024;
/** One GET /health when not told (ms). */
const HEALTH_TIMEOUT_MS = 2_000;
/** The final stop's SIGTERM-to-SIGKILL wait when not told (ms). */
const STOP_TIMEOUT_MS = 5_000;

interface LineWaiter {
  pred: (l: LogLine) => boolean;
  resolve: (l: LogLine) => void;
  reject: (err: Error) => void;
}

/** One node id of a cluster: its current process and every process it had. */
export class ClusterNode {
  readonly runs: ProcessRun[] = [];
  /** The log lines of the current process (unparsed lines as `{ level: 0, msg }`). */
  logs: LogLine[] = [];
  stderr = '';
  healthPort = 0;
  /** MQTT port of the current process's latest serving period; 0 before the first. */
  mqttPort = 0;
  paused = false;
  private child: ChildProcess | null = null;
  private readonly logFile: WriteStream | null;
  private waiters: LineWaiter[] = [];
  /** The current process's stdout and stderr have closed. */
  private outputEnded = false;

  constructor(
    readonly id: number,
    private readonly args: readonly string[],
    private readonly o: NodeOptions = {},
  ) {
    this.logFile = o.logFile === undefined ? null : createWriteStream(o.logFile, { flags: 'a' });
  }

  /** A node process started now with `args`, not waited for. */
  static spawn(id: number, args: string[], env?: Record<string, string>): ClusterNode {
    const n = new ClusterNode(id, args, { env });
    n.launch();
    return n;
  }

  /** Spawns a process of this node id with its flags and waits until its health port listens. */
  async start(timeoutMs: number): Promise<void> {
    this.launch();
    await this.waitForLog((l) => l.msg === 'health listening', timeoutMs);
  }

  private launch(): void {
    if (this.alive) throw new Error(`node ${this.id}: already running`);
    const index = this.runs.length;
    const auditFile = this.o.auditDir === undefined ? '' : join(this.o.auditDir, `audit-${this.id}-${index}.jsonl`);
    this.logs = [];
    this.stderr = '';
    this.healthPort = 0;
    this.mqttPort = 0;
    this.paused = false;
    for (const w of this.waiters.splice(0)) w.reject(new Error(`node ${this.id}: started again`));
    const args = auditFile === '' ? this.args : [...this.args, '--audit-log', auditFile];
    const proc = spawn(process.execPath, [this.o.cli ?? CLI, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(this.o.env === undefined ? {} : { env: { ...process.env, ...this.o.env } }),
    });
    this.child = proc;
    const run: ProcessRun = {
      index,
      pid: proc.pid ?? 0,
      auditFile,
      startMono: hostMonotonicMs(),
      signalMono: null,
      end: null,
      exitCode: null,
    };
    this.runs.push(run);
    if (run.pid !== 0) livePids.add(run.pid);
    this.outputEnded = false;
    proc.once('exit', (code) => {
      livePids.delete(run.pid);
      run.exitCode = code;
    });
    // Waiters fail once the output has ended (after 'exit', the last lines may still be in the pipe).
    proc.once('close', (code, sig) => {
      if (this.child !== proc) return;
      this.outputEnded = true;
      const why = new Error(`node ${this.id} exited (${code ?? sig}); stderr: ${this.stderr}`);
      for (const w of this.waiters.splice(0)) w.reject(why);
    });
    let buf = '';
    proc.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      this.logFile?.write(chunk);
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        this.onLine(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    });
    proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      if (this.stderr.length < STDERR_KEPT_MAX) this.stderr += chunk;
    });
  }

  private onLine(text: string): void {
    let l: LogLine;
    try {
      l = JSON.parse(text) as LogLine;
    } catch {
      l = { level: 0, msg: text };
    }
    if (l.msg === 'listening' && typeof l.port === 'number') this.mqttPort = l.port;
    if (l.msg === 'health listening' && typeof l.port === 'number') this.healthPort = l.port;
    if (this.o.keepLogs !== false) this.logs.push(l);
    for (let i = this.waiters.length - 1; i >= 0; i--) {
      const w = this.waiters[i]!;
      if (w.pred(l)) {
        this.waiters.splice(i, 1);
        w.resolve(l);
      }
    }
  }

  /** The current process. */
  get proc(): ChildProcess {
    if (this.child === null) throw new Error(`node ${this.id}: never started`);
    return this.child;
  }

  get pid(): number {
    return this.child?.pid ?? 0;
  }

  get run(): ProcessRun | undefined {
    return this.runs[this.runs.length - 1];
  }

  get state(): NodeState {
    if (!this.alive) return this.run?.end === 'kill' ? 'killed' : 'exited';
    return this.paused ? 'paused' : 'running';
  }

  get alive(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The first log line of the current process (kept or still to come) that matches; rejects when
   * the process exits first or after timeoutMs. */
  waitForLog(pred: (l: LogLine) => boolean, timeoutMs: number): Promise<LogLine> {
    const hit = this.logs.find(pred);
    if (hit !== undefined) return Promise.resolve(hit);
    if (this.child === null || this.outputEnded) {
      return Promise.reject(
        new Error(`node ${this.id} exited (${this.child?.exitCode ?? this.child?.signalCode}); stderr: ${this.stderr}`),
      );
    }
    return new Promise((resolve, reject) => {
      const w: LineWaiter = {
        pred,
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
        reject: (err) => {
          clearTimeout(timer);
          reject(err);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        reject(new Error(`node ${this.id}: timed out waiting for a log line within ${timeoutMs} ms; stderr: ${this.stderr}`));
      }, timeoutMs);
      this.waiters.push(w);
    });
  }

  /** GET /health; throws when the node does not answer. */
  async health(timeoutMs = HEALTH_TIMEOUT_MS): Promise<Health> {
    const r = await httpGet(this.healthPort, '/health', timeoutMs);
    return { code: r.code, body: JSON.parse(r.text) as HealthBody };
  }

  /** /health of this node: 200 serving, 503 not, 0 unreachable (paused, dead). */
  async healthCode(timeoutMs: number): Promise<number> {
    if (!this.alive || this.paused || this.healthPort === 0) return 0;
    try {
      return (await httpGet(this.healthPort, '/health', timeoutMs)).code;
    } catch {
      return 0;
    }
  }

  /** The /health body, or null while the node does not answer. */
  async healthBody(timeoutMs: number): Promise<HealthBody | null> {
    if (!this.alive || this.paused || this.healthPort === 0) return null;
    try {
      return JSON.parse((await httpGet(this.healthPort, '/health', timeoutMs)).text) as HealthBody;
    } catch {
      return null;
    }
  }

  signal(sig: NodeJS.Signals): void {
    if (this.alive) this.proc.kill(sig);
  }

  /** The exit code (null: ended by a signal) once the current process has exited; SIGKILL after
   * timeoutMs. */
  async exited(timeoutMs: number): Promise<number | null> {
    const proc = this.child;
    if (proc === null || !this.alive) return proc?.exitCode ?? null;
    const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
    const code = await new Promise<number | null>((resolve) => proc.once('exit', (c) => resolve(c)));
    clearTimeout(timer);
    return code;
  }

  /** Resolves with the exit code once the current process has exited, or rejects after timeoutMs. */
  private exitWithin(timeoutMs: number): Promise<number | null> {
    const proc = this.child;
    if (proc === null || !this.alive) return Promise.resolve(proc?.exitCode ?? null);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`node ${this.id}: pid ${proc.pid} still running after ${timeoutMs} ms`)), timeoutMs);
      proc.once('exit', (code) => {
        clearTimeout(timer);
        resolve(code);
      });
    });
  }

  /** SIGKILL: the process loses its memory and writes no state file. */
  async kill9(timeoutMs: number): Promise<void> {
    if (!this.alive) return;
    const run = this.run!;
    run.end = 'kill';
    run.signalMono = hostMonotonicMs();
    process.kill(this.pid, 'SIGKILL');
    await this.exitWithin(timeoutMs);
  }

  /** SIGCONT then SIGTERM (the clean stop: serve-end, handover, state file); the exit code. */
  async terminate(timeoutMs: number): Promise<number | null> {
    if (!this.alive) return this.child?.exitCode ?? null;
    const run = this.run!;
    const exited = this.exitWithin(timeoutMs);
    this.resume();
    run.end = 'term';
    run.signalMono = hostMonotonicMs();
    process.kill(this.pid, 'SIGTERM');
    return exited;
  }

  /** SIGSTOP: the process stops answering anything until resume(). */
  pause(): void {
    if (!this.alive || this.paused) return;
    this.paused = true;
    process.kill(this.pid, 'SIGSTOP');
  }

  resume(): void {
    if (!this.alive) return;
    if (!this.paused) return;
    this.paused = false;
    process.kill(this.pid, 'SIGCONT');
  }

  /** The final stop: SIGCONT, SIGTERM, then SIGKILL after `timeoutMs`; resolves once the process has
   * exited and the log file is closed. */
  async stop(timeoutMs = STOP_TIMEOUT_MS): Promise<void> {
    if (this.alive) {
      const exited = this.exitWithin(timeoutMs + 5_000).catch(() => null);
      // A test may have stopped it with signal('SIGSTOP') rather than pause().
      this.paused = false;
      process.kill(this.pid, 'SIGCONT');
      this.run!.end = 'term';
      this.run!.signalMono = hostMonotonicMs();
      process.kill(this.pid, 'SIGTERM');
      const timer = setTimeout(() => {
        if (this.alive) process.kill(this.pid, 'SIGKILL');
      }, timeoutMs);
      await exited;
      clearTimeout(timer);
    }
    if (this.logFile !== null && !this.logFile.closed) await new Promise<void>((resolve) => this.logFile!.end(() => resolve()));
  }
}

/** The flags a cluster gives node `id`: loopback, MQTT and health port 0, its peers, E and its
 * state file (and where it listens for peers, when that is not its own entry of the list). */
export function clusterNodeArgs(
  c: { peers: string; stateFile: (id: number) => string; electionTimeoutMs: number; listen?: string },
  id: number,
): string[] {
  return [
    ...['--host', LOOPBACK, '--port', '0', '--health-port', '0'],
    ...['--cluster-node', String(id), '--cluster-peers', c.peers],
    ...(c.listen === undefined ? [] : ['--cluster-listen', c.listen]),
    ...['--cluster-election-timeout-ms', String(c.electionTimeoutMs), '--state-file', c.stateFile(id)],
  ];
}

export interface ClusterOptions {
  electionTimeoutMs?: number;
  /** Flags added for node `id`. */
  extra?: (id: number) => string[];
  /** Environment added for node `id` (e.g. a wall clock moved with libfaketime). */
  env?: (id: number) => Record<string, string> | undefined;
  /** Called with the cluster's directory before any node starts (to put state files there). */
  prepare?: (dir: string) => void;
  /** The cluster's directory (state files, logs, audit files); default a new temporary one, which
   * dispose() removes. */
  dir?: string;
  cli?: string;
  /** State file of node `id` in `dir` (default `node${id}.state`). */
  stateFileName?: (id: number) => string;
  /** The port node `from` dials to reach node `to`, which listens for peers on `listenPort` (a
   * relay); without it every node dials the others directly. */
  link?: (from: number, to: number, listenPort: number) => Promise<number>;
  /** Each node appends its stdout to `node-${id}.log` in the directory. */
  logFiles?: boolean;
  /** Each process of a node gets its own audit file in the directory. */
  auditPerRun?: boolean;
  /** Keep log lines in memory (default true). */
  keepLogs?: boolean;
  /** All three processes start within this (ms, default 15 000). */
  startTimeoutMs?: number;
}

export class Cluster {
  private constructor(
    readonly nodes: ClusterNode[],
    /** The peer list of direct addresses (without `link`, every node's). */
    readonly peers: string,
    /** A directory of this cluster's own: state files, records and locks live here. */
    readonly dir: string,
    private readonly ownDir: boolean,
    private readonly argsOf: (id: number) => string[],
    private readonly nodeOptions: (id: number) => NodeOptions,
    private readonly stateFileName: (id: number) => string,
  ) {}

  static async start(o: ClusterOptions = {}, timeoutMs = o.startTimeoutMs ?? 15_000): Promise<Cluster> {
    const listen = new Map<number, number>();
    for (const id of NODE_IDS) listen.set(id, await freePort());
    const peers = NODE_IDS.map((id) => `${id}=${LOOPBACK}:${listen.get(id)}`).join(',');
    const peersOf = new Map<number, string>();
    if (o.link !== undefined) {
      const via = new Map<string, number>();
      for (const from of NODE_IDS) {
        for (const to of NODE_IDS) if (from !== to) via.set(`${from}>${to}`, await o.link(from, to, listen.get(to)!));
      }
      for (const id of NODE_IDS) {
        peersOf.set(id, NODE_IDS.map((j) => `${j}=${LOOPBACK}:${j === id ? listen.get(id) : via.get(`${id}>${j}`)}`).join(','));
      }
    }
    const ownDir = o.dir === undefined;
    const dir = o.dir ?? mkdtempSync(join(tmpdir(), 'raftmq-cluster-'));
    const stateFileName = o.stateFileName ?? ((id: number) => `node${id}.state`);
    const stateFile = (id: number): string => join(dir, stateFileName(id));
    const electionTimeoutMs = o.electionTimeoutMs ?? 500;
    const argsOf = (id: number): string[] => [
      ...clusterNodeArgs(
        o.link === undefined
          ? { peers, stateFile, electionTimeoutMs }
          : { peers: peersOf.get(id)!, stateFile, electionTimeoutMs, listen: `${LOOPBACK}:${listen.get(id)}` },
        id,
      ),
      ...(o.extra?.(id) ?? []),
    ];
    const nodeOptions = (id: number): NodeOptions => ({
      ...(o.cli === undefined ? {} : { cli: o.cli }),
      env: o.env?.(id),
      ...(o.logFiles === true ? { logFile: join(dir, `node-${id}.log`) } : {}),
      ...(o.auditPerRun === true ? { auditDir: dir } : {}),
      ...(o.keepLogs === undefined ? {} : { keepLogs: o.keepLogs }),
    });
    o.prepare?.(dir);
    const nodes = NODE_IDS.map((id) => new ClusterNode(id, argsOf(id), nodeOptions(id)));
    const cluster = new Cluster(nodes, peers, dir, ownDir, argsOf, nodeOptions, stateFileName);
    try {
      await Promise.all(nodes.map((n) => n.start(timeoutMs)));
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    return cluster;
  }

  node(id: number): ClusterNode {
    const n = this.nodes.find((x) => x.id === id);
    if (n === undefined) throw new Error(`no node ${id}`);
    return n;
  }

  stateFile(id: number): string {
    return join(this.dir, this.stateFileName(id));
  }

  /** Starts node `id` again with its flags (and `extra`) as a new ClusterNode in `nodes`; resolves
   * once its health port listens. (ClusterNode.start starts the same node again, keeping its runs.) */
  async restart(id: number, extra: string[] = [], timeoutMs = 15_000): Promise<ClusterNode> {
    const old = this.nodes[id - 1]!;
    if (old.alive) throw new Error(`node ${id} still runs`);
    const n = new ClusterNode(id, [...this.argsOf(id), ...extra], this.nodeOptions(id));
    this.nodes[id - 1] = n;
    await n.start(timeoutMs);
    return n;
  }

  get alive(): ClusterNode[] {
    return this.nodes.filter((n) => n.alive);
  }

  /** Waits until exactly one live node answers /health 200 and has an MQTT port; returns it. */
  async serving(timeoutMs: number, among: ClusterNode[] = this.alive): Promise<ClusterNode> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const codes = await Promise.all(
        among.map((n) =>
          n.health().then(
            (h) => h.code,
            () => 0,
          ),
        ),
      );
      const up = among.filter((_, i) => codes[i] === 200);
      if (up.length === 1 && up[0]!.mqttPort !== 0) return up[0]!;
      if (up.length > 1) throw new Error(`nodes ${up.map((n) => n.id).join(', ')} serve at once`);
      if (Date.now() > deadline) throw new Error(`no serving leader within ${timeoutMs} ms; health ${codes.join(', ')}`);
      await sleep(25);
    }
  }

  async stop(timeoutMs = STOP_TIMEOUT_MS): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop(timeoutMs)));
  }

  /** Stops every node and removes the cluster's directory if it made it. */
  async dispose(): Promise<void> {
    await this.stop();
    if (this.ownDir) rmSync(this.dir, { recursive: true, force: true });
  }
}
