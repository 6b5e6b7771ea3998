// The embedding application's authorization hooks (src/index.ts): `authorizePublish` decides each
// client PUBLISH and each will at CONNECT, `authorizeSubscribe` each filter of a SUBSCRIBE. They run
// on the serving node before anything is proposed, so every replica applies only what was allowed
// and apply stays deterministic; the ACL file (src/broker/acl.ts) still applies after them. A
// connection whose hook answers with a promise reads nothing further until it settles
// (src/server/connection.ts), so its packets keep their order. docs/operations.md "Embedding
// raftmq" documents the answers.

import type { EventKind } from '../../events.js';
import type { QoS } from '../../protocol/packets.js';
import { RC } from '../../protocol/reason-codes.js';
import { describeAnswer, settleHook } from './hook-answer.js';

export interface AuthorizePublishRequest {
  clientId: string;
  /** The verified certificate's identity when the client presented one, else as sent. */
  username: string | null;
  /** After Topic Alias resolution. */
  topic: string;
  payload: Buffer;
  qos: QoS;
  retain: boolean;
  /** true: the will of a CONNECT, decided before the CONNECT is proposed. */
  will: boolean;
}

export interface AuthorizeSubscribeRequest {
  clientId: string;
  username: string | null;
  /** As sent, `$share/GROUP/` included. */
  filter: string;
  qos: QoS;
}

/** true: allowed; false: refused with 0x87 Not authorized; `{ reasonCode }`: refused with that
 * code (one of PUBLISH_REFUSAL_CODES). */
export type AuthorizePublishAnswer = boolean | { reasonCode: number };
/** As AuthorizePublishAnswer (SUBSCRIBE_REFUSAL_CODES), or `{ qos }`: granted at that QoS, at most
 * the one asked for. */
export type AuthorizeSubscribeAnswer = boolean | { reasonCode: number } | { qos: QoS };
export type AuthorizePublishHook = (request: AuthorizePublishRequest) => AuthorizePublishAnswer | Promise<AuthorizePublishAnswer>;
export type AuthorizeSubscribeHook = (request: AuthorizeSubscribeRequest) => AuthorizeSubscribeAnswer | Promise<AuthorizeSubscribeAnswer>;

/** PUBACK/PUBREC reason codes a publish hook may refuse with (§3.4.2.1); a will refused gets the
 * same code on its CONNACK, which has each of them too (§3.2.2.2). */
export const PUBLISH_REFUSAL_CODES: ReadonlySet<number> = new Set([
  RC.UNSPECIFIED_ERROR,
  RC.IMPLEMENTATION_SPECIFIC_ERROR,
  RC.NOT_AUTHORIZED,
  RC.TOPIC_NAME_INVALID,
  RC.QUOTA_EXCEEDED,
  RC.PAYLOAD_FORMAT_INVALID,
]);

/** SUBACK reason codes a subscribe hook may refuse with (§3.9.3). */
export const SUBSCRIBE_REFUSAL_CODES: ReadonlySet<number> = new Set([
  RC.UNSPECIFIED_ERROR,
  RC.IMPLEMENTATION_SPECIFIC_ERROR,
  RC.NOT_AUTHORIZED,
  RC.TOPIC_FILTER_INVALID,
  RC.QUOTA_EXCEEDED,
  RC.SHARED_SUBSCRIPTIONS_NOT_SUPPORTED,
  RC.SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED,
  RC.WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED,
]);

/** What the connection does with a hook's answer. `failed`: the hook threw, rejected, timed out or
 * answered nonsense, so nothing was decided about the client; `reason` is what it is told. */
export type Authorization = { ok: true; qos: QoS } | { ok: false; reason: number; failed: boolean };

const FAILED: Authorization = { ok: false, reason: RC.UNSPECIFIED_ERROR, failed: true };

export interface AuthorizerEvents {
  event(kind: EventKind, fields?: Record<string, unknown>): void;
}

export class HookAuthorizer {
  constructor(
    private readonly publishHook: AuthorizePublishHook | null,
    private readonly subscribeHook: AuthorizeSubscribeHook | null,
    private readonly timeoutMs: number,
    private readonly events: AuthorizerEvents,
  ) {}

  get decidesPublish(): boolean {
    return this.publishHook !== null;
  }

  get decidesSubscribe(): boolean {
    return this.subscribeHook !== null;
  }

  publish(r: AuthorizePublishRequest): Authorization | Promise<Authorization> {
    const hook = this.publishHook;
    if (hook === null) return { ok: true, qos: r.qos };
    return settleHook(() => hook(r), this.timeoutMs, {
      decide: (a) => {
        if (a === true) return { ok: true, qos: r.qos };
        const reason = a === false ? RC.NOT_AUTHORIZED : refusalCode(a, PUBLISH_REFUSAL_CODES);
        if (reason === null) return this.failed('publish', r.clientId, `answered ${describeAnswer(a)}, not true, false or { reasonCode }`);
        this.events.event('authz-hook-denied', { clientId: r.clientId, topic: r.topic, will: r.will, reason });
        return { ok: false, reason, failed: false };
      },
      failed: (problem) => this.failed('publish', r.clientId, problem),
      timedOut: () => this.timedOut('publish', r.clientId),
    });
  }

  subscribe(r: AuthorizeSubscribeRequest): Authorization | Promise<Authorization> {
    const hook = this.subscribeHook;
    if (hook === null) return { ok: true, qos: r.qos };
    return settleHook(() => hook(r), this.timeoutMs, {
      decide: (a) => {
        if (a === true) return { ok: true, qos: r.qos };
        if (typeof a === 'object' && a !== null && 'qos' in a && !('reasonCode' in a)) {
          const q = a.qos;
          if (q === 0 || q === 1 || q === 2) return { ok: true, qos: Math.min(q, r.qos) as QoS };
        }
        const reason = a === false ? RC.NOT_AUTHORIZED : refusalCode(a, SUBSCRIBE_REFUSAL_CODES);
        if (reason === null) {
          return this.failed('subscribe', r.clientId, `answered ${describeAnswer(a)}, not true, false, { reasonCode } or { qos }`);
        }
        this.events.event('authz-hook-denied', { clientId: r.clientId, filter: r.filter, reason });
        return { ok: false, reason, failed: false };
      },
      failed: (problem) => this.failed('subscribe', r.clientId, problem),
      timedOut: () => this.timedOut('subscribe', r.clientId),
    });
  }

  private failed(hook: string, clientId: string, problem: string): Authorization {
    this.events.event('authz-hook-error', { hook, clientId, problem });
    return FAILED;
  }

  private timedOut(hook: string, clientId: string): Authorization {
    this.events.event('authz-hook-timeout', { hook, clientId, timeoutMs: this.timeoutMs });
    return FAILED;
  }
}

function refusalCode(a: unknown, allowed: ReadonlySet<number>): number | null {
  if (typeof a !== 'object' || a === null || !('reasonCode' in a)) return null;
  const code = (a as { reasonCode: unknown }).reasonCode;
  return typeof code === 'number' && allowed.has(code) ? code : null;
}
