// Semantic packets decided by apply (OutPacket) turned into wire packets for one protocol level.
import type { OutPacket } from '../broker/commands.js';
import type { ConnackProps, Packet, PublishProps } from '../protocol/packets.js';
import { connackReturnCode, RC, SUBACK_FAILURE_V4 } from '../protocol/reason-codes.js';

/** What the server announces in a v5 CONNACK (§3.2.2.3), fixed per connection. */
export interface ConnackLimits {
  receiveMaximum: number;
  maxQos: 0 | 1 | 2;
  retainAvailable: boolean;
  maxPacketSize: number;
  topicAliasMaximum: number;
  /** Set only when the server overrides the client's keep-alive [MQTT-3.2.2-21]. */
  serverKeepAlive: number | undefined;
}

const NO_PROPS = Object.freeze({}) as Record<string, never>;

export function connackProps(limits: ConnackLimits, assignedClientId: string | undefined): ConnackProps {
  const props: ConnackProps = {
    receiveMax: limits.receiveMaximum,
    maxPacketSize: limits.maxPacketSize,
    wildcardAvailable: 1,
    subIdAvailable: 1,
    sharedAvailable: 1,
  };
  if (limits.maxQos < 2) props.maxQos = limits.maxQos as 0 | 1;
  if (!limits.retainAvailable) props.retainAvailable = 0;
  if (limits.topicAliasMaximum > 0) props.topicAliasMax = limits.topicAliasMaximum;
  if (limits.serverKeepAlive !== undefined) props.serverKeepAlive = limits.serverKeepAlive;
  if (assignedClientId !== undefined) props.assignedClientId = assignedClientId;
  return props;
}

/** 3.1.1 SUBACK has one failure code, 0x80, and grants 0..2 [MQTT-3.9.3-2]. */
function subackCodeV4(code: number): number {
  return code >= RC.UNSPECIFIED_ERROR ? SUBACK_FAILURE_V4 : code;
}

function publishProps(p: Extract<OutPacket, { type: 'publish' }>): PublishProps {
  const m = p.msg.props;
  if (m === undefined && p.expiryS === undefined && p.subIds === undefined) return NO_PROPS;
  const props: PublishProps = {};
  if (m?.payloadFormat !== undefined) props.payloadFormat = m.payloadFormat;
  if (p.expiryS !== undefined) props.messageExpiry = p.expiryS;
  if (m?.contentType !== undefined) props.contentType = m.contentType;
  if (m?.responseTopic !== undefined) props.responseTopic = m.responseTopic;
  if (m?.correlationData !== undefined) props.correlationData = m.correlationData;
  if (m?.userProps !== undefined) props.userProps = m.userProps;
  if (p.subIds !== undefined && p.subIds.length > 0) props.subIds = p.subIds;
  return props;
}

/** The wire packet for an effect. `limits` feeds the v5 CONNACK. */
export function toWire(p: OutPacket, level: 3 | 4 | 5, limits: ConnackLimits): Packet {
  const v5 = level === 5;
  switch (p.type) {
    case 'connack':
      return {
        type: 'connack',
        sessionPresent: p.sessionPresent,
        code: v5 ? p.code : connackReturnCode(p.code),
        props: v5 && p.code === RC.SUCCESS ? connackProps(limits, p.assignedClientId) : NO_PROPS,
      };
    case 'suback':
      return { type: 'suback', pid: p.pid, codes: v5 ? p.codes : p.codes.map(subackCodeV4), props: NO_PROPS };
    case 'unsuback':
      return { type: 'unsuback', pid: p.pid, codes: v5 ? p.codes : [], props: NO_PROPS };
    case 'puback':
    case 'pubrec':
    case 'pubcomp':
      return { type: p.type, pid: p.pid, code: v5 ? p.code : RC.SUCCESS, props: NO_PROPS };
    case 'pubrel':
      return { type: 'pubrel', pid: p.pid, code: RC.SUCCESS, props: NO_PROPS };
    case 'publish': {
      const out: Packet = {
        type: 'publish',
        dup: p.dup,
        qos: p.qos,
        retain: p.retain,
        topic: p.msg.topic,
        payload: p.msg.payload,
        props: v5 ? publishProps(p) : NO_PROPS,
      };
      if (p.pid !== undefined) out.pid = p.pid;
      return out;
    }
    default: {
      const _: never = p;
      return _;
    }
  }
}
