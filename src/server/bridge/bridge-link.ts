// The serving node's connection to a bridge's remote broker (docs/bridges.md "The promise"): an
// MQTT client written with the repository's own codec. It forwards the bridge's outbox (in the
// replicated state) in log order and proposes `bridge-position` as the remote completes a prefix of
// it, so a later serving node resumes where the remote's completions end. It runs only while the
// node serves and writes only while the lease holds; the remote being down, slow or broken never
// blocks local traffic (docs/bridges.md "When the remote is down").
//
// Inbound rules (docs/bridges.md "Inbound"): the link subscribes at the remote to their remote
// filters (No Local, Retain As Published, Retain Handling 1; for a 3.1.1 remote Mosquitto's bridge
// bit does the same) and proposes what arrives as a `bridge-in` command. The remote's QoS 1 PUBLISH
// is acknowledged only when apply answers that command with a PUBACK effect, that is after its
// entry is committed; while the log takes no more the node pauses reading the socket.
//
// QoS 2 to the remote (docs/bridges.md "QoS 2 to the remote"): an item's packet id comes from apply
// (src/broker/bridge-outbox.ts). The remote's PUBREC is proposed as `bridge-pubrec`, and PUBREL goes
// out only when apply answers that command, that is after the record is committed: a later serving
// node then sends PUBREL for it, and PUBLISH with DUP and the same id for an item not recorded, so
// the remote, which keeps the bridge's session, delivers it once. PUBCOMP completes the item.
import { isIP, connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { Logger } from 'pino';
import WebSocket from 'ws';
import { type BridgeOutbox, firstAtOrAbove, firstAtOrAboveSeq, OUTBOX_PID_MAX, type OutboxItem } from '../../broker/bridge-outbox.js';
import { type BridgeRule, inboundForward, inboundSubscriptions, outboundForward } from '../../broker/bridge-rules.js';
import { BRIDGE_PUBRECS_MAX, type Command, type ConnId, type Message, type OutPacket } from '../../broker/commands.js';
import { Fifo } from '../../broker/fifo.js';
import type { EventKind } from '../../events.js';
import { Decoder } from '../../protocol/decoder.js';
import { encode } from '../../protocol/encoder.js';
import type { Packet, PublishPacket, PublishProps } from '../../protocol/packets.js';
import { messageProps } from '../inbound.js';
import { WsByteStream } from '../listeners/ws-stream.js';
import type { BridgeAddress, BridgeSpec } from './bridge-config.js';

/** The connection to the remote: a TCP or TLS socket, or a WebSocket's stream of frames. */
interface RemoteStream {
  /** `done`: the bytes were handed to the kernel (or the error that ended the connection). */
  write(buf: Buffer, done?: (err?: Error | null) => void): boolean;
  readonly writableLength: number;
  on(event: 'data', listener: (chunk: Buffer) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'close' | 'drain', listener: () => void): unknown;
  removeAllListeners(event: 'data'): unknown;
  pause(): unknown;
  resume(): unknown;
  destroy(): unknown;
}

/** A CONNECT not answered by a CONNACK within this is given up (ms). */
export const BRIDGE_CONNECT_TIMEOUT_MS = 10_000;
/** Reconnect backoff: the first delay, doubling per failure in a row, up to the last (ms); each
 * delay is drawn between half and all of it. */
export const BRIDGE_BACKOFF_FIRST_MS = 500;
export const BRIDGE_BACKOFF_MAX_MS = 30_000;
/** Bytes waiting in the socket above which nothing more is written until it drains, so a slow
 * remote holds at most this much of the outbox in this process's memory besides the outbox. */
export const BRIDGE_WRITE_BUFFER_BYTES = 1024 * 1024;
const PID_MAX = 0xffff;
/** The serving node numbers its QoS 1 PUBLISHes and SUBSCRIBEs from here to PID_MAX; apply numbers
 * QoS 2 items below it, so the remote never holds one id for two of our packets. */
const LOCAL_PID_FIRST = OUTBOX_PID_MAX + 1;
/** Unacknowledged QoS 1 messages the remote may send us at once (MQTT 5 Receive Maximum; a 3.1.1
 * remote keeps to its own, Mosquitto's max_inflight_messages, 20 by default). */
export const BRIDGE_IN_WINDOW = 64;
/** Room above the local maximum packet size for what the remote sends, so a message somewhat too
 * large is read whole, dropped and acknowledged rather than ending the connection: a 3.1.1 remote
 * cannot be told the limit and would send it again on every reconnect. */
export const BRIDGE_IN_SLACK_BYTES = 64 * 1024;

export interface BridgeHost {
  /** The bridge's outbox in the replicated state; undefined while no rule names it yet. */
  outbox(name: string): Readonly<BridgeOutbox> | undefined;
  /** The rules in force. */
  rules(): readonly BridgeRule[];
  /** Whether this node serves and its lease holds now; asking may end serving. */
  mayWrite(): boolean;
  /** Cluster time (ms), the clock of the log's entries; never decreases. */
  now(): number;
  propose(cmd: Command): void;
  /** Counts and logs (rate limited) an event of the node. */
  event(kind: EventKind, fields?: Record<string, unknown>): void;
  readonly logger: Logger;
  /** Largest packet this node takes (and sends to its clients); what a bridge brings in is held to it. */
  readonly maxPacketSize: number;
  /** A connection id of this serving period for a connection to a remote, so the effects of apply
   * can name it as they name a client's connection. */
  newConnId(): ConnId;
  /** Routes a QoS 0 message without retain from the remote to the local subscribers and the other
   * bridges, without a log entry, as a client's QoS 0 publish is routed. */
  routeIn(bridge: string, msg: Message): void;
}

export type BridgeState = 'stopped' | 'connecting' | 'up' | 'backoff';

/** A message sent on the current connection and not yet completed, in send order. */
interface Pending {
  readonly index: number;
  readonly seq: number;
  done: boolean;
  /** QoS 2: 'publish' until the remote's PUBREC, 'rec' while its record waits for the commit, 'rel'
   * once PUBREL is sent; null for QoS 0 and 1. */
  phase: 'publish' | 'rec' | 'rel' | null;
}

export class BridgeLink {
  readonly spec: BridgeSpec;
  state: BridgeState = 'stopped';
  /** The last reason the connection failed; null once it is up. */
  lastError: string | null = null;
  /** Messages the remote completed (PUBACK, or written at QoS 0) since this process started. */
  forwarded = 0;
  /** QoS 1/2 publishes refused for a full outbox while this node served. */
  refused = 0;
  /** Messages dropped instead of forwarded while this node served. */
  dropped = 0;
  /** Messages whose Message Expiry Interval passed in the outbox, dropped by apply while this node
   * served. */
  expired = 0;
  /** Messages from the remote published here (QoS 1: committed and acknowledged to the remote). */
  received = 0;
  /** Messages or packets from the remote refused as bad input (docs/bridges.md "Bad input from the remote"). */
  rejected = 0;
  /** The connection id of the current connection to the remote; apply's effects name it. */
  private connId: ConnId = '';
  private readsPaused = false;
  /** The packet id of the SUBSCRIBE awaiting its SUBACK; 0: none. */
  private subscribePid = 0;
  private readonly host: BridgeHost;
  private socket: RemoteStream | null = null;
  private decoder: Decoder | null = null;
  private timer: NodeJS.Timeout | null = null;
  private pingTimer: NodeJS.Timeout | null = null;
  /** Set at the first failed attempt of an outage: fires the one error line of down-alert-s. */
  private alertTimer: NodeJS.Timeout | null = null;
  /** performance.now() of the first failed attempt of the current outage; 0 while up. */
  private downSince = 0;
  /** Failed attempts of the current outage. */
  private downAttempts = 0;
  private lastRead = 0;
  private failures = 0;
  private addressIndex = 0;
  /** Messages at once the remote has not completed: the bridge's max-inflight, or the remote's
   * Receive Maximum when lower (set at each CONNACK). */
  private window: number;
  /** Of `inflight`, the QoS 2 ones. */
  private inflight2 = 0;
  private remoteMaxPacket = 0;
  /** The send cursor: every item of `cursorOf` whose seq is below this was sent on the current
   * connection. It counts items, not log indexes, because one entry may put several messages into
   * the outbox and the window may fill between two of them. */
  private sentSeq = 0;
  /** The outbox object `sentSeq` counts in; another one (the rules made the bridge's outbox anew,
   * or the state was restored) is numbered anew, and the cursor starts again from its position. */
  private cursorOf: Readonly<BridgeOutbox> | null = null;
  /** One above the log index of the last item sent on the current connection. */
  private sentBelow = 0;
  /** Every item of `cursorOf` whose seq is below this was completed at the remote (known here):
   * a new connection does not send them again, so an entry with more messages than one connection
   * completes still gets through a remote that drops the connection often. */
  private completedSeq = 0;
  /** Every outbox message below this index was completed at the remote (known here). */
  private completedBelow = 0;
  private proposedBelow = 0;
  private positionQueued = false;
  private readonly pending = new Fifo<Pending>();
  private readonly inflight = new Map<number, Pending>();
  private nextPid = LOCAL_PID_FIRST;
  /** Items of `cursorOf` whose seq is below this may have reached the remote before (sent by an
   * earlier serving node or on an earlier connection): sent again with DUP [MQTT-3.3.1-1]. */
  private dupBelowSeq = 0;
  /** PUBRECs of the current connection to record, [log index, packet id], proposed once a turn. */
  private recQueue: [number, number][] = [];

  constructor(spec: BridgeSpec, host: BridgeHost) {
    this.spec = spec;
    this.host = host;
    this.window = spec.maxInflight;
  }

  private get address(): BridgeAddress {
    return this.spec.addresses[this.addressIndex % this.spec.addresses.length] as BridgeAddress;
  }

  /** The node began serving: connect now. */
  start(): void {
    if (this.state !== 'stopped') return;
    this.failures = 0;
    this.completedBelow = 0;
    this.completedSeq = 0;
    this.proposedBelow = 0;
    // Whatever the outbox holds now, an earlier serving node may have sent.
    this.cursorOf = this.host.outbox(this.spec.name) ?? null;
    this.dupBelowSeq = this.cursorOf?.nextSeq ?? 0;
    this.connect();
  }

  /** The node stopped serving: drop the connection; nothing more is written. */
  stop(): void {
    if (this.state === 'stopped') return;
    this.state = 'stopped';
    this.clearTimers();
    this.endOutage();
    this.dropSocket();
  }

  /** The outage is over (the bridge is up, or this node stopped serving): the alert is not due. */
  private endOutage(): number {
    if (this.alertTimer !== null) clearTimeout(this.alertTimer);
    this.alertTimer = null;
    const ms = this.downSince === 0 ? 0 : Math.round(performance.now() - this.downSince);
    this.downSince = 0;
    this.downAttempts = 0;
    return ms;
  }

  private connect(): void {
    this.state = 'connecting';
    const a = this.address;
    let s: RemoteStream;
    try {
      s = a.ws ? this.openWebSocket(a) : this.openSocket(a);
    } catch (err) {
      this.fail(`cannot connect: ${(err as Error).message}`);
      return;
    }
    this.socket = s;
    this.connId = this.host.newConnId();
    if (this.readsPaused) s.pause();
    this.decoder = new Decoder({
      maxPacketSize: this.host.maxPacketSize + BRIDGE_IN_SLACK_BYTES,
      role: 'client',
      level: this.spec.protocol,
    });
    s.on('data', (chunk: Buffer) => this.onData(s, chunk));
    s.on('drain', () => {
      if (s === this.socket) this.pump();
    });
    s.on('error', (err) => this.fail(`${err.message}`, s));
    s.on('close', () => this.fail('the remote closed the connection', s));
    this.timer = setTimeout(() => this.fail(`no CONNACK within ${BRIDGE_CONNECT_TIMEOUT_MS} ms`, s), BRIDGE_CONNECT_TIMEOUT_MS);
  }

  /** mqtt:// or mqtts://: a TCP socket, with TLS for mqtts. */
  private openSocket(a: BridgeAddress): Socket {
    const s = a.tls
      ? tlsConnect({ host: a.host, port: a.port, ...(isIP(a.host) === 0 ? { servername: a.host } : {}), ...this.tlsFiles() })
      : netConnect({ host: a.host, port: a.port });
    s.setNoDelay(true);
    s.on(a.tls ? 'secureConnect' : 'connect', () => this.onOpen(s));
    return s;
  }

  /** ws:// or wss://: MQTT in binary WebSocket frames with the mqtt subprotocol [MQTT-6.0.0-3],
   * through the same stream as the listeners' (one frame per write, backpressure at
   * BRIDGE_WRITE_BUFFER_BYTES). A frame may be at most what the decoder would take, so a remote
   * cannot make us buffer more than one packet's bound. ws sets TCP_NODELAY on its socket. */
  private openWebSocket(a: BridgeAddress): WsByteStream {
    const host = a.host.includes(':') ? `[${a.host}]` : a.host;
    const ws = new WebSocket(`${a.tls ? 'wss' : 'ws'}://${host}:${a.port}${a.path}`, ['mqtt'], {
      perMessageDeflate: false,
      maxPayload: this.host.maxPacketSize + BRIDGE_IN_SLACK_BYTES,
      followRedirects: false,
      ...(a.tls ? { ...(isIP(a.host) === 0 ? { servername: a.host } : {}), ...this.tlsFiles() } : {}),
    });
    const s = new WsByteStream(ws, BRIDGE_WRITE_BUFFER_BYTES);
    // ws itself refuses an upgrade answered without the mqtt subprotocol, or with another.
    ws.once('open', () => {
      // A pause asked before the socket opened takes effect now.
      if (this.readsPaused) s.pause();
      this.onOpen(s);
    });
    return s;
  }

  private tlsFiles(): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
    return {
      ...(this.spec.tlsCa === null ? {} : { ca: this.spec.tlsCa }),
      ...(this.spec.tlsCert === null ? {} : { cert: this.spec.tlsCert }),
      ...(this.spec.tlsKey === null ? {} : { key: this.spec.tlsKey }),
    };
  }

  private onOpen(s: RemoteStream): void {
    if (s !== this.socket || !this.host.mayWrite()) return;
    const sp = this.spec;
    const packet: Packet = {
      type: 'connect',
      protocolName: 'MQTT',
      // Mosquitto's bridge bit (try_private): a 3.1.1 remote that knows it treats us as a bridge
      // and sends us nothing we published ourselves (docs/bridges.md "Topic rules").
      level: (sp.protocol === 4 && sp.tryPrivate ? 0x80 | 4 : sp.protocol) as 4 | 5,
      clean: sp.cleanStart,
      keepAlive: sp.keepaliveS,
      clientId: sp.clientId,
      will: null,
      username: sp.username,
      password: sp.password === null ? null : Buffer.from(sp.password, 'utf8'),
      props:
        sp.protocol === 5
          ? {
              maxPacketSize: this.host.maxPacketSize,
              receiveMax: BRIDGE_IN_WINDOW,
              ...(sp.cleanStart ? {} : { sessionExpiry: 0xffff_ffff }),
            }
          : {},
    };
    s.write(encode(packet, sp.protocol));
  }

  private onData(s: RemoteStream, chunk: Buffer): void {
    if (s !== this.socket || this.decoder === null) return;
    this.lastRead = performance.now();
    const r = this.decoder.feed(chunk);
    for (const p of r.packets) {
      if (s !== this.socket) return;
      this.onPacket(p);
    }
    if (r.error !== null && s === this.socket) this.badInput(`bytes that are not MQTT from the remote: ${r.error.message}`);
  }

  private onPacket(p: Packet): void {
    const hex = (c: number): string => `0x${c.toString(16).padStart(2, '0')}`;
    switch (p.type) {
      case 'connack':
        if (this.state !== 'connecting') this.fail('a second CONNACK from the remote');
        else if (p.code !== 0) this.fail(`the remote refused the CONNECT: code ${hex(p.code)}`);
        else this.onUp(p.props.receiveMax, p.props.maxPacketSize, p.sessionPresent);
        return;
      case 'puback':
        if (this.state !== 'up') this.fail('a PUBACK before CONNACK');
        else this.onPuback(p.pid, p.code);
        return;
      case 'pubrec':
        if (this.state !== 'up') this.fail('a PUBREC before CONNACK');
        else this.onPubrec(p.pid, p.code);
        return;
      case 'pubcomp':
        if (this.state !== 'up') this.fail('a PUBCOMP before CONNACK');
        else this.onPubcomp(p.pid);
        return;
      case 'pubrel':
        // The remote releases its QoS 2 message: PUBCOMP once apply lets the id go (onEffect).
        if (this.state !== 'up') this.badInput('a PUBREL before CONNACK');
        else this.host.propose({ t: 'bridge-in-rel', bridge: this.spec.name, conn: this.connId, pid: p.pid });
        return;
      case 'pingresp':
        return;
      case 'publish':
        if (this.state !== 'up') this.badInput('a PUBLISH before CONNACK');
        else this.onPublish(p);
        return;
      case 'suback':
        if (this.state !== 'up' || p.pid !== this.subscribePid)
          this.badInput(`a SUBACK for packet id ${p.pid} that no SUBSCRIBE of ours has`);
        else this.onSuback(p.codes);
        return;
      case 'disconnect': {
        const why = p.props.reasonString === undefined ? '' : ` (${p.props.reasonString})`;
        this.fail(`DISCONNECT from the remote: code ${hex(p.code)}${why}`);
        return;
      }
      default:
        this.badInput(`an unexpected ${p.type.toUpperCase()} from the remote`);
    }
  }

  private onUp(receiveMax: number | undefined, maxPacketSize: number | undefined, sessionPresent: boolean): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.state = 'up';
    this.failures = 0;
    const a = this.address;
    const downMs = this.endOutage();
    if (this.lastError !== null) this.host.logger.info({ bridge: this.spec.name, address: a.url, downMs }, 'bridge up');
    else this.host.logger.info({ bridge: this.spec.name, address: a.url }, 'bridge connected');
    this.lastError = null;
    this.window = Math.min(this.spec.maxInflight, receiveMax ?? this.spec.maxInflight);
    this.remoteMaxPacket = maxPacketSize ?? 0;
    this.resetCursor();
    // A remote without the bridge's session sends PUBREL for none of its QoS 2 ids held here.
    if (!sessionPresent && (this.host.outbox(this.spec.name)?.inIds.size ?? 0) > 0 && this.host.mayWrite())
      this.host.propose({ t: 'bridge-in-reset', bridge: this.spec.name });
    const every = Math.max(500, this.spec.keepaliveS * 500);
    this.pingTimer = setInterval(() => this.ping(), every);
    this.pingTimer.unref();
    this.subscribe();
    this.pump();
  }

  /** Subscribes at the remote to the remote filter of each inbound rule, at each connection: a
   * remote that kept the session has them already, and subscribing again changes nothing there
   * (Retain Handling 1: no retained messages for a subscription that exists; a 3.1.1 remote sends
   * its retained messages again, as it does to Mosquitto's bridge). */
  private subscribe(): void {
    const subs = inboundSubscriptions(this.host.rules(), this.spec.name);
    const s = this.socket;
    if (subs.length === 0 || s === null || !this.host.mayWrite()) return;
    this.subscribePid = this.takePid();
    const packet: Packet = {
      type: 'subscribe',
      pid: this.subscribePid,
      subs: subs.map((x) => ({ filter: x.filter, qos: x.qos, nl: true, rap: true, rh: 1 })),
      props: {},
    };
    s.write(encode(packet, this.spec.protocol));
  }

  private onSuback(codes: readonly number[]): void {
    this.subscribePid = 0;
    const subs = inboundSubscriptions(this.host.rules(), this.spec.name);
    for (let i = 0; i < codes.length; i++) {
      const code = codes[i] as number;
      if (code < 0x80) continue;
      const filter = subs[i]?.filter ?? '?';
      this.host.event('bridge-subscribe-refused', { bridge: this.spec.name, filter, code });
      this.lastError = `the remote refused the subscription to ${filter}: code 0x${code.toString(16)}`;
    }
  }

  /** A message from the remote: remapped by the first inbound rule that matches, then routed at
   * once (QoS 0 without retain) or proposed (QoS 1, retained QoS 0, and whatever the remote sent at
   * QoS 2), acknowledged to the remote when apply answers (onEffect). Bad input is dropped, counted
   * and, at QoS 1 and 2, acknowledged: the remote would send it again forever otherwise. */
  private onPublish(p: PublishPacket): void {
    const name = this.spec.name;
    if (p.topic === '' || p.props.topicAlias !== undefined) {
      this.badInput('a PUBLISH with a Topic Alias, which the bridge does not allow');
      return;
    }
    const f = inboundForward(this.host.rules(), name, p.topic, p.qos);
    let reject: { kind: 'bridge-in-no-rule' | 'bridge-in-bad-topic' | 'bridge-in-too-large'; why: string } | null = null;
    if (f === 'no-rule') reject = { kind: 'bridge-in-no-rule', why: 'no inbound rule matches it' };
    else if (f === 'bad-topic') reject = { kind: 'bridge-in-bad-topic', why: 'its remapped topic is not a valid topic name' };
    else if (Buffer.byteLength(f.topic) + p.payload.length + PUBLISH_OVERHEAD > this.host.maxPacketSize)
      reject = { kind: 'bridge-in-too-large', why: `larger than the maximum packet size ${this.host.maxPacketSize}` };
    if (reject !== null || typeof f === 'string') {
      const r = reject ?? { kind: 'bridge-in-no-rule' as const, why: '' };
      this.host.event(r.kind, { bridge: name, topic: p.topic, bytes: p.payload.length });
      this.lastError = `a message from the remote on ${p.topic} was dropped: ${r.why}`;
      // At QoS 2 the remote's PUBREL follows; apply answers it with PUBCOMP (0x92: no id held).
      if (p.pid !== undefined) this.ackRemote(p.pid, p.qos === 2 ? 2 : 1);
      return;
    }
    const msg: Message = { topic: f.topic, payload: p.payload, qos: f.qos, retain: p.retain };
    const props = messageProps(p.props);
    if (props !== undefined) msg.props = props;
    if (p.qos === 2) {
      // The remote's QoS 2 flow: through the log whatever the QoS here, so the id is held in the
      // replicated state and the message published once; PUBREC when apply answers (onEffect).
      this.host.propose({ t: 'bridge-in', bridge: name, conn: this.connId, pid: p.pid as number, q2: true, msg });
      return;
    }
    if (msg.qos === 0 && !msg.retain) {
      this.received++;
      this.host.routeIn(name, msg);
      // Delivered at QoS 0 here; the remote's QoS 1 flow still ends with our PUBACK.
      if (p.pid !== undefined) this.ackRemote(p.pid, 1);
      return;
    }
    this.host.propose({ t: 'bridge-in', bridge: name, conn: this.connId, ...(msg.qos === 0 ? {} : { pid: p.pid as number }), msg });
    if (msg.qos === 0) this.received++;
    // A QoS 1 message the rule takes at QoS 0: apply sends no PUBACK, so the remote gets it after
    // the proposal, which the log may still lose; the rule asked for at most once.
    if (msg.qos === 0 && p.pid !== undefined) this.ackRemote(p.pid, 1);
  }

  /** An effect of apply for the connection `conn`: a PUBACK, PUBREC or PUBCOMP to pass on to the
   * remote, or the PUBREL of one of our QoS 2 messages, whose PUBREC is now recorded. */
  onEffect(conn: ConnId, packet: OutPacket): void {
    if (conn !== this.connId || this.state !== 'up') return;
    if (packet.type === 'pubrel') {
      this.onRecorded(packet.pid);
      return;
    }
    if (packet.type === 'pubcomp') {
      // Counted once per message: at the PUBREL of an id held (0x92: one let go before).
      if (packet.code === 0) this.received++;
      this.writeRemote({ type: 'pubcomp', pid: packet.pid, code: this.spec.protocol === 5 ? packet.code : 0, props: {} });
      return;
    }
    if (packet.type !== 'puback' && packet.type !== 'pubrec') return;
    if (packet.code === 0x97) {
      // Another bridge's outbox is full: not acknowledged, so the remote sends it again after the
      // reconnect; nothing it sent later is acknowledged on this connection either.
      this.fail('a message from the remote was refused for a full outbox; it is not acknowledged and comes again');
      return;
    }
    if (packet.type === 'pubrec') {
      this.ackRemote(packet.pid, 2);
      return;
    }
    this.received++;
    this.ackRemote(packet.pid, 1);
  }

  /** Acknowledges the remote's message `pid`: PUBACK for its QoS 1 flow, PUBREC for its QoS 2 one. */
  private ackRemote(pid: number, qos: 1 | 2): void {
    this.writeRemote({ type: qos === 2 ? 'pubrec' : 'puback', pid, code: 0, props: {} });
  }

  private writeRemote(packet: Packet): void {
    const s = this.socket;
    if (s === null || !this.host.mayWrite()) return;
    s.write(encode(packet, this.spec.protocol));
  }

  /** The node's log takes no more for now (true) or again (false): the socket is not read
   * meanwhile, so the remote's messages wait at the remote, unacknowledged. */
  setReadsPaused(on: boolean): void {
    this.readsPaused = on;
    if (on) this.socket?.pause();
    else this.socket?.resume();
  }

  /** Bad input from the remote: counted and logged like any failure, then a reconnect after the
   * backoff. */
  private badInput(reason: string): void {
    this.host.event('bridge-protocol-error', { bridge: this.spec.name, reason });
    this.fail(reason);
  }

  private ping(): void {
    const s = this.socket;
    if (s === null || this.state !== 'up') return;
    if (performance.now() - this.lastRead > this.spec.keepaliveS * 1500) {
      this.fail(`nothing from the remote for 1.5 times the keep-alive (${this.spec.keepaliveS} s)`);
      return;
    }
    if (this.host.mayWrite()) s.write(encode({ type: 'pingreq' }, this.spec.protocol));
  }

  /** Sends what the outbox holds beyond what was sent, within the window. Called after each
   * committed batch and each completion. */
  pump(): void {
    const s = this.socket;
    if (this.state !== 'up' || s === null) return;
    const o = this.host.outbox(this.spec.name);
    if (o === undefined) return;
    if (o !== this.cursorOf) {
      // What is in flight counts in the old outbox's numbers: start again on a new connection.
      if (this.pending.length > 0) {
        this.fail("the bridge's outbox was made anew while messages were in flight");
        return;
      }
      this.resetCursor();
    }
    let i = firstAtOrAboveSeq(o, this.sentSeq);
    if (i >= o.items.length) {
      this.settle();
      return;
    }
    if (!this.host.mayWrite()) return;
    const now = this.host.now();
    while (this.inflight.size < this.window && i < o.items.length && s.writableLength <= BRIDGE_WRITE_BUFFER_BYTES) {
      const item = o.items.at(i++) as OutboxItem;
      // Expired by the cluster clock but not yet removed: the tick at its expiry (the state's next
      // deadline) removes it, and the pump after that entry goes on. An expired message is never
      // forwarded [MQTT-3.3.2-5], and holding keeps the log order.
      // A recorded QoS 2 item only gets its PUBREL, expired or not (bridge-outbox.ts expireOutbox).
      if (item.expiresAt !== null && item.expiresAt <= now && !item.rec) break;
      // A QoS 2 item as far behind the first one as the id space is long may share its id with one
      // before it: it waits until the position passes that one (src/broker/bridge-outbox.ts).
      if (item.qos === 2 && (item.seq - (o.items.at(0) as OutboxItem).seq >= OUTBOX_PID_MAX || this.inflight.has(item.pid))) break;
      if (item.qos === 2 && this.inflight2 >= Math.min(this.spec.maxInflightQos2, this.window)) break;
      this.sentSeq = item.seq + 1;
      this.sentBelow = item.index + 1;
      this.send(s, item, now);
      if (s !== this.socket) return;
    }
    this.settle();
  }

  private send(s: RemoteStream, item: OutboxItem, now: number): void {
    const qos = item.qos;
    const entry: Pending = { index: item.index, seq: item.seq, done: false, phase: qos === 2 ? 'publish' : null };
    if (item.rec) {
      // The remote's PUBREC is recorded: it has the message, and PUBREL completes it; a PUBLISH
      // now could make it deliver the message again.
      this.pending.push(entry);
      entry.phase = 'rel';
      this.inflight.set(item.pid, entry);
      this.inflight2++;
      this.writePubrel(item.pid);
      return;
    }
    const packet: PublishPacket = {
      type: 'publish',
      dup: qos !== 0 && item.seq < this.dupBelowSeq,
      qos,
      retain: item.msg.retain,
      topic: item.topic,
      payload: item.msg.payload,
      props: this.spec.protocol === 5 ? publishProps(item.msg) : {},
    };
    // A forwarded message carries the expiry it has left [MQTT-3.3.2-6], in whole seconds rounded
    // up so that it never goes out with 0.
    if (item.expiresAt !== null && this.spec.protocol === 5) packet.props.messageExpiry = Math.ceil((item.expiresAt - now) / 1000);
    if (qos === 1) packet.pid = this.takePid();
    else if (qos === 2) packet.pid = item.pid;
    const bytes = encode(packet, this.spec.protocol);
    this.pending.push(entry);
    if (this.remoteMaxPacket > 0 && bytes.length > this.remoteMaxPacket) {
      // The remote said it takes nothing this large: dropped, counted, and not sent again.
      this.host.event('bridge-too-large', { bridge: this.spec.name, topic: item.topic, bytes: bytes.length });
      this.complete(entry, false);
      return;
    }
    if (qos !== 0) {
      this.inflight.set(packet.pid as number, entry);
      if (qos === 2) this.inflight2++;
      s.write(bytes);
    } else {
      s.write(bytes, (err) => {
        if (err == null && s === this.socket) this.complete(entry, true);
      });
    }
  }

  private takePid(): number {
    for (;;) {
      const pid = this.nextPid;
      this.nextPid = pid === PID_MAX ? LOCAL_PID_FIRST : pid + 1;
      if (!this.inflight.has(pid) && pid !== this.subscribePid) return pid;
    }
  }

  private onPuback(pid: number, code: number): void {
    const entry = this.inflight.get(pid);
    if (entry === undefined || entry.phase !== null) return;
    this.inflight.delete(pid);
    if (code >= 0x80) {
      // The remote will not take it (MQTT 5): retrying would not change that. Counted, then done.
      this.host.event('bridge-refused-by-remote', { bridge: this.spec.name, code });
      this.lastError = `the remote refused a message: code 0x${code.toString(16)}`;
      this.complete(entry, false);
    } else this.complete(entry, true);
    this.pump();
  }

  /** The remote has the QoS 2 message: its PUBREC is proposed for the record, and PUBREL waits
   * for the commit (onRecorded). A code of 0x80 or above (MQTT 5) ends the flow unsent, refused. */
  private onPubrec(pid: number, code: number): void {
    const entry = this.inflight.get(pid);
    if (entry === undefined || entry.phase === null) return;
    if (code >= 0x80) {
      this.inflight.delete(pid);
      this.inflight2--;
      this.host.event('bridge-refused-by-remote', { bridge: this.spec.name, code });
      this.lastError = `the remote refused a message: code 0x${code.toString(16)}`;
      this.complete(entry, false);
      this.pump();
      return;
    }
    if (entry.phase !== 'publish') return;
    entry.phase = 'rec';
    this.queueRecord(entry.index, pid);
  }

  private queueRecord(index: number, pid: number): void {
    this.recQueue.push([index, pid]);
    if (this.recQueue.length === 1) setImmediate(() => this.proposeRecords());
  }

  /** The PUBRECs of this turn, in commands of at most BRIDGE_PUBRECS_MAX. */
  private proposeRecords(): void {
    const recs = this.recQueue;
    this.recQueue = [];
    if (recs.length === 0 || this.state !== 'up' || !this.host.mayWrite()) return;
    for (let i = 0; i < recs.length; i += BRIDGE_PUBRECS_MAX)
      this.host.propose({ t: 'bridge-pubrec', bridge: this.spec.name, conn: this.connId, recs: recs.slice(i, i + BRIDGE_PUBRECS_MAX) });
  }

  /** Apply recorded the remote's PUBREC for `pid` in a committed entry: PUBREL may go. */
  private onRecorded(pid: number): void {
    const entry = this.inflight.get(pid);
    if (entry === undefined || entry.phase !== 'rec') return;
    entry.phase = 'rel';
    this.writePubrel(pid);
  }

  private writePubrel(pid: number): void {
    const s = this.socket;
    if (s === null || !this.host.mayWrite()) return;
    s.write(encode({ type: 'pubrel', pid, code: 0, props: {} }, this.spec.protocol));
  }

  private onPubcomp(pid: number): void {
    const entry = this.inflight.get(pid);
    if (entry === undefined || entry.phase !== 'rel') return;
    this.inflight.delete(pid);
    this.inflight2--;
    this.complete(entry, true);
    this.pump();
  }

  private complete(entry: Pending, forwarded: boolean): void {
    entry.done = true;
    if (forwarded) this.forwarded++;
    this.settle();
  }

  /** Starts the send cursor at the first item not known completed: at a new connection (what was
   * sent on the last one and not completed goes again) or on a new outbox object. Items of the entry
   * at completedBelow that were completed go again too: at least once. */
  private resetCursor(): void {
    const o = this.host.outbox(this.spec.name);
    if (o !== this.cursorOf) {
      // Numbered anew: what it holds may all have been sent.
      this.completedSeq = 0;
      this.dupBelowSeq = o?.nextSeq ?? 0;
    } else if (this.sentSeq > this.dupBelowSeq) this.dupBelowSeq = this.sentSeq;
    this.cursorOf = o ?? null;
    this.sentBelow = Math.max(this.completedBelow, o?.position ?? 0);
    if (o === undefined) {
      this.sentSeq = 0;
      return;
    }
    const i = firstAtOrAbove(o, this.sentBelow);
    const first = i < o.items.length ? (o.items.at(i) as OutboxItem).seq : o.nextSeq;
    if (first >= this.completedSeq) {
      this.sentSeq = first;
      return;
    }
    // Items of the entry at sentBelow were completed before: the cursor starts after them.
    this.sentSeq = this.completedSeq;
    const last = o.items.at(firstAtOrAboveSeq(o, this.sentSeq) - 1);
    if (last !== undefined && last.index + 1 > this.sentBelow) this.sentBelow = last.index + 1;
  }

  /** With nothing in flight: the log index below which every outbox item is completed, which is
   * the index of the first item not sent yet (the rest of its entry may be behind the cursor's
   * window), or past the last item sent when every item was sent. */
  private unsentBelow(): number {
    const o = this.host.outbox(this.spec.name);
    if (o === undefined || o !== this.cursorOf) return this.completedBelow;
    const next = o.items.at(firstAtOrAboveSeq(o, this.sentSeq));
    return next === undefined ? this.sentBelow : next.index;
  }

  /** Moves completedBelow over the done prefix of what was sent, and proposes it once a turn. It
   * never passes an item not completed: the first one still in flight, or the first one not sent
   * (of the same entry as the last sent, when the window filled inside an entry). */
  private settle(): void {
    for (;;) {
      const head = this.pending.peek();
      if (head === undefined || !head.done) break;
      this.pending.shift();
    }
    const head = this.pending.peek();
    const below = head === undefined ? this.unsentBelow() : head.index;
    const seqBelow = head === undefined ? this.sentSeq : head.seq;
    if (seqBelow > this.completedSeq) this.completedSeq = seqBelow;
    if (below > this.completedBelow) this.completedBelow = below;
    if (this.completedBelow > this.proposedBelow && !this.positionQueued) {
      this.positionQueued = true;
      setImmediate(() => this.proposePosition());
    }
  }

  private proposePosition(): void {
    this.positionQueued = false;
    const o = this.host.outbox(this.spec.name);
    if (o === undefined || this.state === 'stopped' || !this.host.mayWrite()) return;
    const below = this.completedBelow;
    if (below <= this.proposedBelow || below <= o.position) return;
    this.proposedBelow = below;
    this.host.propose({ t: 'bridge-position', bridge: this.spec.name, below });
  }

  /** A QoS 0 publish that has no log entry: written now if the bridge is up, else lost (at most
   * once). */
  forwardQos0(msg: Message): void {
    const s = this.socket;
    if (this.state !== 'up' || s === null) return;
    const f = outboundForward(this.host.rules(), this.spec.name, msg.topic, 0);
    if (f === null) return;
    const packet: PublishPacket = {
      type: 'publish',
      dup: false,
      qos: 0,
      retain: false,
      topic: f.topic,
      payload: msg.payload,
      props: this.spec.protocol === 5 ? publishProps(msg) : {},
    };
    const bytes = encode(packet, this.spec.protocol);
    if (this.remoteMaxPacket > 0 && bytes.length > this.remoteMaxPacket) return;
    s.write(bytes);
    this.forwarded++;
  }

  /** The connection failed: one warning naming the bridge, the address and the reason, then a
   * reconnect after the backoff. `from`: the socket whose event this is (an older one's is
   * ignored). */
  private fail(reason: string, from?: RemoteStream): void {
    if (this.state === 'stopped' || this.state === 'backoff') return;
    if (from !== undefined && from !== this.socket) return;
    const address = this.address.url;
    this.clearTimers();
    this.dropSocket();
    this.lastError = reason;
    this.failures++;
    this.addressIndex++;
    const ceiling = Math.min(BRIDGE_BACKOFF_MAX_MS, BRIDGE_BACKOFF_FIRST_MS * 2 ** Math.min(this.failures - 1, 16));
    const delay = Math.round(ceiling * (0.5 + Math.random() / 2));
    this.host.logger.warn({ bridge: this.spec.name, address, reason, retryInMs: delay }, 'bridge down');
    this.noteOutage();
    this.host.event('bridge-down', { bridge: this.spec.name });
    this.state = 'backoff';
    this.timer = setTimeout(() => {
      this.timer = null;
      if (this.state === 'backoff') this.connect();
    }, delay);
  }

  /** A failed attempt: the first of an outage arms the alert, which logs one error line if the
   * bridge is still not up down-alert-s later (an operator alerts on it; the warnings of each
   * attempt stay). */
  private noteOutage(): void {
    this.downAttempts++;
    if (this.downSince !== 0) return;
    this.downSince = performance.now();
    this.alertTimer = setTimeout(() => {
      this.alertTimer = null;
      if (this.state === 'stopped' || this.state === 'up') return;
      this.host.logger.error(
        {
          bridge: this.spec.name,
          downMs: Math.round(performance.now() - this.downSince),
          attempts: this.downAttempts,
          reason: this.lastError,
          outbox: this.host.outbox(this.spec.name)?.items.length ?? 0,
        },
        'bridge down for long',
      );
    }, this.spec.downAlertS * 1000);
    this.alertTimer.unref();
  }

  private dropSocket(): void {
    const s = this.socket;
    this.socket = null;
    this.decoder = null;
    this.connId = '';
    this.subscribePid = 0;
    // What was sent and not completed goes again on the next connection.
    this.pending.clear();
    this.inflight.clear();
    this.inflight2 = 0;
    this.recQueue = [];
    this.resetCursor();
    if (s !== null) {
      s.removeAllListeners('data');
      s.on('error', () => {});
      s.destroy();
    }
  }

  private clearTimers(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    if (this.pingTimer !== null) clearInterval(this.pingTimer);
    this.pingTimer = null;
  }
}

