// One MQTT connection: bytes → Decoder → CONNECT gate → validation → commands proposed to the log;
// effects of committed entries → packets → one socket write per event-loop turn.
//
// Connection-scoped protocol state lives here and starts fresh with every connection (docs/design.md
// "The seam"): keep-alive, inbound topic aliases, the inbound Receive Maximum count. Everything a
// client may expect to find again after reconnecting is decided by apply.
//
// This file is the coordinator: the socket, the phase, dispatch, waiting for asynchronous verdicts,
// the order of proposals and replies, closing and timers. Each phase's handling of its packets is
// in its own module: connect-phase.ts (CONNECT to CONNACK, authentication), inbound-publish.ts,
// inbound-subscribe.ts, and connection-output.ts (effects to bytes, the socket write); see
// docs/architecture.md "One connection, by phase".
import { performance } from 'node:perf_hooks';
import {
  ACKS_PER_COMMAND_MAX,
  type AckItem,
  type Command,
  type ConnId,
  type Message,
  type OutPacket,
  type ProtocolLevel,
  PUBLISHES_BYTES_MAX,
  PUBLISHES_PER_COMMAND_MAX,
  type PublishCommand,
  type PubrelCommand,
} from '../broker/commands.js';
import { assignedClientId } from '../broker/session.js';
import type { EventKind } from '../events.js';
import { Decoder } from '../protocol/decoder.js';
import { encode } from '../protocol/encoder.js';
import type { ConnectPacket, DecodeError, DisconnectPacket, Packet } from '../protocol/packets.js';
import { CONNACK_V4, RC } from '../protocol/reason-codes.js';
import type { HookAuthorizer } from './auth/hook-authorizer.js';
import type { EnhancedAuthState } from './auth-exchange.js';
import type { Authenticator } from './authenticator.js';
import { onAuth, onAuthAction, onConnect } from './connect-phase.js';
import { deliverEffect, flushOutput, write, writeControl } from './connection-output.js';
import type { StorageGate } from './disk-space.js';
import type { EnhancedAuthMethod } from './enhanced-auth.js';
import { onPublish } from './inbound-publish.js';
import { onSubscribe, onUnsubscribe } from './inbound-subscribe.js';
import { keepAliveWheel, type WheelMember } from './keepalive-wheel.js';
import { type NodeLimits, type TokenBucket, topicLimitProblem } from './limits.js';
import { type ConnackLimits, NO_DISCONNECT, reasonText } from './outbound.js';
import type { Outbox, OutboxMember } from './outbox.js';
import type { PublishTracer } from './publish-trace.js';
import type { ShardGate } from './shard-gate.js';
import type { OutboundAliases } from './topic-alias-out.js';
import type { Traffic } from './traffic.js';
import type { ByteStream, Transport } from './transport.js';

/** The limits a connection enforces; a subset of NodeOptions. */
export interface ConnectionLimits extends NodeLimits {
  maxPacketSize: number;
  maxKeepalive: number;
  receiveMaximum: number;
  topicAliasMaximum: number;
  maxQos: 0 | 1 | 2;
  retainAvailable: boolean;
  /** Output waiting for the socket above which QoS 0 deliveries to it are dropped and reading from
   * it pauses until the output drains (slow consumer; --max-write-buffer-bytes). */
  maxWriteBufferBytes: number;
}

