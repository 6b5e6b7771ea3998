// The output seam: everything a node writes to client sockets leaves through here, after apply's
// effects (docs/design.md "Effects"). The outbox owns the connections with output waiting, the
// per-turn bounds of writing them, the PUBLISH encodings one fan-out shares, and the sockets ended
// after their peer's FIN, a bounded number per turn. A connection shapes its own packets (aliases,
// the client's Maximum Packet Size) and hands the bytes here. The outbox asks the node before each
// socket write whether it still serves, and tells it when the latency probe's delivery is out.
import type { Message, OutPacket, ProtocolLevel } from '../broker/commands.js';
import { Fifo } from '../broker/fifo.js';
import type { EventKind } from '../events.js';
import { encode } from '../protocol/encoder.js';
import { type ConnackLimits, toWire } from './outbound.js';

/** Sockets ended after their peer's FIN in one event-loop turn. Ending and closing one costs
 * about 30–40 µs (Node's stream teardown, the close() system call, the disconnect proposal and
 * its apply), so 64 keep a turn near 2 ms however many clients leave at once (docs/design.md
 * "Performance principles": no turn beyond E/10). Measured with bench/disconnect-storm.ts, 10,000
 * clients: event-loop delay max 20–65 ms at 64 per turn, 43–175 ms at 256, 120–490 ms with every
 * socket closed in the poll phase that read its FIN. */
export const PEER_ENDS_PER_TURN_MAX = 64;
/** Connections whose output is written (one socket write each) in one event-loop turn, and the
 * bytes after which a turn stops early; the rest are written in the next turns, in the order they
 * became dirty. A write costs about 10–20 µs in the kernel, so 256 keep the flush of a turn near
 * 4 ms when thousands of clients reconnect at once and each gets its CONNACK and queued messages
 * (docs/design.md "Performance principles": no turn beyond E/10). The byte bound is high (copying
 * 4 MiB into socket buffers is about a millisecond) so that a turn writing many messages to a few
 * subscribers is not split. */
export const FLUSHES_PER_TURN_MAX = 256;
export const FLUSH_BYTES_PER_TURN_MAX = 4 * 1024 * 1024;

/** A connection as the outbox sees it. */
export interface OutboxMember {
  /** One socket write of everything the connection buffered; returns the bytes written. */
  flush(): number;
  /** Ends the socket after the peer's FIN, once what was decided for the client has gone out. */
  endAfterPeer(): void;
  /** A bug met while writing: it costs this connection only. */
  internalError(err: unknown): void;
}

/** What the outbox asks of the node that owns it, before each socket write. */
export interface OutboxGate {
  /** True when output may be written now. False when serving ended since the last event: the node
   * has then stopped serving (docs/design.md "One server at a time": the lease is checked at each
   * write), and the output of its connections is discarded. */
  mayWrite(): boolean;
  /** The output of `Outbox.watched` was written (the node's latency probe ends there). */
  watchedWritten(): void;
  event(kind: EventKind, fields?: Record<string, unknown>): void;
}

interface SharedPublish {
  msg: Message;
  retain: boolean;
  buf: Buffer;
}

export class Outbox {
  private readonly gate: OutboxGate;
  /** Connections with output not yet written, in the order they got it; FLUSHES_PER_TURN_MAX
   * written per turn. A connection appears once until written (the caller's own dirty flag). */
  private readonly dirty = new Fifo<OutboxMember>();
  private flushScheduled = false;
  private readonly flushBound = (): void => this.flushScheduledTurn();
  /** A commit of this turn wrote at once (writeCommitted); cleared at the turn's end. */
  private committedWritten = false;
  private readonly clearCommittedBound = (): void => {
    this.committedWritten = false;
  };
  /** Connections whose peer sent FIN, ended PEER_ENDS_PER_TURN_MAX per turn in arrival order. */
  private readonly peerEnds = new Fifo<OutboxMember>();
  private peerEndsScheduled = false;
  private readonly peerEndsBound = (): void => this.endPeers();
  /** The last QoS 0 PUBLISH encoded per protocol level, shared by the rest of its fan-out; cleared
   * at every write turn so it holds no message beyond the turn. */
  private readonly sharedPublish: (SharedPublish | null)[] = [null, null, null, null, null, null];

