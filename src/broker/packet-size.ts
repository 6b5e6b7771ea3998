import { Buffer } from 'node:buffer';
import type { ProtocolLevel, QoS } from '../protocol/packets.js';
import type { Message } from './commands.js';

// The encoded size of a PUBLISH the broker sends, so that apply can drop a message larger than the
// client's Maximum Packet Size [MQTT-3.1.2-25] at the position it is decided, the same on every
// replica. The connection may shrink the packet with a topic alias; this is an upper bound.

/** Bytes of an MQTT Variable Byte Integer [MQTT-1.5.5]. */
export function varIntSize(n: number): number {
  if (n < 128) return 1;
  if (n < 16_384) return 2;
  if (n < 2_097_152) return 3;
  return 4;
}

const strSize = (s: string): number => 2 + Buffer.byteLength(s, 'utf8');

/** Property bytes of an outgoing v5 PUBLISH (§3.3.2.3), without the length prefix. */
function propertiesSize(msg: Message, expiryS: number | undefined, subIds: readonly number[] | null): number {
  const p = msg.props;
  let n = 0;
  if (p?.payloadFormat !== undefined) n += 2;
  if (expiryS !== undefined) n += 5;
  if (p?.contentType !== undefined) n += 1 + strSize(p.contentType);
  if (p?.responseTopic !== undefined) n += 1 + strSize(p.responseTopic);
  if (p?.correlationData !== undefined) n += 3 + p.correlationData.length;
  for (const [k, v] of p?.userProps ?? []) n += 1 + strSize(k) + strSize(v);
  for (const id of subIds ?? []) n += 1 + varIntSize(id);
  return n;
}

/** Total encoded size of a PUBLISH: fixed header, topic, packet id, properties (v5), payload. */
export function publishPacketSize(
  protocol: ProtocolLevel,
  msg: Message,
  qos: QoS,
  expiryS: number | undefined,
  subIds: readonly number[] | null,
): number {
  let remaining = strSize(msg.topic) + (qos > 0 ? 2 : 0) + msg.payload.length;
  if (protocol === 5) {
    const props = propertiesSize(msg, expiryS, subIds);
    remaining += varIntSize(props) + props;
  }
  return 1 + varIntSize(remaining) + remaining;
}
