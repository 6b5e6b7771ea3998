// Every event a node counts and logs, with the level of its log line, in one table. Apply emits
// the broker's events as effects (src/broker/deliver.ts `event`), the node and its connections emit
// the rest (BrokerNode.event); each is counted under its kind (the stats line, /metrics by reason,
// $SYS) and logged through the rate-limited logger at its level. A kind not in this table does not
// compile. Broken invariants are errors; refused or dropped work is a warning; the rest is routine.
// Protocol errors are counted apart, under `protocol-error:KEY` (BrokerNode.protocolError).

export type EventLevel = 'debug' | 'info' | 'warn' | 'error';

export const EVENT_LEVELS = {
  // apply (src/broker): the replicated state's own judgements
  'acl-denied': 'warn',
  'acl-denied-subscribe': 'warn',
  expired: 'info',
  'failover-ended': 'info',
  invariant: 'error',
  'no-op': 'warn',
  'packet-id-fence': 'info',
  'packet-id-in-use': 'info',
  'publish-quota-exceeded': 'info',
  'queue-full': 'warn',
  'session-expired': 'info',
  'shared-dropped': 'warn',
  'shared-redelivered': 'info',
  takeover: 'info',
  'too-large': 'warn',
  'will-cancelled': 'info',
  'will-dropped': 'warn',
  'will-published': 'info',
  // bridges (src/broker/bridge-outbox.ts, src/server/bridge)
  'bridge-down': 'debug',
  'bridge-in-bad-topic': 'warn',
  'bridge-in-no-rule': 'warn',
  'bridge-in-too-large': 'warn',
  'bridge-outbox-expired': 'info',
  'bridge-outbox-full': 'warn',
  'bridge-outbox-refused': 'warn',
  'bridge-outbox-removed': 'warn',
  'bridge-protocol-error': 'warn',
  'bridge-refused-by-remote': 'warn',
  'bridge-subscribe-refused': 'warn',
  'bridge-too-large': 'warn',
  // authentication and authorization (src/server/auth)
  'auth-anonymous-refused': 'warn',
  'auth-failed': 'warn',
  'auth-hook-denied': 'info',
  'auth-hook-error': 'warn',
  'auth-hook-timeout': 'warn',
  'auth-http-busy': 'warn',
  'auth-http-failed': 'warn',
  'auth-http-malformed': 'warn',
  'auth-http-status': 'warn',
  'auth-http-timeout': 'warn',
  'auth-throttled': 'warn',
  'authz-hook-denied': 'info',
  'authz-hook-error': 'warn',
  'authz-hook-timeout': 'warn',
  'enhanced-auth-ok': 'info',
  // connections (src/server/connection.ts and its phase modules)
  'connack-too-large-for-client': 'info',
  'connect-refused': 'info',
  'connect-wrong-shard': 'info',
  'connect-timeout': 'info',
  'keepalive-timeout': 'info',
  'packet-too-large-for-client': 'info',
  'payload-format-invalid': 'info',
  'qos0-dropped-slow-consumer': 'warn',
  'reads-paused-slow-consumer': 'warn',
  'response-info-omitted': 'info',
  'shard-assign-failed': 'warn',
  'socket-error': 'info',
  'sys-publish-refused': 'warn',
  // node limits (src/server/limits.ts, src/server/disk-space.ts)
  'limit-connect-rate': 'warn',
  'limit-max-connections': 'warn',
  'limit-pending-connections': 'warn',
  'limit-publish-rate': 'warn',
  'limit-storage-low': 'info',
  'limit-topic': 'warn',
  // the node (src/server/broker-node.ts, src/server/outbox.ts)
  'check-match': 'debug',
  'check-unknown': 'debug',
  'digest-mismatch': 'error',
  'digest-run': 'debug',
  'digest-skipped': 'info',
  'flush-continued': 'debug',
  'reads-paused': 'warn',
  'snapshot-deferred': 'debug',
  'stale-deadline': 'warn',
  'tls-reload-failed': 'info',
  // scale-out (src/scale/shard-link.ts): the shard's NATS connection and its routes
  'forward-failed': 'warn',
  'nats-connect-failed': 'warn',
  'shard-list-differs': 'error',
  'nats-disconnected': 'warn',
  'route-refused': 'warn',
  'route-stale': 'warn',
  'route-too-long': 'warn',
  'route-write-failed': 'warn',
  'shard-outbox-refused': 'warn',
  'shard-in-gap': 'info',
  'shard-in-repeat': 'info',
  'forward-in-refused': 'warn',
} as const satisfies Record<string, EventLevel>;

export type EventKind = keyof typeof EVENT_LEVELS;

/** Sockets refused before they are connections (src/server/listeners, src/server/referrer.ts),
 * counted under these keys and logged at warn (BrokerNode.refused). */
export const REFUSAL_KEYS = [
  'proxy-malformed',
  'proxy-timeout',
  'referral-not-connect',
  'tls-certificate-refused',
  'tls-handshake-refused',
  'ws-no-subprotocol',
  'ws-wrong-path',
] as const;
export type RefusalKey = (typeof REFUSAL_KEYS)[number];

/** What a node's counters are keyed by: events, refusals and protocol errors by their key. */
export type CounterKey = EventKind | RefusalKey | `protocol-error:${string}`;

/** Where events go: counted and logged (BrokerNode.event). */
export interface EventSink {
  event(kind: EventKind, fields?: Record<string, unknown>): void;
}

export function eventLevel(kind: EventKind): EventLevel {
  return EVENT_LEVELS[kind];
}
