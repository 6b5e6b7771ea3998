// The HTTP health port (docs/operations.md "Health"): GET /health answers 200 on the serving leader and
// 503 elsewhere, with a JSON body a load balancer or a script can read; GET /metrics is Prometheus
// text. Everything is read from the node at request time; nothing here changes broker state.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Registry } from 'prom-client';
import { type MetricsSource, NodeMetrics } from './metrics.js';
import type { ClusterStatus } from './raft-log.js';

/** What /health and /metrics read from the node. */
export type HealthSource = MetricsSource;

/** The JSON body of GET /health (a client reads it back with JSON.parse). */
export type HealthBody = ClusterStatus;

/** A request that has not finished within this is closed (ms). */
const REQUEST_TIMEOUT_MS = 5_000;

export class HealthServer {
  private readonly source: HealthSource;
  private readonly server: Server;
  private readonly registry = new Registry();
  private readonly metrics: NodeMetrics;

  constructor(source: HealthSource) {
    this.source = source;
    this.metrics = new NodeMetrics(this.registry, source);
    this.server = createServer((req, res) => this.onRequest(req, res));
    this.server.requestTimeout = REQUEST_TIMEOUT_MS;
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
    this.server.closeAllConnections();
    if (!this.server.listening) return;
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private onRequest(req: IncomingMessage, res: ServerResponse): void {
    const path = (req.url ?? '/').split('?')[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      reply(res, 405, 'text/plain', 'only GET\n');
      return;
    }
    if (path === '/health') {
      const s = this.source.status();
      reply(res, s.serving ? 200 : 503, 'application/json', `${JSON.stringify(s)}\n`);
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
    reply(res, 404, 'text/plain', 'GET /health, /live or /metrics\n');
  }
}

function reply(res: ServerResponse, code: number, type: string, body: string): void {
  res.writeHead(code, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}
