// Stable codes for everything the transport reports: one registry, tests assert the code;
// docs/errors.md lists every code.

/** Why a link was closed. Each is logged with the peer address; none reaches onMessage. */
export type LinkCloseCode =
  | 'frame-oversize' // length prefix above the bound, refused before the body is buffered
  | 'frame-empty' // length 0: no room for the version byte
  | 'frame-version' // version byte not accepted: FRAME_VERSION in the handshake, the codec's after
  | 'body-not-msgpack'
  | 'body-malformed' // the codec's own layout refused the body: a length, count or value out of bounds
  | 'message-invalid' // decoded, but the caller's validate refused it
  | 'hello-invalid' // handshake frame of the wrong shape
  | 'cluster-mismatch'
  | 'identity-mismatch' // both sides know a cluster identity (made at bootstrap) and they differ
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

/** Stable codes in the style of raft/errors.ts (RaftErrorCodes); they may move there. Tests compare
 * codes, never message text. */
export const TransportErrorCodes = {
  /** The peer listen address could not be bound: most often another process of this node id. */
  RAFT_TRANSPORT_LISTEN: 'cannot listen for peers',
  /** Options given to the transport are out of range. */
  RAFT_TRANSPORT_BAD_OPTIONS: 'bad transport options',
  /** A method was called in a state that does not allow it (start twice, address before start). */
  RAFT_TRANSPORT_STATE: 'transport not in a state for this',
} as const;

export type TransportErrorCode = keyof typeof TransportErrorCodes;

export class TransportError extends Error {
  readonly code: TransportErrorCode;
  constructor(code: TransportErrorCode, detail: string, options?: { cause?: unknown }) {
    super(`${TransportErrorCodes[code]}: ${detail}`, options);
    this.name = 'TransportError';
    this.code = code;
  }
}
