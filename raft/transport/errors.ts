// Stable codes for everything the transport reports (STYLE.md: one registry, tests assert the code).
// These may move into raft/errors.ts once that registry exists.

/** Why a link was closed. Each is logged with the peer address; none reaches onMessage. */
export type LinkCloseCode =
  | 'frame-oversize' // length prefix above the bound, refused before the body is buffered
  | 'frame-empty' // length 0: no room for the version byte
  | 'frame-version' // version byte is not FRAME_VERSION
  | 'body-not-msgpack'
  | 'message-invalid' // decoded, but the caller's validate refused it
  | 'hello-invalid' // handshake frame of the wrong shape
  | 'cluster-mismatch'
  | 'epoch-refused' // the caller's epoch comparison refused the peer's epoch
  | 'node-unexpected' // not the dialed peer, or not a configured peer
  | 'auth-missing' // we hold a secret and the peer sent no challenge
  | 'auth-unexpected' // the peer sent a challenge and we hold no secret
  | 'auth-failed' // wrong HMAC answer
  | 'handshake-timeout'
  | 'superseded' // a newer inbound link from the same node replaced this one
  | 'socket-error'
  | 'peer-closed'
  | 'stopped';

export type TransportErrorCode = 'ERR_TRANSPORT_LISTEN' | 'ERR_TRANSPORT_CONFIG' | 'ERR_TRANSPORT_STATE';

export class TransportError extends Error {
  readonly code: TransportErrorCode;
  constructor(code: TransportErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'TransportError';
    this.code = code;
  }
}
