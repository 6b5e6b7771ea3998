// The status page of the health port (docs/operations.md "Status page"): GET / is a page with no
// build step and no outside resource, which polls GET /status.json (this node's view: itself, its
// peers as far as it knows them, a bounded history of client and message counts, a bounded ring of
// leader changes and faults) and opens GET /trace?filter=F, a Server-Sent Events stream of the
// publishes matching F (publish-trace.ts). Access: --status-token, or a loopback bind without one.
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { validateTopicFilter } from '../protocol/topic.js';
import { TRACE_WATCHERS_MAX } from '../server/publish-trace.js';
import { sum } from '../server/traffic.js';
import type { MetricsSource } from './metrics.js';
import { STATUS_PAGE_HTML } from './status-page-html.js';

/** The history ring: one sample every HISTORY_SAMPLE_MS, the last HISTORY_SAMPLES (10 minutes). */
const HISTORY_SAMPLE_MS = 5_000;
const HISTORY_SAMPLES = 120;
/** Leader changes and faults are noticed by comparing readings this often (ms). */
const EVENT_POLL_MS = 1_000;
const EVENTS_MAX = 50;
/** A trace stream sends what changed this often (ms), and a comment line after this much quiet. */
const TRACE_SEND_MS = 200;
const TRACE_KEEPALIVE_MS = 15_000;
/** A trace watcher that does not read is closed once this much waits for it (bytes). */
const TRACE_BUFFER_BYTES_MAX = 1 << 20;

/** Who may open the page and the trace. */
export interface StatusAccess {
  /** '' : none configured. */
  token: string;
  /** Without a token: open (a loopback bind) or refused with 403. */
  openWithoutToken: boolean;
}

interface Sample {
  t: number;
  connections: number;
  sessions: number;
  online: number;
  /** PUBLISH packets received and sent since start (the page charts their rates). */
  received: number;
  sent: number;
}

interface StatusEvent {
  t: number;
  kind: 'leader' | 'role' | 'serving' | 'fault' | 'peer';
  text: string;
}

/** The readings compared at each event poll. */
interface Seen {
  leader: number;
  term: number;
  role: string;
  serving: boolean;
  failure: string | null;
  needsForceStart: boolean;
  links: string;
}

export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

export class StatusPage {
  private readonly source: MetricsSource;
  private readonly access: StatusAccess;
  private readonly history: Sample[] = [];
  private readonly events: StatusEvent[] = [];
  private readonly timer: NodeJS.Timeout;
  private ticks = 0;
  private seen: Seen | null = null;
  private readonly streams = new Set<ServerResponse>();

  constructor(source: MetricsSource, access: StatusAccess) {
    this.source = source;
    this.access = access;
    this.sample();
    this.poll();
    this.timer = setInterval(() => this.tick(), EVENT_POLL_MS);
    this.timer.unref();
  }

  close(): void {
    clearInterval(this.timer);
    for (const res of this.streams) res.destroy();
  }

  /** Serves `/`, `/status.json` and `/trace`; false for any other path. */
  handle(req: IncomingMessage, res: ServerResponse, path: string, query: URLSearchParams): boolean {
    if (path !== '/' && path !== '/status.json' && path !== '/trace') return false;
    if (!this.allowed(req, res, query)) return true;
    if (path === '/') reply(res, 200, 'text/html; charset=utf-8', STATUS_PAGE_HTML);
    else if (path === '/status.json') reply(res, 200, 'application/json', `${JSON.stringify(this.view())}\n`);
    else this.openTrace(req, res, query.get('filter'));
    return true;
  }

  private allowed(req: IncomingMessage, res: ServerResponse, query: URLSearchParams): boolean {
    const token = this.access.token;
    if (token === '') {
      if (this.access.openWithoutToken) return true;
      reply(res, 403, 'text/plain', 'the status page on a non-loopback --health-host needs --status-token TOKEN\n');
      return false;
    }
    const auth = req.headers.authorization;
    const given = auth?.startsWith('Bearer ') ? auth.slice('Bearer '.length) : (query.get('token') ?? '');
    if (sameToken(given, token)) return true;
    res.setHeader('www-authenticate', 'Bearer realm="raftmq status"');
    reply(res, 401, 'text/plain', 'wrong or missing --status-token: send Authorization: Bearer TOKEN or ?token=TOKEN\n');
    return false;
  }

  // ---- /status.json ----

  private view(): unknown {
    const s = this.source.status();
    const raft = this.source.raft;
    const m = raft?.raftMetrics() ?? null;
    const offsets = m?.clockOffsetsMs ?? new Map<number, number>();
    const self = {
      id: s.node,
      self: true,
      role: s.role,
      term: s.term,
      matchLag: s.role === 'leader' ? 0 : null,
      lastContactAgoMs: 0,
      connected: true,
      clockOffsetMs: offsets.get(s.node) ?? null,
    };
    const peers = (m?.peers ?? []).map((p) => {
      // A connected peer the leader replicates to follows it, in its term; of others this node
      // knows only which one it hears as the leader.
      const follows = s.role === 'leader' && p.connected && p.matchLag !== null;
      return {
        id: p.id,
        self: false,
        role: p.id === s.leader ? 'leader' : follows ? 'follower' : null,
        term: follows || p.id === s.leader ? s.term : null,
        matchLag: s.role === 'leader' ? p.matchLag : null,
        lastContactAgoMs: p.lastContactAgoMs,
        connected: p.connected,
        clockOffsetMs: offsets.get(p.id) ?? null,
      };
    });
    const tracer = this.source.node.tracer;
    return {
      now: Date.now(),
      cluster: raft !== null,
      // --shard: this node's shard (docs/scale-out.md "Health and metrics"); null when not sharded.
      shard: this.source.node.shardGate?.shard ?? null,
      status: s,
      nodes: [self, ...peers].sort((a, b) => a.id - b.id),
      lastIndex: m?.lastIndex ?? null,
      historySampleMs: HISTORY_SAMPLE_MS,
      history: this.history,
      events: this.events,
      trace: { watching: tracer.watching, max: TRACE_WATCHERS_MAX, evaluations: tracer.evaluations },
    };
  }

