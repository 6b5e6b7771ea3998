// An HTTP authentication service for --auth-http: a local server that allows every CONNECT (the
// body is read and checked for a client id, so a node that sent nothing useful is noticed), so that
// a fleet run measures what asking a service at each CONNECT costs the broker, for instance after a
// failover, when every device authenticates again at the new leader at once. It runs in the bench
// parent, whose CPU the load figures include; it counts what it answered.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** Request bodies are small JSON objects (docs/security.md "HTTP authentication"). */
const BODY_BYTES_MAX = 64 * 1024;

export class AuthHttpService {
  requests = 0;
  allowed = 0;
  /** Requests that were not a POST of a JSON object with a client id: answered 400. */
  malformed = 0;

  private constructor(private readonly server: Server) {}

  static async start(): Promise<AuthHttpService> {
    let service: AuthHttpService | null = null;
    const server = createServer((req, res) => service?.handle(req, res));
    server.keepAliveTimeout = 60_000;
    service = new AuthHttpService(server);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    return service;
  }

  get url(): string {
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}/auth`;
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    this.requests++;
    const chunks: Buffer[] = [];
    let bytes = 0;
    req.on('data', (c: Buffer) => {
      bytes += c.length;
      if (bytes <= BODY_BYTES_MAX) chunks.push(c);
    });
    req.on('end', () => {
      let ok = req.method === 'POST' && bytes <= BODY_BYTES_MAX;
      if (ok) {
        try {
          const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { clientid?: unknown };
          ok = typeof body === 'object' && body !== null && typeof body.clientid === 'string';
        } catch {
          ok = false;
        }
      }
      if (!ok) {
        this.malformed++;
        res.writeHead(400).end();
        return;
      }
      this.allowed++;
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"allow"}');
    });
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
