// Debian's nats-server with JetStream for the scale-out tests: started on a free loopback port with
// its own temporary store directory (-sd), ready once it greets a client with its INFO line, stopped
// by its PID. Optional user/password authentication, as deployments run it. Fails (never skips)
// naming the Debian package when the binary is missing.
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { signalAndWait } from './child-process.js';
import { freePort, LOOPBACK } from './net.js';
import { until } from './wait.js';

export const NATS_SERVER = '/usr/sbin/nats-server';
/** The Debian package that installs NATS_SERVER. */
export const NATS_SERVER_PACKAGE = 'nats-server';
/** How long a start may take until the server greets a client (ms). */
const READY_MS = 10_000;
/** How long a greeting may take on one probe connection (ms). */
const PROBE_MS = 1_000;
/** Output kept for error messages. */
const OUTPUT_MAX = 256 * 1024;

export interface NatsServerOptions {
  /** Clients must log in with this user and password (nats-server --user/--pass). */
  user?: string;
  password?: string;
  /** Clients must log in with this token (nats-server --auth). */
  token?: string;
  /** TLS on the client port (nats-server --tls): its certificate and key; with `ca`, clients must
   * present a certificate that CA signed (--tlsverify). */
  tls?: { cert: string; key: string; ca?: string };
  /** The binary; NATS_SERVER unless told (a test of the missing-binary message names another). */
  binary?: string;
}

export class NatsServer {
  private child: ChildProcess | null = null;
  output = '';

  private constructor(
    readonly port: number,
    /** The JetStream store directory, kept across stop() and run() (a restart keeps its streams). */
    readonly storeDir: string,
    private readonly options: NatsServerOptions,
  ) {}

  /** A nats-server -js on a free loopback port with a fresh store directory; resolves once it
   * greets a client. Throws naming the Debian package when the binary is missing. */
  static async start(options: NatsServerOptions = {}): Promise<NatsServer> {
    const binary = options.binary ?? NATS_SERVER;
    if (!existsSync(binary)) {
      throw new Error(`${binary} is not installed: install the Debian package ${NATS_SERVER_PACKAGE} (bash .ci/run does this)`);
    }
    if ((options.user === undefined) !== (options.password === undefined)) {
      throw new Error('nats-server: give both user and password, or neither');
    }
    const port = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-nats-'));
    const s = new NatsServer(port, dir, options);
    try {
      await s.run();
    } catch (err) {
      rmSync(dir, { recursive: true, force: true });
      throw err;
    }
    return s;
  }

  /** `nats://127.0.0.1:PORT`: credentials go in the client's options, not the URL. */
  get url(): string {
    return `nats://${LOOPBACK}:${this.port}`;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** Starts it (again) on the same port and store directory; resolves once it greets a client. */
  async run(): Promise<void> {
    if (this.child !== null) throw new Error('nats-server already runs');
    const args = ['-a', LOOPBACK, '-p', String(this.port), '-js', '-sd', this.storeDir];
    if (this.options.user !== undefined && this.options.password !== undefined) {
      args.push('--user', this.options.user, '--pass', this.options.password);
    }
    if (this.options.token !== undefined) args.push('--auth', this.options.token);
    const tls = this.options.tls;
    if (tls !== undefined) {
      args.push('--tls', '--tlscert', tls.cert, '--tlskey', tls.key);
      if (tls.ca !== undefined) args.push('--tlscacert', tls.ca, '--tlsverify');
    }
    const child = spawn(this.options.binary ?? NATS_SERVER, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    this.child = child;
    const keep = (b: Buffer): void => {
      if (this.output.length < OUTPUT_MAX) this.output += b.toString();
    };
    child.stdout?.on('data', keep);
    child.stderr?.on('data', keep);
    child.once('error', (err) => keep(Buffer.from(`spawn: ${err.message}\n`)));
    child.once('exit', () => {
      if (this.child === child) this.child = null;
    });
    try {
      await until(
        `nats-server greeting on ${this.port}`,
        async () => {
          if (this.child !== child) throw new Error(`nats-server exited: ${this.output.slice(-500)}`);
          return greets(this.port);
        },
        READY_MS,
        { intervalMs: 50 },
      );
    } catch (err) {
      await this.kill();
      throw err;
    }
  }

  /** SIGTERM to its PID (JetStream flushes its store), then waits for the exit. */
  async stop(): Promise<void> {
    const child = this.child;
    if (child === null) return;
    await signalAndWait(child, 'SIGTERM', 5_000);
    this.child = null;
  }

  /** SIGKILL to its PID: what JetStream had not written to its store is gone. */
  async kill(): Promise<void> {
    const child = this.child;
    if (child === null) return;
    await signalAndWait(child, 'SIGKILL');
    this.child = null;
  }

  /** Stops it and removes its store directory. */
  async dispose(): Promise<void> {
    await this.stop();
    rmSync(this.storeDir, { recursive: true, force: true });
  }
}

/** Whether a NATS server on `port` greets a new connection with its `INFO {` line within PROBE_MS
 * (a bound port alone is not a server that answers). */
function greets(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, LOOPBACK);
    let text = '';
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      s.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), PROBE_MS);
    s.on('data', (b: Buffer) => {
      text += b.toString('latin1');
      if (text.startsWith('INFO {')) done(true);
      else if (text.length >= 6) done(false);
    });
    s.once('error', () => done(false));
    s.once('close', () => done(false));
  });
}
