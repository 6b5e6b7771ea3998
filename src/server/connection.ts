// One MQTT connection: bytes → Decoder → CONNECT gate → validation → commands proposed to the log;
// effects of committed entries → packets → one socket write per event-loop turn.
//
// Connection-scoped protocol state lives here and starts fresh with every connection (docs/design.md
// "The seam"): keep-alive, inbound topic aliases, the inbound Receive Maximum count. Everything a
// client may expect to find again after reconnecting is decided by apply.
import { performance } from 'node:perf_hooks';
import {
  ACKS_PER_COMMAND_MAX,
  type AckItem,
  type Command,
  type ConnId,
  type Message,
  type OutPacket,
  type ProtocolLevel,
  REFUSED_NONE,
  type SubscriptionRequest,
} from '../broker/commands.js';
import { assignedClientId } from '../broker/session.js';
import type { EventKind } from '../events.js';
import { Decoder } from '../protocol/decoder.js';
import { encode } from '../protocol/encoder.js';
import type {
  AuthPacket,
  ConnectPacket,
  DecodeError,
  DisconnectPacket,
  Packet,
  PublishPacket,
  QoS,
  SubscribePacket,
  UnsubscribePacket,
} from '../protocol/packets.js';
import { CONNACK_V4, RC } from '../protocol/reason-codes.js';
import { validateTopicFilter, validateTopicName } from '../protocol/topic.js';
import type { Authorization, AuthorizePublishRequest, HookAuthorizer } from './auth/hook-authorizer.js';
import { type AuthAction, EnhancedAuthState, type FailedLogin } from './auth-exchange.js';
import type { Authenticator, AuthResult } from './authenticator.js';
import type { StorageGate } from './disk-space.js';
import type { EnhancedAuthMethod } from './enhanced-auth.js';
import { connectExpiryS, messageFromPublish, payloadFormatValid, RECEIVE_MAX_DEFAULT, willFromConnect } from './inbound.js';
import { keepAliveWheel, type WheelMember } from './keepalive-wheel.js';
import { type NodeLimits, TokenBucket, topicLimitProblem } from './limits.js';
import { type ConnackLimits, codesAckBytes, publishWithAlias, reasonText, toWire, withoutProblemInfo } from './outbound.js';
import type { Outbox, OutboxMember } from './outbox.js';
import type { PublishTracer } from './publish-trace.js';
import type { Referral, ShardGate } from './shard-gate.js';
import { OutboundAliases } from './topic-alias-out.js';
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
/** Keep-alive is enforced at one and a half times the interval [MQTT-3.1.2-24]. */
const KEEPALIVE_FACTOR_PER_S_MS = 1_500;

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

const NO_DISCONNECT = -1;
const EMPTY_PAYLOAD = new Uint8Array(0);

/** Topics the broker publishes itself (src/server/sys-topics.ts); clients may not. */
export function isSysTopic(topic: string): boolean {
  return topic.startsWith('$SYS') && (topic.length === 4 || topic.charCodeAt(4) === 0x2f);
}

/** The socket's property naming the Connection that reads it. */
const OWNER: unique symbol = Symbol('raftmq.connection');
type OwnedStream = ByteStream & { [OWNER]?: Connection };

