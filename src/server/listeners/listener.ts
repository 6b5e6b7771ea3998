// One MQTT listener of any kind. Every connection is accepted by a plain TCP server, so PROXY
// protocol, socket tracking and draining are the same for all kinds; a TLS or HTTP server that
// never listens itself is then handed the socket ('connection' injection, as node:tls documents).
import { createServer as createHttpServer, type Server as HttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { createServer as createTlsServer, type TLSSocket, type Server as TlsServer } from 'node:tls';
import { WebSocketServer } from 'ws';
import type { RefusalKey } from '../../events.js';
import { type ProxySource, parseProxyHeader } from '../proxy-protocol.js';
import type { ByteStream, Transport } from '../transport.js';
import { isTlsKind, type ListenerSpec } from './listen-url.js';
import { certIdentity, type TlsMaterial } from './tls-material.js';
import { WsByteStream } from './ws-stream.js';

/** What a listener needs from the node. */
export interface ListenerHost {
  /** A socket was just accepted: false when the bound on sockets not yet past CONNECT is reached
   * (the host counts the refusal), else the socket holds a slot of that bound from now on, through
   * its PROXY header, TLS handshake and WebSocket upgrade, until handshakeEnded(). */
  admitSocket(): boolean;
  /** The socket's slot is released: it closed during its handshake, or it is about to be given to
   * accept(), where its connection takes the slot until CONNECT. */
  handshakeEnded(): void;
  accept(stream: ByteStream, transport: Transport): void;
  /** A connection refused before MQTT (TLS handshake, PROXY header, WebSocket upgrade): counted
   * under `key` and logged at most once per window per key. */
  refused(key: RefusalKey, fields: Record<string, unknown>, message: string): void;
}

/** A PROXY header that has not arrived within this time closes the socket. */
export const PROXY_HEADER_TIMEOUT_MS = 5_000;
/** An HTTP request line and headers (the WebSocket upgrade) must arrive within this time. */
const HTTP_HEADERS_TIMEOUT_MS = 10_000;
/** WebSocket subprotocols, preferred first [MQTT-6.0.0-3/4]; mqttv3.1 for older clients. */
const WS_SUBPROTOCOLS = ['mqtt', 'mqttv3.1'] as const;

export interface ListenerLimits {
  maxPacketSize: number;
  /** A TLS handshake not done within this time is abandoned (the CONNECT timeout). */
  handshakeTimeoutMs: number;
  /** A WebSocket's outbound bytes above which it reports backpressure (--max-write-buffer-bytes). */
  maxWriteBufferBytes: number;
  /** The accept queue (--listen-backlog); absent: Node's default of 511. */
  backlog?: number;
}

/** The socket's property naming the Listener that accepted it, for the one shared close handler. */
const ACCEPTED_BY: unique symbol = Symbol('raftmq.listener');
/** Its peer key, taken at accept: the handshake table is keyed by it. */
const PEER_KEY: unique symbol = Symbol('raftmq.peer-key');
type AcceptedSocket = Socket & { [ACCEPTED_BY]?: Listener; [PEER_KEY]?: string };

export class Listener {
  readonly spec: ListenerSpec;
  private readonly host: ListenerHost;
  private readonly tls: TlsMaterial | null;
  private readonly raw: NetServer;
  private readonly sockets = new Set<Socket>();
  private readonly limits: ListenerLimits;
  /** Sockets still in their handshake (holding a pending slot of the host), by "address|port";
   * a TLS socket shares its TCP socket's peer, which finds the slot again at hand-over. */
  private readonly handshaking = new Map<string, Socket>();
  /** PROXY sources by the real peer's "address|port", for sockets handed to a TLS/HTTP server. */
  private readonly sources = new Map<string, ProxySource>();
  private readonly tlsServer: TlsServer | null = null;
  private readonly httpServer: HttpServer | null = null;
  private readonly wss: WebSocketServer | null = null;
  private unsubscribe: (() => void) | null = null;

  constructor(spec: ListenerSpec, host: ListenerHost, tls: TlsMaterial | null, limits: ListenerLimits) {
    this.spec = spec;
    this.host = host;
    this.limits = limits;
    const handshakeTimeout = limits.handshakeTimeoutMs;
    if (isTlsKind(spec.kind) && tls === null) throw new Error(`${spec.kind} listener without TLS material`);
    this.tls = tls;
    // A plain MQTT socket stays half-open after the peer's FIN until its connection ends it, so
    // that a mass disconnect is closed over several turns (Connection.onPeerEnd). TLS, HTTP and
    // WebSocket layers above the raw socket keep Node's default and close by themselves.
    const allowHalfOpen = spec.kind === 'mqtt';
    this.raw = createNetServer({ noDelay: true, allowHalfOpen, pauseOnConnect: spec.proxy !== null }, (s) => this.onRaw(s));
    switch (spec.kind) {
      case 'mqtt':
        break;
      case 'mqtts':
        this.tlsServer = createTlsServer({ ...(tls as TlsMaterial).serverOptions(), handshakeTimeout }, (s) => this.onSecure(s));
        break;
      case 'ws':
        this.httpServer = createHttpServer(
          { headersTimeout: HTTP_HEADERS_TIMEOUT_MS, requestTimeout: HTTP_HEADERS_TIMEOUT_MS },
          notWebSocket,
        );
        break;
      case 'wss':
        this.httpServer = createHttpsServer(
          {
            ...(tls as TlsMaterial).serverOptions(),
            handshakeTimeout,
            headersTimeout: HTTP_HEADERS_TIMEOUT_MS,
            requestTimeout: HTTP_HEADERS_TIMEOUT_MS,
          },
          notWebSocket,
        );
        break;
      default: {
        const _: never = spec.kind;
        void _;
      }
    }
    const secure = (this.tlsServer ?? this.httpServer) as TlsServer | null;
    if (tls !== null && secure !== null && isTlsKind(spec.kind)) {
      // node:tls leaves a socket whose handshake timed out open once 'tlsClientError' has a
      // listener; it would hold its pending slot until the peer leaves.
      secure.on('tlsClientError', (err: Error & { code?: string }, s: TLSSocket) => {
        this.onTlsError(err, s);
        s.destroy();
      });
      this.unsubscribe = tls.subscribe((opts) => secure.setSecureContext(opts));
    }
    if (this.httpServer !== null) {
      // Twice the packet bound: a frame may carry several packets, and the decoder bounds each.
      this.wss = new WebSocketServer({
        noServer: true,
        maxPayload: 2 * limits.maxPacketSize,
        perMessageDeflate: false,
        clientTracking: false,
        handleProtocols: (offered) => WS_SUBPROTOCOLS.find((p) => offered.has(p)) ?? false,
      });
      this.httpServer.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => this.onUpgrade(req, socket, head));
    }
  }

  /** Resolves with the bound port (port 0 picks a free one). */
  listen(port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.raw.once('error', onError);
      const backlog = this.limits.backlog;
      this.raw.listen({ host: this.spec.host, port, ...(backlog === undefined ? {} : { backlog }) }, () => {
        this.raw.off('error', onError);
        const addr = this.raw.address();
        resolve(typeof addr === 'object' && addr !== null ? addr.port : port);
      });
    });
  }

  /** Stops accepting; resolves once every socket has closed, destroying stragglers after graceMs. */
  close(graceMs: number): Promise<void> {
    this.unsubscribe?.();
    this.unsubscribe = null;
    this.httpServer?.close(() => {});
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        for (const s of this.sockets) s.destroy();
      }, graceMs);
      this.raw.close(() => {
        clearTimeout(timer);
        resolve();
      });
      if (this.sockets.size === 0) clearTimeout(timer);
    });
  }

  // ---- accepting ----

  private onRaw(socket: Socket): void {
    if (!this.host.admitSocket()) {
      socket.destroy();
      return;
    }
    const key = peerKey(socket);
    this.handshaking.set(key, socket);
    this.sockets.add(socket);
    // One shared handler instead of a closure and a once() wrapper per socket (idle memory).
    (socket as AcceptedSocket)[ACCEPTED_BY] = this;
    (socket as AcceptedSocket)[PEER_KEY] = key;
    socket.on('close', socketClosed);
    if (this.spec.proxy === null) this.dispatch(socket, null);
    else this.readProxy(socket, this.spec.proxy);
  }

  /** A socket it accepted, under peer key `key`, has closed. */
  forget(socket: Socket, key: string): void {
    this.sockets.delete(socket);
    this.sources.delete(key);
    if (this.handshaking.get(key) === socket) {
      this.handshaking.delete(key);
      this.host.handshakeEnded();
    }
  }

  /** Reads the PROXY header before anything else; the bytes behind it are put back. */
  private readProxy(socket: Socket, version: 1 | 2): void {
    let buf: Buffer = Buffer.alloc(0);
    const fail = (reason: string, key: RefusalKey): void => {
      cleanup();
      this.host.refused(key, { listener: this.spec.kind, remote: socket.remoteAddress, reason }, 'PROXY header refused; closing');
      socket.destroy();
    };
    const onData = (chunk: Buffer): void => {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
      const r = parseProxyHeader(buf, version);
      switch (r.k) {
        case 'more':
          return;
        case 'error':
          fail(r.reason, 'proxy-malformed');
          return;
        case 'done': {
          cleanup();
          // Paused before the bytes behind the header are put back: unshift into a flowing stream
          // with an empty buffer would emit them at once, to no listener.
          socket.pause();
          if (r.consumed < buf.length) socket.unshift(buf.subarray(r.consumed));
          this.dispatch(socket, r.source);
          return;
        }
        default: {
          const _: never = r;
          void _;
        }
      }
    };
    // The listener allows half-open sockets: a peer that leaves inside its header is closed here.
    const onError = (): void => {
      cleanup();
      socket.destroy();
    };
    const timer = setTimeout(() => fail(`no header within ${PROXY_HEADER_TIMEOUT_MS} ms`, 'proxy-timeout'), PROXY_HEADER_TIMEOUT_MS);
    const cleanup = (): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('error', onError);
      socket.off('end', onError);
    };
    socket.on('data', onData);
    socket.on('error', onError);
    socket.on('end', onError);
    socket.resume();
  }

  private dispatch(socket: Socket, source: ProxySource | null): void {
    if (source !== null) this.sources.set(peerKey(socket), source);
    switch (this.spec.kind) {
      case 'mqtt':
        // Resumed before the connection attaches its reader: bytes put back flow to it on the
        // next tick, and the connection may pause again at once.
        if (this.spec.proxy !== null) socket.resume();
        this.handOver(socket, this.transport(socket, null), socket);
        return;
      case 'mqtts':
        this.tlsServer?.emit('connection', socket);
        return;
      case 'ws':
        // The HTTP parser reads the socket's handle directly once resumed; the bytes put back
        // reach it first, through its 'data' listener.
        this.httpServer?.emit('connection', socket);
        if (this.spec.proxy !== null) socket.resume();
        return;
      case 'wss':
        // TLS reads the bytes put back itself and starts reading the handle.
        this.httpServer?.emit('connection', socket);
        return;
      default: {
        const _: never = this.spec.kind;
        void _;
      }
    }
  }

  private transport(socket: Socket, certId: string | null): Transport {
    const src = this.sources.get(peerKey(socket));
    return {
      kind: this.spec.kind,
      remoteAddress: src?.address ?? socket.remoteAddress ?? '',
      remotePort: src?.port ?? socket.remotePort ?? 0,
      certIdentity: certId,
      clientIdMustMatchIdentity: certId !== null && this.tls?.settings.requireClientIdMatch === true,
    };
  }

  // ---- TLS ----

  /** `key`: a failed handshake, or a verified handshake whose certificate this listener refuses. */
  private onTlsError(err: Error & { code?: string }, s: TLSSocket, key: RefusalKey = 'tls-handshake-refused'): void {
    this.host.refused(
      key,
      { listener: this.spec.kind, remote: this.sources.get(peerKey(s))?.address ?? s.remoteAddress, reason: err.code ?? err.message },
      'TLS handshake refused',
    );
  }

  /** The identity of a TLS peer, or a reason to refuse it: under 'optional' a presented
   * certificate must still verify; a verified one must carry the configured field. */
  private peerIdentity(s: TLSSocket): { ok: true; id: string | null } | { ok: false; reason: string } {
    const tls = this.tls as TlsMaterial;
    if (tls.settings.clientAuth === 'none') return { ok: true, id: null };
    const cert = s.getPeerCertificate();
    if (cert === null || Object.keys(cert).length === 0) return { ok: true, id: null };
    if (!s.authorized) return { ok: false, reason: String(s.authorizationError) };
    const id = certIdentity(cert, tls.settings.identity);
    if (id === null)
      return { ok: false, reason: `certificate has no ${tls.settings.identity === 'cn' ? 'subject CN' : 'DNS, email or URI SAN'}` };
    return { ok: true, id };
  }

  private onSecure(s: TLSSocket): void {
    const peer = this.peerIdentity(s);
    if (!peer.ok) {
      this.onTlsError(Object.assign(new Error(peer.reason), { code: peer.reason }), s, 'tls-certificate-refused');
      s.destroy();
      return;
    }
    this.handOver(s, this.transport(s, peer.id), s);
  }

  /** The handshake is done: the socket's slot passes to the connection that accept() makes. */
  private handOver(stream: ByteStream, transport: Transport, peer: Socket): void {
    const key = peerKey(peer);
    if (this.handshaking.delete(key)) this.host.handshakeEnded();
    this.host.accept(stream, transport);
  }

  // ---- WebSocket ----

  private onUpgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    const path = (req.url ?? '').split('?')[0];
    const offered = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim());
    const fields = { listener: this.spec.kind, remote: this.sources.get(peerKey(socket))?.address ?? socket.remoteAddress, path };
    if (path !== this.spec.path) {
      this.host.refused('ws-wrong-path', fields, 'WebSocket upgrade on an unknown path');
      return void refuseUpgrade(socket, '404 Not Found');
    }
    if (!WS_SUBPROTOCOLS.some((p) => offered.includes(p))) {
      // [MQTT-6.0.0-3]: the client must offer the "mqtt" subprotocol.
      this.host.refused('ws-no-subprotocol', { ...fields, offered }, 'WebSocket upgrade without the mqtt subprotocol');
      return void refuseUpgrade(socket, '400 Bad Request');
    }
    let certId: string | null = null;
    if (this.spec.kind === 'wss') {
      const peer = this.peerIdentity(socket as TLSSocket);
      if (!peer.ok) {
        this.onTlsError(Object.assign(new Error(peer.reason), { code: peer.reason }), socket as TLSSocket, 'tls-certificate-refused');
        return void socket.destroy();
      }
      certId = peer.id;
    }
    const transport = this.transport(socket, certId);
    const full = this.limits.maxWriteBufferBytes;
    this.wss?.handleUpgrade(req, socket, head, (ws) => this.handOver(new WsByteStream(ws, full), transport, socket));
  }
}

function socketClosed(this: AcceptedSocket): void {
  this[ACCEPTED_BY]?.forget(this, this[PEER_KEY] ?? '');
}

function peerKey(s: Socket): string {
  return `${s.remoteAddress}|${s.remotePort}`;
}

function refuseUpgrade(socket: Socket, status: string): void {
  socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
}

/** A plain HTTP request to a WebSocket listener. */
function notWebSocket(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(426, { Connection: 'close', Upgrade: 'websocket', 'Content-Type': 'text/plain' });
  res.end('MQTT over WebSocket: upgrade with subprotocol mqtt\n');
}
