// What a node's listeners do with a socket while the node does not serve, under
// --cluster-server-reference (docs/operations.md "Server Reference"): read the client's CONNECT
// only to answer it with a CONNACK that sends the client to the leader, and close. While no
// leader is known an MQTT 5 CONNECT waits for one, at most REFERRAL_HOLD_MS; when this node
// begins to serve, the sockets it holds become connections and their CONNECTs are served. Nothing
// else of MQTT is spoken here and nothing reaches the log. Under --shard a CONNECT whose client id
// belongs to another shard is sent to that shard at once (src/server/shard-gate.ts), not to this
// shard's leader, which would only send it on.

import type { EventKind, RefusalKey } from '../events.js';
import { Decoder } from '../protocol/decoder.js';
import { encode } from '../protocol/encoder.js';
import { CONNACK_V4, RC } from '../protocol/reason-codes.js';
import type { Referral, ShardGate } from './shard-gate.js';
import type { ByteStream, Transport } from './transport.js';

export interface ReferenceSource {
  /** The leader's address as clients reach it, or null while no other node is known to lead. */
  leader(): string | null;
  /** This node's own address as clients reach it. */
  readonly own: string;
}

export interface ReferrerHost {
  /** Counted and logged at most once per window per key, as the node's other refusals. */
  refused(key: RefusalKey, fields: Record<string, unknown>, message: string): void;
  /** Counted and logged as the connections' events are. */
  event(kind: EventKind, fields?: Record<string, unknown>): void;
  /** This node serves now: a held socket becomes a connection, given the bytes read from it so far
   * (its CONNECT, and whatever followed it). */
  adopt(stream: ByteStream, transport: Transport, read: readonly Buffer[]): void;
}

export interface ReferrerLimits {
  maxPacketSize: number;
  /** A socket silent for this long after accept is closed (the CONNECT timeout). */
  handshakeTimeoutMs: number;
}

/** An MQTT 5 CONNECT that arrives while no leader is known waits this long for one (an election
 * takes about one to two election timeouts) before it is answered 0x88: a device answered at once
 * would only wait out its backoff and try again. */
const REFERRAL_HOLD_MS = 3_000;
/** How often held CONNECTs look for a leader. */
const REFERRAL_POLL_MS = 20;
/** Held sockets handed to the node per event-loop turn when it begins to serve: a fleet held
 * during an election is thousands, and taking them all in one turn stalled the new leader past
 * its lease. */
const ADOPT_PER_TURN = 256;

interface Held {
  readonly stream: ByteStream;
  readonly transport: Transport;
  readonly until: number;
  /** Every chunk read from the socket, the CONNECT's first. */
  readonly read: Buffer[];
  readonly done: () => void;
  /** Takes the referrer's listeners off the socket. */
  readonly detach: () => void;
}

export class Referrer {
  /** Sockets accepted and not yet answered; they count against --max-pending-connections. */
  pending = 0;
  /** CONNECTs answered with an address, and without one (no leader known, or 3.1.1). */
  referred = 0;
  unavailable = 0;
  private readonly held = new Set<Held>();
  private poll: NodeJS.Timeout | null = null;

  constructor(
    private readonly source: ReferenceSource,
    private readonly host: ReferrerHost,
    private readonly limits: ReferrerLimits,
    /** --shard: clients of other shards are sent there; null: not sharded. */
    private readonly shards: ShardGate | null = null,
  ) {}

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
    const onGone = (): void => finish();
    const onEnd = (): void => {
      finish();
      stream.destroy();
    };
    const chunks: Buffer[] = [];
    let decided = false;
    const onData = (chunk: Buffer): void => {
      if (done) return;
      chunks.push(chunk);
      if (decided) return; // held: what follows the CONNECT goes to the connection too
      const { packets, error } = decoder.feed(chunk);
      const first = packets[0];
      if (first === undefined && error === null) return;
      decided = true;
      if (first?.type !== 'connect') {
        finish();
        this.host.refused(
          'referral-not-connect',
          { remote: transport.remoteAddress },
          'first packet to a node that does not serve is not CONNECT; closed',
        );
        stream.destroy();
        return;
      }
      const elsewhere = first.clientId === '' || this.shards === null ? null : this.shards.referral(first.clientId);
      if (elsewhere !== null) {
        finish();
        this.host.event('connect-wrong-shard', { remote: transport.remoteAddress, shard: elsewhere.shard, reference: elsewhere.reference });
        this.sendToShard(stream, first.level, elsewhere);
        return;
      }
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
      clearTimeout(timer);
      const detach = (): void => {
        stream.off('data', onData);
        stream.off('error', onGone);
        stream.off('close', onGone);
        stream.off('end', onEnd);
      };
      this.held.add({ stream, transport, until: performance.now() + REFERRAL_HOLD_MS, read: chunks, done: finish, detach });
      this.poll ??= setInterval(this.lookForLeader, REFERRAL_POLL_MS);
    };
    stream.on('data', onData);
    stream.on('error', onGone);
    stream.on('close', onGone);
    stream.on('end', onEnd);
  }

  /** This node serves now: every socket it holds becomes a connection, its CONNECT served here,
   * ADOPT_PER_TURN a turn. */
  serving(): void {
    this.stopPoll();
    if (this.held.size > 0) setImmediate(this.adoptSome);
  }

  private readonly adoptSome = (): void => {
    let n = 0;
    for (const h of this.held) {
      if (n++ === ADOPT_PER_TURN) break;
      this.held.delete(h);
      h.done();
      h.detach();
      if (!h.stream.destroyed) this.host.adopt(h.stream, h.transport, h.read);
    }
    if (this.held.size > 0) setImmediate(this.adoptSome);
  };

  /** The node stops: held sockets are closed unanswered. */
  stop(): void {
    for (const h of this.held) {
      h.done();
      h.stream.destroy();
    }
    this.held.clear();
    this.stopPoll();
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

  /** A client of another shard: MQTT 5 0x9C Use another server, with its shard's address when one is
   * configured; 3.1.1 return code 3, Server unavailable; then end. */
  private sendToShard(stream: ByteStream, level: 3 | 4 | 5, to: Referral): void {
    this.referred++;
    const props = to.reference === null ? { reasonString: to.reason } : { reasonString: to.reason, serverReference: to.reference };
    stream.write(
      level === 5
        ? encode({ type: 'connack', sessionPresent: false, code: RC.USE_ANOTHER_SERVER, props }, 5)
        : encode({ type: 'connack', sessionPresent: false, code: CONNACK_V4.SERVER_UNAVAILABLE, props: {} }, level),
    );
    stream.end();
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
