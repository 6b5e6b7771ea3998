// The brokers under test, started by this bench on loopback with free ports: raftmq as one node,
// raftmq as three Raft nodes (every node's MQTT port passed explicitly, so clients know the
// followers' ports although only the serving leader listens), and Debian's Mosquitto. Each
// process is started through `sh -c 'ulimit -n ...; exec ...'` (exec keeps the PID) so 10,000
// clients fit; only these PIDs are ever signalled.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect } from 'node:net';
import { dirname, join, resolve } from 'node:path';
import { freePort } from '../../test/support/net.js';
import { sleep } from '../../test/support/wait.js';
import type { Endpoint } from './client.js';

export type TargetKind = 'raftmq' | 'raftmq-cluster' | 'mosquitto';
export const TARGETS: readonly TargetKind[] = ['raftmq', 'raftmq-cluster', 'mosquitto'];

export const HOST = '127.0.0.1';
const REPO = resolve(dirname(new URL(import.meta.url).pathname), '..', '..', '..');
export const RAFTMQ_CLI = join(REPO, 'build', 'src', 'cli.js');
export const MOSQUITTO = '/usr/sbin/mosquitto';
const NOFILE = 65_536;
const START_WAIT_MS = 20_000;
const STOP_WAIT_MS = 10_000;
const POLL_MS = 50;
const TAIL_CHARS = 20_000;

export interface TlsFiles {
  cert: string;
  key: string;
  ca: string;
}

export interface TargetOptions {
  kind: TargetKind;
  tls: TlsFiles | null;
  /** A folder of this run's own for configs and state files. */
  dir: string;
  /** Extra raftmq flags for every node. */
  raftmqArgs: string[];
  /** Three nodes: --cluster-server-reference with every node's MQTT address. */
  serverReference?: boolean;
}

/** Settings set alike on both brokers for throughput: Mosquitto's as asked (no persistence,
 * unbounded inflight, 100,000 queued), raftmq's nearest equivalents. */
const RAFTMQ_COMMON = ['--log-level', 'warn', '--max-inflight', '65535', '--max-queued-messages', '100000'];

export class BrokerNode {
  proc: ChildProcess | null = null;
  tail = '';
  starts = 0;

  constructor(
    readonly id: number,
    readonly role: string,
    readonly command: string,
    readonly args: string[],
    readonly mqttPort: number,
    readonly tlsPort: number,
    readonly healthPort: number,
  ) {}