/** What a connection needs from the node that owns it. */
export interface ConnectionHost {
  readonly limits: ConnectionLimits;
  readonly authenticator: Authenticator;
  /** An embedding application's authorization hooks (src/server/auth/hook-authorizer.ts), or null. */
  readonly authorizer: HookAuthorizer | null;
  /** MQTT 5 enhanced-authentication methods offered, by Authentication Method name. */
  readonly enhancedAuth: ReadonlyMap<string, EnhancedAuthMethod>;
  /** A node limit's refusal of this CONNECT (RC.*), or null when admitted (src/server/limits.ts,
   * src/server/disk-space.ts). */
  admitConnect(address: string, conn: Connection, connect: ConnectPacket): number | null;
  /** While true, a PUBLISH that would be stored is refused (src/server/disk-space.ts). */
  readonly storageGate: StorageGate;
  /** Appends a command to the log (and pauses reading everywhere when the log is over its bound). */
  propose(cmd: Command): void;
  /** Routes a QoS 0 non-retained message to live subscribers and executes the effects. */
  routeQos0(from: ConnId, msg: Message): void;
  /** The socket has closed; the host forgets the connection. */
  closed(c: Connection): void;
  /** A counted event (and, for protocol errors, a rate-limited log line). */
  event(kind: EventKind, fields?: Record<string, unknown>): void;
  protocolError(key: string, fields: Record<string, unknown>, message: string): void;
  /** True while the log refuses more input; new and resumed sockets stay paused. */
  readonly readsPaused: boolean;
  /** The node's traffic counters, bumped in place here. */
  readonly traffic: Traffic;
  /** Offers a PUBLISH read at `readAt` (performance.now() of its socket read) as the latency probe:
   * a QoS 0 one by its message, a QoS 1/2 one by its packet id. */
  probePublish(conn: ConnId, msg: Message | null, pid: number, readAt: number): void;
  /** The status page's live trace (publish-trace.ts); called only while `tracer.on`. */
  readonly tracer: PublishTracer;
  /** --shard: which client ids this node serves (src/server/shard-gate.ts); null: every one. */
  readonly shardGate: ShardGate | null;
}

/** A connection that decided to close waits at most this long for its queued replies. */
const CLOSE_GRACE_MS = 5_000;

type Phase =
  | 'awaiting-connect'
  | 'authenticating'
  /** CONNECT named an Authentication Method: AUTH exchanges until the method decides. */
  | 'auth-exchange'
  /** CONNECT proposed, CONNACK not yet applied. */
  | 'connecting'
  | 'connected'
  /** Reading stopped; replies already decided still go out, then the socket ends. */
  | 'closing'
  | 'closed';

/** A reply the connection decides itself; it waits behind this connection's unapplied proposals
 * so that replies keep arrival order (docs/design.md "Replies keep arrival order"). */
type LocalAction =
  | { k: 'send'; packet: OutPacket }
  | { k: 'pingresp' }
  | { k: 'route'; msg: Message }
  /** reason: v5 DISCONNECT reason to send first, or -1 for none. */
  | { k: 'close'; reason: number };

/** The socket's property naming the Connection that reads it. */
const OWNER: unique symbol = Symbol('raftmq.connection');
type OwnedStream = ByteStream & { [OWNER]?: Connection };

/** Owns the socket and the phase, and keeps replies in arrival order; what each phase does with a
 * packet is in its own module (connect-phase.ts, inbound-publish.ts, inbound-subscribe.ts), and
 * the output in connection-output.ts. Those modules are plain functions over this connection's fields, so members they use are not `private`: a helper object
 * per phase would cost every idle connection its bytes. */
