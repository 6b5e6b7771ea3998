// One TCP connection to a peer: handshake, then frames of opaque messages. A Link never throws on
// what the peer sends; every refusal closes the socket and reports a LinkCloseCode to its owner.
import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { type BodyDecoder, BodyRefusal, newUnpacker, packBody, unpackBody } from './codec.js';
import type { LinkCloseCode } from './errors.js';
import { encodeFrame, FrameReader } from './frame.js';
import {
  HANDSHAKE_FRAME_BYTES_MAX,
  type Hello,
  type HelloExpectations,
  judgeHello,
  makeHello,
  NONCE_BYTES,
  parseHandshakeFrame,
  proofMac,
  proofMatches,
} from './handshake.js';

export type LinkDirection = 'out' | 'in';

export interface LinkOwner<M> {
  linkReady(link: Link<M>): void;
  linkMessage(link: Link<M>, msg: M): void;
  linkClosed(link: Link<M>, code: LinkCloseCode, detail: string): void;
  linkDrained(link: Link<M>): void;
}

export interface LinkOptions<M> {
  socket: Socket;
  direction: LinkDirection;
  expectations: HelloExpectations;
  secret: Uint8Array | string | undefined;
  maxFrameBytes: number;
  handshakeTimeoutMs: number;
  validate: (m: unknown) => m is M;
  /** The frame versions accepted after the handshake, and this link's decoder for them. */
  versions: readonly number[];
  decode: BodyDecoder;
  owner: LinkOwner<M>;
}

const REFUSED = Symbol('refused');

type Phase = 'handshake' | 'ready' | 'closed';

export class Link<M> {
  readonly socket: Socket;
  readonly direction: LinkDirection;
  /** The peer's hello, once received and accepted. */
  peer: Hello | undefined;
  /** The peer's hello as received, accepted or not (unauthenticated until the link is ready). */
  heard: Hello | undefined;
  private phase: Phase = 'handshake';
  private readonly opts: LinkOptions<M>;
  private readonly reader = new FrameReader(HANDSHAKE_FRAME_BYTES_MAX);
  // Handshake frames are msgpackr whatever the codec; each link has its own unpacker for them.
  private readonly unpacker = newUnpacker();
  private readonly nonce: Uint8Array | undefined;
  private readonly helloBody: Uint8Array;
  private peerHelloBody: Uint8Array | undefined;
  private proved = false;
  private wasReady = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(opts: LinkOptions<M>) {
    this.opts = opts;
    this.socket = opts.socket;
    this.direction = opts.direction;
    this.nonce = opts.secret === undefined ? undefined : randomBytes(NONCE_BYTES);
    this.helloBody = packBody(makeHello(opts.expectations.local, this.nonce));
    this.socket.setNoDelay(true);
    this.socket.on('data', this.onData);
    this.socket.on('error', this.onError);
    this.socket.on('close', this.onClose);
    this.socket.on('drain', this.onDrain);
    this.timer = setTimeout(this.onHandshakeTimeout, opts.handshakeTimeoutMs);
    // Written at once: on a dialed socket Node holds it until the connection is made.
    this.socket.write(encodeFrame(this.helloBody));
  }

  get ready(): boolean {
    return this.phase === 'ready';
  }

  /** True once the handshake completed, and still true after the link closes. */
  get established(): boolean {
    return this.wasReady;
  }

  get closed(): boolean {
    return this.phase === 'closed';
  }

  /** Writes one frame; false when the socket wants 'drain' before more. */
  write(frame: Uint8Array): boolean {
    return this.socket.write(frame);
  }

  close(code: LinkCloseCode, detail: string): void {
    if (this.phase === 'closed') return;
    this.phase = 'closed';
    clearTimeout(this.timer);
    this.socket.destroy();
    this.opts.owner.linkClosed(this, code, detail);
  }

