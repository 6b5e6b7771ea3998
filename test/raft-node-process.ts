// Starts raft node programs (build/raft/driver/node-main.js) as real processes on loopback port 0,
// tells each the others' addresses, and talks to them over their line protocol. Every wait is
// bounded; only processes started here are signalled, by PID.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { connect } from 'node:net';
import { join } from 'node:path';
import type { DriverStatus } from '../raft/driver/driver.js';
import { LOOPBACK } from './support/net.js';
import { sleep } from './support/wait.js';

export const NODE_MAIN = join(process.cwd(), 'build', 'raft', 'driver', 'node-main.js');

export interface NodeLogLine {
  level?: string;
  msg?: string;
  event?: string;
  [k: string]: unknown;
}

export class RaftNodeProcess {
  readonly logs: NodeLogLine[] = [];
  stderr = '';
  raftPort = 0;
  clientPort = 0;

  private constructor(
    readonly id: number,
    readonly proc: ChildProcess,
  ) {}

  static async start(
    id: number,
    ids: readonly number[],
    electionTimeoutMs: number,
    timeoutMs = 10_000,
    extra: readonly string[] = [],
  ): Promise<RaftNodeProcess> {
    const peers = ids.map((p) => `${p}=${LOOPBACK}:0`).join(',');
    const args = [NODE_MAIN, '--id', String(id), '--peers', peers, '--election-timeout-ms', String(electionTimeoutMs), ...extra];
    const proc = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const node = new RaftNodeProcess(id, proc);
    node.collectOutput();
    const line = await node
      .waitForLog((l) => l.event === 'listening', timeoutMs)
      .catch((err: Error) => {
        proc.kill('SIGKILL');
        throw new Error(`node ${id}: ${err.message}; stderr: ${node.stderr}`);
      });
    node.raftPort = line.raftPort as number;
    node.clientPort = line.clientPort as number;
    return node;
  }

  get pid(): number {
    return this.proc.pid!;
  }

  get alive(): boolean {
    return this.proc.exitCode === null && this.proc.signalCode === null;
  }

  private collectOutput(): void {
    let buf = '';
    this.proc.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buf += chunk;
      for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
        const text = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          this.logs.push(JSON.parse(text) as NodeLogLine);
        } catch {
          this.logs.push({ msg: text });
        }
      }
    });
    this.proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      this.stderr += chunk;
    });
  }

  async waitForLog(pred: (l: NodeLogLine) => boolean, timeoutMs: number): Promise<NodeLogLine> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.logs.find(pred);
      if (hit !== undefined) return hit;
      if (!this.alive) throw new Error(`node ${this.id} exited (${this.proc.exitCode ?? this.proc.signalCode})`);
      if (Date.now() > deadline) throw new Error(`node ${this.id}: no matching log line within ${timeoutMs} ms`);
      await sleep(20);
    }
  }

  /** Sends one command line and resolves with the first reply line. */
  request(line: string, timeoutMs = 5_000): Promise<string> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: LOOPBACK, port: this.clientPort });
      let buf = '';
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`node ${this.id}: no reply to "${line}" within ${timeoutMs} ms`));
      }, timeoutMs);
      socket.setEncoding('utf8');
      socket.on('connect', () => socket.write(`${line}\n`));
      socket.on('data', (chunk: string) => {
        buf += chunk;
        const nl = buf.indexOf('\n');
        if (nl < 0) return;
        clearTimeout(timer);
        socket.destroy();
        resolve(buf.slice(0, nl));
      });
      socket.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
  }

  /** Sends every line on one connection in one write (one event-loop turn on the node) and resolves
   * with as many reply lines. */
  requestMany(lines: readonly string[], timeoutMs = 10_000): Promise<string[]> {
    return new Promise((resolve, reject) => {
      const socket = connect({ host: LOOPBACK, port: this.clientPort });
      let buf = '';
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`node ${this.id}: ${lines.length} replies not in within ${timeoutMs} ms; got: ${buf}`));
      }, timeoutMs);
      socket.setEncoding('utf8');
      socket.on('connect', () => socket.write(lines.map((l) => `${l}\n`).join('')));
      socket.on('data', (chunk: string) => {
        buf += chunk;
        const replies = buf.split('\n').slice(0, -1);
        if (replies.length < lines.length) return;
        clearTimeout(timer);
        socket.destroy();
        resolve(replies.slice(0, lines.length));
      });
      socket.on('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
    });
  }

  async status(): Promise<DriverStatus> {
    return JSON.parse(await this.request('status')) as DriverStatus;
  }

  async entries(): Promise<Array<[number, number, string | null]>> {
    return JSON.parse(await this.request('entries 1 10000')) as Array<[number, number, string | null]>;
  }

  signal(sig: NodeJS.Signals): void {
    if (this.alive) process.kill(this.pid, sig);
  }

  /** Stops the process: SIGCONT first in case it is paused, then SIGKILL; waits for its exit. */
  async kill(timeoutMs = 5_000): Promise<void> {
    if (!this.alive) return;
    const exited = once(this.proc, 'exit');
    process.kill(this.pid, 'SIGCONT');
    process.kill(this.pid, 'SIGKILL');
    await Promise.race([exited, sleep(timeoutMs)]);
  }
}

