// Three raftmq processes on loopback as one cluster, for cluster tests. Peer ports must be known up
// front (each node dials the others at the addresses of --cluster-peers), so they are picked by
// binding port 0 and closing: a small race with other programs, acceptable in tests. MQTT and
// health ports are 0, read back from the logs. Every wait is bounded; only processes started here
// are signalled, by PID.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HealthBody } from '../src/cluster/health.js';
import { CLI, type LogLine } from './broker-process.js';
import { freePort, httpGet, LOOPBACK } from './support/net.js';

export { freePort, httpGet, LOOPBACK };

export interface Health {
  code: number;
  body: HealthBody;
}

export class ClusterNodeProcess {
  readonly logs: LogLine[] = [];
  stderr = '';
  healthPort = 0;
  private constructor(
    readonly id: number,
    readonly proc: ChildProcess,
  ) {}

  static spawn(id: number, args: string[], env?: Record<string, string>): ClusterNodeProcess {
    const proc = spawn(process.execPath, [CLI, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(env === undefined ? {} : { env: { ...process.env, ...env } }),
    });
    const n = new ClusterNodeProcess(id, proc);
    let buf = '';
    proc.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          n.logs.push(JSON.parse(line) as LogLine);
        } catch {
          n.logs.push({ level: 0, msg: line });
        }
      }
    });
    proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      n.stderr += chunk;
    });
    return n;
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  /** The MQTT port of the latest serving period of this node (0: never listened). */
  get mqttPort(): number {
    for (let i = this.logs.length - 1; i >= 0; i--) {
      const l = this.logs[i]!;
      if (l.msg === 'listening') return l.port as number;
    }
    return 0;
  }

  async waitForLog(pred: (l: LogLine) => boolean, timeoutMs: number): Promise<LogLine> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.logs.find(pred);
      if (hit !== undefined) return hit;
      if (!this.alive) throw new Error(`node ${this.id} exited (${this.proc.exitCode ?? this.proc.signalCode}); stderr: ${this.stderr}`);
      if (Date.now() > deadline) throw new Error(`node ${this.id}: timed out waiting for a log line`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  async health(): Promise<Health> {
    const r = await httpGet(this.healthPort, '/health');
    return { code: r.code, body: JSON.parse(r.text) as HealthBody };
  }

  signal(sig: NodeJS.Signals): void {
    if (this.alive) this.proc.kill(sig);
  }

  async exited(timeoutMs: number): Promise<number | null> {
    if (!this.alive) return this.proc.exitCode;
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), timeoutMs);
    const [code] = (await once(this.proc, 'exit')) as [number | null];
    clearTimeout(timer);
    return code;
  }

  async stop(): Promise<void> {
    if (!this.alive) return;
    this.proc.kill('SIGCONT');
    this.proc.kill('SIGTERM');
    await this.exited(5_000);
  }
}

export interface ClusterOptions {
  electionTimeoutMs?: number;
  extra?: (id: number) => string[];
  /** Environment added for node `id` (e.g. a wall clock moved with libfaketime). */
  env?: (id: number) => Record<string, string> | undefined;
  /** Called with the cluster's directory before any node starts (to put state files there). */
  prepare?: (dir: string) => void;
}

/** The flags LocalCluster gives node `id`: loopback, free MQTT and health ports, its peers, E and
 * its state file. */
export function clusterNodeArgs(c: { peers: string; stateFile: (id: number) => string; electionTimeoutMs: number }, id: number): string[] {
  return [
    '--host',
    LOOPBACK,
    '--port',
    '0',
    '--health-port',
    '0',
    '--cluster-node',
    String(id),
    '--cluster-peers',
    c.peers,
    '--cluster-election-timeout-ms',
    String(c.electionTimeoutMs),
    '--state-file',
    c.stateFile(id),
  ];
}

export class LocalCluster {
  private constructor(
    readonly nodes: ClusterNodeProcess[],
    readonly peers: string,
    /** A directory of this cluster's own: state files, records and locks live here. */
    readonly dir: string,
    private readonly argsOf: (id: number) => string[],
    private readonly envOf: (id: number) => Record<string, string> | undefined,
  ) {}

  static async start(o: ClusterOptions = {}, timeoutMs = 15_000): Promise<LocalCluster> {
    const ports = [await freePort(), await freePort(), await freePort()];
    const peers = ports.map((p, i) => `${i + 1}=${LOOPBACK}:${p}`).join(',');
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-cluster-'));
    const stateFile = (id: number): string => join(dir, `node${id}.state`);
    const argsOf = (id: number): string[] => [
      ...clusterNodeArgs({ peers, stateFile, electionTimeoutMs: o.electionTimeoutMs ?? 500 }, id),
      ...(o.extra?.(id) ?? []),
    ];
    const envOf = o.env ?? (() => undefined);
    o.prepare?.(dir);
    const nodes = [1, 2, 3].map((id) => ClusterNodeProcess.spawn(id, argsOf(id), envOf(id)));
    const cluster = new LocalCluster(nodes, peers, dir, argsOf, envOf);
    try {
      for (const n of nodes) await cluster.healthOf(n, timeoutMs);
    } catch (err) {
      await cluster.stop();
      throw err;
    }
    return cluster;
  }

  stateFile(id: number): string {
    return join(this.dir, `node${id}.state`);
  }

  /** Starts node `id` again with its flags (and `extra`), replacing the exited process in `nodes`;
   * resolves once its health port listens. */
  async restart(id: number, extra: string[] = [], timeoutMs = 15_000): Promise<ClusterNodeProcess> {
    const old = this.nodes[id - 1]!;
    if (old.alive) throw new Error(`node ${id} still runs`);
    const n = ClusterNodeProcess.spawn(id, [...this.argsOf(id), ...extra], this.envOf(id));
    this.nodes[id - 1] = n;
    await this.healthOf(n, timeoutMs);
    return n;
  }

  private async healthOf(n: ClusterNodeProcess, timeoutMs: number): Promise<void> {
    const line = await n.waitForLog((l) => l.msg === 'health listening', timeoutMs);
    n.healthPort = line.port as number;
  }

  get alive(): ClusterNodeProcess[] {
    return this.nodes.filter((n) => n.alive);
  }

  /** Waits until exactly one live node answers /health 200 and has an MQTT port; returns it. */
  async serving(timeoutMs: number, among: ClusterNodeProcess[] = this.alive): Promise<ClusterNodeProcess> {
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
      await new Promise((r) => setTimeout(r, 25));
    }
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }

  /** Stops every node and removes the cluster's directory. */
  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
