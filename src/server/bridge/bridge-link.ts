// The serving node's connection to a bridge's remote broker (docs/bridges.md "The promise"): an
// MQTT client written with the repository's own codec. It forwards the bridge's outbox (in the
// replicated state) in log order and proposes `bridge-position` as the remote completes a prefix of
// it, so a later serving node resumes where the remote's completions end. It runs only while the
// node serves and writes only while the lease holds; the remote being down, slow or broken never
// blocks local traffic (docs/bridges.md "When the remote is down").
import { isIP, connect as netConnect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { Logger } from 'pino';
import { type BridgeOutbox, firstAtOrAbove, type OutboxItem } from '../../broker/bridge-outbox.js';
import { type BridgeRule, outboundForward } from '../../broker/bridge-rules.js';
import type { Command, Message } from '../../broker/commands.js';
import { Fifo } from '../../broker/fifo.js';
import type { EventKind } from '../../events.js';
import { Decoder } from '../../protocol/decoder.js';
import { encode } from '../../protocol/encoder.js';
import type { Packet, PublishPacket, PublishProps } from '../../protocol/packets.js';
import type { BridgeAddress, BridgeSpec } from './bridge-config.js';

/** A CONNECT not answered by a CONNACK within this is given up (ms). */
export const BRIDGE_CONNECT_TIMEOUT_MS = 10_000;
/** Reconnect backoff: the first delay, doubling per failure in a row, up to the last (ms); each
 * delay is drawn between half and all of it. */
export const BRIDGE_BACKOFF_FIRST_MS = 500;
export const BRIDGE_BACKOFF_MAX_MS = 30_000;
/** Unacknowledged QoS 1 messages at once (MQTT 5: at most the remote's Receive Maximum). */
export const BRIDGE_WINDOW = 64;
/** Bytes waiting in the socket above which nothing more is written until it drains, so a slow
 * remote holds at most this much of the outbox in this process's memory besides the outbox. */
export const BRIDGE_WRITE_BUFFER_BYTES = 1024 * 1024;
const PID_MAX = 0xffff;

export interface BridgeHost {
  /** The bridge's outbox in the replicated state; undefined while no rule names it yet. */
  outbox(name: string): Readonly<BridgeOutbox> | undefined;
  /** The rules in force. */
  rules(): readonly BridgeRule[];
  /** Whether this node serves and its lease holds now; asking may end serving. */
  mayWrite(): boolean;
  propose(cmd: Command): void;
  /** Counts and logs (rate limited) an event of the node. */
  event(kind: EventKind, fields?: Record<string, unknown>): void;
  readonly logger: Logger;
  /** Largest packet accepted from the remote. */
  readonly maxPacketSize: number;
}

export type BridgeState = 'stopped' | 'connecting' | 'up' | 'backoff';

/** A message sent on the current connection and not yet completed, in send order. */
interface Pending {
  readonly index: number;
  done: boolean;
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
  private readonly host: BridgeHost;
  private socket: Socket | null = null;
  private decoder: Decoder | null = null;
  private timer: NodeJS.Timeout | null = null;
  private pingTimer: NodeJS.Timeout | null = null;
  private lastRead = 0;
  private failures = 0;
  private addressIndex = 0;
  private window = BRIDGE_WINDOW;
  private remoteMaxPacket = 0;
  /** Every outbox message below this index was sent on the current connection. */
  private sentBelow = 0;
  /** Every outbox message below this index was completed at the remote (known here). */
  private completedBelow = 0;
  private proposedBelow = 0;
  private positionQueued = false;
  private readonly pending = new Fifo<Pending>();
  private readonly inflight = new Map<number, Pending>();
  private nextPid = 1;

  constructor(spec: BridgeSpec, host: BridgeHost) {
    this.spec = spec;
    this.host = host;
  }

  private get address(): BridgeAddress {
    return this.spec.addresses[this.addressIndex % this.spec.addresses.length] as BridgeAddress;
  }

  /** The node began serving: connect now. */
  start(): void {
    if (this.state !== 'stopped') return;
    this.failures = 0;
    this.completedBelow = 0;
    this.proposedBelow = 0;
    this.connect();
  }

  /** The node stopped serving: drop the connection; nothing more is written. */
  stop(): void {
    if (this.state === 'stopped') return;
    this.state = 'stopped';
    this.clearTimers();
    this.dropSocket();
  }

  private connect(): void {
    this.state = 'connecting';
    const a = this.address;
    let s: Socket;
    try {
      s = a.tls
        ? tlsConnect({
            host: a.host,
            port: a.port,
            ...(isIP(a.host) === 0 ? { servername: a.host } : {}),
            ...(this.spec.tlsCa === null ? {} : { ca: this.spec.tlsCa }),
            ...(this.spec.tlsCert === null ? {} : { cert: this.spec.tlsCert }),
            ...(this.spec.tlsKey === null ? {} : { key: this.spec.tlsKey }),
          })
        : netConnect({ host: a.host, port: a.port });
    } catch (err) {
      this.fail(`cannot connect: ${(err as Error).message}`);
      return;
    }
    this.socket = s;
    this.decoder = new Decoder({ maxPacketSize: this.host.maxPacketSize, role: 'client', level: this.spec.protocol });
    s.setNoDelay(true);
    s.on(a.tls ? 'secureConnect' : 'connect', () => this.onOpen(s));
    s.on('data', (chunk: Buffer) => this.onData(s, chunk));
    s.on('drain', () => {
      if (s === this.socket) this.pump();
    });
    s.on('error', (err) => this.fail(`${err.message}`, s));
    s.on('close', () => this.fail('the remote closed the connection', s));
    this.timer = setTimeout(() => this.fail(`no CONNACK within ${BRIDGE_CONNECT_TIMEOUT_MS} ms`, s), BRIDGE_CONNECT_TIMEOUT_MS);
  }

  private onOpen(s: Socket): void {
    if (s !== this.socket || !this.host.mayWrite()) return;
    const sp = this.spec;
    const packet: Packet = {
      type: 'connect',
      protocolName: 'MQTT',
      level: sp.protocol,
      clean: sp.cleanStart,
      keepAlive: sp.keepaliveS,
      clientId: sp.clientId,
      will: null,
      username: sp.username,
      password: sp.password === null ? null : Buffer.from(sp.password, 'utf8'),
      props: sp.protocol === 5 ? { maxPacketSize: this.host.maxPacketSize, ...(sp.cleanStart ? {} : { sessionExpiry: 0xffff_ffff }) } : {},
    };
    s.write(encode(packet, sp.protocol));
  }

  private onData(s: Socket, chunk: Buffer): void {
    if (s !== this.socket || this.decoder === null) return;
    this.lastRead = performance.now();
    const r = this.decoder.feed(chunk);
    for (const p of r.packets) {
      if (s !== this.socket) return;
      this.onPacket(p);
    }
    if (r.error !== null && s === this.socket) this.fail(`bytes that are not MQTT from the remote: ${r.error.message}`);
  }

  private onPacket(p: Packet): void {
    const hex = (c: number): string => `0x${c.toString(16).padStart(2, '0')}`;
    switch (p.type) {
      case 'connack':
        if (this.state !== 'connecting') this.fail('a second CONNACK from the remote');
        else if (p.code !== 0) this.fail(`the remote refused the CONNECT: code ${hex(p.code)}`);
        else this.onUp(p.props.receiveMax, p.props.maxPacketSize);
        return;
      case 'puback':
        if (this.state !== 'up') this.fail('a PUBACK before CONNACK');
        else this.onPuback(p.pid, p.code);
        return;
      case 'pingresp':
        return;
      case 'disconnect': {
        const why = p.props.reasonString === undefined ? '' : ` (${p.props.reasonString})`;
        this.fail(`DISCONNECT from the remote: code ${hex(p.code)}${why}`);
        return;
      }
      default:
        this.fail(`an unexpected ${p.type.toUpperCase()} from the remote`);
    }
  }

  private onUp(receiveMax: number | undefined, maxPacketSize: number | undefined): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    this.state = 'up';
    this.failures = 0;
    const a = this.address;
    if (this.lastError !== null) this.host.logger.info({ bridge: this.spec.name, address: a.url }, 'bridge up');
    else this.host.logger.info({ bridge: this.spec.name, address: a.url }, 'bridge connected');
    this.lastError = null;
    this.window = Math.min(BRIDGE_WINDOW, receiveMax ?? BRIDGE_WINDOW);
    this.remoteMaxPacket = maxPacketSize ?? 0;
    const o = this.host.outbox(this.spec.name);
    this.sentBelow = Math.max(this.completedBelow, o?.position ?? 0);
    const every = Math.max(500, this.spec.keepaliveS * 500);
    this.pingTimer = setInterval(() => this.ping(), every);
    this.pingTimer.unref();
    this.pump();
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
    let i = firstAtOrAbove(o, this.sentBelow);
    if (i >= o.items.length) {
      this.settle();
      return;
    }
    if (!this.host.mayWrite()) return;
    while (this.inflight.size < this.window && i < o.items.length && s.writableLength <= BRIDGE_WRITE_BUFFER_BYTES) {
      const item = o.items.at(i++) as OutboxItem;
      this.sentBelow = item.index + 1;
      this.send(s, item);
      if (s !== this.socket) return;
    }
    this.settle();
  }

  private send(s: Socket, item: OutboxItem): void {
    const entry: Pending = { index: item.index, done: false };
    // QoS 2 to the remote is not built: such a message goes out at QoS 1 (docs/bridges.md).
    const qos = item.qos === 0 ? 0 : 1;
    const packet: PublishPacket = {
      type: 'publish',
      dup: false,
      qos,
      retain: item.msg.retain,
      topic: item.topic,
      payload: item.msg.payload,
      props: this.spec.protocol === 5 ? publishProps(item.msg) : {},
    };
    if (qos === 1) packet.pid = this.takePid();
    const bytes = encode(packet, this.spec.protocol);
    this.pending.push(entry);
    if (this.remoteMaxPacket > 0 && bytes.length > this.remoteMaxPacket) {
      // The remote said it takes nothing this large: dropped, counted, and not sent again.
      this.host.event('bridge-too-large', { bridge: this.spec.name, topic: item.topic, bytes: bytes.length });
      this.complete(entry, false);
      return;
    }
    if (qos === 1) {
      this.inflight.set(packet.pid as number, entry);
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
      this.nextPid = pid === PID_MAX ? 1 : pid + 1;
      if (!this.inflight.has(pid)) return pid;
    }
  }

  private onPuback(pid: number, code: number): void {
    const entry = this.inflight.get(pid);
    if (entry === undefined) return;
    this.inflight.delete(pid);
    if (code >= 0x80) {
      // The remote will not take it (MQTT 5): retrying would not change that. Counted, then done.
      this.host.event('bridge-refused-by-remote', { bridge: this.spec.name, code });
      this.lastError = `the remote refused a message: code 0x${code.toString(16)}`;
      this.complete(entry, false);
    } else this.complete(entry, true);
    this.pump();
  }

  private complete(entry: Pending, forwarded: boolean): void {
    entry.done = true;
    if (forwarded) this.forwarded++;
    this.settle();
  }

  /** Moves completedBelow over the done prefix of what was sent, and proposes it once a turn. */
  private settle(): void {
    for (;;) {
      const head = this.pending.peek();
      if (head === undefined || !head.done) break;
      this.pending.shift();
    }
    const head = this.pending.peek();
    const below = head === undefined ? this.sentBelow : head.index;
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
  private fail(reason: string, from?: Socket): void {
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
    this.host.event('bridge-down', { bridge: this.spec.name });
    this.state = 'backoff';
    this.timer = setTimeout(() => {
      this.timer = null;
      if (this.state === 'backoff') this.connect();
    }, delay);
  }

  private dropSocket(): void {
    const s = this.socket;
    this.socket = null;
    this.decoder = null;
    // What was sent and not completed goes again on the next connection.
    this.pending.clear();
    this.inflight.clear();
    this.sentBelow = this.completedBelow;
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

  forwardQos0(msg: Message): void {
    for (const l of this.links) l.forwardQos0(msg);
  }

  /** An event of the node that names bridge `name`. */
  counted(name: string, kind: string): void {
    const l = this.links.find((x) => x.spec.name === name);
    if (l === undefined) return;
    if (kind === 'bridge-outbox-refused') l.refused++;
    else if (kind === 'bridge-outbox-full' || kind === 'bridge-too-large') l.dropped++;
  }
}
