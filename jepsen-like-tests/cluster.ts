// Three raftmq processes with a relay on every directed peer link. Peer ports are picked up front
// (bind port 0, close: a small race with other programs on the host); MQTT and health ports are 0
// and read back from each node's log. Node i listens for peers on L_i; its --cluster-peers names
// every other node j by the relay i→j, which forwards to L_j. A node id may be started again with the
// same flags after a kill or a SIGTERM (its ports come back from its new log; L_i and the state file
// stay), each process with its own audit file. Every signal goes to a PID this module spawned; every
// wait is bounded.
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { Prng } from '../raft/core/prng.js';
import { hostMonotonicMs } from '../src/cluster/audit-log.js';
import type { HealthBody } from '../src/cluster/health.js';
import { freePort, httpGet, LOOPBACK } from '../test/support/net.js';
import { Relay } from './relay.js';

export { freePort, httpGet, LOOPBACK };
export const NODE_IDS = [1, 2, 3] as const;

export interface ClusterOptions {
  /** Path of the built raftmq CLI. */
  cli: string;
  dir: string;
  electionTimeoutMs: number;
  seed: number;
  /** Start-up of all three processes, in ms. */
  startTimeoutMs: number;
}

/** PIDs this process spawned and has not seen exit, for a last-resort SIGKILL when the run overruns. */
export const livePids = new Set<number>();

export type NodeState = 'running' | 'paused' | 'killed' | 'exited';

/** How a process ended: SIGKILL by a fault (its memory is lost), SIGTERM (it wrote its state file,
 * if it exited 0), or still running. */
export type RunEnd = 'kill' | 'term' | null;

/** One process of a node id, from spawn to exit. Each has its own audit file, so the checkers can
 * tell the lease of an old process from a new one of the same node id. */
export interface ProcessRun {
  /** 0 for the first start of this node id, +1 per restart. */
  index: number;
  pid: number;
  auditFile: string;
  startMono: number;
  /** When the harness sent the signal that ended it; null while running or for the final stop. */
  signalMono: number | null;
  end: RunEnd;
  exitCode: number | null;
}

export class NodeProcess {
  readonly id: number;
  readonly runs: ProcessRun[] = [];
  healthPort = 0;
  /** MQTT port of the latest serving period; 0 before the first. */
  mqttPort = 0;
  paused = false;
  stderr = '';
  private proc: ChildProcess | null = null;
  private readonly logFile: WriteStream;
  private lineWaiters: { pred: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }[] = [];

  constructor(
    id: number,
    private readonly cli: string,
    private readonly args: readonly string[],
    private readonly dir: string,
  ) {
    this.id = id;
    this.logFile = createWriteStream(join(dir, `node-${id}.log`), { flags: 'a' });
  }

  /** Spawns a process of this node id with the same flags (a new audit file) and waits until its
   * health port answers. */
  async start(timeoutMs: number): Promise<void> {
    if (this.alive) throw new Error(`node ${this.id}: already running`);
    const index = this.runs.length;
    const auditFile = join(this.dir, `audit-${this.id}-${index}.jsonl`);
    this.healthPort = 0;
    this.mqttPort = 0;
    this.paused = false;
    this.lineWaiters = [];
    const proc = spawn(process.execPath, [this.cli, ...this.args, '--audit-log', auditFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
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
    proc.once('exit', (code) => {
      livePids.delete(run.pid);
      run.exitCode = code;
    });
    let buf = '';
    proc.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      this.logFile.write(chunk);
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        this.onLine(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    });
    proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      if (this.stderr.length < 64 * 1024) this.stderr += chunk;
    });
    await this.waitForLine((l) => l.msg === 'health listening', timeoutMs);
  }

  get pid(): number {
    return this.proc?.pid ?? 0;
  }

  get run(): ProcessRun | undefined {
    return this.runs[this.runs.length - 1];
  }

  get state(): NodeState {
    if (!this.alive) return this.run?.end === 'kill' ? 'killed' : 'exited';
    return this.paused ? 'paused' : 'running';
  }

  get alive(): boolean {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  private onLine(text: string): void {
    let l: Record<string, unknown>;
    try {
      l = JSON.parse(text) as Record<string, unknown>;
    } catch {
      return;
    }
    if (l.msg === 'listening' && typeof l.port === 'number') this.mqttPort = l.port;
    if (l.msg === 'health listening' && typeof l.port === 'number') this.healthPort = l.port;
    for (let i = this.lineWaiters.length - 1; i >= 0; i--) {
      const w = this.lineWaiters[i]!;
      if (w.pred(l)) {
        this.lineWaiters.splice(i, 1);
        w.resolve(l);
      }
    }
  }

  waitForLine(pred: (l: Record<string, unknown>) => boolean, timeoutMs: number): Promise<Record<string, unknown>> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`node ${this.id}: no matching log line within ${timeoutMs} ms; stderr: ${this.stderr}`)),
        timeoutMs,
      );
      this.lineWaiters.push({
        pred,
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
      });
    });
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
  async health(timeoutMs: number): Promise<HealthBody | null> {
    if (!this.alive || this.paused || this.healthPort === 0) return null;
    try {
      return JSON.parse((await httpGet(this.healthPort, '/health', timeoutMs)).text) as HealthBody;
    } catch {
      return null;
    }
  }

  /** Resolves with the exit code (null: ended by a signal) once the current process has exited, or
   * rejects after timeoutMs. */
  private exited(timeoutMs: number): Promise<number | null> {
    const proc = this.proc;
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
    await this.exited(timeoutMs);
  }

  /** SIGCONT then SIGTERM (the clean stop: serve-end, handover, state file); the exit code. */
  async terminate(timeoutMs: number): Promise<number | null> {
    if (!this.alive) return this.proc?.exitCode ?? null;
    const run = this.run!;
    const exited = this.exited(timeoutMs);
    this.resume();
    run.end = 'term';
    run.signalMono = hostMonotonicMs();
    process.kill(this.pid, 'SIGTERM');
    return exited;
  }

  pause(): void {
    if (!this.alive || this.paused) return;
    this.paused = true;
    process.kill(this.pid, 'SIGSTOP');
  }

  resume(): void {
    if (!this.alive || !this.paused) return;
    this.paused = false;
    process.kill(this.pid, 'SIGCONT');
  }

  /** The final stop: SIGCONT, SIGTERM, then SIGKILL after `timeoutMs`; resolves once the process has
   * exited and the log is closed. */
  async stop(timeoutMs: number): Promise<void> {
    if (this.alive) {
      const exited = this.exited(timeoutMs + 5_000).catch(() => null);
      this.resume();
      this.run!.end = 'term';
      this.run!.signalMono = hostMonotonicMs();
      process.kill(this.pid, 'SIGTERM');
      const timer = setTimeout(() => {
        if (this.alive) process.kill(this.pid, 'SIGKILL');
      }, timeoutMs);
      await exited;
      clearTimeout(timer);
    }
    await new Promise<void>((resolve) => this.logFile.end(() => resolve()));
  }
}

