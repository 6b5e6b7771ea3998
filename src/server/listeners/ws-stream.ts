// A WebSocket as a ByteStream: MQTT bytes travel in binary frames [MQTT-6.0.0-1], one frame per
// write (the connection writes once per event-loop turn), and reading pauses while the socket's
// outbound buffer is above a bound, so a peer that does not read cannot make us buffer without end.
import { EventEmitter } from 'node:events';
import type WebSocket from 'ws';
import type { ByteStream } from '../transport.js';

/** Outbound bytes above which reading from the peer pauses, and below which it resumes. */
export const WS_PAUSE_ABOVE_BYTES = 1024 * 1024;
export const WS_RESUME_BELOW_BYTES = 256 * 1024;
/** Close codes (RFC 6455 §7.4.1). */
const WS_CLOSE_NORMAL = 1000;
const WS_CLOSE_UNSUPPORTED_DATA = 1003;

export class WsByteStream extends EventEmitter implements ByteStream {
  private readonly ws: WebSocket;
  /** Paused by the connection (log over its bound, closing, authenticating). */
  private userPaused = false;
  /** Paused because our outbound buffer to this peer is high. */
  private backpressured = false;
  private gone = false;
  private readonly onSentBound = (): void => this.onSent();

  constructor(ws: WebSocket) {
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

  write(buf: Buffer): boolean {
    if (this.ws.readyState !== this.ws.OPEN) return false;
    this.ws.send(buf, { binary: true }, this.onSentBound);
    if (!this.backpressured && this.ws.bufferedAmount > WS_PAUSE_ABOVE_BYTES) {
      this.backpressured = true;
      this.apply();
    }
    return true;
  }

  private onSent(): void {
    if (this.backpressured && this.ws.bufferedAmount < WS_RESUME_BELOW_BYTES) {
      this.backpressured = false;
      this.apply();
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
    if (this.userPaused || this.backpressured) this.ws.pause();
    else this.ws.resume();
  }

  end(): this {
    // The closing handshake needs the peer's close frame read, even if the connection paused
    // reading; the connection ignores any data that still arrives.
    this.userPaused = false;
    this.backpressured = false;
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
