// The Authenticator over an embedding application's `authenticate` hook (src/index.ts): the hook
// gets the CONNECT's identity and answers true, false or a CONNACK reason code, at once or with a
// promise. It runs on the serving node before the connect is proposed; the connection reads
// nothing further until it answers (src/server/connect-phase.ts pauses it), so its packets keep their
// order. docs/operations.md "Embedding raftmq" documents the answers and the timeout.
import type { ConnectPacket } from '../../protocol/packets.js';
import { RC } from '../../protocol/reason-codes.js';
import type { Authenticator, AuthResult } from '../authenticator.js';
import type { ListenerKind, Transport } from '../transport.js';
import { describeAnswer, settleHook } from './hook-answer.js';
import type { AuthCounters } from './password-authenticator.js';

/** What the hook is told of a CONNECT. */
export interface AuthenticateRequest {
  /** As sent; empty when the client asked the broker to assign one. */
  clientId: string;
  /** The verified certificate's identity when the client presented one, else as sent. */
  username: string | null;
  password: Buffer | null;
  remoteAddress: string;
  remotePort: number;
  /** 3 (MQTT 3.1), 4 (3.1.1) or 5. */
  protocolVersion: number;
  listener: ListenerKind;
  certIdentity: string | null;
}

/** true: allowed; false: refused with 0x87 Not authorized; `{ reasonCode }`: refused with that
 * CONNACK reason code (one of REFUSAL_CODES; 3.1.1 clients get the nearest return code). */
export type AuthenticateAnswer = boolean | { reasonCode: number };
export type AuthenticateHook = (request: AuthenticateRequest) => AuthenticateAnswer | Promise<AuthenticateAnswer>;

/** The CONNACK reason codes a hook may refuse with. */
export const REFUSAL_CODES: ReadonlySet<number> = new Set([
  RC.UNSPECIFIED_ERROR,
  RC.IMPLEMENTATION_SPECIFIC_ERROR,
  RC.CLIENT_IDENTIFIER_NOT_VALID,
  RC.BAD_USER_NAME_OR_PASSWORD,
  RC.NOT_AUTHORIZED,
  RC.SERVER_UNAVAILABLE,
  RC.SERVER_BUSY,
  RC.BANNED,
  RC.CONNECTION_RATE_EXCEEDED,
]);

/** A hook that does not answer within its timeout: refused with 0x88 Server unavailable (3.1.1:
 * return code 3), since nothing was decided and the client may try again. */
export const HOOK_TIMEOUT: AuthResult = { ok: false, reason: RC.SERVER_UNAVAILABLE };
const OK: AuthResult = { ok: true };
const DENIED: AuthResult = { ok: false, reason: RC.NOT_AUTHORIZED };

export function requestOf(c: ConnectPacket, remoteAddress: string, t: Transport): AuthenticateRequest {
  return {
    clientId: c.clientId,
    username: c.username,
    password: c.password === null ? null : Buffer.from(c.password.buffer, c.password.byteOffset, c.password.byteLength),
    remoteAddress,
    remotePort: t.remotePort,
    protocolVersion: c.level,
    listener: t.kind,
    certIdentity: t.certIdentity,
  };
}

export class HookAuthenticator implements Authenticator {
  constructor(
    private readonly hook: AuthenticateHook,
    private readonly timeoutMs: number,
    private readonly counters: AuthCounters,
  ) {}

  authenticate(c: ConnectPacket, remoteAddress: string, t: Transport): AuthResult | Promise<AuthResult> {
    return settleHook(() => this.hook(requestOf(c, remoteAddress, t)), this.timeoutMs, {
      decide: (a) => this.decide(c, a),
      failed: (problem) => this.failed(c, problem),
      timedOut: () => {
        this.counters.event('auth-hook-timeout', { clientId: c.clientId, timeoutMs: this.timeoutMs });
        return HOOK_TIMEOUT;
      },
    });
  }

  private decide(c: ConnectPacket, a: AuthenticateAnswer): AuthResult {
    if (a === true) return OK;
    if (a === false) {
      this.counters.event('auth-hook-denied', { clientId: c.clientId, reason: RC.NOT_AUTHORIZED });
      return DENIED;
    }
    if (typeof a === 'object' && a !== null && REFUSAL_CODES.has(a.reasonCode)) {
      this.counters.event('auth-hook-denied', { clientId: c.clientId, reason: a.reasonCode });
      return { ok: false, reason: a.reasonCode };
    }
    return this.failed(c, `answered ${describeAnswer(a)}, not true, false or { reasonCode } with a CONNACK refusal code`);
  }

  /** A hook that throws, rejects or answers nonsense refuses the CONNECT with 0x88: its fault,
   * not the client's. */
  private failed(c: ConnectPacket, problem: string): AuthResult {
    this.counters.event('auth-hook-error', { clientId: c.clientId, problem });
    return HOOK_TIMEOUT;
  }
}
