// The HTTP health port (docs/operations.md "Health and metrics"): GET /health answers 200 on the serving leader and
// 503 elsewhere, with a JSON body a load balancer or a script can read; GET /metrics is Prometheus
// text. Everything is read from the node at request time; nothing here changes broker state.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type IntervalHistogram, monitorEventLoopDelay } from 'node:perf_hooks';
import { Counter, Gauge, Registry } from 'prom-client';
import type { ClusterStatus } from './raft-log.js';

/** What /health and /metrics read from the node. */
export interface HealthSource {
  status(): ClusterStatus;
  connections(): number;
  messagesIn(): number;
  messagesOut(): number;
  queueDrops(): number;
}

/** Event-loop delay histogram resolution (ms). */
const LOOP_DELAY_RESOLUTION_MS = 10;
const NS_PER_S = 1e9;
/** A request that has not finished within this is closed (ms). */
const REQUEST_TIMEOUT_MS = 5_000;

export class HealthServer {
  private readonly source: HealthSource;
  private readonly server: Server;
  private readonly registry = new Registry();
  private readonly loopDelay: IntervalHistogram;

  constructor(source: HealthSource) {
    this.source = source;
    this.loopDelay = monitorEventLoopDelay({ resolution: LOOP_DELAY_RESOLUTION_MS });
    this.defineMetrics();
    this.server = createServer((req, res) => this.onRequest(req, res));
    this.server.requestTimeout = REQUEST_TIMEOUT_MS;
  }

  /** Binds host:port (0 picks a free port) and resolves with the bound port. */
  listen(host: string, port: number): Promise<number> {
    this.loopDelay.enable();
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen({ host, port }, () => {
        this.server.off('error', reject);
        resolve((this.server.address() as AddressInfo).port);
      });
    });
  }

  async close(): Promise<void> {
    this.loopDelay.disable();
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
    if (path === '/metrics') {
      this.registry.metrics().then(
        (text) => reply(res, 200, this.registry.contentType, text),
        (err: Error) => reply(res, 500, 'text/plain', `${err.message}\n`),
      );
      return;
    }
    reply(res, 404, 'text/plain', 'GET /health or /metrics\n');
  }

  private defineMetrics(): void {
    const src = this.source;
    const registers = [this.registry];
    const gauge = (name: string, help: string, read: () => number): void => {
      new Gauge({
        name,
        help,
        registers,
        collect() {
          this.set(read());
        },
      });
    };
    // Counters mirror totals the node keeps; prom-client counters only go up, so each scrape sets
    // the total afresh.
    const counter = (name: string, help: string, read: () => number): void => {
      new Counter({
        name,
        help,
        registers,
        collect() {
          this.reset();
          this.inc(read());
        },
      });
    };
    gauge('raftmq_connections', 'open MQTT connections', () => src.connections());
    counter('raftmq_messages_in_total', 'PUBLISH packets received from clients', () => src.messagesIn());
    counter('raftmq_messages_out_total', 'PUBLISH packets written to clients', () => src.messagesOut());
    counter('raftmq_queue_drops_total', 'messages not admitted to a full session queue', () => src.queueDrops());
    gauge('raftmq_serving', '1 while this node serves MQTT clients', () => (src.status().serving ? 1 : 0));
    gauge('raftmq_raft_term', 'current raft term', () => src.status().term);
    gauge('raftmq_raft_commit_index', 'raft commit index', () => src.status().commitIndex);
    gauge('raftmq_raft_applied_index', 'last raft index applied to the broker state', () => src.status().appliedIndex);
    gauge('raftmq_lease_remaining_seconds', 'time left of the leader lease', () => src.status().leaseRemainingMs / 1000);
    const loop = this.loopDelay;
    gauge('raftmq_event_loop_delay_p99_seconds', 'event-loop delay, 99th percentile since the last scrape', () => {
      const p99 = loop.percentile(99) / NS_PER_S;
      loop.reset();
      return Number.isFinite(p99) ? p99 : 0;
    });
  }
}

function reply(res: ServerResponse, code: number, type: string, body: string): void {
  res.writeHead(code, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}
