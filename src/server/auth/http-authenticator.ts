// --auth-http-url: each CONNECT is decided by an HTTP service, in the spirit of EMQX's HTTP
// authentication and mosquitto-go-auth's HTTP backend. docs/security.md "HTTP authentication"
// documents the contract: POST of a JSON object, a 2xx reply of {"result":"allow"|"deny"}.
// Decisions are cached for --auth-http-cache-ms (a bounded table), requests time out after
// --auth-http-timeout-ms and at most --auth-http-concurrency run at once; CONNECTs beyond them wait
// in order, at most --auth-http-queue of them and each at most --auth-http-timeout-ms, so that a
// fleet reconnecting at once (after a failover every device authenticates again at the new
// leader) is asked about in turn instead of being refused while the service is healthy.
import { createHash } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { performance } from 'node:perf_hooks';
import { CONFIG_ERROR, ConfigError } from '../../errors.js';
import type { ConnectPacket } from '../../protocol/packets.js';
import { RC } from '../../protocol/reason-codes.js';
import type { Authenticator, AuthResult } from '../authenticator.js';
import type { Transport } from '../transport.js';
import type { AuthCounters } from './password-authenticator.js';

export interface HttpAuthOptions {
  url: string;
  timeoutMs: number;
  /** 0: no cache. */
  cacheMs: number;
  concurrency: number;
  /** CONNECTs that may wait for a request slot; 0: refused at once when every slot is taken. */
  queue: number;
  events: AuthCounters;
  /** Decisions held at most; the oldest goes first. */
  cacheEntries?: number;
}

/** Largest reply body read; a longer one is malformed. */
const MAX_REPLY_BYTES = 64 * 1024;
const CACHE_ENTRIES_DEFAULT = 100_000;

const OK: AuthResult = { ok: true };
/** {"result":"deny"}. */
const DENIED: AuthResult = { ok: false, reason: RC.NOT_AUTHORIZED };
/** No decision: a timeout, a refused connection, a non-2xx status or a malformed reply. */
const UNAVAILABLE: AuthResult = { ok: false, reason: RC.SERVER_UNAVAILABLE };
/** Every request slot taken and --auth-http-queue CONNECTs waiting, or one waited
 * --auth-http-timeout-ms for a slot. */
const BUSY: AuthResult = { ok: false, reason: RC.SERVER_BUSY };

/** A CONNECT waiting for one of the --auth-http-concurrency request slots. */
interface Waiter {
  readonly key: string;
  readonly body: string;
  readonly clientId: string;
  readonly since: number;
  readonly resolve: (r: AuthResult) => void;
  timer: NodeJS.Timeout | undefined;
}

/** The counters (and warn lines, at most one per kind per 10 s) of replies that are no decision. */
type HttpProblem = 'auth-http-timeout' | 'auth-http-failed' | 'auth-http-status' | 'auth-http-malformed';

const PROTOCOL: Record<number, string> = { 3: 'mqtt3.1', 4: 'mqtt3.1.1', 5: 'mqtt5' };

export class HttpAuthenticator implements Authenticator {
  private readonly url: URL;
  private readonly agent: http.Agent;
  private readonly request: typeof http.request;
  /** key → [decision, expires at (performance.now() ms)]; insertion order is age order. */
  private readonly cache = new Map<string, [AuthResult, number]>();
  private readonly cacheEntries: number;
  private inflight = 0;
  /** In arrival order (a Set keeps insertion order and deletes a timed-out one in O(1)). */
  private readonly waiting = new Set<Waiter>();