export class JepsenCluster {
  readonly nodes: NodeProcess[];
  /** Relay of each directed link, keyed `${from}>${to}`. */
  readonly relays: Map<string, Relay>;

  private constructor(nodes: NodeProcess[], relays: Map<string, Relay>) {
    this.nodes = nodes;
    this.relays = relays;
  }

  static async start(o: ClusterOptions): Promise<JepsenCluster> {
    const random = new Prng(o.seed ^ 0x5eed);
    const listen = new Map<number, number>();
    for (const id of NODE_IDS) listen.set(id, await freePort());
    const relays = new Map<string, Relay>();
    const relayPort = new Map<string, number>();
    for (const from of NODE_IDS) {
      for (const to of NODE_IDS) {
        if (from === to) continue;
        const r = new Relay(from, to, { host: LOOPBACK, port: listen.get(to)! }, random.fork());
        relayPort.set(`${from}>${to}`, await r.listen(LOOPBACK, 0));
        relays.set(`${from}>${to}`, r);
      }
    }
    const nodes = NODE_IDS.map((id) => {
      const peers = NODE_IDS.map((j) => `${j}=${LOOPBACK}:${j === id ? listen.get(id) : relayPort.get(`${id}>${j}`)}`).join(',');
      const args = [
        '--host',
        LOOPBACK,
        '--port',
        '0',
        '--health-port',
        '0',
        '--cluster-node',
        String(id),
        '--cluster-peers',
        peers,
        '--cluster-listen',
        `${LOOPBACK}:${listen.get(id)}`,
        '--cluster-election-timeout-ms',
        String(o.electionTimeoutMs),
        '--state-file',
        join(o.dir, `state-${id}`),
        // Sized so that no queue ever drops in a run (the checker assumes no admission drops).
        '--max-queued-messages',
        '1000000',
        '--max-queued-bytes',
        '1GiB',
      ];
      return new NodeProcess(id, o.cli, args, o.dir);
    });
    const cluster = new JepsenCluster(nodes, relays);
    try {
      await Promise.all(nodes.map((n) => n.start(o.startTimeoutMs)));
    } catch (err) {
      await cluster.stop(5_000);
      throw err;
    }
    return cluster;
  }

  node(id: number): NodeProcess {
    const n = this.nodes.find((x) => x.id === id);
    if (n === undefined) throw new Error(`no node ${id}`);
    return n;
  }

  /** The node answering /health 200 and listening, if exactly one does; as a load balancer sees it. */
  async servingNode(timeoutMs: number): Promise<NodeProcess | null> {
    const { serving } = await this.healthCheck(timeoutMs);
    return serving;
  }

  /** One health check of every node: the serving one (if exactly one), and the MQTT ports of the
   * nodes that failed the check. */
  async healthCheck(timeoutMs: number): Promise<{ serving: NodeProcess | null; downPorts: number[] }> {
    const codes = await Promise.all(this.nodes.map((n) => n.healthCode(timeoutMs)));
    const up = this.nodes.filter((n, i) => codes[i] === 200 && n.mqttPort !== 0);
    const downPorts = this.nodes.filter((n, i) => codes[i] !== 200 && n.mqttPort !== 0).map((n) => n.mqttPort);
    return { serving: up.length === 1 ? up[0]! : null, downPorts };
  }

  /** Whether a live node leads and says `redundant` on /health (only the leader knows). */
  async redundant(timeoutMs: number): Promise<boolean> {
    const bodies = await Promise.all(this.nodes.map((n) => n.health(timeoutMs)));
    return bodies.some((b) => b !== null && b.role === 'leader' && b.redundant);
  }

  relay(from: number, to: number): Relay {
    const r = this.relays.get(`${from}>${to}`);
    if (r === undefined) throw new Error(`no relay ${from}>${to}`);
    return r;
  }

  healAll(): void {
    for (const r of this.relays.values()) r.heal();
  }

  async stop(timeoutMs: number): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop(timeoutMs)));
    await Promise.all([...this.relays.values()].map((r) => r.close()));
  }
}
