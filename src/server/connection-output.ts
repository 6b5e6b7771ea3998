// A Connection's output: the effects of committed entries (and QoS 0 routes) for its client turned
// into bytes in its output list, and the one socket write per event-loop turn the outbox asks for
// (outbox.ts owns the dirty connections and the per-turn bounds). Encoding here follows the
// client: its protocol level, its outbound topic aliases, its Maximum Packet Size
// [MQTT-3.1.2-24/25]. Replies the connection decides itself reach this module only when their
// turn comes (LocalAction, connection.ts), so the order of the output is the order of arrival.
//
// Plain functions over the Connection's fields (connection.ts), as connect-phase.ts is: flushes and
// deliveries are the hot path, and they allocate nothing but the bytes.
import type { OutPacket } from '../broker/commands.js';
import { encode } from '../protocol/encoder.js';
import type { Packet } from '../protocol/packets.js';
import { RC } from '../protocol/reason-codes.js';
import type { Connection } from './connection.js';
import { NO_DISCONNECT, publishWithAlias, toWire, withoutProblemInfo } from './outbound.js';
import { answerSent } from './receive-maximum.js';
import type { OutboundAliases } from './topic-alias-out.js';

/** An effect of a committed entry (or of a QoS 0 route) for this connection. */
export function deliverEffect(conn: Connection, p: OutPacket): void {
  if (conn.phase === 'closed') return;
  switch (p.type) {
    case 'connack':
      onConnack(conn, p);
      return;
    case 'suback':
    case 'unsuback':
    case 'pubrel':
      sendOut(conn, p);
      return;
    case 'puback':
    case 'pubrec':
    case 'pubcomp':
      answerSent(conn, p);
      sendOut(conn, p);
      return;
    case 'publish':
      if (p.qos === 0 && conn.socket.writableLength + conn.outBytes > conn.host.limits.maxWriteBufferBytes) {
        conn.host.event('qos0-dropped-slow-consumer', conn.who());
        return;
      }
      conn.host.traffic.publishOut[p.qos]++;
      conn.host.traffic.publishOutBytes[p.qos] += p.msg.payload.length;
      sendOut(conn, p);
      return;
    default: {
      const _: never = p;
      void _;
    }
  }
}

function onConnack(conn: Connection, p: Extract<OutPacket, { type: 'connack' }>): void {
  sendOut(conn, p);
  if (p.code !== RC.SUCCESS) {
    conn.closeNow(NO_DISCONNECT);
    return;
  }
  if (conn.phase === 'connecting') conn.phase = 'connected';
  conn.connackOk = true;
}

export function sendOut(conn: Connection, p: OutPacket): void {
  if (p.type !== 'publish') writeControl(conn, toWire(p, conn.level, conn.limits));
  else if (conn.aliasesOut === null) write(conn, conn.outbox.encodePublish(p, conn.level, conn.limits));
  else write(conn, encodeAliased(conn, p));
}

/** A PUBLISH under an outbound alias. Apply sized the packet without one; an alias that would
 * push it over the client's Maximum Packet Size is not used [MQTT-3.1.2-24]. */
function encodeAliased(conn: Connection, p: Extract<OutPacket, { type: 'publish' }>): Buffer {
  const aliases = conn.aliasesOut as OutboundAliases;
  const alias = aliases.assign(p.msg.topic);
  const known = aliases.known;
  const buf = encode(publishWithAlias(p, alias, known), 5);
  if (conn.clientMaxPacket === 0 || buf.length <= conn.clientMaxPacket) return buf;
  if (!known) aliases.cancel(p.msg.topic);
  return conn.outbox.encodePublish(p, conn.level, conn.limits);
}

/** Every packet but PUBLISH: Reason String and User Properties go first when the packet would
 * exceed the client's Maximum Packet Size [MQTT-3.1.2-25]; a packet that cannot fit even then
 * is not sent, and the connection closes since the client cannot be answered. */
export function writeControl(conn: Connection, w: Packet): void {
  let buf = encode(w, conn.level);
  if (conn.clientMaxPacket === 0 || buf.length <= conn.clientMaxPacket) {
    write(conn, buf);
    return;
  }
  const bare = withoutProblemInfo(w);
  if (bare !== null) buf = encode(bare, conn.level);
  if (buf.length <= conn.clientMaxPacket) {
    write(conn, buf);
    return;
  }
  conn.host.event('packet-too-large-for-client', { ...conn.who(), type: w.type, bytes: buf.length });
  if (w.type !== 'disconnect') conn.beginClose(RC.PACKET_TOO_LARGE);
}

export function write(conn: Connection, buf: Buffer): void {
  conn.host.traffic.packetsOut++;
  conn.out.push(buf);
  conn.outBytes += buf.length;
  if (!conn.dirty) {
    conn.dirty = true;
    conn.outbox.queued(conn);
  }
}

/** One socket write for everything buffered so far (docs/design.md "Performance principles");
 * returns the bytes handed to the socket. */
export function flushOutput(conn: Connection): number {
  conn.dirty = false;
  if (conn.out.length === 0) return 0;
  conn.connackWritten = conn.connackOk;
  const buf = conn.out.length === 1 ? (conn.out[0] as Buffer) : Buffer.concat(conn.out, conn.outBytes);
  conn.out = [];
  conn.outBytes = 0;
  if (conn.socket.destroyed) return 0;
  conn.host.traffic.bytesOut += buf.length;
  if (conn.socket.write(buf) || conn.outputFull) return buf.length;
  if (conn.socket.writableLength > conn.host.limits.maxWriteBufferBytes) {
    // A client that publishes but does not read must not grow our memory: its own input waits.
    conn.outputFull = true;
    conn.socket.pause();
    conn.host.event('reads-paused-slow-consumer', { ...conn.who(), bytes: conn.socket.writableLength });
  }
  return buf.length;
}
