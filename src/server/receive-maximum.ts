// The inbound side of an MQTT 5 client's flow control (§4.9): the client may have at most the
// Receive Maximum we sent in CONNACK of QoS 1/2 publishes unanswered. A flow opens when its PUBLISH
// is read and ends when our answer is sent: PUBACK for QoS 1, PUBCOMP for QoS 2, or a PUBREC with
// an error code, which ends a QoS 2 flow at once [MQTT-4.3.3-8]. One more than the maximum is a
// protocol error (0x93). The replicated packet ids of QoS 2 flows awaiting PUBREL are a different
// thing: src/broker/qos2-receiver.ts.
//
// Plain functions over the Connection's `inbound` set (connection.ts), as inbound-publish.ts is.
import type { OutPacket } from '../broker/commands.js';
import { RC } from '../protocol/reason-codes.js';
import type { Connection } from './connection.js';

/** A QoS 1/2 PUBLISH with packet id `pid` was read: false when it exceeds `receiveMaximum`. */
export function openInboundFlow(conn: Connection, pid: number, receiveMaximum: number): boolean {
  conn.inbound ??= new Set();
  conn.inbound.add(pid);
  return conn.inbound.size <= receiveMaximum;
}

/** An answer to one of the client's publishes is being sent: the flows it ends are closed. */
export function answerSent(conn: Connection, p: Extract<OutPacket, { type: 'puback' | 'pubrec' | 'pubcomp' }>): void {
  if (p.type === 'pubrec' && p.code < RC.UNSPECIFIED_ERROR) return;
  conn.inbound?.delete(p.pid);
}
