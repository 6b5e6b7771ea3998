// Starts the raftmq command as a real process on a free port, for tests that need a process
// (CLI behaviour, real third-party clients, logs). Stops only the process it started, by PID.
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { join } from 'node:path';

export const CLI = join(process.cwd(), 'build', 'src', 'cli.js');

export interface LogLine {
  level: number;
  msg: string;
  [k: string]: unknown;
}

export class BrokerProcess {
  readonly logs: LogLine[] = [];
  stderr = '';
  private constructor(
    readonly proc: ChildProcess,
    public port: number,
  ) {}

  /** Starts `raftmq --host 127.0.0.1 --port 0 ...args` and waits for its 'listening' line. */
  static async start(args: string[] = [], timeoutMs = 15_000): Promise<BrokerProcess> {
    const proc = spawn(process.execPath, [CLI, '--host', '127.0.0.1', '--port', '0', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const bp = new BrokerProcess(proc, 0);
    let buf = '';
    proc.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      buf += chunk;
      let nl = buf.indexOf('\n');
      while (nl >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        try {
          bp.logs.push(JSON.parse(line) as LogLine);
        } catch {
          bp.logs.push({ level: 0, msg: line });
        }
        nl = buf.indexOf('\n');
      }
    });
    proc.stderr?.setEncoding('utf8').on('data', (chunk: string) => {
      bp.stderr += chunk;
    });
    const line = await bp
      .waitForLog((l) => l.msg === 'listening', timeoutMs)
      .catch((err: Error) => {
        proc.kill('SIGKILL');
        throw new Error(`${err.message}; stderr: ${bp.stderr}`);
      });
    bp.port = line.port as number;
    return bp;
  }

  async waitForLog(pred: (l: LogLine) => boolean, timeoutMs = 10_000): Promise<LogLine> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const hit = this.logs.find(pred);
      if (hit) return hit;
      if (this.proc.exitCode !== null) throw new Error(`broker exited with ${this.proc.exitCode} before the expected log line`);
      if (Date.now() > deadline) throw new Error('timed out waiting for a log line');
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  /** Sends a signal and waits for exit; returns the exit code. Kills with SIGKILL after the timeout. */
  async stop(signal: NodeJS.Signals = 'SIGTERM', timeoutMs = 10_000): Promise<number | null> {
    if (this.proc.exitCode !== null) return this.proc.exitCode;
    const exited = once(this.proc, 'exit');
    this.proc.kill(signal);
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), timeoutMs);
    const [code] = (await exited) as [number | null];
    clearTimeout(timer);
    return code;
  }
}

/** Fails (never skips) when an external command is missing, naming the Debian package. */
export function requireCommand(command: string, debianPackage: string): void {
  const r = spawnSync('sh', ['-c', `command -v ${command}`]);
  if (r.status !== 0) {
    throw new Error(`${command} is not installed: install the Debian package ${debianPackage} (bash .ci/run does this)`);
  }
}
