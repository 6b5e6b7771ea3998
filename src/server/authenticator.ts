import type { ConnectPacket } from '../protocol/packets.js';
import { RC } from '../protocol/reason-codes.js';
import type { Transport } from './transport.js';

/** The outcome of checking a CONNECT. `reason` is an MQTT 5 CONNACK reason code (RC.*); a 3.1.1
 * connection maps it with connackReturnCode(). */
export type AuthResult = { ok: true } | { ok: false; reason: number };

/** Decides whether a CONNECT may proceed. Authentication stays local to the serving node
 * (docs/design.md "The seam"); a synchronous answer costs no promise, an asynchronous one (a password
 * file lookup, an external service) pauses the connection until it settles. */
export interface Authenticator {
  /** `connect.username` is already the certificate identity when `transport.certIdentity` is set
   * (the certificate was verified against --tls-ca during the handshake). */
  authenticate(connect: ConnectPacket, remoteAddress: string, transport: Transport): AuthResult | Promise<AuthResult>;
  /** The failed-login backoff of this authenticator, which enhanced authentication (SCRAM) shares,
   * so a guesser gains nothing by switching method. */
  readonly loginThrottle?: LoginThrottle;
}

/** Failed-login backoff per source address and per user name (src/server/auth/auth-throttle.ts). */
export interface LoginThrottle {
  /** Milliseconds left of the backoff of this address or user; 0: may try now. A positive answer
   * is counted as throttled. `user` null: not yet known. */
  blocked(address: string, user: string | null): number;
  /** Records and counts a failed login; returns the delay before its refusal goes out. */
  failed(address: string, user: string | null): number;
  succeeded(address: string, user: string): void;
}

const OK: AuthResult = { ok: true };
const BAD_METHOD: AuthResult = { ok: false, reason: RC.BAD_AUTHENTICATION_METHOD };

/** Accepts every client. MQTT 5 enhanced authentication is not offered, so a CONNECT that names an
 * Authentication Method is refused with 0x8C [MQTT-4.12.0-1]. */
export const allowAll: Authenticator = {
  authenticate(connect) {
    return connect.props.authMethod === undefined ? OK : BAD_METHOD;
  },
};