/** Fixed header, topic length and packet id of a PUBLISH, and room for its properties. */
const PUBLISH_OVERHEAD = 64;

function publishProps(m: Message): PublishProps {
  const p = m.props;
  if (p === undefined) return {};
  const out: PublishProps = {};
  if (p.payloadFormat !== undefined) out.payloadFormat = p.payloadFormat;
  if (p.expiryS !== undefined) out.messageExpiry = p.expiryS;
  if (p.contentType !== undefined) out.contentType = p.contentType;
  if (p.responseTopic !== undefined) out.responseTopic = p.responseTopic;
  if (p.correlationData !== undefined) out.correlationData = p.correlationData;
  if (p.userProps !== undefined) out.userProps = p.userProps;
  return out;
}

/** Every bridge of the node. */
export class BridgeSet {
  readonly links: BridgeLink[];

  constructor(specs: readonly BridgeSpec[], host: BridgeHost) {
    this.links = specs.map((s) => new BridgeLink(s, host));
  }

  start(): void {
    for (const l of this.links) l.start();
  }

  stop(): void {
    for (const l of this.links) l.stop();
  }

  pump(): void {
    for (const l of this.links) l.pump();
  }

  /** `via`: the bridge a message from a remote came in through, which does not send it back. */
  forwardQos0(msg: Message, via: string | null = null): void {
    for (const l of this.links) if (l.spec.name !== via) l.forwardQos0(msg);
  }

  setReadsPaused(on: boolean): void {
    for (const l of this.links) l.setReadsPaused(on);
  }

  /** An effect of apply for a connection that is not a client's: a bridge's, or a closed one's. */
  onEffect(conn: ConnId, packet: OutPacket): void {
    for (const l of this.links) l.onEffect(conn, packet);
  }

  /** An event of the node that names bridge `name`. */
  counted(name: string, kind: string): void {
    const l = this.links.find((x) => x.spec.name === name);
    if (l === undefined) return;
    if (kind === 'bridge-outbox-refused') l.refused++;
    else if (kind === 'bridge-outbox-full' || kind === 'bridge-too-large') l.dropped++;
    else if (kind === 'bridge-outbox-expired') l.expired++;
    else if (kind.startsWith('bridge-in-') || kind === 'bridge-protocol-error') l.rejected++;
  }
}