export class Connection implements WheelMember, OutboxMember {
  readonly id: ConnId;
  /** The client id its CONNECT named, for log lines; null before CONNECT or when assigned. */
  private clientId: string | null = null;
  /** --shard: the id assigned to a CONNECT without one, chosen to belong to this shard; null: the
   * usual assignedClientId(id). */
  private assigned: string | null = null;
  /** The user the CONNECT was allowed as (a certificate identity replaces the name sent). */
  private username: string | null = null;
  readonly transport: Transport;
  private readonly socket: ByteStream;
  private readonly host: ConnectionHost;
  /** Where this connection's output waits for its socket write, shared by the node's connections. */
  private readonly outbox: Outbox;
  private readonly decoder: Decoder;
  private phase: Phase = 'awaiting-connect';
  private level: ProtocolLevel = 4;
  private connackOk = false;
  /** A successful CONNACK has gone to the socket (not only into this turn's buffer). */
  private connackWritten = false;
  /** Proposals of this connection not yet applied. */
  private pending = 0;
  /** PUBACK/PUBREC/PUBCOMP read and not yet proposed: the acks of one read go out as one command,
   * proposed before anything else this connection proposes or replies, so order is kept. */
  private acks: AckItem[] = [];
  private local: LocalAction[] = [];
  private out: Buffer[] = [];
  private outBytes = 0;
  private dirty = false;
  /** The socket holds more than maxWriteBufferBytes of output: reading waits for its 'drain'. */
  private outputFull = false;
  private keepAliveMs = 0;
  private lastRxMs = 0;
  /** The connect timeout or the close grace; keep-alive is on the shared wheel instead. */
  private timer: NodeJS.Timeout | null = null;
  wheelAt = 0;
  wheelSlot = -1;
  wheelIndex = 0;
  private aliases: Map<number, string> | null = null;
  /** Packet ids of inbound QoS 1/2 publishes not yet answered (v5 Receive Maximum, §4.9);
   * created by the first one, since an empty Set costs about 170 bytes per idle connection. */
  private inbound: Set<number> | null = null;
  private connectExpiry = 0;
  private connectProposed = false;
  private disconnectProposed = false;
  private limits: ConnackLimits;
  /** An authorization hook's answer is pending: what was read after its packet waits in `backlog`. */
  private awaitingHook = false;
  /** Packets decoded while an asynchronous authentication or authorization was running. */
  private backlog: Packet[] = [];
  private backlogError: DecodeError | null = null;
  /** Enhanced authentication agreed at CONNECT, kept for re-authentication. */
  private enhanced: EnhancedAuthState | null = null;
  /** Outbound topic aliases, when the client accepts them. */
  private aliasesOut: OutboundAliases | null = null;
  /** The client's Maximum Packet Size; 0: none beyond the protocol's. */
  private clientMaxPacket = 0;
  /** The CONNECT of an enhanced authentication in progress, proposed once the method succeeds. */
  private pendingConnect: ConnectPacket | undefined;
  /** --max-publish-rate, created on the first PUBLISH when a rate is set. */
  private publishBucket: TokenBucket | null = null;
  /** PUBLISH packets refused over the rate, at the same rate: when it runs dry, DISCONNECT 0x96. */
  private excessBucket: TokenBucket | null = null;

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
      this.proposeAcks();
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
      this.onAuthAction({ k: 'refuse', reason: RC.PROTOCOL_ERROR, why: `${p.type} during authentication` });
      return;
    }
    switch (p.type) {
      case 'connect':
        this.onConnect(p);
        return;
      case 'publish':
        this.onPublish(p);
        return;
      case 'puback':
      case 'pubrec':
      case 'pubcomp':
        this.acks.push({ pid: p.pid, kind: p.type });
        if (this.acks.length >= ACKS_PER_COMMAND_MAX) this.proposeAcks();
        return;
      case 'pubrel':
        this.propose({ t: 'pubrel', conn: this.id, pid: p.pid });
        return;
      case 'subscribe':
        this.onSubscribe(p);
        return;
      case 'unsubscribe':
        this.onUnsubscribe(p);
        return;
      case 'pingreq':
        this.reply({ k: 'pingresp' });
        return;
      case 'disconnect':
        this.onDisconnect(p);
        return;
      case 'auth':
        this.onAuth(p);
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
        this.write(encode(connack, 4));
      }
      this.closeNow(NO_DISCONNECT);
      return;
    }
    this.beginClose(e.reason);
  }

  /** The fields naming this connection in a log line: `conn`, and `clientId` once known. */
  private who(): { conn: ConnId; clientId?: string } {
    return this.clientId === null ? { conn: this.id } : { conn: this.id, clientId: this.clientId };
  }

  // ---- CONNECT ----

  private onConnect(connect: ConnectPacket): void {
    this.level = connect.level;
    // [MQTT-3.1.2-24] holds for every packet from now on, a refusing CONNACK and AUTH included.
    if (connect.level === 5) this.clientMaxPacket = connect.props.maxPacketSize ?? 0;
    this.clientId = connect.clientId === '' ? null : connect.clientId;
    // --shard: a client of another shard is sent there before anything else is looked at.
    const gate = this.host.shardGate;
    if (gate !== null && !this.placedHere(gate, connect)) return;
    const limited = this.host.admitConnect(this.transport.remoteAddress, this, connect);
    if (limited === RC.CONNECTION_RATE_EXCEEDED && connect.level !== 5) {
      this.closeNow(NO_DISCONNECT); // 3.1.1 has no return code for a rate: closed without CONNACK.
      return;
    }
    // A verified client certificate names the user; its identity replaces any username sent.
    const certId = this.transport.certIdentity;
    const c = certId === null ? connect : { ...connect, username: certId };
    const refusal = limited ?? this.connectRefusal(c);
    if (refusal !== null) {
      this.refuseConnect(refusal);
      return;
    }
    if (c.level === 5 && c.props.authMethod !== undefined) {
      this.beginEnhanced(c);
      return;
    }
    let verdict: AuthResult | Promise<AuthResult>;
    try {
      verdict = this.host.authenticator.authenticate(c, this.transport.remoteAddress, this.transport);
    } catch (err) {
      this.host.protocolError('authenticator', { ...this.who(), error: String(err) }, 'authenticator threw');
      verdict = { ok: false, reason: RC.UNSPECIFIED_ERROR };
    }
    if (!(verdict instanceof Promise)) {
      this.afterAuth(c, verdict);
      return;
    }
    this.phase = 'authenticating';
    this.socket.pause();
    verdict.then(
      (r) => this.afterAuthAsync(c, r),
      (err: unknown) => {
        this.host.protocolError('authenticator', { ...this.who(), error: String(err) }, 'authenticator failed');
        this.afterAuthAsync(c, { ok: false, reason: RC.UNSPECIFIED_ERROR });
      },
    );
  }

  /** Whether this shard serves the CONNECT: its client id belongs here, or it sent none and is
   * assigned one that does. Otherwise it is refused: MQTT 5 with 0x9C Use another server and the
   * owner's address as Server Reference when configured, 3.1.1 with return code 3 Server
   * unavailable (docs/scale-out.md "Refusal at the wrong shard"). */
  private placedHere(gate: ShardGate, c: ConnectPacket): boolean {
    if (c.clientId === '') {
      this.assigned = gate.assign(assignedClientId(this.id));
      if (this.assigned !== null) return true;
      this.host.event('shard-assign-failed', { conn: this.id });
      this.refuseConnect(RC.SERVER_UNAVAILABLE);
      return false;
    }
    const to = gate.referral(c.clientId);
    if (to === null) return true;
    this.host.event('connect-wrong-shard', { ...this.who(), shard: to.shard, reference: to.reference });
    this.refuseConnect(RC.USE_ANOTHER_SERVER, to);
    return false;
  }

  /** The client id assigned to a CONNECT that named none. */
  private assignedId(): string {
    return this.assigned ?? assignedClientId(this.id);
  }

  /** The MQTT 5 reason code for refusing this CONNECT before proposing it, or null. */
  private connectRefusal(c: ConnectPacket): number | null {
    const l = this.host.limits;
    // 3.1.1 [MQTT-3.1.3-8]: a persistent session needs a client id to find it again. MQTT 5 drops
    // that rule: an empty id is assigned one whatever Clean Start says [MQTT-3.1.3-6].
    if (c.clientId === '' && !c.clean && c.level !== 5) return RC.CLIENT_IDENTIFIER_NOT_VALID;
    // --tls-require-client-id-match: a device may only claim the session of its own certificate.
    if (this.transport.clientIdMustMatchIdentity && c.clientId !== this.transport.certIdentity) return RC.CLIENT_IDENTIFIER_NOT_VALID;
    // 3.1.1 cannot tell the client a shorter keep-alive; like Mosquitto, refuse the identifier.
    if (c.level !== 5 && c.keepAlive > l.maxKeepalive) return RC.CLIENT_IDENTIFIER_NOT_VALID;
    if (c.will !== null) {
      if (c.will.qos > l.maxQos) return RC.QOS_NOT_SUPPORTED; // [MQTT-3.2.2-12]
      if (c.will.retain && !l.retainAvailable) return RC.RETAIN_NOT_SUPPORTED; // [MQTT-3.2.2-13]
      if (validateTopicName(c.will.topic) !== null || !this.topicWithinLimits(c.will.topic)) return RC.TOPIC_NAME_INVALID;
      // The broker's own topics: refused as an ACL denial of the will is, 0x87 (3.1.1: 5).
      if (isSysTopic(c.will.topic)) {
        this.host.event('sys-publish-refused', { conn: this.id, will: true });
        return RC.NOT_AUTHORIZED;
      }
    }
    return null;
  }

  private refuseConnect(reason: number, to: Referral | null = null): void {
    this.host.event('connect-refused', { ...this.who(), reason });
    const connack: OutPacket = { type: 'connack', sessionPresent: false, code: reason };
    if (to !== null) {
      connack.reasonString = to.reason;
      if (to.reference !== null) connack.serverReference = to.reference;
    }
    this.sendOut(connack);
    this.closeNow(NO_DISCONNECT);
  }

  private afterAuthAsync(c: ConnectPacket, r: AuthResult): void {
    if (this.phase !== 'authenticating') return;
    this.phase = 'awaiting-connect';
    this.resumeAfter(() => this.afterAuth(c, r));
  }

  /** Runs what a pending verdict decided, then the packets read meanwhile, in order; reading resumes
   * unless they made the connection wait again. */
  private resumeAfter(decided: () => void): void {
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
  private onVerdict<T>(verdict: T | Promise<T>, decided: (answer: T) => void): void {
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

  private afterAuth(c: ConnectPacket, r: AuthResult, user: string | null = c.username): void {
    if (!r.ok) {
      this.refuseConnect(r.reason);
      return;
    }
    const authz = this.host.authorizer;
    if (c.will !== null && authz?.decidesPublish === true) {
      const clientId = c.clientId === '' ? this.assignedId() : c.clientId;
      const verdict = authz.publish(publishRequest(clientId, user, c.will.topic, c.will, true));
      this.onVerdict(verdict, (a) => this.afterWillAuthorized(c, a, user));
      return;
    }
    this.proposeConnect(c, user);
  }

  /** A will the hook refused refuses the CONNECT with its code, as an ACL denial of the will does
   * (3.1.1: the nearest return code); a hook that failed, with 0x88, as `authenticate` does. */
  private afterWillAuthorized(c: ConnectPacket, a: Authorization, user: string | null): void {
    if (a.ok) this.proposeConnect(c, user);
    else this.refuseConnect(a.failed ? RC.SERVER_UNAVAILABLE : a.reason);
  }

  private proposeConnect(c: ConnectPacket, user: string | null): void {
    if (c.level === 5) this.takeClientLimits(c);
    const keepAliveS = this.keepAliveFor(c);
    const unanswerable = c.level === 5 ? this.connackRefusal(c) : null;
    if (unanswerable !== null) {
      this.refuseConnect(unanswerable);
      return;
    }
    this.phase = 'connecting';
    this.username = user;
    this.connectExpiry = connectExpiryS(c);
    this.keepAliveMs = keepAliveS * KEEPALIVE_FACTOR_PER_S_MS;
    this.clearTimer();
    if (this.keepAliveMs > 0) keepAliveWheel.schedule(this, performance.now() + this.keepAliveMs);
    this.connectProposed = true;
    this.propose({
      t: 'connect',
      conn: this.id,
      clientId: c.clientId === '' ? null : c.clientId,
      // Only a shard's own choice is carried; the usual one apply derives from conn, as before.
      ...(this.assigned === null || this.assigned === assignedClientId(this.id) ? {} : { assignedId: this.assigned }),
      protocol: c.level,
      // An assigned id names a new session: Clean Start 0 must not resume one a client that chose
      // the same name may hold.
      clean: c.clean || c.clientId === '',
      expiryS: this.connectExpiry,
      will: willFromConnect(c),
      username: user,
      receiveMax: c.props.receiveMax ?? RECEIVE_MAX_DEFAULT,
      maxPacketSize: c.props.maxPacketSize ?? 0,
      problemInfo: c.props.requestProblemInfo !== 0,
    });
  }

  /** What the v5 client asked of the server's output (§3.1.2.11): problem information, response
   * information, outbound aliases, its Maximum Packet Size. */
  private takeClientLimits(c: ConnectPacket): void {
    const p = c.props;
    if (p.requestProblemInfo === 0) this.limits.noProblemInfo = true;
    if (p.requestResponseInfo === 1) this.limits.responseInfoFor = c.clientId;
    const aliasMax = Math.min(p.topicAliasMax ?? 0, this.host.limits.topicAliasMaximum);
    if (aliasMax > 0) this.aliasesOut = new OutboundAliases(aliasMax);
  }

  /** The successful CONNACK apply will send is known here but for Session Present, which does not
   * change its size; it must be encodable and within the client's Maximum Packet Size
   * [MQTT-3.1.2-24]. Checked before the CONNECT is proposed: a CONNACK found too large only when
   * it is sent would leave a session the client was never told of. Response Information is
   * optional (§3.2.2.3.15), so it goes first; a CONNACK that does not fit without it refuses the
   * CONNECT with 0x95 (a reply to it would exceed a maximum packet size). Returns the refusal's
   * reason code, or null when the CONNACK fits. */
  private connackRefusal(c: ConnectPacket): number | null {
    const assigned = c.clientId === '' ? this.assignedId() : undefined;
    if (this.connackFits(assigned)) return null;
    if (this.limits.responseInfoFor !== undefined) {
      this.limits.responseInfoFor = undefined;
      this.host.event('response-info-omitted', { conn: this.id });
      if (this.connackFits(assigned)) return null;
    }
    this.host.event('connack-too-large-for-client', { conn: this.id, maxPacketSize: this.clientMaxPacket });
    return RC.PACKET_TOO_LARGE;
  }

  private connackFits(assigned: string | undefined): boolean {
    const connack: OutPacket = { type: 'connack', sessionPresent: true, code: RC.SUCCESS };
    if (assigned !== undefined) connack.assignedClientId = assigned;
    let bytes: number;
    try {
      bytes = encode(toWire(connack, 5, this.limits), 5).length;
    } catch (err) {
      // A property over its wire limit (a string or binary value over 65535 bytes).
      if (err instanceof RangeError) return false;
      throw err;
    }
    return this.clientMaxPacket === 0 || bytes <= this.clientMaxPacket;
  }

  // ---- enhanced authentication (§4.12; rules in auth-exchange.ts) ----

  private beginEnhanced(c: ConnectPacket): void {
    // An address in its failed-login backoff is refused without an exchange, as a password is.
    const blocked = this.host.authenticator.loginThrottle?.blocked(this.transport.remoteAddress, null) ?? 0;
    if (blocked > 0) {
      this.refuseAfter(RC.BAD_USER_NAME_OR_PASSWORD, blocked);
      return;
    }
    const { state, action } = EnhancedAuthState.begin(c, this.host.enhancedAuth);
    this.enhanced = state;
    this.onAuthAction(action, c);
  }

  /** Refuses the CONNECT after `delayMs` of the failed-login backoff; nothing is read meanwhile. */
  private refuseAfter(reason: number, delayMs: number): void {
    if (delayMs <= 0) {
      this.refuseConnect(reason);
      return;
    }
    this.phase = 'authenticating';
    this.socket.pause();
    setTimeout(refuseDue, delayMs, this, reason);
  }

  /** The backoff of a refusal has passed (through the shared callback). */
  onRefuseDue(reason: number): void {
    if (this.phase === 'authenticating') this.refuseConnect(reason);
  }

  private onAuth(p: AuthPacket): void {
    if (this.enhanced === null) {
      // No Authentication Method was agreed, so AUTH is out of place [MQTT-4.12.0-1].
      this.fail(RC.PROTOCOL_ERROR, 'auth-unexpected', 'AUTH without an authentication method');
      return;
    }
    if (this.phase === 'connecting') {
      // Authenticated, CONNACK not yet out: the client must wait for it [MQTT-3.1.2-30].
      this.fail(RC.PROTOCOL_ERROR, 'auth-before-connack', 'AUTH before CONNACK');
      return;
    }
    this.onAuthAction(this.enhanced.onAuth(p, this.phase === 'connected'), this.pendingConnect);
  }

  private onAuthAction(a: AuthAction, c?: ConnectPacket): void {
    switch (a.k) {
      case 'send':
        if (this.phase === 'awaiting-connect') {
          this.phase = 'auth-exchange';
          this.pendingConnect = c;
        }
        this.writeControl({ type: 'auth', code: a.code, props: { authMethod: this.enhanced?.method.name, authData: a.data } });
        return;
      case 'authenticated': {
        const connect = c as ConnectPacket;
        this.pendingConnect = undefined;
        const throttle = this.host.authenticator.loginThrottle;
        const blocked = throttle?.blocked(this.transport.remoteAddress, a.user) ?? 0;
        if (blocked > 0) {
          // The user is in its backoff: refused whatever the proof, so guessing gains nothing.
          this.refuseAfter(RC.BAD_USER_NAME_OR_PASSWORD, blocked);
          return;
        }
        throttle?.succeeded(this.transport.remoteAddress, a.user);
        this.phase = 'awaiting-connect';
        this.limits.auth = { method: connect.props.authMethod as string, data: a.data };
        this.host.event('enhanced-auth-ok', { ...this.who(), method: this.limits.auth.method });
        this.afterAuth(connect, { ok: true }, a.user);
        return;
      }
      case 'refuse':
        if (a.login === undefined) {
          this.host.protocolError('enhanced-auth', { ...this.who(), reason: a.reason }, a.why);
          this.refuseConnect(a.reason);
          return;
        }
        this.refuseAfter(a.reason, this.failedLogin(a.login, a.why));
        return;
      case 'disconnect':
        if (a.login !== undefined) this.failedLogin(a.login, a.why);
        this.fail(a.reason, 'reauth', a.why);
        return;
      default: {
        const _: never = a;
        void _;
      }
    }
  }

  /** Counts a login the method refused toward the failed-login backoff; returns the delay before
   * the refusal goes out (0 without a backoff). */
  private failedLogin(login: FailedLogin, why: string): number {
    const throttle = this.host.authenticator.loginThrottle;
    if (throttle !== undefined) return throttle.failed(this.transport.remoteAddress, login.user);
    this.host.event('auth-failed', { ...this.who(), username: login.user ?? '', reason: why });
    return 0;
  }

  /** The keep-alive in seconds this connection runs with. 0 means disabled, as the client asked
   * [MQTT-3.1.2-10 / §3.1.2.10]; a v5 client asking more than maxKeepalive is told the maximum with
   * Server Keep Alive [MQTT-3.2.2-21]. */
  private keepAliveFor(c: ConnectPacket): number {
    const max = this.host.limits.maxKeepalive;
    if (c.level === 5 && c.keepAlive > max) {
      this.limits.serverKeepAlive = max;
      return max;
    }
    return c.keepAlive;
  }

  // ---- PUBLISH ----

  private onPublish(p: PublishPacket): void {
    const traffic = this.host.traffic;
    traffic.publishIn[p.qos]++;
    traffic.publishInBytes[p.qos] += p.payload.length;
    const topic = this.resolveTopic(p);
    if (topic === null) return;
    const l = this.host.limits;
    if (p.qos > l.maxQos) {
      this.fail(RC.QOS_NOT_SUPPORTED, 'qos-not-supported', `QoS ${p.qos}`);
      return;
    }
    if (p.retain && !l.retainAvailable) {
      this.fail(RC.RETAIN_NOT_SUPPORTED, 'retain-not-supported', 'retain');
      return;
    }
    if (p.qos > 0 && this.level === 5) {
      this.inbound ??= new Set();
      const inbound = this.inbound;
      inbound.add(p.pid as number);
      if (inbound.size > l.receiveMaximum) {
        this.fail(RC.RECEIVE_MAXIMUM_EXCEEDED, 'receive-maximum', `${inbound.size} unacknowledged`);
        return;
      }
    }
    if (this.level === 5 && !payloadFormatValid(p)) {
      this.refusePayload(p);
      return;
    }
    // After the alias is resolved, so that a refused PUBLISH still sets its alias (§3.3.2.3.4).
    if (!this.withinPublishRate(p, topic)) return;
    if (this.host.storageGate.low && !this.storedWhileLow(p, topic)) return;
    if (isSysTopic(topic)) {
      this.refuseSys(p);
      return;
    }
    const authz = this.host.authorizer;
    if (authz?.decidesPublish === true) {
      const verdict = authz.publish(publishRequest(this.clientId ?? this.assignedId(), this.username, topic, p, false));
      this.onVerdict(verdict, (a) => this.afterPublishAuthorized(p, topic, a));
      return;
    }
    this.acceptPublish(p, topic);
  }

  /** A PUBLISH the hook refused is answered as an ACL denial is: the hook's code on a v5 PUBACK or
   * PUBREC, nothing for QoS 0, and a 3.1.1 QoS 1/2 acknowledged and dropped, as 3.1.1 has no
   * negative acknowledgement. A hook that failed decided nothing: the connection closes (v5:
   * DISCONNECT 0x80) with nothing acknowledged, so the client sends the message again. */
  private afterPublishAuthorized(p: PublishPacket, topic: string, a: Authorization): void {
    if (a.ok) this.acceptPublish(p, topic);
    else if (a.failed) this.beginClose(RC.UNSPECIFIED_ERROR);
    else if (p.qos === 1) this.reply({ k: 'send', packet: { type: 'puback', pid: p.pid as number, code: a.reason } });
    else if (p.qos === 2) this.reply({ k: 'send', packet: { type: 'pubrec', pid: p.pid as number, code: a.reason } });
  }

  private acceptPublish(p: PublishPacket, topic: string): void {
    const traffic = this.host.traffic;
    const msg = messageFromPublish(p, topic);
    if (this.host.tracer.on) this.host.tracer.read(this.id, this.clientId, msg, p.pid ?? 0);
    // A retained QoS 0 PUBLISH goes through the log without a packet id to find it by: not probed.
    if (--traffic.probeCountdown <= 0 && (p.qos > 0 || !p.retain)) {
      this.host.probePublish(this.id, p.qos === 0 ? msg : null, p.pid ?? 0, this.lastRxMs);
    }
    if (p.qos === 0 && !p.retain) {
      // The common case routes at once without allocating a queued action.
      if (this.pending === 0 && this.local.length === 0) {
        this.host.routeQos0(this.id, msg);
        return;
      }
      this.reply({ k: 'route', msg });
      return;
    }
    const cmd: Command = { t: 'publish', conn: this.id, msg };
    if (p.qos > 0) cmd.pid = p.pid as number;
    this.propose(cmd);
  }

  /** --max-publish-rate is the publisher's own quota (docs/design.md "Queues are bounded by admission":
   * 0x97 answers the publisher's own quotas). A PUBLISH over it is not routed: QoS 0 is dropped,
   * QoS 1/2 are answered 0x97 [§3.4.2.1, §3.5.2.1]. Excess beyond the rate itself again (sending
   * at more than twice the rate) is abuse: DISCONNECT 0x96. A 3.1.1 PUBACK cannot refuse, and a
   * plain one would claim a delivery that did not happen, so a 3.1.1 QoS 1/2 PUBLISH over the rate
   * closes the connection: the client keeps the message and sends it again after reconnecting. */
  private withinPublishRate(p: PublishPacket, topic: string): boolean {
    const rate = this.host.limits.publishRate;
    if (rate <= 0) return true;
    const now = performance.now();
    this.publishBucket ??= new TokenBucket(rate, rate, now);
    if (this.publishBucket.take(now)) return true;
    this.host.event('limit-publish-rate', { ...this.who(), qos: p.qos });
    this.excessBucket ??= new TokenBucket(rate, rate, now);
    if (!this.excessBucket.take(now) || (this.level !== 5 && p.qos > 0)) {
      this.fail(RC.MESSAGE_RATE_TOO_HIGH, 'publish-rate', `over ${rate} PUBLISH/s`);
      return false;
    }
    if (p.qos === 1) this.reply({ k: 'send', packet: { type: 'puback', pid: p.pid as number, code: RC.QUOTA_EXCEEDED } });
    else if (p.qos === 2 && !p.dup) this.reply({ k: 'send', packet: { type: 'pubrec', pid: p.pid as number, code: RC.QUOTA_EXCEEDED } });
    else if (p.qos === 2) {
      // A retry may carry an id apply still holds (received before, PUBREC lost): only apply can
      // tell, so the refusal goes through the log, without the payload.
      const msg: Message = { topic, payload: EMPTY_PAYLOAD, qos: 2, retain: false };
      this.propose({ t: 'publish', conn: this.id, pid: p.pid as number, msg, quotaExceeded: true });
    }
    return false;
  }

  /** The data directory is low on space (docs/operations.md "Disk trouble"): what would be stored is
   * refused as a quota, the way --max-publish-rate refuses it: QoS 1/2 answered 0x97 (a QoS 2 retry
   * through the log, as only apply knows whether it holds the id), a retained QoS 0 dropped, and a
   * 3.1.1 QoS 1/2 closes the connection, since its PUBACK cannot refuse: the client keeps the
   * message and sends it again. A plain QoS 0 is routed, as it is never stored. */
  private storedWhileLow(p: PublishPacket, topic: string): boolean {
    if (p.qos === 0 && !p.retain) return true;
    this.host.event('limit-storage-low', { ...this.who(), qos: p.qos });
    if (p.qos > 0 && this.level !== 5) this.fail(RC.QUOTA_EXCEEDED, 'storage-low', '3.1.1 QoS 1/2 PUBLISH while storage is low');
    else if (p.qos === 1) this.reply({ k: 'send', packet: { type: 'puback', pid: p.pid as number, code: RC.QUOTA_EXCEEDED } });
    else if (p.qos === 2 && !p.dup) this.reply({ k: 'send', packet: { type: 'pubrec', pid: p.pid as number, code: RC.QUOTA_EXCEEDED } });
    else if (p.qos === 2) {
      const msg: Message = { topic, payload: EMPTY_PAYLOAD, qos: 2, retain: false };
      this.propose({ t: 'publish', conn: this.id, pid: p.pid as number, msg, quotaExceeded: true });
    }
    return false;
  }

  /** `$SYS/...` is the broker's own: a client's PUBLISH there is refused as an ACL denial is, with
   * 0x87 Not authorized on a v5 PUBACK/PUBREC and no route. Not 0x90 Topic Name invalid: the name
   * is valid MQTT, and 0x90 on a QoS 0 PUBLISH would mean a DISCONNECT, while a refusal keeps the
   * connection. QoS 0 is dropped; a 3.1.1 QoS 1/2 is acknowledged and dropped, as 3.1.1 has no
   * negative acknowledgement. Decided here, so nothing is proposed: no replica ever stores or
   * routes a client's $SYS message, whatever the ACL grants. */
  private refuseSys(p: PublishPacket): void {
    this.host.event('sys-publish-refused', { conn: this.id, qos: p.qos });
    if (p.qos === 1) this.reply({ k: 'send', packet: { type: 'puback', pid: p.pid as number, code: RC.NOT_AUTHORIZED } });
    else if (p.qos === 2) this.reply({ k: 'send', packet: { type: 'pubrec', pid: p.pid as number, code: RC.NOT_AUTHORIZED } });
  }

  /** The topic after Topic Alias resolution (§3.3.2.3.4), or null after failing the connection. */
  private resolveTopic(p: PublishPacket): string | null {
    let topic = p.topic;
    const alias = p.props.topicAlias;
    if (alias !== undefined) {
      if (alias === 0 || alias > this.host.limits.topicAliasMaximum) {
        this.fail(RC.TOPIC_ALIAS_INVALID, 'topic-alias-invalid', `alias ${alias}`); // [MQTT-3.3.2-8/9]
        return null;
      }
      this.aliases ??= new Map();
      if (topic === '') {
        const known = this.aliases.get(alias);
        if (known === undefined) {
          this.fail(RC.PROTOCOL_ERROR, 'topic-alias-unknown', `alias ${alias}`);
          return null;
        }
        topic = known;
      } else {
        this.aliases.set(alias, topic);
      }
    }
    const invalid = validateTopicName(topic);
    if (invalid !== null) {
      this.fail(RC.TOPIC_NAME_INVALID, 'topic-name-invalid', invalid);
      return null;
    }
    if (!this.topicWithinLimits(topic)) {
      this.beginClose(RC.TOPIC_NAME_INVALID);
      return null;
    }
    return topic;
  }

  /** Payload Format Indicator 1 with a payload that is not UTF-8: not routed; QoS 1/2 are answered
   * with 0x99 [MQTT-3.3.2-4 / §3.3.2.3.2], a QoS 0 publish has no answer but DISCONNECT. */
  private refusePayload(p: PublishPacket): void {
    this.host.event('payload-format-invalid', this.who());
    if (p.qos === 0) {
      this.fail(RC.PAYLOAD_FORMAT_INVALID, 'payload-format', 'QoS 0 payload not UTF-8');
      return;
    }
    const type = p.qos === 1 ? 'puback' : 'pubrec';
    this.reply({ k: 'send', packet: { type, pid: p.pid as number, code: RC.PAYLOAD_FORMAT_INVALID } });
  }

  // ---- SUBSCRIBE / UNSUBSCRIBE ----

  /** Invalid filters get their failure code here; the valid ones are proposed, and the codes
   * decided here travel in the command (`refused`), so apply's SUBACK carries every code in order.
   * A packet with no valid filter is answered locally (behind this connection's unapplied
   * proposals). */
  private onSubscribe(s: SubscribePacket): void {
    if (!this.codesAckFits(s.subs.length, 'suback')) return;
    let codes: number[] | null = null;
    const valid: SubscriptionRequest[] = [];
    /** The packet's index of each valid filter. */
    const at: number[] = [];
    for (let i = 0; i < s.subs.length; i++) {
      const sub = s.subs[i] as SubscribePacket['subs'][number];
      if (sub.nl && this.level === 5 && sub.filter.startsWith('$share/')) {
        // [MQTT-3.8.3-4]: No Local on a shared subscription is a protocol error.
        this.fail(RC.PROTOCOL_ERROR, 'shared-no-local', sub.filter);
        return;
      }
      if (validateTopicFilter(sub.filter) === null && this.topicWithinLimits(sub.filter)) {
        valid.push(sub);
        at.push(i);
      } else {
        codes ??= new Array<number>(s.subs.length).fill(REFUSED_NONE);
        codes[i] = RC.TOPIC_FILTER_INVALID;
      }
    }
    const authz = this.host.authorizer;
    if (valid.length === 0 || authz?.decidesSubscribe !== true) {
      this.proposeSubscribe(s, valid, codes);
      return;
    }
    const clientId = this.clientId ?? this.assignedId();
    const verdicts = valid.map((sub) => authz.subscribe({ clientId, username: this.username, filter: sub.filter, qos: sub.qos }));
    const decided = (all: readonly Authorization[]): void => {
      const allowed: SubscriptionRequest[] = [];
      for (let k = 0; k < all.length; k++) {
        const a = all[k] as Authorization;
        const sub = valid[k] as SubscriptionRequest;
        if (a.ok) allowed.push(a.qos === sub.qos ? sub : { ...sub, qos: a.qos });
        else {
          // A SUBACK failure code is valid in both versions (3.1.1 sends it as 0x80).
          codes ??= new Array<number>(s.subs.length).fill(REFUSED_NONE);
          codes[at[k] as number] = a.reason;
        }
      }
      this.proposeSubscribe(s, allowed, codes);
    };
    this.onVerdict(verdicts.some((v) => v instanceof Promise) ? Promise.all(verdicts) : (verdicts as Authorization[]), decided);
  }

  /** The filters that remain are proposed; the codes decided here travel in the command. */
  private proposeSubscribe(s: SubscribePacket, subs: SubscriptionRequest[], codes: number[] | null): void {
    if (subs.length === 0) {
      this.reply({ k: 'send', packet: { type: 'suback', pid: s.pid, codes: codes ?? [] } });
      return;
    }
    const cmd: Command = { t: 'subscribe', conn: this.id, pid: s.pid, subs };
    if (s.props.subId !== undefined) cmd.subId = s.props.subId;
    if (codes !== null) cmd.refused = codes;
    this.propose(cmd);
  }

  /** A SUBACK or UNSUBACK has one reason code per filter, so a client may ask more filters than
   * its own Maximum Packet Size lets it be answered for. That is known before proposing: the
   * connection fails with 0x95 and the subscriptions are not made, rather than made and never
   * acknowledged (writeControl would have to drop the reply). */
  private codesAckFits(codes: number, type: 'suback' | 'unsuback'): boolean {
    if (this.level !== 5 || this.clientMaxPacket === 0) return true;
    const bytes = codesAckBytes(codes);
    if (bytes <= this.clientMaxPacket) return true;
    this.host.event('packet-too-large-for-client', { conn: this.id, type, bytes });
    this.fail(RC.PACKET_TOO_LARGE, `${type}-too-large-for-client`, `${type} of ${bytes} bytes over ${this.clientMaxPacket}`);
    return false;
  }

  /** A topic name or filter over --max-topic-levels or --max-topic-length is a limit, counted as
   * such (`limit-topic`), not a protocol error; the caller refuses it with its reason code. */
  private topicWithinLimits(topic: string): boolean {
    const problem = topicLimitProblem(topic, this.host.limits);
    if (problem === null) return true;
    this.host.event('limit-topic', { ...this.who(), problem });
    return false;
  }

  private onUnsubscribe(u: UnsubscribePacket): void {
    if (!this.codesAckFits(u.filters.length, 'unsuback')) return;
    let codes: number[] | null = null;
    const valid: string[] = [];
    for (let i = 0; i < u.filters.length; i++) {
      const f = u.filters[i] as string;
      if (validateTopicFilter(f) === null) valid.push(f);
      else {
        codes ??= new Array<number>(u.filters.length).fill(REFUSED_NONE);
        codes[i] = RC.TOPIC_FILTER_INVALID;
      }
    }
    if (valid.length === 0) {
      this.reply({ k: 'send', packet: { type: 'unsuback', pid: u.pid, codes: codes ?? [] } });
      return;
    }
    const cmd: Command = { t: 'unsubscribe', conn: this.id, pid: u.pid, filters: valid };
    if (codes !== null) cmd.refused = codes;
    this.propose(cmd);
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

  private propose(cmd: Command): void {
    if (this.acks.length > 0) this.proposeAcks();
    this.pending++;
    this.host.propose(cmd);
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

  private reply(a: LocalAction): void {
    if (this.acks.length > 0) this.proposeAcks();
    if (this.pending === 0 && this.local.length === 0) this.run(a);
    else this.local.push(a);
  }

  private run(a: LocalAction): void {
    switch (a.k) {
      case 'send':
        this.deliver(a.packet);
        return;
      case 'pingresp':
        this.write(encode({ type: 'pingresp' }, this.level));
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
  private fail(reason: number, key: string, message: string): void {
    this.host.protocolError(key, { ...this.who(), reason }, message);
    this.beginClose(reason);
  }

  private beginClose(reason: number): void {
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

  // ---- effects ----

  /** An effect of a committed entry (or of a QoS 0 route) for this connection. */
  deliver(p: OutPacket): void {
    if (this.phase === 'closed') return;
    switch (p.type) {
      case 'connack':
        this.onConnack(p);
        return;
      case 'suback':
      case 'unsuback':
      case 'pubrel':
        this.sendOut(p);
        return;
      case 'puback':
      case 'pubcomp':
        this.inbound?.delete(p.pid);
        this.sendOut(p);
        return;
      case 'pubrec':
        // A PUBREC with an error ends the flow; otherwise the id is held until PUBCOMP (§4.9).
        if (p.code >= RC.UNSPECIFIED_ERROR) this.inbound?.delete(p.pid);
        this.sendOut(p);
        return;
      case 'publish':
        if (p.qos === 0 && this.socket.writableLength + this.outBytes > this.host.limits.maxWriteBufferBytes) {
          this.host.event('qos0-dropped-slow-consumer', this.who());
          return;
        }
        this.host.traffic.publishOut[p.qos]++;
        this.host.traffic.publishOutBytes[p.qos] += p.msg.payload.length;
        this.sendOut(p);
        return;
      default: {
        const _: never = p;
        void _;
      }
    }
  }

  private onConnack(p: Extract<OutPacket, { type: 'connack' }>): void {
    this.sendOut(p);
    if (p.code !== RC.SUCCESS) {
      this.closeNow(NO_DISCONNECT);
      return;
    }
    if (this.phase === 'connecting') this.phase = 'connected';
    this.connackOk = true;
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

  private sendOut(p: OutPacket): void {
    if (p.type !== 'publish') this.writeControl(toWire(p, this.level, this.limits));
    else if (this.aliasesOut === null) this.write(this.outbox.encodePublish(p, this.level, this.limits));
    else this.write(this.encodeAliased(p));
  }

  /** A PUBLISH under an outbound alias. Apply sized the packet without one; an alias that would
   * push it over the client's Maximum Packet Size is not used [MQTT-3.1.2-24]. */
  private encodeAliased(p: Extract<OutPacket, { type: 'publish' }>): Buffer {
    const aliases = this.aliasesOut as OutboundAliases;
    const alias = aliases.assign(p.msg.topic);
    const known = aliases.known;
    const buf = encode(publishWithAlias(p, alias, known), 5);
    if (this.clientMaxPacket === 0 || buf.length <= this.clientMaxPacket) return buf;
    if (!known) aliases.cancel(p.msg.topic);
    return this.outbox.encodePublish(p, this.level, this.limits);
  }

  /** Every packet but PUBLISH: Reason String and User Properties go first when the packet would
   * exceed the client's Maximum Packet Size [MQTT-3.1.2-25]; a packet that cannot fit even then
   * is not sent, and the connection closes since the client cannot be answered. */
  private writeControl(w: Packet): void {
    let buf = encode(w, this.level);
    if (this.clientMaxPacket === 0 || buf.length <= this.clientMaxPacket) {
      this.write(buf);
      return;
    }
    const bare = withoutProblemInfo(w);
    if (bare !== null) buf = encode(bare, this.level);
    if (buf.length <= this.clientMaxPacket) {
      this.write(buf);
      return;
    }
    this.host.event('packet-too-large-for-client', { ...this.who(), type: w.type, bytes: buf.length });
    if (w.type !== 'disconnect') this.beginClose(RC.PACKET_TOO_LARGE);
  }

  private write(buf: Buffer): void {
    this.host.traffic.packetsOut++;
    this.out.push(buf);
    this.outBytes += buf.length;
    if (!this.dirty) {
      this.dirty = true;
      this.outbox.queued(this);
    }
  }

  /** One socket write for everything buffered so far (docs/design.md "Performance principles");
   * returns the bytes handed to the socket. */
  flush(): number {
    this.dirty = false;
    if (this.out.length === 0) return 0;
    this.connackWritten = this.connackOk;
    const buf = this.out.length === 1 ? (this.out[0] as Buffer) : Buffer.concat(this.out, this.outBytes);
    this.out = [];
    this.outBytes = 0;
    if (this.socket.destroyed) return 0;
    this.host.traffic.bytesOut += buf.length;
    if (this.socket.write(buf) || this.outputFull) return buf.length;
    if (this.socket.writableLength > this.host.limits.maxWriteBufferBytes) {
      // A client that publishes but does not read must not grow our memory: its own input waits.
      this.outputFull = true;
      this.socket.pause();
      this.host.event('reads-paused-slow-consumer', { ...this.who(), bytes: this.socket.writableLength });
    }
    return buf.length;
  }

  /** The socket's 'drain', through the shared listener. */
  onDrain(): void {
    if (!this.outputFull) return;
    this.outputFull = false;
    if (this.isReading() && !this.host.readsPaused) this.socket.resume();
  }

  private closeNow(reason: number): void {
    if (this.phase === 'closed') return;
    if (reason !== NO_DISCONNECT && this.level === 5 && this.connackOk) {
      const text = reasonText(reason);
      this.writeControl({ type: 'disconnect', code: reason, props: text === undefined ? {} : { reasonString: text } });
    }
    this.phase = 'closed';
    this.local = [];
    this.flush();
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
  private clearTimer(): void {
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
    this.flush();
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

function refuseDue(c: Connection, reason: number): void {
  c.onRefuseDue(reason);
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

/** What authorizePublish is told of a PUBLISH or a will (its payload not copied). */
function publishRequest(
  clientId: string,
  username: string | null,
  topic: string,
  m: { payload: Uint8Array; qos: QoS; retain: boolean },
  will: boolean,
): AuthorizePublishRequest {
  const payload = Buffer.from(m.payload.buffer, m.payload.byteOffset, m.payload.byteLength);
  return { clientId, username, topic, payload, qos: m.qos, retain: m.retain, will };
}
