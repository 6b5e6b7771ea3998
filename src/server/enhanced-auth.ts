// MQTT 5 enhanced authentication (§4.12): a method named by the client's Authentication Method
// runs a challenge/response exchange carried in Authentication Data, over CONNECT → AUTH 0x18 ... →
// CONNACK, and again over AUTH 0x19 → AUTH 0x18 ... → AUTH 0x00 for re-authentication (§4.12.1).
//
// Methods are synchronous: credentials are looked up in memory (a store loaded at start), so an
// exchange step costs no promise and keeps the connection's packet order simple. A method whose
// checks need I/O would load what it needs ahead of the exchange.
import { RC } from '../protocol/reason-codes.js';

/** One step of an exchange, as the method decides it. */
export type AuthStep =
  /** Send AUTH 0x18 with `data` and wait for the client's next AUTH 0x18. */
  | { k: 'continue'; data: Uint8Array; next: AuthExchange }
  /** Authenticated as `user`; `data` (the server's final message) goes in CONNACK or AUTH 0x00. */
  | { k: 'success'; user: string; data: Uint8Array | undefined }
  /** Refused: `reason` is a CONNACK reason code (RC.NOT_AUTHORIZED, RC.BAD_USER_NAME_OR_PASSWORD);
   * `why` is for the log only, never for the client; `user`: the identity the client claimed, when
   * the method got that far, for the failed-login backoff. */
  | { k: 'failure'; reason: number; why: string; user?: string };

/** The state of one exchange after the server's challenge. */
export interface AuthExchange {
  /** The client's next Authentication Data (absent when the AUTH carried none). */
  step(authData: Uint8Array | undefined): AuthStep;
}

/** A pluggable enhanced-authentication method (SCRAM-SHA-256 in scram.ts). */
export interface EnhancedAuthMethod {
  /** The Authentication Method string clients name, e.g. 'SCRAM-SHA-256'. */
  readonly name: string;
  /** A new exchange from the Authentication Data of CONNECT or of AUTH 0x19. */
  start(authData: Uint8Array | undefined): AuthStep;
}

/** The methods a node offers, by name. */
export function methodTable(methods: readonly EnhancedAuthMethod[] | undefined): ReadonlyMap<string, EnhancedAuthMethod> {
  const table = new Map<string, EnhancedAuthMethod>();
  for (const m of methods ?? []) table.set(m.name, m);
  return table;
}

/** Calls a method, turning a throw (a bug in a plug-in) into a refusal so that it costs one
 * connection, never the process. */
export function safeStep(run: () => AuthStep): AuthStep {
  try {
    return run();
  } catch (err) {
    return { k: 'failure', reason: RC.NOT_AUTHORIZED, why: `method threw: ${String(err)}` };
  }
}