  constructor(private readonly o: HttpAuthOptions) {
    let url: URL;
    try {
      url = new URL(o.url);
    } catch {
      throw new ConfigError(CONFIG_ERROR.BAD_VALUE, `--auth-http-url: not a URL (got ${JSON.stringify(o.url)})`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new ConfigError(CONFIG_ERROR.BAD_VALUE, `--auth-http-url: expected http:// or https:// (got ${JSON.stringify(o.url)})`);
    }
    this.url = url;
    const tls = url.protocol === 'https:';
    this.agent = new (tls ? https.Agent : http.Agent)({ keepAlive: true, maxSockets: o.concurrency });
    this.request = tls ? https.request : http.request;
    this.cacheEntries = o.cacheEntries ?? CACHE_ENTRIES_DEFAULT;
  }

  gauges(): Record<string, number> {
    return { authHttpInflight: this.inflight, authHttpQueued: this.waiting.size, authHttpCached: this.cache.size };
  }

  authenticate(c: ConnectPacket, remoteAddress: string, t: Transport): AuthResult | Promise<AuthResult> {
    const key = this.o.cacheMs > 0 ? cacheKey(c) : '';
    if (key !== '') {
      const hit = this.cache.get(key);
      if (hit !== undefined) {
        if (hit[1] > performance.now()) return hit[0];
        this.cache.delete(key);
      }
    }
    const full = this.inflight >= this.o.concurrency;
    if (full && this.waiting.size >= this.o.queue) {
      this.o.events.event('auth-http-busy', { clientId: c.clientId, inflight: this.inflight, queued: this.waiting.size });
      return BUSY;
    }
    const body = JSON.stringify({
      clientid: c.clientId,
      username: c.username,
      password: c.password === null ? null : Buffer.from(c.password).toString('base64'),
      remote_address: remoteAddress,
      remote_port: t.remotePort,
      protocol: PROTOCOL[c.level] ?? String(c.level),
      listener: t.kind,
      cert_identity: t.certIdentity,
    });
    if (!full) return this.ask(key, body, c.clientId);
    return new Promise<AuthResult>((resolve) => {
      const w: Waiter = { key, body, clientId: c.clientId, since: performance.now(), resolve, timer: undefined };
      w.timer = setTimeout(() => this.waitedTooLong(w), this.o.timeoutMs);
      this.waiting.add(w);
    });
  }

  private ask(key: string, body: string, clientId: string): Promise<AuthResult> {
    this.inflight++;
    return this.post(body, clientId).then((r) => {
      this.inflight--;
      if (key !== '' && r !== UNAVAILABLE) this.remember(key, r);
      this.startWaiting();
      return r;
    });
  }

  /** Free request slots go to the CONNECTs that wait, oldest first. */
  private startWaiting(): void {
    for (const w of this.waiting) {
      if (this.inflight >= this.o.concurrency) return;
      this.waiting.delete(w);
      clearTimeout(w.timer);
      // A decision for the same credentials may have come in while it waited.
      const hit = w.key === '' ? undefined : this.cache.get(w.key);
      if (hit !== undefined && hit[1] > performance.now()) w.resolve(hit[0]);
      else void this.ask(w.key, w.body, w.clientId).then(w.resolve);
    }
  }

  private waitedTooLong(w: Waiter): void {
    if (!this.waiting.delete(w)) return;
    const waitedMs = Math.round(performance.now() - w.since);
    this.o.events.event('auth-http-busy', { clientId: w.clientId, inflight: this.inflight, queued: this.waiting.size, waitedMs });
    w.resolve(BUSY);
  }

  private remember(key: string, r: AuthResult): void {
    if (this.cache.size >= this.cacheEntries) {
      const oldest = this.cache.keys().next();
      if (oldest.done !== true) this.cache.delete(oldest.value);
    }
    this.cache.set(key, [r, performance.now() + this.o.cacheMs]);
  }

  /** Resolves with the decision; never rejects. */
  private post(body: string, clientId: string): Promise<AuthResult> {
    return new Promise<AuthResult>((resolve) => {
      let settled = false;
      /** `kind`: the counter and log line of a reply that is no decision. */
      const done = (r: AuthResult, problem?: string, kind: HttpProblem = 'auth-http-malformed'): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (problem !== undefined) this.o.events.event(kind, { clientId, problem, url: this.url.origin });
        resolve(r);
      };
      const req = this.request(this.url, {
        method: 'POST',
        agent: this.agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), accept: 'application/json' },
      });
      const timer = setTimeout(() => {
        done(UNAVAILABLE, `no reply within --auth-http-timeout-ms ${this.o.timeoutMs}`, 'auth-http-timeout');
        req.destroy();
      }, this.o.timeoutMs);
      req.on('error', (err) => done(UNAVAILABLE, `request failed: ${err.message}`, 'auth-http-failed'));
      req.on('response', (res) => {
        const status = res.statusCode ?? 0;
        const chunks: Buffer[] = [];
        let bytes = 0;
        res.on('data', (chunk: Buffer) => {
          bytes += chunk.length;
          if (bytes > MAX_REPLY_BYTES) {
            done(UNAVAILABLE, `reply body over ${MAX_REPLY_BYTES} bytes`);
            res.destroy();
            return;
          }
          chunks.push(chunk);
        });
        res.on('error', (err) => done(UNAVAILABLE, `reply failed: ${err.message}`, 'auth-http-failed'));
        res.on('end', () => {
          if (status < 200 || status > 299) {
            done(UNAVAILABLE, `HTTP status ${status}, expected 2xx`, 'auth-http-status');
            return;
          }
          const text = Buffer.concat(chunks).toString('utf8');
          const [r, problem] = decision(text);
          done(r, problem);
        });
      });
      req.end(body);
    });
  }
}

/** The decision in a 2xx reply's body, or UNAVAILABLE and what is wrong with it. */
export function decision(text: string): [AuthResult, string?] {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    return [UNAVAILABLE, `reply body is not JSON: ${JSON.stringify(text.slice(0, 80))}`];
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) return [UNAVAILABLE, 'reply body is not a JSON object'];
  const result = (doc as { result?: unknown }).result;
  if (result === 'allow') return [OK];
  if (result === 'deny') return [DENIED];
  return [UNAVAILABLE, `reply "result" is ${JSON.stringify(result) ?? 'missing'}, expected "allow" or "deny"`];
}

/** The credentials a decision is for, hashed so the table holds no password. */
function cacheKey(c: ConnectPacket): string {
  const h = createHash('sha256');
  h.update(`${c.level}\0${c.clientId}\0${c.username === null ? '\u0001' : c.username}\0`);
  if (c.password !== null) h.update(c.password);
  else h.update('\u0001');
  return h.digest('base64');
}