export class Connection implements WheelMember, OutboxMember {
  readonly id: ConnId;
  /** The client id its CONNECT named, for log lines; null before CONNECT or when assigned. */
  clientId: string | null = null;
  /** --shard: the id assigned to a CONNECT without one, chosen to belong to this shard; null: the
   * usual assignedClientId(id). */
  assigned: string | null = null;
  /** The user the CONNECT was allowed as (a certificate identity replaces the name sent). */
  username: string | null = null;
  readonly transport: Transport;
  readonly socket: ByteStream;
  readonly host: ConnectionHost;
  /** Where this connection's output waits for its socket write, shared by the node's connections. */
  readonly outbox: Outbox;
  private readonly decoder: Decoder;
  phase: Phase = 'awaiting-connect';
  level: ProtocolLevel = 4;
  connackOk = false;
  /** A successful CONNACK has gone to the socket (not only into this turn's buffer). */
  connackWritten = false;
  /** Proposals of this connection not yet applied. */
  pending = 0;
  /** PUBACK/PUBREC/PUBCOMP read and not yet proposed: the acks of one read go out as one command,
   * proposed before anything else this connection proposes or replies, so order is kept. */
  private acks: AckItem[] = [];
  /** Publishes and PUBRELs read and not yet proposed: those of one read go out as one `publishes`
   * command (a new one past PUBLISHES_PER_COMMAND_MAX or PUBLISHES_BYTES_MAX), proposed before
   * anything else this connection proposes or replies, so order is kept. */
  private pubs: (PublishCommand | PubrelCommand)[] = [];
  private pubsBytes = 0;
  local: LocalAction[] = [];
  out: Buffer[] = [];
  outBytes = 0;
  dirty = false;
  /** The socket holds more than maxWriteBufferBytes of output: reading waits for its 'drain'. */
  outputFull = false;
  keepAliveMs = 0;
  lastRxMs = 0;
  /** The connect timeout or the close grace; keep-alive is on the shared wheel instead. */
  private timer: NodeJS.Timeout | null = null;
  wheelAt = 0;
  wheelSlot = -1;
  wheelIndex = 0;
  aliases: Map<number, string> | null = null;
  /** Packet ids of inbound QoS 1/2 publishes not yet answered (v5 Receive Maximum, §4.9,
   * receive-maximum.ts); created by the first one, since an empty Set costs about 170 bytes per
   * idle connection. */
  inbound: Set<number> | null = null;
  connectExpiry = 0;
  connectProposed = false;
  private disconnectProposed = false;
  limits: ConnackLimits;
  /** An authorization hook's answer is pending: what was read after its packet waits in `backlog`. */
  private awaitingHook = false;
  /** Packets decoded while an asynchronous authentication or authorization was running. */
  private backlog: Packet[] = [];
  private backlogError: DecodeError | null = null;
  /** Enhanced authentication agreed at CONNECT, kept for re-authentication. */
  enhanced: EnhancedAuthState | null = null;
  /** Outbound topic aliases, when the client accepts them. */
  aliasesOut: OutboundAliases | null = null;
  /** The client's Maximum Packet Size; 0: none beyond the protocol's. */
  clientMaxPacket = 0;
  /** The CONNECT of an enhanced authentication in progress, proposed once the method succeeds. */
  pendingConnect: ConnectPacket | undefined;
  /** --max-publish-rate, created on the first PUBLISH when a rate is set. */
  publishBucket: TokenBucket | null = null;
  /** PUBLISH packets refused over the rate, at the same rate: when it runs dry, DISCONNECT 0x96. */
  excessBucket: TokenBucket | null = null;

  constructor(id: ConnId, socket: ByteStream, transport: Transport, host: ConnectionHost, outbox: Outbox) {
    this.id = id;
    this.socket = socket;
    this.transport = transport;
    this.host = host;
    this.outbox = outbox;
    const l = host.limits;
    this.decoder = new Decoder({ maxPacketSize: l.maxPacketSize });
    this.limits = {
      receiveMaximum: l.receiveMaximum,
      maxQos: l.maxQos,
      retainAvailable: l.retainAvailable,
      maxPacketSize: l.maxPacketSize,
      topicAliasMaximum: l.topicAliasMaximum,
      serverKeepAlive: undefined,
    };
    // Shared listeners find their connection on the socket: four closures and their context per
    // connection were about 260 bytes of every idle connection.
    (socket as OwnedStream)[OWNER] = this;
    socket.on('data', socketData);
    socket.on('error', socketError);
    socket.on('close', socketClose);
    socket.on('drain', socketDrain);
    socket.on('end', socketEnd);
    this.lastRxMs = performance.now();
    this.armTimer(l.connectTimeoutMs);
    if (host.readsPaused) socket.pause();
  }

  get isOpen(): boolean {
    return this.phase !== 'closed';
  }

  // ---- input ----

  /** The socket's 'data', through the shared listener. */
  onData(chunk: Buffer): void {
    this.lastRxMs = performance.now();
    this.host.traffic.bytesIn += chunk.length;
    if (this.phase === 'closing' || this.phase === 'closed') return;
    try {
      const { packets, error } = this.decoder.feed(chunk);
      this.host.traffic.packetsIn += packets.length;
      this.handleAll(packets, 0, error);
    } catch (err) {
      this.internalError(err);
    }
  }

