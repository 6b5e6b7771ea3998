// The load worker processes: forked with advanced serialization, each started through
// `sh -c 'ulimit -n ...; exec node worker.js'` (exec keeps the PID and the IPC channel) so one
// worker can hold thousands of sockets. Requests are answered in any order, matched by seq.
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import type { Reply, Request } from './protocol.js';

const WORKER = new URL('./worker.js', import.meta.url).pathname;
const NOFILE = 65_536;
const STOP_WAIT_MS = 5_000;

export class Workers {
  private seq = 0;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();

  private constructor(readonly procs: ChildProcess[]) {
    for (const p of procs) {
      p.on('message', (m: Reply) => {
        const w = this.pending.get(m.seq);
        if (w === undefined) return;
        this.pending.delete(m.seq);
        if (m.ok) w.resolve(m.result);
        else w.reject(new Error(`load worker ${p.pid}: ${m.error}`));
      });
      p.on('exit', (code, sig) => {
        for (const [, w] of this.pending) w.reject(new Error(`load worker ${p.pid} exited (${code ?? sig})`));
        this.pending.clear();
      });
    }
  }

  static start(count: number): Workers {
    const procs: ChildProcess[] = [];
    // FLEET_WORKER_PROF=DIR: the workers run under node --cpu-prof, profiles in DIR.
    const prof = process.env.FLEET_WORKER_PROF;
    const flags = prof === undefined || prof === '' ? [] : ['--cpu-prof', '--cpu-prof-dir', prof];
    for (let i = 0; i < count; i++) {
      procs.push(
        spawn('/bin/sh', ['-c', `ulimit -n ${NOFILE} 2>/dev/null; exec "$0" "$@"`, process.execPath, ...flags, WORKER], {
          stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
          serialization: 'advanced',
        }),
      );
    }
    return new Workers(procs);
  }

  get count(): number {
    return this.procs.length;
  }

  pids(): { pid: number; role: string }[] {
    return this.procs.map((p, i) => ({ pid: p.pid ?? 0, role: `load worker ${i}`, alive: p.exitCode === null })).filter((p) => p.alive);
  }

  call<T>(i: number, cmd: string, args: unknown = {}, timeoutMs = 600_000): Promise<T> {
    const p = this.procs[i] as ChildProcess;
    const seq = ++this.seq;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(seq);
        reject(new Error(`load worker ${p.pid}: ${cmd} not answered in ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(seq, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v as T);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      p.send({ seq, cmd, args } satisfies Request);
    });
  }

  all<T>(cmd: string, args: (i: number) => unknown = () => ({}), timeoutMs?: number): Promise<T[]> {
    return Promise.all(this.procs.map((_, i) => this.call<T>(i, cmd, args(i), timeoutMs)));
  }

  async stop(): Promise<void> {
    await Promise.all(
      this.procs.map(async (p) => {
        if (p.exitCode !== null || p.signalCode !== null) return;
        const exited = once(p, 'exit');
        p.disconnect();
        const timer = setTimeout(() => p.kill('SIGKILL'), STOP_WAIT_MS);
        await exited;
        clearTimeout(timer);
      }),
    );
  }
}

/** Splits 0..n-1 into `parts` contiguous ranges. */
export function split(n: number, parts: number): number[][] {
  const out: number[][] = [];
  for (let w = 0; w < parts; w++) {
    const lo = Math.floor((w * n) / parts);
    const hi = Math.floor(((w + 1) * n) / parts);
    out.push(Array.from({ length: hi - lo }, (_, k) => lo + k));
  }
  return out;
}
