// What a connection needs from the byte stream under it, and what it knows about the peer. TCP,
// TLS and WebSocket streams all fit, so the broker's semantics are the same on every listener.

export type ListenerKind = 'mqtt' | 'mqtts' | 'ws' | 'wss';

/** The subset of a net.Socket a connection uses; tls.TLSSocket and WsByteStream provide it too. */
export interface ByteStream {
  on(event: 'data', listener: (chunk: Buffer) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  on(event: 'close', listener: () => void): unknown;
  /** The peer ended its side (TCP FIN); a stream that does not allow half-open connections ends
   * and closes by itself after it. */
  on(event: 'end', listener: () => void): unknown;
  /** After a write() that returned false: the output has drained and writing may go on. */
  on(event: 'drain', listener: () => void): unknown;
  /** Removes a listener added with on(). */
  off(event: 'data', listener: (chunk: Buffer) => void): unknown;
  off(event: 'error', listener: (err: Error) => void): unknown;
  off(event: 'close' | 'end' | 'drain', listener: () => void): unknown;
  pause(): unknown;
  resume(): unknown;
  /** One call per event-loop turn (for WebSocket: one binary frame). False: the output is over its
   * bound, and 'drain' follows once it is written out. */
  write(buf: Buffer): boolean;
  end(): unknown;
  destroy(): unknown;
  readonly destroyed: boolean;
  /** Bytes accepted by write() and not yet handed to the kernel. */
  readonly writableLength: number;
}

/** Where a connection came from. */
export interface Transport {
  kind: ListenerKind;
  /** The device's address: from the PROXY header when the listener has one, else the socket's. */
  remoteAddress: string;
  remotePort: number;
  /** The verified client certificate's identity (subject CN or first SAN, per --tls-identity),
   * or null when the client presented none. */
  certIdentity: string | null;
  /** --tls-require-client-id-match: a client with a certificate must use its identity as client id. */
  clientIdMustMatchIdentity: boolean;
}
