// The HTTP health port (docs/operations.md "Health"): GET /health answers 200 on the serving leader and
// 503 elsewhere, with a JSON body a load balancer or a script can read; GET /metrics is Prometheus
// text. Everything is read from the node at request time; nothing here changes broker state. GET /
// is the status page (status-page.ts). Every request is bounded (docs/operations.md "Health port
// bounds"): headers in size and time, no body, a fixed number of sockets.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { type MetricsSource, NodeMetrics } from './metrics.js';
import type { ClusterStatus } from './raft-log.js';
import { reply, type StatusAccess, StatusPage } from './status-page.js';

/** What /health and /metrics read from the node. */
export type HealthSource = MetricsSource;

/** The JSON body of GET /health (a client reads it back with JSON.parse). */
export type HealthBody = ClusterStatus;

/** A request whose headers have not all come within this is answered 408 and closed (ms). */
const REQUEST_TIMEOUT_MS = 10_000;
/** Request headers larger than this are answered 431 (bytes). */
const HEADER_BYTES_MAX = 8_192;
/** Sockets open at once on the health port; more are closed at accept. */
const SOCKETS_MAX = 64;
/** How often the request timeouts are checked (ms). */
const TIMEOUT_CHECK_MS = 1_000;

export class HealthServer {
  private readonly source: HealthSource;
  private readonly server: Server;
  private readonly registry = new Registry();
  private readonly metrics: NodeMetrics;
  private readonly status: StatusPage;

  /** `access`: who may open the status page; default: open, as on a loopback bind. */
  constructor(source: HealthSource, access: StatusAccess = { token: '', openWithoutToken: true }) {
    this.source = source;
    this.metrics = new NodeMetrics(this.registry, source);
    this.status = new StatusPage(source, access);
    this.server = createServer(
      {
        maxHeaderSize: HEADER_BYTES_MAX,
        headersTimeout: REQUEST_TIMEOUT_MS,
        requestTimeout: REQUEST_TIMEOUT_MS,
        connectionsCheckingInterval: TIMEOUT_CHECK_MS,
      },
      (req, res) => this.onRequest(req, res),
    );
    this.server.maxConnections = SOCKETS_MAX;
  }

  /** Binds host:port (0 picks a free port) and resolves with the bound port. */
  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen({ host, port }, () => {
        this.server.off('error', reject);
        resolve((this.server.address() as AddressInfo).port);
      });
    });
  }

  async close(): Promise<void> {
    this.metrics.close();
    this.status.close();
    this.server.closeAllConnections();
    if (!this.server.listening) return;
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (refusedBody(req, res)) return;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      reply(res, 405, 'text/plain', 'only GET\n');
      return;
    }
    if (path === '/health') {
      const s = this.source.status();
      reply(res, s.serving ? 200 : 503, 'application/json', `${JSON.stringify(withDataDir(s, this.source))}\n`);
      return;
    }
    if (path === '/live') {
      // Liveness (a Kubernetes livenessProbe): the process runs and its event loop answers, on
      // every node, leader or not; /health is the leader check a load balancer needs.
      reply(res, 200, 'text/plain', 'live\n');
      return;
    }
    if (path === '/metrics') {
      this.metrics.scrape().then(
        (text) => reply(res, 200, this.registry.contentType, text),
        (err: Error) => reply(res, 500, 'text/plain', `${err.message}\n`),
      );
      return;
    }
    if (this.status.handle(req, res, path, new URLSearchParams(q < 0 ? '' : url.slice(q + 1)))) return;
    reply(res, 404, 'text/plain', 'GET /, /status.json, /trace?filter=F, /health, /live or /metrics\n');
  }
}

/** /health of a node with --data-dir carries a `dataDir` block (docs/operations.md "Disk trouble"),
 * of a node with bridges a `bridges` list (docs/bridges.md "Health and metrics"), and of a node
 * with --shard its `shard` and with --nats its `nats` link (docs/scale-out.md "Health and metrics"). */
function withDataDir(s: object, source: HealthSource): object {
  const bridges = source.node.bridgeStatus();
  const gate = source.node.shardGate;
  const link = source.node.shardLink;
  const nats =
    link === null
      ? null
      : {
          state: link.state,
          connected: link.connected,
          lastError: link.lastError,
          remoteRoutes: link.table.size,
          pendingWrites: link.pendingWrites,
          forwarded: link.forwarder.forwarded,
          received: link.receiver.received,
          refusedIn: link.receiver.refused,
        };
  const withShard = gate === null ? s : nats === null ? { ...s, shard: gate.shard } : { ...s, shard: gate.shard, nats };
  const withBridges = bridges.length === 0 ? withShard : { ...withShard, bridges };
  return source.dataDir === undefined ? withBridges : { ...withBridges, dataDir: source.dataDir() };
}

/** Requests carry no body here: one announced is answered 413 and the socket closed unread. */
function refusedBody(req: IncomingMessage, res: ServerResponse): boolean {
  const length = req.headers['content-length'];
  if (req.headers['transfer-encoding'] === undefined && (length === undefined || length === '0')) return false;
  res.setHeader('connection', 'close');
  reply(res, 413, 'text/plain', 'the health port takes no request body\n');
  req.socket.destroySoon();
  return true;
}
