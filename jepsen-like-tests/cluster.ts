// Three raftmq processes with a relay on every directed peer link. Peer ports are picked up front
// (bind port 0, close: a small race with other programs on the host); MQTT and health ports are 0
// and read back from each node's log. Node i listens for peers on L_i; its --cluster-peers names
// every other node j by the relay i→j, which forwards to L_j. Every signal goes to a PID this module
// spawned; every wait is bounded.
import { type ChildProcess, spawn } from 'node:child_process';
import { createWriteStream, type WriteStream } from 'node:fs';
import { join } from 'node:path';
import { Prng } from '../raft/core/prng.js';
import { freePort, httpGet, LOOPBACK } from './net.js';
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

export class NodeProcess {
  readonly id: number;
  readonly auditFile: string;
  healthPort = 0;
  /** MQTT port of the latest serving period; 0 before the first. */
  mqttPort = 0;
  paused = false;
  killed = false;
  stderr = '';
  private readonly proc: ChildProcess;
  private readonly logFile: WriteStream;
  private readonly lineWaiters: { pred: (l: Record<string, unknown>) => boolean; resolve: (l: Record<string, unknown>) => void }[] = [];

  constructor(id: number, cli: string, args: string[], dir: string) {
    this.id = id;
    this.auditFile = join(dir, `audit-${id}.jsonl`);
    this.logFile = createWriteStream(join(dir, `node-${id}.log`));
    this.proc = spawn(process.execPath, [cli, ...args, '--audit-log', this.auditFile], { stdio: ['ignore', 'pipe', 'pipe'] });
    const pid = this.proc.pid;
    if (pid !== undefined) {
      livePids.add(pid);
      this.proc.once('exit', () => livePids.delete(pid));
    }
    let buf = '';
    this.proc.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      this.logFile.write(chunk);
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        this.onLine(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
      }
    });
    this.proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      if (this.stderr.length < 64 * 1024) this.stderr += chunk;
    });
  }

  get pid(): number {
    return this.proc.pid ?? 0;
  }

  get state(): NodeState {
    if (this.killed) return 'killed';
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return 'exited';
    return this.paused ? 'paused' : 'running';
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
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
      const timer = setTimeout(() => reject(new Error(`node ${this.id}: no matching log line within ${timeoutMs} ms; stderr: ${this.stderr}`)), timeoutMs);
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

  kill9(): void {
    if (!this.alive) return;
    this.killed = true;
    process.kill(this.pid, 'SIGKILL');
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

  /** SIGCONT, SIGTERM, then SIGKILL after `timeoutMs`; resolves once the process has exited. */
  async stop(timeoutMs: number): Promise<void> {
    if (this.alive) {
      const exited = new Promise<void>((resolve) => this.proc.once('exit', () => resolve()));
      process.kill(this.pid, 'SIGCONT');
      this.paused = false;
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
      await Promise.all(nodes.map((n) => n.waitForLine((l) => l.msg === 'health listening', o.startTimeoutMs)));
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
