// TCP links between raft nodes (docs/design.md "Links"). Generic over the message type M: the
// transport carries whatever its body codec encodes (by default plain msgpackr-encodable objects)
// and knows nothing of raft/core.
//
// Topology: each node dials every peer and uses that dialed link only for its own sends; it
// accepts inbound links and only reads from them. So between two nodes there are two TCP
// connections, one per direction, and each side owns the reconnection of the link it sends on.
// A newer inbound link from a node replaces the older one (the peer restarted or redialed).
//
// Loss is allowed (raft retransmits): frames queued for a peer are bounded in bytes and the oldest
// are dropped; frames written to a link that then breaks are lost; nothing is ever retried here.
import { type AddressInfo, connect, createServer, type Server, type Socket } from 'node:net';
import { reconnectDelayMs } from './backoff.js';
import { type BodyCodec, type EncodedBody, msgpackCodec } from './codec.js';
import { type LinkCloseCode, TransportError } from './errors.js';
import { encodeFrame, FRAME_BYTES_LIMIT, FRAME_BYTES_MAX_DEFAULT, FRAME_HEADER_BYTES, FRAME_PREFIX_BYTES } from './frame.js';
import type { HelloExpectations, Incarnation, LocalIdentity } from './handshake.js';
import { Link, type LinkDirection, type LinkOwner } from './link.js';
import { SendQueue } from './send-queue.js';

export interface PeerAddress {
  host: string;
  port: number;
}

