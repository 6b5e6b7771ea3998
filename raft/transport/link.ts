// One TCP connection to a peer: handshake, then frames of opaque messages. A Link never throws on
// what the peer sends; every refusal closes the socket and reports a LinkCloseCode to its owner.
import { randomBytes } from 'node:crypto';
import type { Socket } from 'node:net';
import { Packr } from 'msgpackr';
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
  owner: LinkOwner<M>;
}

/** Encodes without saved record structures (DESIGN.md "Encoding"), so bytes depend only on the value. */
const encoder = new Packr({ useRecords: false, mapsAsObjects: true });

export function encodeBody(value: unknown): Uint8Array {
  return encoder.pack(value);
}

const NOT_MSGPACK = Symbol('not msgpack');

type Phase = 'handshake' | 'ready' | 'closed';

export class Link<M> {
  readonly socket: Socket;
  readonly direction: LinkDirection;
  /** The peer's hello, once received and accepted. */
  peer: Hello | undefined;
  private phase: Phase = 'handshake';
  private readonly opts: LinkOptions<M>;
  private readonly reader = new FrameReader(HANDSHAKE_FRAME_BYTES_MAX);
  // Each link decodes with its own Packr: msgpackr keeps record definitions it decodes, and one
  // peer's definitions must not change how another peer's bytes decode.
  private readonly decoder = new Packr({ useRecords: false, mapsAsObjects: true });
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
    this.helloBody = encodeBody(makeHello(opts.expectations.local, this.nonce));
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
      else if (this.phase === 'ready') this.receive(r.body);
      else this.handshakeFrame(r.body);
    }
  };

  private receive(body: Uint8Array): void {
    const value = this.decode(body);
    if (value === NOT_MSGPACK) return;
    let valid = false;
    try {
      valid = this.opts.validate(value);
    } catch {
      valid = false; // a validator that chokes on untrusted input has refused it
    }
    if (valid) this.opts.owner.linkMessage(this, value as M);
    else this.close('message-invalid', 'message refused by validate');
  }

  private decode(body: Uint8Array): unknown {
    try {
      return this.decoder.unpack(body);
    } catch (err) {
      this.close('body-not-msgpack', (err as Error).message);
      return NOT_MSGPACK;
    }
  }

  private handshakeFrame(body: Uint8Array): void {
    const value = this.decode(body);
    if (value === NOT_MSGPACK) return;
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
      this.socket.write(encodeFrame(encodeBody({ t: 'proof', mac: proofMac(secret, hello.nonce!, this.helloBody) })));
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