  /** A bug met while handling this connection's input or output: it closes this connection
   * only; the process and every other connection go on. */
  internalError(err: unknown): void {
    this.host.protocolError('internal', { ...this.who(), error: String(err) }, 'internal error; closing connection');
    if (this.phase === 'closed') return;
    if (this.connectProposed) this.beginClose(RC.IMPLEMENTATION_SPECIFIC_ERROR);
    else this.closeNow(NO_DISCONNECT);
  }

  private handleAll(packets: Packet[], from: number, error: DecodeError | null): void {
    try {
      this.handleEach(packets, from, error);
    } finally {
      // Every read and every resumption after a verdict ends here: nothing waits past it unproposed.
      this.proposeHeld();
    }
  }

  private handleEach(packets: Packet[], from: number, error: DecodeError | null): void {
    for (let i = from; i < packets.length; i++) {
      if (this.phase === 'authenticating' || this.awaitingHook) {
        this.backlog = packets.slice(i);
        this.backlogError = error;
        return;
      }
      if (this.phase === 'closing' || this.phase === 'closed') return;
      this.handle(packets[i] as Packet);
    }
    if (this.phase === 'authenticating' || this.awaitingHook) {
      // The packet waiting was the last one: a decode error behind it waits for the verdict too.
      this.backlog = [];
      this.backlogError = error;
      return;
    }
    if (error !== null && this.phase !== 'closing' && this.phase !== 'closed') this.onDecodeError(error);
  }

  private handle(p: Packet): void {
    if (this.phase === 'auth-exchange' && p.type !== 'auth' && p.type !== 'disconnect') {
      // [MQTT-3.1.2-30]: only AUTH or DISCONNECT until the CONNACK of an enhanced authentication.
      onAuthAction(this, { k: 'refuse', reason: RC.PROTOCOL_ERROR, why: `${p.type} during authentication` });
      return;
    }
    switch (p.type) {
      case 'connect':
        onConnect(this, p);
        return;
      case 'publish':
        onPublish(this, p);
        return;
      case 'puback':
      case 'pubrec':
      case 'pubcomp':
        if (this.pubs.length > 0) this.proposePubs();
        this.acks.push({ pid: p.pid, kind: p.type });
        if (this.acks.length >= ACKS_PER_COMMAND_MAX) this.proposeAcks();
        return;
      case 'pubrel':
        this.proposePublish({ t: 'pubrel', conn: this.id, pid: p.pid });
        return;
      case 'subscribe':
        onSubscribe(this, p);
        return;
      case 'unsubscribe':
        onUnsubscribe(this, p);
        return;
      case 'pingreq':
        this.reply({ k: 'pingresp' });
        return;
      case 'disconnect':
        this.onDisconnect(p);
        return;
      case 'auth':
        onAuth(this, p);
        return;
      case 'connack':
      case 'suback':
      case 'unsuback':
      case 'pingresp':
        this.fail(RC.PROTOCOL_ERROR, 'server-packet', `client sent ${p.type}`);
        return;
      default: {
        const _: never = p;
        void _;
      }
    }
  }

  private onDecodeError(e: DecodeError): void {
    this.host.protocolError(e.key, { ...this.who(), reason: e.reason }, e.message);
    if (this.phase === 'awaiting-connect') {
      // [MQTT-3.1.2-2]: an unsupported protocol level is answered with CONNACK 0x01, in the 3.1.1
      // form, since the client's own version is the one we do not speak.
      if (e.reason === RC.UNSUPPORTED_PROTOCOL_VERSION) {
        const connack: Packet = {
          type: 'connack',
          sessionPresent: false,
          code: CONNACK_V4.UNACCEPTABLE_PROTOCOL_VERSION,
          props: {},
        };
        write(this, encode(connack, 4));
      }
      this.closeNow(NO_DISCONNECT);
      return;
    }
    this.beginClose(e.reason);
  }

  /** The fields naming this connection in a log line: `conn`, and `clientId` once known. */
  who(): { conn: ConnId; clientId?: string } {
    return this.clientId === null ? { conn: this.id } : { conn: this.id, clientId: this.clientId };
  }

  /** The client id assigned to a CONNECT that named none. */
  assignedId(): string {
    return this.assigned ?? assignedClientId(this.id);
  }