/** The subset of pino the transport uses: fields first, then the message. */
export interface TransportLogger {
  info(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
}

export interface TransportOptions<M> {
  nodeId: number;
  incarnation: Incarnation;
  clusterId: string;
  /** Any msgpackr value; sent in every hello and judged by epochAccepts. */
  epoch: unknown;
  /** The cluster identity, sent in every hello; a peer that sends another one is refused. Absent or
   * '': not known yet (see setClusterUid). */
  clusterUid?: string;
  listen: PeerAddress;
  /** Every node of the cluster; an entry for this node is ignored. Port 0: address not known yet
   * (see setPeerAddress); such a peer is not dialed. */
  peers: Map<number, PeerAddress>;
  /** With a secret every link starts with an HMAC-SHA256 challenge both ways. */
  secret?: string | Uint8Array;
  logger: TransportLogger;
  validate: (m: unknown) => m is M;
  /** How messages become frame bodies and back; default msgpackCodec (msgpackr under FRAME_VERSION). */
  codec?: BodyCodec<M>;
  /** Bound on a frame's length field (version byte and body), in bytes; default 64 MiB. */
  maxFrameBytes?: number;
  /** Bound on the frames queued for one peer, in bytes; default 64 MiB. */
  sendQueueBytesMax?: number;
  /** Whether a peer of epoch `remote` may link with this node; default: every epoch may, because
   * nodes of different epochs must still meet to find the newer one (docs/design.md "Force-start"). */
  epochAccepts?: (local: unknown, remote: unknown) => boolean;
  /** Uniform in [0, 1), for reconnect jitter; default Math.random. */
  random?: () => number;
  /** A link that has not finished its handshake within this is closed; default 3 s. */
  handshakeTimeoutMs?: number;
  /** send() only queues, and the caller calls flush() once per event-loop turn (the raft driver
   * does, after it proposes the turn's batch), so each link gets one write a turn. Default false:
   * the transport flushes by itself at the end of the turn. */
  callerFlushes?: boolean;
}

export interface TransportStats {
  framesIn: number; // delivered to onMessage
  framesOut: number; // handed to a socket
  dropped: number; // never handed to a socket: queue overflow, unknown peer, unencodable, oversize, stop
  badFrames: number; // links closed for a malformed frame or a message validate refused
  refusedLinks: number; // links closed by the handshake: cluster, node, epoch, authentication
  reconnects: number; // dialed links established again after an earlier one to the same peer
  peers: Array<{ nodeId: number; connected: boolean; queuedFrames: number; queuedBytes: number }>;
}

export type LinkEvent =
  | { t: 'up'; nodeId: number; direction: LinkDirection; incarnation: Incarnation; epoch: unknown; clusterUid: string }
  | { t: 'down'; nodeId: number; direction: LinkDirection; code: LinkCloseCode }
  /** A hello named another cluster identity (not authenticated: for reporting only). */
  | { t: 'identity-refused'; nodeId: number; clusterUid: string; detail: string };

/** Unauthenticated inbound connections are bounded; three nodes need two inbound links. */
export const INBOUND_CONNECTIONS_MAX = 64;
export const HANDSHAKE_TIMEOUT_MS_DEFAULT = 3_000;
export const SEND_QUEUE_BYTES_MAX_DEFAULT = 64 * 1024 * 1024;
/** Distinct refused identities logged; beyond, refusals are only counted (refusedLinks). */
const IDENTITY_LOGGED_MAX = 64;

const BAD_FRAME_CODES: ReadonlySet<LinkCloseCode> = new Set<LinkCloseCode>([
  'frame-oversize',
  'frame-empty',
  'frame-version',
  'body-not-msgpack',
  'body-malformed',
  'message-invalid',
  'hello-invalid',
]);
const REFUSAL_CODES: ReadonlySet<LinkCloseCode> = new Set<LinkCloseCode>([
  'cluster-mismatch',
  'identity-mismatch',
  'epoch-refused',
  'node-unexpected',
  'auth-missing',
  'auth-unexpected',
  'auth-failed',
  'handshake-timeout',
]);
/** Expected while a peer is down, restarts or we close; not worth a warning on every redial. */
const QUIET_CODES: ReadonlySet<LinkCloseCode> = new Set<LinkCloseCode>(['socket-error', 'peer-closed', 'stopped', 'superseded']);

interface Peer<M> {
  readonly nodeId: number;
  address: PeerAddress;
  readonly queue: SendQueue;
  link: Link<M> | undefined; // the dialed link, in any phase
  attempt: number; // redials since the last established link
  timer: NodeJS.Timeout | undefined;
  blocked: boolean; // the socket asked for 'drain'
  everUp: boolean;
}

type State = 'new' | 'starting' | 'started' | 'stopped';

export class Transport<M> implements LinkOwner<M> {
  /** False without a cluster secret: links are not authenticated and the caller should warn. */
  readonly authenticatesPeers: boolean;
  private readonly opts: TransportOptions<M>;
  private readonly identity: LocalIdentity;
  private readonly maxFrameBytes: number;
  private readonly handshakeTimeoutMs: number;
  private readonly random: () => number;
  private readonly epochAccepts: (local: unknown, remote: unknown) => boolean;
  private readonly codec: BodyCodec<M>;
  private readonly out = new Map<number, Peer<M>>();
  private readonly outPeerOf = new Map<Link<M>, Peer<M>>();
  private readonly inbound = new Map<number, Link<M>>(); // ready inbound link per node
  private readonly inboundPending = new Set<Link<M>>(); // inbound links still in handshake
  private readonly dirty = new Set<Peer<M>>();
  private readonly server: Server;
  private state: State = 'new';
  private flushScheduled = false;
  private messageHandler: ((from: number, msg: M) => void) | undefined;
  private linkHandler: ((event: LinkEvent) => void) | undefined;
  /** `node/identity` pairs whose refusal was logged. */
  private readonly identityLogged = new Set<string>();
  private readonly counters = { framesIn: 0, framesOut: 0, dropped: 0, badFrames: 0, refusedLinks: 0, reconnects: 0 };

