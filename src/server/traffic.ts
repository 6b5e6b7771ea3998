// What one node's connections moved, as plain number fields bumped in place on the message path and
// read only by the metrics and $SYS collectors. Counters of this process: they start at 0 with it
// and never reset, so every reader sees totals that only grow.
import type { EventKind } from '../events.js';

export class Traffic {
  /** Bytes read from and written to client sockets (MQTT bytes; WebSocket framing excluded). */
  bytesIn = 0;
  bytesOut = 0;
  /** PUBLISH packets from clients, by QoS, and their payload bytes. */
  readonly publishIn = [0, 0, 0];
  readonly publishInBytes = [0, 0, 0];
  /** PUBLISH packets handed to client sockets, by delivered QoS, and their payload bytes. */
  readonly publishOut = [0, 0, 0];
  readonly publishOutBytes = [0, 0, 0];
  /** MQTT packets of any type read from and written to client connections. */
  packetsIn = 0;
  packetsOut = 0;
  /** Connections accepted past their transport handshake. */
  connectionsAccepted = 0;
  /** The most connections that held an admitted CONNECT at once. */
  connectedMax = 0;
  /** PUBLISH packets left until the next is offered as a latency probe (BrokerNode.probePublish). */
  probeCountdown = PROBE_EVERY;
}

/** One PUBLISH in this many is offered as a publish-to-delivery latency probe, and one probe is
 * timed at a time: the message path pays a decrement per PUBLISH, a comparison per delivery and
 * per flushed connection, and two clock reads per probe. */
export const PROBE_EVERY = 32;

/** The node events that are a message not delivered (raftmq_messages_dropped_total's reasons). */
export const DROP_EVENTS: readonly EventKind[] = [
  'queue-full',
  'qos0-dropped-slow-consumer',
  'too-large',
  'expired',
  'shared-dropped',
  'will-dropped',
  'limit-publish-rate',
];

export function sum(xs: readonly number[]): number {
  let n = 0;
  for (let i = 0; i < xs.length; i++) n += xs[i] as number;
  return n;
}
