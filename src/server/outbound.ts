// Semantic packets decided by apply (OutPacket) turned into wire packets for one protocol level.
import type { OutPacket } from '../broker/commands.js';
import { vbiSize } from '../protocol/codec-writer.js';
import type { AckProps, ConnackProps, Packet, PublishProps } from '../protocol/packets.js';
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
  /** The client's Request Problem Information was 0: no Reason String on acks [MQTT-3.1.2-29]. */
  noProblemInfo?: boolean;
  /** The client's id (empty: apply assigns one) when it sent Request Response Information 1. */
  responseInfoFor?: string;
  /** Enhanced authentication that succeeded: Authentication Method and the server's final data
   * for the CONNACK (§3.2.2.3.17). */
  auth?: { method: string; data: Uint8Array | undefined };
}

/** Response Information is `response/<client id>/` (§3.2.2.3.15 leaves its meaning to the server):
 * a topic prefix per client that a requester can put in Response Topic. An ACL pattern such as
 * `pattern readwrite response/%c/#` keeps it private. */
export const RESPONSE_INFO_PREFIX = 'response/';

/** An MQTT string holds at most this many bytes of UTF-8 (§1.5.4). */
const MQTT_STRING_BYTES_MAX = 0xffff;

/** Response Information for a client, or undefined where the server omits it, as it may
 * (§3.2.2.3.15). A client id with a wildcard character would make no valid topic name. A client id
 * of 65,526 bytes or more would make a prefix longer than an MQTT string: it is left out rather than
 * shortened, since a shortened prefix would no longer be this client's alone. */
export function responseInformation(clientId: string): string | undefined {
  if (clientId === '' || clientId.includes('+') || clientId.includes('#')) return undefined;
  const info = `${RESPONSE_INFO_PREFIX}${clientId}/`;
  return Buffer.byteLength(info) <= MQTT_STRING_BYTES_MAX ? info : undefined;
}

/** The bytes of a v5 SUBACK or UNSUBACK carrying `codes` reason codes and no property: the least
 * that answer can be, known before the SUBSCRIBE or UNSUBSCRIBE is proposed. */
export function codesAckBytes(codes: number): number {
  const remaining = 2 + 1 + codes; // packet id, property length 0, one byte per code
  return 1 + vbiSize(remaining) + remaining;
}

/** A connection's close reason meaning: send no DISCONNECT first. */
export const NO_DISCONNECT = -1;

/** Reason String text for a reason code: its RC name in words ('QUOTA_EXCEEDED' → 'quota exceeded'). */
const REASON_TEXT = new Map<number, string>();
for (const [name, code] of Object.entries(RC)) {
  if (code >= RC.UNSPECIFIED_ERROR) REASON_TEXT.set(code, name.toLowerCase().replace(/_/g, ' '));
}

export function reasonText(code: number): string | undefined {
  return REASON_TEXT.get(code);
}

/** A Reason String property for an ack whose (first) failure is `code`, where the client allows
 * problem information [MQTT-3.1.2-29]; success codes carry none. */
function ackProps(code: number | undefined, limits: ConnackLimits): AckProps {
  if (code === undefined || limits.noProblemInfo === true) return NO_PROPS;
  const text = reasonText(code);
  return text === undefined ? NO_PROPS : { reasonString: text };
}

function firstFailure(codes: readonly number[]): number | undefined {
  for (let i = 0; i < codes.length; i++) if ((codes[i] as number) >= RC.UNSPECIFIED_ERROR) return codes[i];
  return undefined;
}

/** The packet without Reason String and User Properties, which the server drops before it would
 * exceed the client's Maximum Packet Size [MQTT-3.1.2-25 / §3.1.2.11.4]. Null when there were none. */
export function withoutProblemInfo(p: Packet): Packet | null {
  if (!('props' in p)) return null;
  const props = p.props as { reasonString?: string; userProps?: unknown };
  if (props.reasonString === undefined && props.userProps === undefined) return null;
  const { reasonString: _r, userProps: _u, ...rest } = props;
  return { ...p, props: rest } as Packet;
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
  if (limits.responseInfoFor !== undefined) {
    const info = responseInformation(assignedClientId ?? limits.responseInfoFor);
    if (info !== undefined) props.responseInfo = info;
  }
  if (limits.auth !== undefined) {
    props.authMethod = limits.auth.method;
    if (limits.auth.data !== undefined) props.authData = limits.auth.data;
  }
  return props;
}

/** A refused CONNACK says why; CONNACK may carry a Reason String whatever the client asked
 * [MQTT-3.1.2-29]. */
function refusalProps(p: Extract<OutPacket, { type: 'connack' }>): ConnackProps {
  const text = p.reasonString ?? reasonText(p.code);
  const props: ConnackProps = text === undefined ? {} : { reasonString: text };
  if (p.serverReference !== undefined) props.serverReference = p.serverReference;
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

/** A v5 PUBLISH under an outbound Topic Alias (§3.3.2.3.4): `known` sends the alias alone with an
 * empty topic, otherwise topic and alias together so that the client learns the mapping. */
export function publishWithAlias(p: Extract<OutPacket, { type: 'publish' }>, alias: number, known: boolean): Packet {
  const out: Packet = {
    type: 'publish',
    dup: p.dup,
    qos: p.qos,
    retain: p.retain,
    topic: known ? '' : p.msg.topic,
    payload: p.msg.payload,
    props: { ...publishProps(p), topicAlias: alias },
  };
  if (p.pid !== undefined) out.pid = p.pid;
  return out;
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
        props: !v5 ? NO_PROPS : p.code === RC.SUCCESS ? connackProps(limits, p.assignedClientId) : refusalProps(p),
      };
    case 'suback':
      if (!v5) return { type: 'suback', pid: p.pid, codes: p.codes.map(subackCodeV4), props: NO_PROPS };
      return { type: 'suback', pid: p.pid, codes: p.codes, props: ackProps(firstFailure(p.codes), limits) };
    case 'unsuback':
      if (!v5) return { type: 'unsuback', pid: p.pid, codes: [], props: NO_PROPS };
      return { type: 'unsuback', pid: p.pid, codes: p.codes, props: ackProps(firstFailure(p.codes), limits) };
    case 'puback':
    case 'pubrec':
    case 'pubcomp':
      if (!v5) return { type: p.type, pid: p.pid, code: RC.SUCCESS, props: NO_PROPS };
      return { type: p.type, pid: p.pid, code: p.code, props: ackProps(p.code, limits) };
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