  /** The connection whose next write the gate hears of (the latency probe's first delivery);
   * cleared when that write happens. */
  watched: OutboxMember | null = null;

  constructor(gate: OutboxGate) {
    this.gate = gate;
  }

  /** A QoS 0 delivery without per-subscription fields is the same bytes for every subscriber of
   * one level (docs/design.md "Performance principles": encode a PUBLISH once per fan-out). QoS 1/2
   * deliveries differ in packet id and are encoded each. */
  encodePublish(p: Extract<OutPacket, { type: 'publish' }>, level: ProtocolLevel, limits: ConnackLimits): Buffer {
    if (p.qos !== 0 || p.dup || p.subIds !== undefined || p.expiryS !== undefined) {
      return encode(toWire(p, level, limits), level);
    }
    const slot = this.sharedPublish[level];
    if (slot != null && slot.msg === p.msg && slot.retain === p.retain) return slot.buf;
    const buf = encode(toWire(p, level, limits), level);
    this.sharedPublish[level] = { msg: p.msg, retain: p.retain, buf };
    return buf;
  }

  /** `m` has buffered output (and was not dirty): it is written in this turn's write, or a later
   * one when the bounds are reached. */
  queued(m: OutboxMember): void {
    this.dirty.push(m);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flushBound);
  }

  /** The peer ended its side of `m`'s socket (TCP FIN); it is ended in a later turn, a bounded
   * number per turn. */
  peerEnded(m: OutboxMember): void {
    this.peerEnds.push(m);
    this.schedulePeerEnds();
  }

  /** The write of a turn: at the end of a committed batch, and scheduled when output was queued. */
  writeTurn(): void {
    this.write(FLUSHES_PER_TURN_MAX, FLUSH_BYTES_PER_TURN_MAX);
  }

  /** The write after a committed batch. Where commits come amid the reads of a turn (a cluster
   * leader, BrokerLog commitsMidTurn), only the first commit of a turn writes at once, which keeps a
   * light load's latency; the output of the turn's later commits waits for the turn's write
   * (queued()), so a busy turn writes each connection at most twice, not once per commit. */
  writeCommitted(midTurn: boolean): void {
    if (midTurn) {
      if (this.committedWritten) return;
      this.committedWritten = true;
      setImmediate(this.clearCommittedBound);
    }
    this.writeTurn();
  }

  /** Writes everything queued, without the per-turn bounds: every connection is closing. */
  writeAll(): void {
    this.write(Number.POSITIVE_INFINITY, Number.POSITIVE_INFINITY);
  }

  private flushScheduledTurn(): void {
    this.flushScheduled = false;
    this.writeTurn();
  }

  /** Writes the output of at most `conns` dirty connections, stopping early once `bytes` were
   * written; what is left is written in a later turn. */
  private write(conns: number, bytes: number): void {
    this.sharedPublish.fill(null);
    if (this.dirty.length === 0) return;
    let written = 0;
    for (let n = 0; n < conns && written < bytes; n++) {
      // Asked before every socket write, not once per turn: a lease may lapse while a turn writes.
      if (!this.gate.mayWrite()) return;
      const m = this.dirty.shift();
      if (m === undefined) return;
      written += m.flush();
      if (m === this.watched) {
        this.watched = null;
        this.gate.watchedWritten();
      }
    }
    if (this.dirty.length > 0) {
      this.gate.event('flush-continued', { left: this.dirty.length });
      if (this.flushScheduled) return;
      this.flushScheduled = true;
      setImmediate(this.flushBound);
    }
  }

  private schedulePeerEnds(): void {
    if (this.peerEndsScheduled) return;
    this.peerEndsScheduled = true;
    setImmediate(this.peerEndsBound);
  }

  private endPeers(): void {
    this.peerEndsScheduled = false;
    for (let n = 0; n < PEER_ENDS_PER_TURN_MAX; n++) {
      const m = this.peerEnds.shift();
      if (m === undefined) return;
      try {
        m.endAfterPeer();
      } catch (err) {
        m.internalError(err);
      }
    }
    if (this.peerEnds.length > 0) this.schedulePeerEnds();
  }
}