  spawn(): void {
    const proc = spawn('/bin/sh', ['-c', `ulimit -n ${NOFILE} 2>/dev/null; exec "$0" "$@"`, this.command, ...this.args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const keep = (c: string): void => {
      this.tail = (this.tail + c).slice(-TAIL_CHARS);
    };
    proc.stdout?.setEncoding('utf8').on('data', keep);
    proc.stderr?.setEncoding('utf8').on('data', keep);
    this.proc = proc;
    this.starts++;
  }

  get alive(): boolean {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  get pid(): number {
    return this.proc?.pid ?? 0;
  }

  endpoint(tls: boolean): Endpoint {
    return { host: HOST, port: tls ? this.tlsPort : this.mqttPort, tls };
  }

  async kill9(): Promise<void> {
    if (!this.alive || this.proc === null) return;
    const exited = once(this.proc, 'exit');
    this.proc.kill('SIGKILL');
    await exited;
  }

  async stop(): Promise<void> {
    if (!this.alive || this.proc === null) return;
    const exited = once(this.proc, 'exit');
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc?.kill('SIGKILL'), STOP_WAIT_MS);
    await exited;
    clearTimeout(timer);
  }
}

export function portOpen(port: number): Promise<boolean> {
  return new Promise((res) => {
    const s = connect(port, HOST);
    s.setTimeout(1000, () => s.destroy());
    s.once('connect', () => {
      s.destroy();
      res(true);
    });
    s.once('error', () => res(false));
    s.once('close', () => res(false));
  });
}

function healthCode(port: number): Promise<number> {
  return new Promise((res) => {
    const req = request({ host: HOST, port, path: '/health', timeout: 1000 }, (r) => {
      r.resume();
      res(r.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => res(0));
    req.end();
  });
}

export class Target {
  private constructor(
    readonly kind: TargetKind,
    readonly nodes: BrokerNode[],
    readonly tls: boolean,
  ) {}

  static async start(o: TargetOptions): Promise<Target> {
    const nodes: BrokerNode[] = [];
    const tls = o.tls !== null;
    if (o.kind === 'mosquitto') {
      const port = await freePort();
      const tlsPort = tls ? await freePort() : 0;
      const conf = join(o.dir, 'mosquitto.conf');
      const lines = [
        'per_listener_settings false',
        'allow_anonymous true',
        'persistence false',
        'max_inflight_messages 0',
        'max_queued_messages 100000',
        // Nagle off, as raftmq's sockets: without it a lone small packet waits for a delayed ACK.
        'set_tcp_nodelay true',
        'user root',
        'log_dest stderr',
        'log_type error',
        'log_type warning',
        `listener ${port} ${HOST}`,
      ];
      if (o.tls !== null) lines.push(`listener ${tlsPort} ${HOST}`, `certfile ${o.tls.cert}`, `keyfile ${o.tls.key}`, `cafile ${o.tls.ca}`);
      writeFileSync(conf, `${lines.join('\n')}\n`);
      nodes.push(new BrokerNode(1, 'mosquitto', MOSQUITTO, ['-c', conf], port, tlsPort, 0));
    } else {
      const cluster = o.kind === 'raftmq-cluster';
      const count = cluster ? 3 : 1;
      const peerPorts: number[] = [];
      for (let i = 0; i < count && cluster; i++) peerPorts.push(await freePort());
      const peers = peerPorts.map((p, i) => `${i + 1}=${HOST}:${p}`).join(',');
      const ports: number[] = [];
      for (let i = 0; i < count; i++) ports.push(await freePort());
      const refs = ports.map((p, i) => `${i + 1}=${HOST}:${p}`).join(',');
      for (let id = 1; id <= count; id++) {
        const port = ports[id - 1] as number;
        const tlsPort = tls ? await freePort() : 0;
        const healthPort = await freePort();
        const args = [RAFTMQ_CLI, '--host', HOST, ...RAFTMQ_COMMON];
        if (o.tls !== null) {
          args.push('--listen', `mqtt://${HOST}:${port}`, '--listen', `mqtts://${HOST}:${tlsPort}`);
          args.push('--tls-cert', o.tls.cert, '--tls-key', o.tls.key);
        } else {
          args.push('--port', String(port));
        }
        args.push('--health-port', String(healthPort));
        if (cluster) {
          args.push('--cluster-node', String(id), '--cluster-peers', peers, '--state-file', join(o.dir, `node${id}.state`));
          if (o.serverReference === true) args.push('--cluster-server-reference', refs);
        }
        args.push(...o.raftmqArgs);
        nodes.push(new BrokerNode(id, cluster ? `raftmq node ${id}` : 'raftmq', process.execPath, args, port, tlsPort, healthPort));
      }
    }
    const t = new Target(o.kind, nodes, tls);
    for (const n of nodes) n.spawn();
    try {
      await t.serving(START_WAIT_MS);
    } catch (err) {
      await t.stop();
      throw err;
    }
    return t;
  }

  /** Index in `nodes` of the node that serves MQTT: for a cluster the live node whose /health is
   * 200 and whose MQTT port accepts; else the one node once its port(s) accept. */
  async serving(timeoutMs: number): Promise<number> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      for (let i = 0; i < this.nodes.length; i++) {
        const n = this.nodes[i] as BrokerNode;
        if (!n.alive) continue;
        if (this.kind === 'raftmq-cluster' && (await healthCode(n.healthPort)) !== 200) continue;
        if (!(await portOpen(n.mqttPort))) continue;
        if (this.tls && !(await portOpen(n.tlsPort))) continue;
        return i;
      }
      const dead = this.nodes.filter((n) => !n.alive);
      if (dead.length === this.nodes.length) {
        throw new Error(`${this.kind}: every process exited; last output: ${dead.map((n) => n.tail).join('\n')}`);
      }
      if (Date.now() > deadline) {
        throw new Error(`${this.kind}: nothing serves within ${timeoutMs} ms; output: ${this.nodes.map((n) => n.tail).join('\n')}`);
      }
      await sleep(POLL_MS * 2);
    }
  }

  /** Every node's endpoint, in node order (the addresses a device knows in advance). */
  endpoints(tls: boolean): Endpoint[] {
    return this.nodes.map((n) => n.endpoint(tls));
  }

  procs(): { pid: number; role: string }[] {
    return this.nodes.filter((n) => n.alive).map((n) => ({ pid: n.pid, role: n.role }));
  }

  deadNodes(): BrokerNode[] {
    return this.nodes.filter((n) => !n.alive);
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }
}
