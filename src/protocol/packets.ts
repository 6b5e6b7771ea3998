// MQTT control packets as the broker sees them: one union for 3.1, 3.1.1 and 5.0. The codec
// (decoder.ts, encoder.ts) turns bytes into these and back; nothing outside src/protocol sees
// mqtt-packet's shapes. Absent optional fields mean "not present on the wire".
export type QoS = 0 | 1 | 2;

/** MQTT protocol level from CONNECT: 3 is MQTT 3.1 ("MQIsdp"), 4 is 3.1.1, 5 is 5.0. */
export type ProtocolLevel = 3 | 4 | 5;

/** An ordered list of MQTT 5 user properties; order and duplicates are kept [MQTT-3.3.2-18]. */
export type UserProperties = [string, string][];

export interface ConnectProps {
  sessionExpiry?: number;
  receiveMax?: number;
  maxPacketSize?: number;
  topicAliasMax?: number;
  requestResponseInfo?: 0 | 1;
  requestProblemInfo?: 0 | 1;
  userProps?: UserProperties;
  authMethod?: string;
  authData?: Uint8Array;
}

export interface WillProps {
  willDelay?: number;
  payloadFormat?: 0 | 1;
  messageExpiry?: number;
  contentType?: string;
  responseTopic?: string;
  correlationData?: Uint8Array;
  userProps?: UserProperties;
}

export interface ConnackProps {
  sessionExpiry?: number;
  receiveMax?: number;
  maxQos?: 0 | 1;
  retainAvailable?: 0 | 1;
  maxPacketSize?: number;
  assignedClientId?: string;
  topicAliasMax?: number;
  reasonString?: string;
  userProps?: UserProperties;
  wildcardAvailable?: 0 | 1;
  subIdAvailable?: 0 | 1;
  sharedAvailable?: 0 | 1;
  serverKeepAlive?: number;
  responseInfo?: string;
  serverReference?: string;
  authMethod?: string;
  authData?: Uint8Array;
}

export interface PublishProps {
  payloadFormat?: 0 | 1;
  messageExpiry?: number;
  topicAlias?: number;
  responseTopic?: string;
  correlationData?: Uint8Array;
  userProps?: UserProperties;
  /** Subscription Identifiers; only server-to-client. */
  subIds?: number[];
  contentType?: string;
}

/** PUBACK, PUBREC, PUBREL, PUBCOMP, SUBACK, UNSUBACK. */
export interface AckProps {
  reasonString?: string;
  userProps?: UserProperties;
}

export interface SubscribeProps {
  subId?: number;
  userProps?: UserProperties;
}

export interface DisconnectProps {
  sessionExpiry?: number;
  reasonString?: string;
  userProps?: UserProperties;
  serverReference?: string;
}

export interface AuthProps {
  authMethod?: string;
  authData?: Uint8Array;
  reasonString?: string;
  userProps?: UserProperties;
}

export interface ConnectPacket {
  type: 'connect';
  protocolName: 'MQTT' | 'MQIsdp';
  level: ProtocolLevel;
  clean: boolean;
  keepAlive: number;
  /** May be empty. */
  clientId: string;
  will: {
    topic: string;
    payload: Uint8Array;
    qos: QoS;
    retain: boolean;
    props: WillProps;
  } | null;
  username: string | null;
  password: Uint8Array | null;
  props: ConnectProps;
}

export interface ConnackPacket {
  type: 'connack';
  sessionPresent: boolean;
  /** 3.1.1: return code 0..5; 5.0: reason code. */
  code: number;
  props: ConnackProps;
}

export interface PublishPacket {
  type: 'publish';
  dup: boolean;
  qos: QoS;
  retain: boolean;
  /** May be empty in MQTT 5 when a Topic Alias is present. */
  topic: string;
  /** Present iff qos > 0. */
  pid?: number;
  payload: Uint8Array;
  props: PublishProps;
}

export interface PubAckPacket {
  type: 'puback' | 'pubrec' | 'pubrel' | 'pubcomp';
  pid: number;
  /** 0 when absent on the wire. */
  code: number;
  props: AckProps;
}

export interface SubscribePacket {
  type: 'subscribe';
  pid: number;
  subs: { filter: string; qos: QoS; nl: boolean; rap: boolean; rh: 0 | 1 | 2 }[];
  props: SubscribeProps;
}

export interface SubackPacket {
  type: 'suback';
  pid: number;
  codes: number[];
  props: AckProps;
}

export interface UnsubscribePacket {
  type: 'unsubscribe';
  pid: number;
  filters: string[];
  props: { userProps?: UserProperties };
}

export interface UnsubackPacket {
  type: 'unsuback';
  pid: number;
  /** MQTT 5 only; empty for 3.1.1. */
  codes: number[];
  props: AckProps;
}

export interface PingPacket {
  type: 'pingreq' | 'pingresp';
}

export interface DisconnectPacket {
  type: 'disconnect';
  /** 0 when absent on the wire. */
  code: number;
  props: DisconnectProps;
}

export interface AuthPacket {
  type: 'auth';
  code: number;
  props: AuthProps;
}

export type Packet =
  | ConnectPacket
  | ConnackPacket
  | PublishPacket
  | PubAckPacket
  | SubscribePacket
  | SubackPacket
  | UnsubscribePacket
  | UnsubackPacket
  | PingPacket
  | DisconnectPacket
  | AuthPacket;

export type PacketType = Packet['type'];

/** Why the decoder refused the input. The connection closes, with DISCONNECT `reason` for MQTT 5
 * where the specification allows it, and logs `message`. */
export interface DecodeError {
  /** RC.MALFORMED_PACKET, RC.PROTOCOL_ERROR, RC.PACKET_TOO_LARGE, RC.TOPIC_NAME_INVALID,
   * RC.UNSUPPORTED_PROTOCOL_VERSION, ... */
  reason: number;
  /** A stable short key for rate-limited logging, e.g. 'remaining-length', 'utf8', 'qos3'. */
  key: string;
  message: string;
}
