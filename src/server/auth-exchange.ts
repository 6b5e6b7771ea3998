// The protocol rules of enhanced authentication for one connection (§4.12), apart from the
// connection's I/O: which AUTH is allowed when, what the server answers, and when it refuses.
// Connection-scoped: nothing of it is replicated (docs/design.md "The seam").
import type { AuthPacket, ConnectPacket } from '../protocol/packets.js';
import { RC } from '../protocol/reason-codes.js';
import { type AuthExchange, type AuthStep, type EnhancedAuthMethod, safeStep } from './enhanced-auth.js';

/** What the connection does next. */
export type AuthAction =
  /** Send AUTH `code` (0x18 continue, 0x00 re-authentication success) with the method and `data`. */
  | { k: 'send'; code: number; data: Uint8Array | undefined }
  /** The first authentication succeeded: propose the CONNECT as `user`, CONNACK carries `data`. */
  | { k: 'authenticated'; user: string; data: Uint8Array | undefined }
  /** Before CONNACK: refuse the CONNECT with this CONNACK reason code. `login`: the method refused
   * the credentials (a failed login, counted by the backoff), not the protocol. */
  | { k: 'refuse'; reason: number; why: string; login?: FailedLogin }
  /** After CONNACK: DISCONNECT with this reason code; `login` as for refuse. */
  | { k: 'disconnect'; reason: number; why: string; login?: FailedLogin };

/** A login the method refused; user: the identity claimed, null when the method did not get it. */
export interface FailedLogin {
  user: string | null;
}

export class EnhancedAuthState {
  /** The method agreed at CONNECT; fixed for the connection [MQTT-4.12.1-1]. */
  readonly method: EnhancedAuthMethod;
  /** The exchange waiting for the client's next AUTH 0x18, if any. */
  private pending: AuthExchange | null = null;
  /** The identity of the first authentication; a re-authentication must prove the same one. */
  private user: string | null = null;

  private constructor(method: EnhancedAuthMethod) {
    this.method = method;
  }

  /** For a CONNECT naming an Authentication Method: the state and the first action. A method the
   * broker does not offer is refused with 0x8C [MQTT-4.12.0-1 / §3.2.2.2]. */
  static begin(
    c: ConnectPacket,
    methods: ReadonlyMap<string, EnhancedAuthMethod>,
  ): { state: EnhancedAuthState | null; action: AuthAction } {
    const name = c.props.authMethod as string;
    const method = methods.get(name);
    if (method === undefined)
      return { state: null, action: { k: 'refuse', reason: RC.BAD_AUTHENTICATION_METHOD, why: `method ${name} not offered` } };
    const state = new EnhancedAuthState(method);
    const data = c.props.authData;
    return { state, action: state.first(safeStep(() => method.start(data))) };
  }

  /** True while the first authentication waits for the client's AUTH. */
  get connecting(): boolean {
    return this.user === null;
  }

  /** An AUTH from the client, before CONNACK (`connected` false) or after it. */
  onAuth(p: AuthPacket, connected: boolean): AuthAction {
    const fail = connected ? 'disconnect' : 'refuse';
    if (p.props.authMethod !== this.method.name) {
      // [MQTT-4.12.0-5 / MQTT-4.12.1-1]: every AUTH names the method of the CONNECT.
      return { k: fail, reason: RC.PROTOCOL_ERROR, why: `AUTH method ${p.props.authMethod ?? '(none)'}` };
    }
    const data = p.props.authData;
    if (p.code === RC.CONTINUE_AUTHENTICATION && this.pending !== null) {
      const exchange = this.pending;
      this.pending = null;
      const step = safeStep(() => exchange.step(data));
      return connected ? this.again(step) : this.first(step);
    }
    if (p.code === RC.REAUTHENTICATE && connected && this.pending === null) {
      // [MQTT-4.12.1-1]: re-authentication starts with AUTH 0x19 after CONNACK.
      return this.again(safeStep(() => this.method.start(data)));
    }
    return { k: fail, reason: RC.PROTOCOL_ERROR, why: `AUTH 0x${p.code.toString(16)} out of sequence` };
  }

  private first(step: AuthStep): AuthAction {
    switch (step.k) {
      case 'continue':
        this.pending = step.next;
        return { k: 'send', code: RC.CONTINUE_AUTHENTICATION, data: step.data };
      case 'success':
        this.user = step.user;
        return { k: 'authenticated', user: step.user, data: step.data };
      case 'failure':
        return { k: 'refuse', reason: step.reason, why: step.why, login: { user: step.user ?? null } };
      default: {
        const _: never = step;
        return _;
      }
    }
  }

  private again(step: AuthStep): AuthAction {
    switch (step.k) {
      case 'continue':
        this.pending = step.next;
        return { k: 'send', code: RC.CONTINUE_AUTHENTICATION, data: step.data };
      case 'success':
        if (step.user !== this.user) {
          return { k: 'disconnect', reason: RC.NOT_AUTHORIZED, why: 're-authenticated as another user' };
        }
        return { k: 'send', code: RC.SUCCESS, data: step.data };
      case 'failure':
        // DISCONNECT has no 0x86, so every re-authentication failure is Not Authorized (§3.14.2.1).
        return { k: 'disconnect', reason: RC.NOT_AUTHORIZED, why: step.why, login: { user: step.user ?? null } };
      default: {
        const _: never = step;
        return _;
      }
    }
  }
}
