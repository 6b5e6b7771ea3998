// The receiver side of QoS 2 in the replicated state (MQTT 5 §4.3.3, method B): a session holds
// the packet id of each inbound QoS 2 PUBLISH that it answered with a successful PUBREC, until the
// publisher's PUBREL releases it. The message is routed when its PUBLISH is applied, once; a PUBLISH
// whose id is held was routed already and is only answered again, so a publisher that re-sends
// after a lost PUBREC, or after a failover, never has its message delivered twice
// (docs/guarantees.md). The connection's count of unanswered inbound publishes (Receive Maximum) is
// a different thing and lives in src/server/receive-maximum.ts.
//
// The functions change the session in place: the caller has made it its own first (Broker.cow).
import { RC } from '../protocol/reason-codes.js';
import type { Session } from './session.js';

/** A PUBLISH with this id belongs to a flow awaiting PUBREL: it was routed already, and is
 * answered with PUBREC again [MQTT-4.3.3-10]. */
export function isHeld(s: Session | undefined, pid: number): boolean {
  return s?.inbound?.has(pid) === true;
}

/** A QoS 1 PUBLISH of an MQTT 5 client that reuses an id still held by a QoS 2 flow: the session
 * states differ [MQTT-2.2.1-3], so it is refused with 0x91 and not routed (§3.4.2.1). A 3.1.1
 * client has no such reason code; its publish goes on as usual. */
export function qos1ReusesHeldId(s: Session | undefined, pid: number): boolean {
  return s !== undefined && s.protocol === 5 && isHeld(s, pid);
}

/** After the PUBREC of a routed QoS 2 PUBLISH: a PUBREC with an error code ends the flow
 * [MQTT-4.3.3-8], so only a success holds the id. */
export function holdAfterPubrec(s: Session, pid: number, pubrecCode: number): void {
  if (pubrecCode >= RC.UNSPECIFIED_ERROR) return;
  s.inbound ??= new Set();
  s.inbound.add(pid);
}

/** PUBREL releases the held id [MQTT-4.3.3-12]; returns the code of the PUBCOMP that answers it:
 * 0x92 Packet Identifier not found when nothing was held (MQTT 5 only; 3.1.1 has no reason code). */
export function releaseOnPubrel(s: Session, pid: number): number {
  const held = s.inbound?.delete(pid) === true;
  return held || s.protocol < 5 ? RC.SUCCESS : RC.PACKET_IDENTIFIER_NOT_FOUND;
}