  /** Runs what a pending verdict decided, then the packets read meanwhile, in order; reading resumes
   * unless they made the connection wait again. */
  resumeAfter(decided: () => void): void {
    try {
      decided();
      const backlog = this.backlog;
      const error = this.backlogError;
      this.backlog = [];
      this.backlogError = null;
      this.handleAll(backlog, 0, error);
    } catch (err) {
      this.internalError(err);
    }
    if (this.isReading() && !this.host.readsPaused) this.socket.resume();
  }

  /** A verdict given at once is acted on at once; a promise makes the connection wait for it. */
  onVerdict<T>(verdict: T | Promise<T>, decided: (answer: T) => void): void {
    if (verdict instanceof Promise) this.waitForHook(verdict, decided);
    else decided(verdict);
  }

  /** An authorization hook answered with a promise: nothing more is handled until it settles. */
  private waitForHook<T>(verdict: Promise<T>, decided: (answer: T) => void): void {
    this.awaitingHook = true;
    this.socket.pause();
    void verdict.then((a) => {
      this.awaitingHook = false;
      if (this.phase === 'closing' || this.phase === 'closed') return;
      this.resumeAfter(() => decided(a));
    });
  }

  /** A topic name or filter over --max-topic-levels or --max-topic-length is a limit, counted as
   * such (`limit-topic`), not a protocol error; the caller refuses it with its reason code. */
  topicWithinLimits(topic: string): boolean {
    const problem = topicLimitProblem(topic, this.host.limits);
    if (problem === null) return true;
    this.host.event('limit-topic', { ...this.who(), problem });
    return false;
  }

  // ---- DISCONNECT ----

  private onDisconnect(d: DisconnectPacket): void {
    const expiry = d.props.sessionExpiry;
    if (expiry !== undefined && this.connectExpiry === 0 && expiry !== 0) {
      // [MQTT-3.14.2-2]: a session that was to end with the connection cannot be kept now.
      this.fail(RC.PROTOCOL_ERROR, 'disconnect-session-expiry', `expiry ${expiry} after 0`);
      return;
    }
    // Only a normal DISCONNECT (0x00) discards the will [MQTT-3.1.2-10]; 0x04 asks for it.
    this.proposeDisconnect(d.code, d.code !== RC.SUCCESS, expiry);
    this.stopReading();
    this.reply({ k: 'close', reason: NO_DISCONNECT });
  }

  // ---- proposals and local replies ----

  propose(cmd: Command): void {
    this.proposeHeld();
    this.pending++;
    this.host.propose(cmd);
  }

  /** A publish accepted in this read, or a PUBREL: proposed with the others of the read at its end.
   * While a live trace is on, each goes alone, as the trace follows one entry per message
   * (publish-trace.ts). */
  proposePublish(cmd: PublishCommand | PubrelCommand): void {
    if (this.host.tracer.on) {
      this.propose(cmd);
      return;
    }
    if (this.acks.length > 0) this.proposeAcks();
    const size = cmd.t === 'publish' ? cmd.msg.topic.length + cmd.msg.payload.length : 0;
    if (this.pubs.length > 0 && this.pubsBytes + size > PUBLISHES_BYTES_MAX) this.proposePubs();
    this.pubs.push(cmd);
    this.pubsBytes += size;
    if (this.pubs.length >= PUBLISHES_PER_COMMAND_MAX) this.proposePubs();
  }

  /** Whether anything of this connection waits to be proposed or applied before a reply may run. */
  get busy(): boolean {
    return this.pending > 0 || this.local.length > 0 || this.pubs.length > 0;
  }

  /** What this read gathered and did not propose yet: at most one of the two holds anything, as
   * each is proposed before the other gathers. */
  private proposeHeld(): void {
    this.proposePubs();
    this.proposeAcks();
  }

  /** A single one as itself (a publish has its own hand-written layout), one `publishes` for several. */
  private proposePubs(): void {
    const pubs = this.pubs;
    if (pubs.length === 0) return;
    this.pubs = [];
    this.pubsBytes = 0;
    this.pending++;
    this.host.propose(pubs.length === 1 ? (pubs[0] as PublishCommand | PubrelCommand) : { t: 'publishes', conn: this.id, pubs });
  }