  constructor(opts: TransportOptions<M>) {
    checkOptions(opts);
    this.opts = opts;
    this.identity = {
      clusterId: opts.clusterId,
      epoch: opts.epoch,
      nodeId: opts.nodeId,
      incarnation: opts.incarnation,
      clusterUid: opts.clusterUid ?? '',
    };
    this.authenticatesPeers = opts.secret !== undefined;
    this.maxFrameBytes = opts.maxFrameBytes ?? FRAME_BYTES_MAX_DEFAULT;
    this.handshakeTimeoutMs = opts.handshakeTimeoutMs ?? HANDSHAKE_TIMEOUT_MS_DEFAULT;
    this.random = opts.random ?? Math.random;
    this.epochAccepts = opts.epochAccepts ?? acceptEveryEpoch;
    this.codec = opts.codec ?? (msgpackCodec as BodyCodec<M>);
    const queueBytesMax = opts.sendQueueBytesMax ?? SEND_QUEUE_BYTES_MAX_DEFAULT;
    for (const [nodeId, address] of opts.peers) {
      if (nodeId === opts.nodeId) continue;
      this.out.set(nodeId, {
        nodeId,
        address: { ...address },
        queue: new SendQueue(queueBytesMax),
        link: undefined,
        attempt: 0,
        timer: undefined,
        blocked: false,
        everUp: false,
      });
    }
    this.server = createServer(this.onConnection);
    this.server.maxConnections = INBOUND_CONNECTIONS_MAX;
  }

  /** Binds the listen address before anything else, so a second process with this node id on the
   * same host fails here at once (docs/design.md "Links"); then dials every peer. */
  async start(): Promise<void> {
    if (this.state !== 'new') throw new TransportError('RAFT_TRANSPORT_STATE', `start() when ${this.state}`);
    this.state = 'starting';
    try {
      await this.listen();
    } catch (err) {
      this.state = 'stopped';
      throw err;
    }
    if ((this.state as State) === 'stopped') {
      // stop() was called while binding and found nothing to close yet.
      await new Promise<void>((resolve) => this.server.close(() => resolve()));
      return;
    }
    this.state = 'started';
    this.server.on('error', this.onServerError);
    for (const peer of this.out.values()) this.dial(peer);
  }

  /** The bound listen address (its real port when 0 was asked for). */
  address(): PeerAddress {
    const a = this.server.address() as AddressInfo | null;
    if (a === null) throw new TransportError('RAFT_TRANSPORT_STATE', 'not listening');
    return { host: a.address, port: a.port };
  }

  /** Queues msg for the peer; written with everything else queued this event-loop turn, or when
   * the link to the peer is up (messages sent before start() wait too). Never throws: a message
   * that cannot go is dropped and counted. */
  send(to: number, msg: M): void {
    const peer = this.out.get(to);
    if (peer === undefined || this.state === 'stopped') {
      this.counters.dropped++;
      return;
    }
    let frame: Uint8Array;
    try {
      frame = this.encodeFrame(msg);
    } catch (err) {
      this.counters.dropped++;
      this.opts.logger.warn({ peer: to, err: (err as Error).message }, 'raft message not encodable; dropped');
      return;
    }
    if (frame.length - FRAME_PREFIX_BYTES > this.maxFrameBytes) {
      this.counters.dropped++;
      this.opts.logger.warn({ peer: to, bytes: frame.length - FRAME_HEADER_BYTES }, 'raft message above the frame bound; dropped');
      return;
    }
    this.counters.dropped += peer.queue.push(frame);
    if (peer.link?.ready !== true || peer.blocked) return;
    if (this.opts.callerFlushes === true) this.dirty.add(peer);
    else this.scheduleFlush(peer);
  }

  private encodeFrame(msg: M): Uint8Array {
    if (this.codec.encodeFrame !== undefined) return this.codec.encodeFrame(msg);
    const { version, body }: EncodedBody = this.codec.encode(msg);
    return encodeFrame(body, version);
  }

  onMessage(fn: (from: number, msg: M) => void): void {
    this.messageHandler = fn;
  }

  /** Reports each link that completes its handshake and each ready link that closes. */
  onLink(fn: (event: LinkEvent) => void): void {
    this.linkHandler = fn;
  }

  /** Hellos of links made from now on carry this epoch (after a force-start). */
  setEpoch(epoch: unknown): void {
    this.identity.epoch = epoch;
  }

