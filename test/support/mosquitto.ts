// Debian's Mosquitto as a remote broker for bridge tests: started on a free loopback port with a
// config file in a temporary directory, stopped by its PID.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { signalAndWait } from './child-process.js';
import { freePort, LOOPBACK, portOpen } from './net.js';
import { until } from './wait.js';

export const MOSQUITTO = '/usr/sbin/mosquitto';

export class Mosquitto {
  private child: ChildProcess | null = null;
  output = '';

  private constructor(
    readonly port: number,
    readonly dir: string,
    private readonly conf: string,
  ) {}

  /** Mosquitto on a free port; `extra` lines are added to its config. Persistence on, so a
   * persistent subscriber's session and queue survive a stop and start. */
  static async start(extra: string[] = []): Promise<Mosquitto> {
    if (!existsSync(MOSQUITTO))
      throw new Error(`${MOSQUITTO} is not installed: install the Debian package mosquitto (bash .ci/run does this)`);
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-mosquitto-'));
    const conf = join(dir, 'mosquitto.conf');
    writeFileSync(
      conf,
      [
        `listener ${port} ${LOOPBACK}`,
        'allow_anonymous true',
        'persistence true',
        `persistence_location ${dir}/`,
        'log_dest stdout',
        // Run as root it would switch to the user mosquitto, which cannot write the temporary
        // directory; as this process's user it stays that user.
        `user ${userInfo().username}`,
        'max_queued_messages 100000',
        ...extra,
        '',
      ].join('\n'),
    );
    const m = new Mosquitto(port, dir, conf);
    await m.run();
    return m;
  }

  get url(): string {
    return `mqtt://${LOOPBACK}:${this.port}`;
  }

  /** Starts it (again) on the same port; resolves once the port accepts connections. */
  async run(): Promise<void> {
    if (this.child !== null) throw new Error('mosquitto already runs');
    const child = spawn(MOSQUITTO, ['-c', this.conf], { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    const keep = (b: Buffer): void => {
      if (this.output.length < 256 * 1024) this.output += b.toString();
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.once('exit', () => {
      if (this.child === child) this.child = null;
    });
    await until(`mosquitto listening on ${this.port}`, async () => {
      if (this.child !== child) throw new Error(`mosquitto exited: ${this.output.slice(-500)}`);
      return portOpen(this.port);
    });
  }

  /** SIGTERM to its PID (it saves its persistence file), then waits for the exit. */
  async stop(): Promise<void> {
    const child = this.child;
    if (child === null) return;
    await signalAndWait(child, 'SIGTERM', 5_000);
    this.child = null;
  }

  /** SIGSTOP: it holds its sockets open and reads nothing. */
  pause(): void {
    if (this.child?.pid !== undefined) process.kill(this.child.pid, 'SIGSTOP');
  }

  /** SIGCONT after pause(). */
  resume(): void {
    if (this.child?.pid !== undefined) process.kill(this.child.pid, 'SIGCONT');
  }

  /** SIGKILL: whatever it had read and not saved is gone; its sockets close. */
  async kill(): Promise<void> {
    const child = this.child;
    if (child === null) return;
    await signalAndWait(child, 'SIGKILL');
    this.child = null;
  }

  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.dir, { recursive: true, force: true });
  }
}
