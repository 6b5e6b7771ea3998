// A follower's listeners under --cluster-server-reference (docs/operations.md "Server Reference"):
// they take a client's CONNECT only to answer it with a CONNACK that sends the client to the leader
// and close; while no leader is known an MQTT 5 CONNECT waits for one, at most REFERRAL_HOLD_MS.
// Nothing else of MQTT is spoken here and nothing reaches the log.
import { Decoder } from '../protocol/decoder.js';
import { encode } from '../protocol/encoder.js';
import { CONNACK_V4, RC } from '../protocol/reason-codes.js';
import type { ListenerSpec } from './listeners/listen-url.js';
import { Listener, type ListenerHost, type ListenerLimits } from './listeners/listener.js';
import type { TlsMaterial } from './listeners/tls-material.js';
import type { ByteStream, Transport } from './transport.js';

export interface ReferenceSource {
  /** The leader's address as clients reach it, or null while no other node is known to lead. */
  leader(): string | null;
  /** This node's own address as clients reach it. */
  readonly own: string;
}

export interface ReferrerHost {
  /** Counted and logged at most once per window per key, as the node's other refusals. */
  refused(key: string, fields: Record<string, unknown>, message: string): void;
}

/** Open sockets not yet answered; one past it is closed at accept. A fleet reconnects at once. */
const REFERRALS_PENDING_MAX = 20_000;
/** An MQTT 5 CONNECT that arrives while no leader is known waits this long for one (an election
 * takes about one to two election timeouts) before it is answered 0x88: a device answered at once
 * would only wait out its backoff and try again. */
export const REFERRAL_HOLD_MS = 3_000;
/** How often held CONNECTs look for a leader. */
const REFERRAL_POLL_MS = 20;

interface Held {
  readonly stream: ByteStream;
  readonly until: number;
  readonly done: () => void;
}

export class Referrer implements ListenerHost {
  private listeners: Listener[] | null = null;
  private closing: Promise<void> = Promise.resolve();
  private pending = 0;
  private readonly held = new Set<Held>();
  private poll: NodeJS.Timeout | null = null;
  /** CONNECTs answered with the leader's address, and without one (no leader known). */
  referred = 0;
  unavailable = 0;

  constructor(
    private readonly specs: readonly ListenerSpec[],
    private readonly tls: TlsMaterial | null,
    private readonly limits: ListenerLimits,
    private readonly source: ReferenceSource,
    private readonly host: ReferrerHost,
  ) {}

  get open(): boolean {
    return this.listeners !== null;
  }

  /** Listens on `ports` (one per spec; 0: the spec's own) once an earlier close() has finished.
   * Resolves with the bound ports; a bind failure closes what opened and rejects. */
  async listen(ports: readonly number[]): Promise<number[]> {
    await this.closing;
    if (this.listeners !== null) return ports.slice();
    const listeners = this.specs.map((spec) => new Listener(spec, this, this.tls, this.limits));
    this.listeners = listeners;
    try {
      return await Promise.all(listeners.map((l, i) => l.listen(ports[i] || l.spec.port)));
    } catch (err) {
      this.close();
      throw err;
    }
  }

  /** Stops listening; the promise (also awaited by the next listen()) resolves once every port is
   * released. `serving`: this node now serves, so a CONNECT held for want of a leader is sent here
   * (its own address), else it is closed unanswered. */
  close(serving = false): Promise<void> {
    for (const h of this.held) {
      h.done();
      if (serving) this.send(h.stream, this.source.own);
      else h.stream.destroy();
    }
    this.held.clear();
    this.stopPoll();
    const listeners = this.listeners;
    this.listeners = null;
    if (listeners !== null) this.closing = Promise.all(listeners.map((l) => l.close(0))).then(() => undefined);
    return this.closing;
  }

  admitSocket(): boolean {
    if (this.pending >= REFERRALS_PENDING_MAX) {
      this.host.refused('limit-pending-referrals', { pending: this.pending }, 'too many sockets awaiting a referral; closed');
      return false;
    }
    this.pending++;
    return true;
  }

  handshakeEnded(): void {
    this.pending--;
  }

  refused(key: string, fields: Record<string, unknown>, message: string): void {
    this.host.refused(key, fields, message);
  }

  /** Reads the first packet: a CONNECT is answered and the socket ended; anything else, a decode
   * error or silence past the CONNECT timeout closes it unanswered. */
  accept(stream: ByteStream, transport: Transport): void {
    this.pending++;
    const decoder = new Decoder({ maxPacketSize: this.limits.maxPacketSize });
    let done = false;
    const finish = (): void => {
      if (done) return;
      done = true;
      this.pending--;
      clearTimeout(timer);
    };
    const timer = setTimeout(() => {
      finish();
      stream.destroy();
    }, this.limits.handshakeTimeoutMs);
    stream.on('error', () => finish());
    stream.on('close', () => finish());
    stream.on('end', () => {
      finish();
      stream.destroy();
    });
    stream.on('data', (chunk: Buffer) => {
      if (done) return;
      const { packets, error } = decoder.feed(chunk);
      const first = packets[0];
      if (first === undefined && error === null) return;
      if (first?.type !== 'connect') {
        finish();
        this.host.refused('referral-not-connect', { remote: transport.remoteAddress }, 'first packet to a follower is not CONNECT; closed');
        stream.destroy();
        return;
      }
      clearTimeout(timer);
      if (first.level !== 5) {
        // 3.1.1 has no reference: return code 3, Server unavailable, at once.
        finish();
        this.unavailable++;
        stream.write(encode({ type: 'connack', sessionPresent: false, code: CONNACK_V4.SERVER_UNAVAILABLE, props: {} }, first.level));
        stream.end();
        return;
      }
      const to = this.source.leader();
      if (to !== null) {
        finish();
        this.send(stream, to);
        return;
      }
      this.held.add({ stream, until: performance.now() + REFERRAL_HOLD_MS, done: finish });
      this.poll ??= setInterval(this.lookForLeader, REFERRAL_POLL_MS);
    });
  }

  private readonly lookForLeader = (): void => {
    const to = this.source.leader();
    const now = performance.now();
    for (const h of this.held) {
      if (h.stream.destroyed) {
        this.held.delete(h);
        h.done();
      } else if (to !== null || now >= h.until) {
        this.held.delete(h);
        h.done();
        this.send(h.stream, to);
      }
    }
    if (this.held.size === 0) this.stopPoll();
  };

  private stopPoll(): void {
    if (this.poll !== null) clearInterval(this.poll);
    this.poll = null;
  }

  /** MQTT 5: 0x9C Use another server with `to`, or 0x88 Server unavailable without one; then end. */
  private send(stream: ByteStream, to: string | null): void {
    if (to === null) this.unavailable++;
    else this.referred++;
    stream.write(
      to === null
        ? encode({ type: 'connack', sessionPresent: false, code: RC.SERVER_UNAVAILABLE, props: { reasonString: 'no leader known' } }, 5)
        : encode({ type: 'connack', sessionPresent: false, code: RC.USE_ANOTHER_SERVER, props: { serverReference: to } }, 5),
    );
    stream.end();
  }
}
