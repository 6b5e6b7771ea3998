// A WebSocket as a ByteStream: MQTT bytes travel in binary frames [MQTT-6.0.0-1], one frame per
// write (the connection writes once per event-loop turn). Like a net.Socket, write() returns false
// while the outbound buffer is above a bound and 'drain' follows when it is low again; the
// connection then pauses reading, so a peer that does not read cannot make us buffer without end.
import { EventEmitter } from 'node:events';
import type WebSocket from 'ws';
import type { ByteStream } from '../transport.js';

/** 'drain' comes when the outbound buffer is below this fraction of its bound. */
const DRAIN_BELOW_FRACTION = 4;
/** Close codes (RFC 6455 §7.4.1). */
const WS_CLOSE_NORMAL = 1000;
const WS_CLOSE_UNSUPPORTED_DATA = 1003;

export class WsByteStream extends EventEmitter implements ByteStream {
  private readonly ws: WebSocket;
  /** Paused by the connection (log over its bound, closing, authenticating). */
  private userPaused = false;
  /** Our outbound buffer to this peer went over the bound; 'drain' is owed. */
  private backpressured = false;
  private gone = false;
  private readonly onSentBound = (): void => this.onSent();

  constructor(
    ws: WebSocket,
    private readonly fullAboveBytes: number,
  ) {
    super();
    this.ws = ws;
    ws.binaryType = 'nodebuffer';
    ws.on('message', (data: Buffer, isBinary: boolean) => this.onMessage(data, isBinary));
    ws.on('error', (err: Error) => this.emit('error', err));
    ws.on('close', () => {
      this.gone = true;
      this.emit('close');
    });
  }

  get destroyed(): boolean {
    return this.gone || this.ws.readyState === this.ws.CLOSED;
  }

  get writableLength(): number {
    return this.ws.bufferedAmount;
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    if (!isBinary) {
      // [MQTT-6.0.0-1]: a text frame is not MQTT; the network connection is closed.
      this.emit('error', new Error('WebSocket text frame'));
      this.ws.close(WS_CLOSE_UNSUPPORTED_DATA);
      return;
    }
    this.emit('data', data);
  }

  /** `done`, when given, is called once the frame is written out (or with the error that ended it). */
  write(buf: Buffer, done?: (err?: Error | null) => void): boolean {
    if (this.ws.readyState !== this.ws.OPEN) return false;
    this.ws.send(
      buf,
      { binary: true },
      done === undefined
        ? this.onSentBound
        : (err) => {
            this.onSent();
            done(err);
          },
    );
    if (this.ws.bufferedAmount > this.fullAboveBytes) this.backpressured = true;
    return !this.backpressured;
  }

  private onSent(): void {
    if (this.backpressured && this.ws.bufferedAmount < this.fullAboveBytes / DRAIN_BELOW_FRACTION) {
      this.backpressured = false;
      this.emit('drain');
    }
  }

  pause(): this {
    this.userPaused = true;
    this.apply();
    return this;
  }

  resume(): this {
    this.userPaused = false;
    this.apply();
    return this;
  }

  private apply(): void {
    if (this.ws.readyState !== this.ws.OPEN) return;
    if (this.userPaused) this.ws.pause();
    else this.ws.resume();
  }

  end(): this {
    // The closing handshake needs the peer's close frame read, even if the connection paused
    // reading; the connection ignores any data that still arrives.
    this.userPaused = false;
    this.apply();
    if (this.ws.readyState === this.ws.OPEN || this.ws.readyState === this.ws.CONNECTING) this.ws.close(WS_CLOSE_NORMAL);
    return this;
  }

  destroy(): this {
    this.gone = true;
    this.ws.terminate();
    return this;
  }
}
