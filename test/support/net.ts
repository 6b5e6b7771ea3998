// Loopback helpers shared by the tests, the benches and the fault-injection harness: a free port,
// whether a port accepts connections, a bounded HTTP GET (for /health and /metrics), and a TCP relay
// that can be cut.
import { request } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';

export const LOOPBACK = '127.0.0.1';

/** Ports this process has handed out: the OS may give a just-closed port 0 binding again, and two
 * nodes of one test must never be given the same port. */
const handedOut = new Set<number>();
/** Attempts to find a port not handed out before. */
const FREE_PORT_TRIES_MAX = 50;

/** A port that was free a moment ago (bind port 0, read it, close): peers must know each other's
 * ports before they start, so a small race with other processes is accepted. */
export async function freePort(): Promise<number> {
  for (let i = 0; i < FREE_PORT_TRIES_MAX; i++) {
    const port = await bindAndRelease();
    if (port !== 0 && !handedOut.has(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no fresh loopback port in ${FREE_PORT_TRIES_MAX} tries`);
}

async function bindAndRelease(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: LOOPBACK, port: 0 }, () => resolve());
  });
  const a = server.address();
  const port = typeof a === 'object' && a !== null ? a.port : 0;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Whether `host:port` accepts a TCP connection now (closed at once). */
export function portOpen(port: number, host = LOOPBACK): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, host);
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

export function httpGet(port: number, path: string, timeoutMs = 2_000): Promise<{ code: number; text: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: LOOPBACK, port, path, method: 'GET', timeout: timeoutMs }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        text += c;
      });
      res.on('end', () => resolve({ code: res.statusCode ?? 0, text }));
    });
    req.on('timeout', () => req.destroy(new Error(`GET ${path} on ${port} timed out`)));
    req.on('error', reject);
    req.end();
  });
}

/** A TCP relay on a free loopback port to `target`: while `down` it closes every new connection,
 * and cut() also closes those open, so what connects through it sees the link go away while the
 * target runs on. Setting `down` to false lets new connections through again. */
export class CuttableRelay {
  private readonly server: Server;
  private readonly open = new Set<Socket>();
  down = false;

  constructor(target: number) {
    this.server = createServer((s) => {
      s.on('error', () => {});
      if (this.down) {
        s.destroy();
        return;
      }
      const t = connect(target, LOOPBACK);
      t.on('error', () => s.destroy());
      s.on('close', () => t.destroy());
      t.on('close', () => s.destroy());
      this.open.add(s);
      s.on('close', () => this.open.delete(s));
      s.pipe(t);
      t.pipe(s);
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, LOOPBACK, () => resolve()));
    return (this.server.address() as { port: number }).port;
  }

  cut(): void {
    this.down = true;
    for (const s of this.open) s.destroy();
  }

  close(): Promise<void> {
    this.cut();
    return new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** The link from one cluster node to a peer's listen port (ClusterOptions `link`), which a test
 * can cut. */
export class PeerLink extends CuttableRelay {
  constructor(
    readonly from: number,
    readonly to: number,
    target: number,
  ) {
    super(target);
  }
}