  /** This node made or learned its cluster identity (once per process). Links already made carry
   * hellos without it, from which no peer could learn it, so they are made again. */
  setClusterUid(uid: string): void {
    if (this.identity.clusterUid === uid) return;
    this.identity.clusterUid = uid;
    this.remakeLinks('cluster identity set');
  }

  /** Closes every link, so that each is made again with a hello of the identity as it is now (a
   * node that made a new epoch: peers learn the identity from hellos of that epoch). Queued frames
   * wait for the new links. */
  remakeLinks(why = 'identity changed'): void {
    for (const peer of this.out.values()) peer.link?.close('superseded', why);
    for (const link of [...this.inbound.values(), ...this.inboundPending]) link.close('superseded', why);
  }

  /** Learns or changes a peer's address; the dialed link to it is made again at once. */
  setPeerAddress(nodeId: number, address: PeerAddress): void {
    const peer = this.out.get(nodeId);
    if (peer === undefined) throw new TransportError('RAFT_TRANSPORT_BAD_OPTIONS', `node ${nodeId} is not a peer`);
    checkAddress(address, `peer ${nodeId}`);
    peer.address = { ...address };
    peer.attempt = 0;
    clearTimeout(peer.timer);
    peer.timer = undefined;
    if (peer.link !== undefined) peer.link.close('superseded', 'peer address changed');
    else this.dial(peer);
  }