  private tick(): void {
    this.poll();
    if (++this.ticks % (HISTORY_SAMPLE_MS / EVENT_POLL_MS) === 0) this.sample();
  }

  private sample(): void {
    const node = this.source.node;
    const totals = node.stateTotals();
    if (this.history.length >= HISTORY_SAMPLES) this.history.shift();
    this.history.push({
      t: Date.now(),
      connections: node.connectionCount,
      sessions: totals.sessions,
      online: totals.online,
      received: sum(node.traffic.publishIn),
      sent: sum(node.traffic.publishOut),
    });
  }

  /** Notes what changed since the last poll: leader, term, role, serving, failures, peer links. */
  private poll(): void {
    const s = this.source.status();
    const peers = this.source.raft?.raftMetrics().peers ?? [];
    const now: Seen = {
      leader: s.leader,
      term: s.term,
      role: s.role,
      serving: s.serving,
      failure: s.failure,
      needsForceStart: s.needsForceStart,
      links: peers.map((p) => `${p.id}:${p.connected ? 'up' : 'down'}`).join(' '),
    };
    const was = this.seen;
    this.seen = now;
    if (was === null) {
      this.event('leader', now.leader === 0 ? `no leader known (term ${now.term})` : `leader ${now.leader} (term ${now.term})`);
      return;
    }
    if (now.leader !== was.leader || now.term !== was.term) {
      this.event('leader', now.leader === 0 ? `no leader (term ${now.term})` : `leader ${now.leader} (term ${now.term})`);
    }
    if (now.role !== was.role) this.event('role', `this node: ${was.role} → ${now.role}`);
    if (now.serving !== was.serving) this.event('serving', now.serving ? 'this node serves MQTT clients' : 'this node stopped serving');
    if (now.failure !== was.failure && now.failure !== null) this.event('fault', `state machine failure: ${now.failure}`);
    if (now.needsForceStart && !was.needsForceStart) this.event('fault', 'no configuration can elect a leader: needs --force-start');
    if (now.links !== was.links) {
      for (const p of peers) {
        const before = was.links.includes(`${p.id}:up`);
        if (before !== p.connected) this.event(p.connected ? 'peer' : 'fault', `link to node ${p.id} ${p.connected ? 'up' : 'down'}`);
      }
    }
  }

  private event(kind: StatusEvent['kind'], text: string): void {
    if (this.events.length >= EVENTS_MAX) this.events.shift();
    this.events.push({ t: Date.now(), kind, text });
  }

  // ---- /trace ----

  /** An SSE stream (docs/operations.md "Live trace"): one `data:` line of JSON per record change. */
  private openTrace(req: IncomingMessage, res: ServerResponse, filter: string | null): void {
    if (req.method !== 'GET') {
      reply(res, 405, 'text/plain', 'trace: GET only\n');
      return;
    }
    if (filter === null || filter === '') {
      reply(res, 400, 'text/plain', 'trace: give ?filter=TOPIC_FILTER (a valid MQTT topic filter, e.g. sensors/#)\n');
      return;
    }
    const problem = filter.startsWith('$share/')
      ? 'a shared subscription; give the topic filter without $share/GROUP/'
      : validateTopicFilter(filter);
    if (problem !== null) {
      reply(res, 400, 'text/plain', `trace filter ${JSON.stringify(filter.slice(0, 200))} is not a valid topic filter: ${problem}\n`);
      return;
    }
    const tracer = this.source.node.tracer;
    const id = tracer.open(filter);
    if (id === null) {
      reply(res, 503, 'text/plain', `trace: ${TRACE_WATCHERS_MAX} watchers are open already, the most this node allows; try later\n`);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive' });
    res.write(`event: open\ndata: ${JSON.stringify({ filter, watcher: id })}\n\n`);
    this.streams.add(res);
    let since = 0;
    let quietSince = Date.now();
    const send = setInterval(() => {
      if (res.writableLength > TRACE_BUFFER_BYTES_MAX) {
        res.destroy();
        return;
      }
      if (tracer.version === since) {
        if (Date.now() - quietSince >= TRACE_KEEPALIVE_MS) {
          res.write(': quiet\n\n');
          quietSince = Date.now();
        }
        return;
      }
      for (const r of tracer.changedFor(id, since)) res.write(`data: ${JSON.stringify(r)}\n\n`);
      since = tracer.version;
      quietSince = Date.now();
    }, TRACE_SEND_MS);
    const end = (): void => {
      clearInterval(send);
      this.streams.delete(res);
      tracer.close(id);
    };
    res.once('close', end);
    req.once('error', () => res.destroy());
  }
}

/** Compared by digest, so the time taken does not depend on where the strings differ. */
function sameToken(given: string, token: string): boolean {
  const a = createHash('sha256').update(given).digest();
  const b = createHash('sha256').update(token).digest();
  return timingSafeEqual(a, b);
}

export function reply(res: ServerResponse, code: number, type: string, body: string): void {
  res.writeHead(code, { 'content-type': type, 'cache-control': 'no-store' });
  res.end(body);
}