  private readonly onData = (chunk: Buffer): void => {
    this.reader.push(chunk);
    while (this.phase !== 'closed') {
      const r = this.reader.next();
      if (r.t === 'more') return;
      if (r.t === 'error') this.close(r.code, r.detail);
      else if (this.phase === 'ready') this.receive(r.version, r.body);
      else this.handshakeFrame(r.body);
    }
  };

  private receive(version: number, body: Uint8Array): void {
    const value = this.decode(version, body);
    if (value === REFUSED) return;
    let valid = false;
    try {
      valid = this.opts.validate(value);
    } catch {
      valid = false; // a validator that chokes on untrusted input has refused it
    }
    if (valid) this.opts.owner.linkMessage(this, value as M);
    else this.close('message-invalid', 'message refused by validate');
  }

  /** The codec's decoded value, or REFUSED once the link is closed for the body. */
  private decode(version: number, body: Uint8Array): unknown {
    let value: unknown;
    try {
      value = this.opts.decode(version, body);
    } catch (err) {
      value = new BodyRefusal('body-not-msgpack', (err as Error).message); // a decoder that throws has refused
    }
    if (!(value instanceof BodyRefusal)) return value;
    this.close(value.code, value.detail);
    return REFUSED;
  }

  /** The reader accepts only FRAME_VERSION until the handshake is done. */
  private handshakeFrame(body: Uint8Array): void {
    const value = unpackBody(this.unpacker, body);
    if (value instanceof BodyRefusal) {
      this.close(value.code, value.detail);
      return;
    }
    const frame = parseHandshakeFrame(value);
    if (frame === undefined) {
      this.close('hello-invalid', 'expected a hello or proof frame');
      return;
    }
    switch (frame.t) {
      case 'hello':
        this.receiveHello(frame, body);
        break;
      case 'proof':
        this.receiveProof(frame.mac);
        break;
      default: {
        const _: never = frame;
        this.close('hello-invalid', `unknown handshake frame ${String(_)}`);
      }
    }
  }

  private receiveHello(hello: Hello, body: Uint8Array): void {
    this.heard ??= hello;
    const refusal =
      this.peer === undefined ? judgeHello(hello, this.opts.expectations) : { code: 'hello-invalid' as const, detail: 'second hello' };
    if (refusal !== undefined) {
      this.close(refusal.code, refusal.detail);
      return;
    }
    this.peer = hello;
    this.peerHelloBody = Uint8Array.from(body);
    const secret = this.opts.secret;
    if (secret !== undefined) {
      this.socket.write(encodeFrame(packBody({ t: 'proof', mac: proofMac(secret, hello.nonce!, this.helloBody) })));
    }
    this.maybeReady();
  }

  private receiveProof(mac: Uint8Array): void {
    const secret = this.opts.secret;
    if (secret === undefined || this.peer === undefined || this.proved) {
      this.close('hello-invalid', 'unexpected proof frame');
      return;
    }
    if (!proofMatches(proofMac(secret, this.nonce!, this.peerHelloBody!), mac)) {
      this.close('auth-failed', 'wrong HMAC answer to our challenge: is the cluster secret the same?');
      return;
    }
    this.proved = true;
    this.maybeReady();
  }

  private maybeReady(): void {
    if (this.peer === undefined || (this.opts.secret !== undefined && !this.proved)) return;
    this.phase = 'ready';
    this.wasReady = true;
    clearTimeout(this.timer);
    this.reader.setMaxFrameBytes(this.opts.maxFrameBytes);
    this.reader.setVersions(this.opts.versions);
    this.opts.owner.linkReady(this);
  }

  private readonly onError = (err: Error): void => this.close('socket-error', err.message);
  private readonly onClose = (): void => this.close('peer-closed', 'connection closed');
  private readonly onDrain = (): void => {
    if (this.phase === 'ready') this.opts.owner.linkDrained(this);
  };
  private readonly onHandshakeTimeout = (): void =>
    this.close('handshake-timeout', `no complete handshake within ${this.opts.handshakeTimeoutMs} ms`);
}