  async stop(): Promise<void> {
    if (this.state === 'stopped' && !this.server.listening) return;
    this.state = 'stopped';
    for (const peer of this.out.values()) {
      clearTimeout(peer.timer);
      peer.timer = undefined;
      peer.link?.close('stopped', 'transport stopped');
      this.counters.dropped += peer.queue.clear();
    }
    for (const link of [...this.inbound.values(), ...this.inboundPending]) link.close('stopped', 'transport stopped');
    if (!this.server.listening) return;
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  stats(): TransportStats {
    const peers = [...this.out.values()].map((p) => ({
      nodeId: p.nodeId,
      connected: p.link?.ready === true,
      queuedFrames: p.queue.length,
      queuedBytes: p.queue.queuedBytes,
    }));
    return { ...this.counters, peers };
  }

  private listen(): Promise<void> {
    const { host, port } = this.opts.listen;
    return new Promise((resolve, reject) => {
      const onError = (err: NodeJS.ErrnoException): void => {
        const why = err.code === 'EADDRINUSE' ? 'address in use: is another process running this node id?' : err.message;
        reject(new TransportError('RAFT_TRANSPORT_LISTEN', `${host}:${port}: ${why}`, { cause: err }));
      };
      this.server.once('error', onError);
      // exclusive: never share the port with a sibling worker; a second owner must fail.
      this.server.listen({ host, port, exclusive: true }, () => {
        this.server.off('error', onError);
        resolve();
      });
    });
  }

  private readonly onServerError = (err: Error): void => {
    this.opts.logger.warn({ err: err.message }, 'peer listener error');
  };

  private readonly onConnection = (socket: Socket): void => {
    if (this.state !== 'started') {
      socket.destroy();
      return;
    }
    const self = this.opts.nodeId;
    const expectNode = (id: number): boolean => id !== self && this.out.has(id);
    this.inboundPending.add(this.newLink(socket, 'in', expectNode));
  };

  private dial(peer: Peer<M>): void {
    if (this.state !== 'started' || peer.link !== undefined || peer.address.port === 0) return;
    const socket = connect({ host: peer.address.host, port: peer.address.port });
    const link = this.newLink(socket, 'out', (id) => id === peer.nodeId);
    peer.link = link;
    this.outPeerOf.set(link, peer);
  }

  private newLink(socket: Socket, direction: LinkDirection, expectNode: (id: number) => boolean): Link<M> {
    const expectations: HelloExpectations = {
      local: { ...this.identity },
      expectNode,
      epochAccepts: this.epochAccepts,
      hasSecret: this.authenticatesPeers,
    };
    return new Link<M>({
      socket,
      direction,
      expectations,
      secret: this.opts.secret,
      maxFrameBytes: this.maxFrameBytes,
      handshakeTimeoutMs: this.handshakeTimeoutMs,
      validate: this.opts.validate,
      versions: this.codec.versions,
      decode: this.codec.newDecoder(),
      owner: this,
    });
  }

  linkReady(link: Link<M>): void {
    const hello = link.peer!;
    if (link.direction === 'out') {
      const peer = this.outPeerOf.get(link)!;
      if (peer.everUp) this.counters.reconnects++;
      peer.everUp = true;
      peer.attempt = 0;
      if (peer.queue.length > 0) this.scheduleFlush(peer);
    } else {
      this.inboundPending.delete(link);
      const older = this.inbound.get(hello.nodeId);
      this.inbound.set(hello.nodeId, link);
      older?.close('superseded', 'a newer link from the same node');
    }
    this.opts.logger.info({ peer: hello.nodeId, direction: link.direction, incarnation: hello.incarnation }, 'peer link up');
    this.linkHandler?.({
      t: 'up',
      nodeId: hello.nodeId,
      direction: link.direction,
      incarnation: hello.incarnation,
      epoch: hello.epoch,
      clusterUid: hello.clusterUid ?? '',
    });
  }

  linkMessage(link: Link<M>, msg: M): void {
    if (this.state !== 'started') return;
    this.counters.framesIn++;
    this.messageHandler?.(link.peer!.nodeId, msg);
  }

  linkDrained(link: Link<M>): void {
    const peer = this.outPeerOf.get(link);
    if (peer === undefined) return;
    peer.blocked = false;
    this.scheduleFlush(peer);
  }

  linkClosed(link: Link<M>, code: LinkCloseCode, detail: string): void {
    const wasUp = link.established;
    this.countClose(code);
    if (code === 'identity-mismatch') this.identityRefused(link, detail);
    else this.logClose(link, code, detail, wasUp);
    if (link.direction === 'out') this.outLinkClosed(link);
    else this.inLinkClosed(link);
    if (wasUp) this.linkHandler?.({ t: 'down', nodeId: link.peer!.nodeId, direction: link.direction, code });
  }

  private outLinkClosed(link: Link<M>): void {
    const peer = this.outPeerOf.get(link)!;
    this.outPeerOf.delete(link);
    peer.link = undefined;
    peer.blocked = false;
    this.dirty.delete(peer);
    if (this.state !== 'started') return;
    const delay = reconnectDelayMs(peer.attempt++, this.random);
    peer.timer = setTimeout(() => {
      peer.timer = undefined;
      this.dial(peer);
    }, delay);
  }

  private inLinkClosed(link: Link<M>): void {
    this.inboundPending.delete(link);
    const nodeId = link.peer?.nodeId;
    if (nodeId !== undefined && this.inbound.get(nodeId) === link) this.inbound.delete(nodeId);
  }

  private countClose(code: LinkCloseCode): void {
    if (BAD_FRAME_CODES.has(code)) this.counters.badFrames++;
    else if (REFUSAL_CODES.has(code)) this.counters.refusedLinks++;
  }

  /** Logged once per peer node id and identity: the peer redials every few seconds for as long as
   * it runs, and the owner reports the lasting state (RaftDriver: out of membership). */
  private identityRefused(link: Link<M>, detail: string): void {
    const heard = link.heard;
    const nodeId = heard?.nodeId ?? 0;
    const uid = heard?.clusterUid ?? '';
    const key = `${nodeId}/${uid}`;
    if (!this.identityLogged.has(key) && this.identityLogged.size < IDENTITY_LOGGED_MAX) {
      this.identityLogged.add(key);
      const remote = `${link.socket.remoteAddress}:${link.socket.remotePort}`;
      this.opts.logger.warn({ peer: nodeId, remote, code: 'identity-mismatch', detail }, 'peer link refused: another cluster');
    }
    this.linkHandler?.({ t: 'identity-refused', nodeId, clusterUid: uid, detail });
  }

  private logClose(link: Link<M>, code: LinkCloseCode, detail: string, wasUp: boolean): void {
    const fields = {
      peer: link.peer?.nodeId ?? link.socket.remoteAddress,
      remote: `${link.socket.remoteAddress}:${link.socket.remotePort}`,
      direction: link.direction,
      code,
      detail,
    };
    if (!QUIET_CODES.has(code)) this.opts.logger.warn(fields, 'peer link closed');
    else if (wasUp && code !== 'stopped') this.opts.logger.info(fields, 'peer link down');
  }

  private scheduleFlush(peer: Peer<M>): void {
    this.dirty.add(peer);
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    setImmediate(this.flushAll);
  }

  /** One batch per link per event-loop turn: corked, so the frames leave in one writev. */
  private readonly flushAll = (): void => {
    this.flushScheduled = false;
    for (const peer of this.dirty) this.flushPeer(peer);
    this.dirty.clear();
  };

  /** Writes every queued frame now instead of at the scheduled flush. The raft driver calls it once
   * a turn, after it proposes the turn's batch (see callerFlushes). */
  flush(): void {
    if (this.dirty.size > 0) this.flushAll();
  }

  private flushPeer(peer: Peer<M>): void {
    const link = peer.link;
    if (link === undefined || !link.ready || peer.blocked || this.state !== 'started') return;
    link.socket.cork();
    let more = true;
    for (let frame = peer.queue.shift(); frame !== undefined; frame = more ? peer.queue.shift() : undefined) {
      more = link.write(frame);
      this.counters.framesOut++;
    }
    link.socket.uncork();
    if (!more) peer.blocked = true;
  }
}

function acceptEveryEpoch(): boolean {
  return true;
}

function checkOptions<M>(opts: TransportOptions<M>): void {
  if (!Number.isSafeInteger(opts.nodeId))
    throw new TransportError('RAFT_TRANSPORT_BAD_OPTIONS', `node id ${opts.nodeId} is not an integer`);
  checkAddress(opts.listen, 'listen');
  for (const [id, address] of opts.peers) {
    if (!Number.isSafeInteger(id)) throw new TransportError('RAFT_TRANSPORT_BAD_OPTIONS', `peer id ${id} is not an integer`);
    checkAddress(address, `peer ${id}`);
  }
  checkBytes(opts.maxFrameBytes, 'maxFrameBytes', FRAME_BYTES_LIMIT);
  checkBytes(opts.sendQueueBytesMax, 'sendQueueBytesMax', Number.MAX_SAFE_INTEGER);
  if (opts.codec !== undefined && (opts.codec.versions.length === 0 || !opts.codec.versions.every(isByte))) {
    throw new TransportError('RAFT_TRANSPORT_BAD_OPTIONS', `codec versions must be bytes, got ${String(opts.codec.versions)}`);
  }
  if (opts.secret !== undefined && opts.secret.length === 0) {
    throw new TransportError('RAFT_TRANSPORT_BAD_OPTIONS', 'cluster secret is empty');
  }
}

function isByte(v: number): boolean {
  return Number.isInteger(v) && v >= 0 && v <= 255;
}

function checkAddress(a: PeerAddress, what: string): void {
  if (typeof a.host !== 'string' || !Number.isInteger(a.port) || a.port < 0 || a.port > 65535) {
    throw new TransportError('RAFT_TRANSPORT_BAD_OPTIONS', `${what} address ${JSON.stringify(a)} is not host and port`);
  }
}

function checkBytes(n: number | undefined, what: string, max: number): void {
  if (n !== undefined && (!Number.isSafeInteger(n) || n < 1 || n > max)) {
    throw new TransportError('RAFT_TRANSPORT_BAD_OPTIONS', `${what} must be an integer in [1, ${max}], got ${n}`);
  }
}
