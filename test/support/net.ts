// Loopback helpers shared by the tests, the benches and the fault-injection harness: a free port,
// whether a port accepts connections, a bounded HTTP GET (for /health and /metrics), and a TCP relay
// that can be cut.
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';

export const LOOPBACK = '127.0.0.1';

/** Ports this process has handed out: the OS may give a just-closed port 0 binding again, and two
 * nodes of one test must never be given the same port. */
const handedOut = new Set<number>();
/** Attempts to find a port not handed out before. */
const FREE_PORT_TRIES_MAX = 50;

/** A port that was free a moment ago (bind it, close): peers must know each other's ports before
 * they start, so a small race with other processes is accepted. It is drawn below the kernel's
 * ephemeral range, from which port 0 bindings and every outgoing connection take their local port:
 * a port from that range can be taken by a node's own dial to a peer before the node it was meant
 * for binds it. */
export async function freePort(): Promise<number> {
  const [low, high] = belowEphemeral();
  for (let i = 0; i < FREE_PORT_TRIES_MAX; i++) {
    const want = low + Math.floor(Math.random() * (high - low));
    if (handedOut.has(want)) continue;
    const port = await bindAndRelease(want);
    if (port !== 0) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free loopback port from ${low} to ${high} in ${FREE_PORT_TRIES_MAX} tries`);
}

/** Ports below the ephemeral range (Linux: /proc/sys/net/ipv4/ip_local_port_range, 32768 by
 * default), from 10000 up; a range of at least 5,000 ports. */
function belowEphemeral(): [number, number] {
  let first = 32_768;
  try {
    const n = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(n)) first = n;
  } catch {
    // Not Linux: the usual default.
  }
  return first - 10_000 >= 5_000 ? [10_000, first] : [20_000, 30_000];
}

/** Binds `port` on loopback and closes it again: the port, or 0 when it was taken. */
async function bindAndRelease(port: number): Promise<number> {
  const server = createServer();
  const bound = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen({ host: LOOPBACK, port, exclusive: true }, () => resolve(true));
  });
  if (!bound) return 0;
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

/** Every peer link of one cluster, made through `link` (ClusterOptions `link`), so that a test can
 * cut a node off from the others and close them all at the end. */
export class PeerLinks {
  readonly all: PeerLink[] = [];

  readonly link = async (from: number, to: number, listenPort: number): Promise<number> => {
    const l = new PeerLink(from, to, listenPort);
    this.all.push(l);
    return l.listen();
  };

  /** Cuts every link to and from node `id`. */
  isolate(id: number): void {
    for (const l of this.all) if (l.from === id || l.to === id) l.cut();
  }

  async close(): Promise<void> {
    for (const l of this.all) await l.close();
  }
}