/** Tells every live node the bound raft port of every other (after a restart moved one). */
export async function linkAll(nodes: readonly RaftNodeProcess[]): Promise<void> {
  for (const n of nodes) {
    if (!n.alive) continue;
    for (const m of nodes) {
      if (m === n || !m.alive) continue;
      const answer = await n.request(`peer ${m.id} ${LOOPBACK}:${m.raftPort}`);
      if (answer !== 'ok') throw new Error(`node ${n.id} refused peer ${m.id}: ${answer}`);
    }
  }
}

/** Runs the node program until it exits (a refused start); resolves with its code and stderr. */
export async function runToExit(args: readonly string[], timeoutMs = 10_000): Promise<{ code: number | null; stderr: string }> {
  const proc = spawn(process.execPath, [NODE_MAIN, ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
  });
  const timer = setTimeout(() => proc.kill('SIGKILL'), timeoutMs);
  const [code] = (await once(proc, 'exit')) as [number | null];
  clearTimeout(timer);
  return { code, stderr };
}

/** Three nodes on port 0, each told the others' bound raft ports. */
export async function startCluster(electionTimeoutMs: number): Promise<RaftNodeProcess[]> {
  const ids = [1, 2, 3];
  const nodes: RaftNodeProcess[] = [];
  try {
    for (const id of ids) nodes.push(await RaftNodeProcess.start(id, ids, electionTimeoutMs));
    for (const n of nodes) {
      for (const m of nodes) {
        if (m === n) continue;
        const answer = await n.request(`peer ${m.id} ${LOOPBACK}:${m.raftPort}`);
        if (answer !== 'ok') throw new Error(`node ${n.id} refused peer ${m.id}: ${answer}`);
      }
    }
  } catch (err) {
    await stopNodes(nodes);
    throw err;
  }
  return nodes;
}

export async function stopNodes(nodes: readonly RaftNodeProcess[]): Promise<void> {
  await Promise.all(nodes.map((n) => n.kill()));
}

/** The one leader that every given live node agrees on, in one term; undefined while they differ. */
export async function agreedLeader(nodes: readonly RaftNodeProcess[]): Promise<RaftNodeProcess | undefined> {
  const statuses = await Promise.all(nodes.map((n) => n.status()));
  const leaders = statuses.filter((s) => s.role === 'leader');
  if (leaders.length !== 1) return undefined;
  const { id, term } = leaders[0]!;
  if (!statuses.every((s) => s.leader === id && s.term === term)) return undefined;
  return nodes.find((n) => n.id === id);
}