  /** One `ack` for a single one (its own hand-written layout), one `acks` for several. */
  private proposeAcks(): void {
    const acks = this.acks;
    if (acks.length === 0) return;
    this.acks = [];
    this.pending++;
    const a = acks[0] as AckItem;
    this.host.propose(acks.length === 1 ? { t: 'ack', conn: this.id, pid: a.pid, kind: a.kind } : { t: 'acks', conn: this.id, acks });
  }

  private proposeDisconnect(reason: number, publishWill: boolean, expiryS?: number): void {
    if (!this.connectProposed || this.disconnectProposed) return;
    this.disconnectProposed = true;
    const cmd: Command = { t: 'disconnect', conn: this.id, reason, publishWill };
    if (expiryS !== undefined) cmd.expiryS = expiryS;
    this.propose(cmd);
  }

  reply(a: LocalAction): void {
    this.proposeHeld();
    if (this.pending === 0 && this.local.length === 0) this.run(a);
    else this.local.push(a);
  }

  private run(a: LocalAction): void {
    switch (a.k) {
      case 'send':
        deliverEffect(this, a.packet);
        return;
      case 'pingresp':
        write(this, encode({ type: 'pingresp' }, this.level));
        return;
      case 'route':
        this.host.routeQos0(this.id, a.msg);
        return;
      case 'close':
        this.closeNow(a.reason);
        return;
      default: {
        const _: never = a;
        void _;
      }
    }
  }

  /** A committed entry proposed by this connection has been applied (and its effects executed). */
  applied(): void {
    this.pending--;
    if (this.pending > 0 || this.local.length === 0) return;
    const queued = this.local;
    this.local = [];
    // Local actions never propose, so pending stays 0 while they run.
    for (let i = 0; i < queued.length; i++) this.run(queued[i] as LocalAction);
  }

  /** A protocol violation: stop reading, propose the disconnect (the will is published), and
   * close after the replies already decided, with a v5 DISCONNECT carrying `reason`. */
  fail(reason: number, key: string, message: string): void {
    this.host.protocolError(key, { ...this.who(), reason }, message);
    this.beginClose(reason);
  }

  beginClose(reason: number): void {
    if (this.phase === 'closing' || this.phase === 'closed') return;
    this.proposeDisconnect(reason, true);
    this.stopReading();
    this.reply({ k: 'close', reason });
  }

  private stopReading(): void {
    this.phase = 'closing';
    this.socket.pause();
    this.armTimer(CLOSE_GRACE_MS);
  }

  // ---- effects and closing ----

  /** An effect of a committed entry (or of a QoS 0 route) for this connection (connection-output.ts). */
  deliver(p: OutPacket): void {
    deliverEffect(this, p);
  }

  /** A close decided by apply (session taken over, ...). */
  closeByBroker(reason: number): void {
    if (this.phase === 'closed') return;
    this.proposeDisconnect(reason, true);
    this.closeNow(reason);
  }

  /** The node stops serving: close without proposing anything. `discard`: serving ended (lease
   * lapsed, higher term, failed state machine), so output buffered this turn is dropped, not sent
   * (docs/design.md "One server at a time": the lease is checked at each write). */
  shutdown(reason: number, discard: boolean): void {
    this.disconnectProposed = true;
    if (discard) {
      this.out = [];
      this.outBytes = 0;
      // No DISCONNECT before a CONNACK the client never got [MQTT-3.14.0-1].
      this.connackOk = this.connackWritten;
    }
    this.closeNow(reason);
  }

  // ---- output ----

  /** The outbox's turn to write this connection: one socket write (connection-output.ts). */
  flush(): number {
    return flushOutput(this);
  }

  /** The socket's 'drain', through the shared listener. */
  onDrain(): void {
    if (!this.outputFull) return;
    this.outputFull = false;
    if (this.isReading() && !this.host.readsPaused) this.socket.resume();
  }

