// Packets from a client turned into the plain data that commands carry (src/broker/commands.ts).
import { isUtf8 } from 'node:buffer';
import type { Message, MessageProps, Will } from '../broker/commands.js';
import type { ConnectPacket, PublishPacket, QoS, WillProps } from '../protocol/packets.js';
import type { AuthorizePublishRequest } from './auth/hook-authorizer.js';

/** Session Expiry Interval that never expires [MQTT-3.1.2-23]. */
export const EXPIRY_NEVER = 0xffffffff;
/** Receive Maximum when the client sends none [MQTT-3.1.2-21 / §3.1.2.11.3]. */
export const RECEIVE_MAX_DEFAULT = 65535;

/** MQTT 5 properties that travel with the message; undefined when there are none, so commands of
 * 3.1.1 clients and of plain v5 publishes stay small. */
export function messageProps(p: {
  payloadFormat?: 0 | 1;
  messageExpiry?: number;
  contentType?: string;
  responseTopic?: string;
  correlationData?: Uint8Array;
  userProps?: [string, string][];
}): MessageProps | undefined {
  const props: MessageProps = {};
  let any = false;
  if (p.payloadFormat !== undefined) {
    props.payloadFormat = p.payloadFormat;
    any = true;
  }
  if (p.messageExpiry !== undefined) {
    props.expiryS = p.messageExpiry;
    any = true;
  }
  if (p.contentType !== undefined) {
    props.contentType = p.contentType;
    any = true;
  }
  if (p.responseTopic !== undefined) {
    props.responseTopic = p.responseTopic;
    any = true;
  }
  if (p.correlationData !== undefined) {
    props.correlationData = p.correlationData;
    any = true;
  }
  if (p.userProps !== undefined && p.userProps.length > 0) {
    props.userProps = p.userProps;
    any = true;
  }
  return any ? props : undefined;
}

/** The message of a PUBLISH whose topic alias has been resolved to `topic`. */
export function messageFromPublish(p: PublishPacket, topic: string): Message {
  const msg: Message = { topic, payload: p.payload, qos: p.qos, retain: p.retain };
  const props = messageProps(p.props);
  if (props !== undefined) msg.props = props;
  return msg;
}

export function willFromConnect(c: ConnectPacket): Will | null {
  if (c.will === null) return null;
  const wp: WillProps = c.will.props;
  const msg: Message = { topic: c.will.topic, payload: c.will.payload, qos: c.will.qos, retain: c.will.retain };
  const props = messageProps(wp);
  if (props !== undefined) msg.props = props;
  return { msg, delayS: wp.willDelay ?? 0 };
}

/** Session expiry as the command carries it: 3.1.1 has none on the wire, so a clean session ends
 * with the connection and a persistent one never expires [MQTT-3.1.2-4..6]. */
export function connectExpiryS(c: ConnectPacket): number {
  if (c.level === 5) return c.props.sessionExpiry ?? 0;
  return c.clean ? 0 : EXPIRY_NEVER;
}

/** A v5 PUBLISH with Payload Format Indicator 1 must carry UTF-8 [MQTT-3.3.2-4]. */
export function payloadFormatValid(p: PublishPacket): boolean {
  if (p.props.payloadFormat !== 1) return true;
  return isUtf8(p.payload);
}

/** Topics the broker publishes itself (src/server/sys-topics.ts); clients may not. */
export function isSysTopic(topic: string): boolean {
  return topic.startsWith('$SYS') && (topic.length === 4 || topic.charCodeAt(4) === 0x2f);
}

/** What authorizePublish is told of a PUBLISH or a will (its payload not copied). */
export function publishRequest(
  clientId: string,
  username: string | null,
  topic: string,
  m: { payload: Uint8Array; qos: QoS; retain: boolean },
  will: boolean,
): AuthorizePublishRequest {
  const payload = Buffer.from(m.payload.buffer, m.payload.byteOffset, m.payload.byteLength);
  return { clientId, username, topic, payload, qos: m.qos, retain: m.retain, will };
}
