// A TCP relay for one directed peer link (node `from` dialing node `to`). raft/transport sends each
// node's messages only on the link it dialed, so a relay on `from`'s dialed address carries exactly
// the traffic from → to, and faults can be one-way.
//
// Modes, set by the harness at any time:
//   pass       bytes flow (after `delayMs`, order kept);
//   blackhole  a partition: open pairs are cut, new connections are accepted and then ignored (the
//              dialer's handshake times out, as across a real partition), nothing is forwarded;
//   drop       each chunk cuts its connection with probability `dropRate` (frames in flight are lost,
//              as a link that breaks loses them; bytes are never dropped from inside a stream,
//              which would only corrupt the framing).
import { connect, createServer, type Server, type Socket } from 'node:net';
import type { Prng } from '../raft/core/prng.js';

export type RelayMode = 'pass' | 'blackhole' | 'drop';

export interface RelayStats {
  accepted: number;
  cut: number;
  bytes: number;
}

/** Pairs held at once; a dialer that reconnects in a loop cannot grow this. */
const PAIRS_MAX = 64;

interface Pair {
  down: Socket;
  up: Socket | null;
  /** Monotonic ms before which no chunk of this pair is released: keeps order under delay. */
  releaseAt: number;
}

export class Relay {
  readonly from: number;
  readonly to: number;
  private readonly target: { host: string; port: number };
  private readonly random: Prng;
  private server: Server | null = null;
  private readonly pairs = new Set<Pair>();
  private mode: RelayMode = 'pass';
  private delayMs = 0;
  private dropRate = 0;
  readonly stats: RelayStats = { accepted: 0, cut: 0, bytes: 0 };

  constructor(from: number, to: number, target: { host: string; port: number }, random: Prng) {
    this.from = from;
    this.to = to;
    this.target = target;
    this.random = random;
  }

  listen(host: string, port: number): Promise<number> {
    const server = createServer((s) => this.onAccept(s));
    this.server = server;
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host, port }, () => {
        const a = server.address();
        resolve(typeof a === 'object' && a !== null ? a.port : 0);
      });
    });
  }

  set(mode: RelayMode, opts: { delayMs?: number; dropRate?: number } = {}): void {
    this.mode = mode;
    this.delayMs = opts.delayMs ?? 0;
    this.dropRate = opts.dropRate ?? 0;
    if (mode === 'blackhole') for (const p of this.pairs) this.cut(p);
  }

  /** Back to pass; connections held by a blackhole are cut so the dialer redials at once. */
  heal(): void {
    const wasBlackhole = this.mode === 'blackhole';
    this.set('pass');
    if (wasBlackhole) for (const p of this.pairs) this.cut(p);
  }

  get currentMode(): RelayMode {
    return this.mode;
  }

  async close(): Promise<void> {
    for (const p of this.pairs) this.cut(p);
    const server = this.server;
    this.server = null;
    if (server !== null) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private onAccept(down: Socket): void {
    this.stats.accepted++;
    if (this.pairs.size >= PAIRS_MAX) {
      down.destroy();
      return;
    }
    const pair: Pair = { down, up: null, releaseAt: 0 };
    this.pairs.add(pair);
    down.on('error', () => this.cut(pair));
    down.on('close', () => this.cut(pair));
    if (this.mode === 'blackhole') {
      down.on('data', () => {});
      return;
    }
    const up = connect(this.target);
    pair.up = up;
    up.on('error', () => this.cut(pair));
    up.on('close', () => this.cut(pair));
    down.on('data', (chunk: Buffer) => this.forward(pair, chunk, up));
    up.on('data', (chunk: Buffer) => this.forward(pair, chunk, down));
  }

  private forward(pair: Pair, chunk: Buffer, to: Socket): void {
    if (!this.pairs.has(pair)) return;
    switch (this.mode) {
      case 'blackhole':
        return;
      case 'drop':
        if (this.random.chance(this.dropRate)) {
          this.cut(pair);
          return;
        }
        break;
      case 'pass':
        break;
      default: {
        const _: never = this.mode;
        void _;
      }
    }
    this.stats.bytes += chunk.length;
    if (this.delayMs <= 0 && pair.releaseAt <= performance.now()) {
      to.write(chunk);
      return;
    }
    const at = Math.max(performance.now() + this.delayMs, pair.releaseAt);
    pair.releaseAt = at;
    setTimeout(() => {
      if (this.pairs.has(pair) && !to.destroyed) to.write(chunk);
    }, at - performance.now());
  }

  private cut(pair: Pair): void {
    if (!this.pairs.delete(pair)) return;
    this.stats.cut++;
    pair.down.destroy();
    pair.up?.destroy();
  }
}