  closeNow(reason: number): void {
    if (this.phase === 'closed') return;
    if (reason !== NO_DISCONNECT && this.level === 5 && this.connackOk) {
      const text = reasonText(reason);
      writeControl(this, { type: 'disconnect', code: reason, props: text === undefined ? {} : { reasonString: text } });
    }
    this.phase = 'closed';
    this.local = [];
    flushOutput(this);
    this.socket.end();
    this.armTimer(CLOSE_GRACE_MS);
  }

  // ---- reading, timers, socket events ----

  private isReading(): boolean {
    return this.phase !== 'closing' && this.phase !== 'closed' && this.phase !== 'authenticating' && !this.awaitingHook && !this.outputFull;
  }

  setReadsPaused(paused: boolean): void {
    if (paused) this.socket.pause();
    else if (this.isReading()) this.socket.resume();
  }

  private armTimer(ms: number): void {
    this.clearTimer();
    this.timer = setTimeout(timerFired, ms, this);
  }

  /** Stops the timer and takes the connection off the keep-alive wheel. */
  clearTimer(): void {
    keepAliveWheel.cancel(this);
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
  }

  /** The keep-alive deadline on the wheel has passed. */
  wheelDue(): void {
    if (this.phase === 'connecting' || this.phase === 'connected') this.checkKeepAlive();
  }

  /** The connection's own timer has fired, through the shared callback. */
  onTimer(): void {
    this.timer = null;
    switch (this.phase) {
      case 'awaiting-connect':
      case 'authenticating':
      case 'auth-exchange':
        this.host.event('connect-timeout', this.who());
        this.closeNow(NO_DISCONNECT);
        return;
      case 'connecting':
      case 'connected':
        this.checkKeepAlive();
        return;
      case 'closing':
        this.closeNow(NO_DISCONNECT);
        return;
      case 'closed':
        this.socket.destroy();
        return;
      default: {
        const _: never = this.phase;
        void _;
      }
    }
  }

  /** Rescheduled for the remaining time when it falls due, instead of on every packet. */
  private checkKeepAlive(): void {
    const idle = performance.now() - this.lastRxMs;
    if (idle < this.keepAliveMs) {
      keepAliveWheel.schedule(this, this.lastRxMs + this.keepAliveMs);
      return;
    }
    this.host.event('keepalive-timeout', this.who());
    this.beginClose(RC.KEEP_ALIVE_TIMEOUT);
  }

  /** The socket's 'error', through the shared listener. */
  onSocketError(err: Error): void {
    this.host.event('socket-error', { ...this.who(), error: err.message });
    this.socket.destroy();
  }

  /** The socket's 'end', through the shared listener: the client closed the network connection.
   * A plain TCP listener allows half-open sockets, so Node does not end and close this socket in
   * the same poll phase as its FIN: when thousands of clients leave at once, libuv delivers every
   * FIN in one poll phase, and closing them all there stalled the event loop for hundreds of ms. */
  onPeerEnd(): void {
    this.outbox.peerEnded(this);
  }

  /** Ends the socket after the peer's FIN, in a turn the outbox chose: what was already decided for
   * this client goes out first, then the socket closes and 'close' proposes the disconnect. */
  endAfterPeer(): void {
    if (this.socket.destroyed) return;
    flushOutput(this);
    if (this.socket.writableLength === 0) this.socket.destroy();
    else this.socket.end();
  }

  /** The socket's 'close', through the shared listener. */
  onSocketClose(): void {
    this.clearTimer();
    if (this.phase !== 'closed') {
      this.phase = 'closed';
      this.local = [];
    }
    // An end without a normal DISCONNECT publishes the will [MQTT-3.1.2-8].
    this.proposeDisconnect(RC.UNSPECIFIED_ERROR, true);
    this.host.closed(this);
  }
}

function timerFired(c: Connection): void {
  c.onTimer();
}

function socketData(this: OwnedStream, chunk: Buffer): void {
  this[OWNER]?.onData(chunk);
}

function socketError(this: OwnedStream, err: Error): void {
  this[OWNER]?.onSocketError(err);
}

function socketClose(this: OwnedStream): void {
  this[OWNER]?.onSocketClose();
}

function socketEnd(this: OwnedStream): void {
  this[OWNER]?.onPeerEnd();
}

function socketDrain(this: OwnedStream): void {
  this[OWNER]?.onDrain();
}
