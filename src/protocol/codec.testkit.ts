// Test support for the codec tests: feeding helpers, and the mapping between mqtt-packet's shapes
// and ours, so mqtt-packet can serve as the oracle. Imported by tests only.
import mqttPacket from 'mqtt-packet';
import { Decoder, type DecoderOptions, type FeedResult } from './decoder.js';
import type { DecodeError, Packet, ProtocolLevel, UserProperties } from './packets.js';

// biome-ignore lint/suspicious/noExplicitAny: mqtt-packet's objects are loosely shaped by design.
export type Mp = Record<string, any>;

export const MAX = 1 << 20;

/** Packet types a server receives; the rest are decoded with role 'client'. */
export const TO_SERVER_TYPES: ReadonlySet<string> = new Set([
  'connect',
  'publish',
  'puback',
  'pubrec',
  'pubrel',
  'pubcomp',
  'subscribe',
  'unsubscribe',
  'pingreq',
  'disconnect',
  'auth',
]);

/** A decoder positioned to read `p`: a fresh server for CONNECT, a connected server for the other
 * client-to-server packets, a client otherwise. */
export function decoderFor(p: Packet, level: ProtocolLevel, toClient = false): Decoder {
  const opts: DecoderOptions = { maxPacketSize: MAX };
  if (p.type === 'connect') return new Decoder(opts);
  if (!toClient && TO_SERVER_TYPES.has(p.type)) return new Decoder({ ...opts, level });
  return new Decoder({ ...opts, role: 'client', level });
}

/** Feeds `bytes` cut at the given offsets and gathers everything. */
export function feedPieces(d: Decoder, bytes: Uint8Array, cuts: number[]): FeedResult {
  const packets: Packet[] = [];
  let error: DecodeError | null = null;
  let prev = 0;
  for (const cut of [...cuts, bytes.length]) {
    const r = d.feed(Buffer.from(bytes.subarray(prev, cut)));
    packets.push(...r.packets);
    error = r.error;
    prev = cut;
  }
  return { packets, error };
}

/** mqtt-packet's parse of `bytes`, synchronously. */
export function mpParse(bytes: Uint8Array, level: ProtocolLevel | 0): { packets: Mp[]; error: Error | null } {
  const parser = mqttPacket.parser(level === 0 ? {} : { protocolVersion: level });
  const packets: Mp[] = [];
  let error: Error | null = null;
  parser.on('packet', (p: Mp) => packets.push(p));
  parser.on('error', (e: Error) => {
    error ??= e;
  });
  parser.parse(Buffer.from(bytes));
  return { packets, error };
}

export function mpGenerate(p: Mp, level: ProtocolLevel): Buffer {
  return mqttPacket.generate(p as Parameters<typeof mqttPacket.generate>[0], { protocolVersion: level });
}

/** Our field name, mqtt-packet's name, and whether mqtt-packet turns the byte into a boolean. */
const PROP_NAMES: [string, string, boolean][] = [
  ['sessionExpiry', 'sessionExpiryInterval', false],
  ['willDelay', 'willDelayInterval', false],
  ['receiveMax', 'receiveMaximum', false],
  ['maxPacketSize', 'maximumPacketSize', false],
  ['topicAliasMax', 'topicAliasMaximum', false],
  ['requestResponseInfo', 'requestResponseInformation', true],
  ['requestProblemInfo', 'requestProblemInformation', true],
  ['authMethod', 'authenticationMethod', false],
  ['authData', 'authenticationData', false],
  ['payloadFormat', 'payloadFormatIndicator', true],
  ['messageExpiry', 'messageExpiryInterval', false],
  ['contentType', 'contentType', false],
  ['responseTopic', 'responseTopic', false],
  ['correlationData', 'correlationData', false],
  ['maxQos', 'maximumQoS', false],
  ['retainAvailable', 'retainAvailable', true],
  ['assignedClientId', 'assignedClientIdentifier', false],
  ['reasonString', 'reasonString', false],
  ['wildcardAvailable', 'wildcardSubscriptionAvailable', true],
  ['subIdAvailable', 'subscriptionIdentifiersAvailable', true],
  ['sharedAvailable', 'sharedSubscriptionAvailable', true],
  ['serverKeepAlive', 'serverKeepAlive', false],
  ['responseInfo', 'responseInformation', false],
  ['serverReference', 'serverReference', false],
  ['topicAlias', 'topicAlias', false],
];

/** mqtt-packet keeps user properties in an object (one array per repeated name), so only the
 * order within one name survives; compare with pairs stably sorted by name. */
export function sortUserProps(pairs: UserProperties): UserProperties {
  return [...pairs].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

function propsFromMp(mp: Mp | undefined, subIdField: 'subId' | 'subIds' | null): Mp {
  const out: Mp = {};
  if (mp === undefined) return out;
  for (const [ours, theirs, bool] of PROP_NAMES) {
    const v = mp[theirs];
    if (v !== undefined) out[ours] = bool ? (v ? 1 : 0) : v;
  }
  if (mp.subscriptionIdentifier !== undefined && subIdField !== null) {
    const ids = ([] as number[]).concat(mp.subscriptionIdentifier);
    out[subIdField] = subIdField === 'subId' ? ids[0] : ids;
  }
  if (mp.userProperties !== undefined) {
    const pairs: UserProperties = [];
    for (const k of Object.keys(mp.userProperties)) {
      for (const v of ([] as string[]).concat(mp.userProperties[k])) pairs.push([k, v]);
    }
    out.userProps = sortUserProps(pairs);
  }
  return out;
}

function propsToMp(props: Mp, subIdField: 'subId' | 'subIds' | null): Mp | undefined {
  const out: Mp = {};
  for (const [ours, theirs, bool] of PROP_NAMES) {
    const v = props[ours];
    if (v !== undefined) out[theirs] = bool ? v === 1 : v;
  }
  if (subIdField !== null && props[subIdField] !== undefined) {
    const v = props[subIdField] as number | number[];
    out.subscriptionIdentifier = Array.isArray(v) && v.length === 1 ? v[0] : v;
  }
  if (props.userProps !== undefined) {
    const o: Mp = Object.create(null);
    for (const [k, v] of props.userProps as UserProperties) {
      o[k] = o[k] === undefined ? v : ([] as string[]).concat(o[k], v);
    }
    out.userProperties = o;
  }
  return Object.keys(out).length === 0 ? undefined : out;
}

/** Our packet with user properties sorted by name: the form mqtt-packet can represent. */
export function comparable(p: Packet): Packet {
  const sortIn = (props: Mp): Mp => (props.userProps === undefined ? props : { ...props, userProps: sortUserProps(props.userProps) });
  const q = { ...p } as Mp;
  if (q.props !== undefined) q.props = sortIn(q.props);
  if (p.type === 'connect' && p.will !== null) q.will = { ...p.will, props: sortIn(p.will.props) };
  return q as Packet;
}

/** mqtt-packet's parse result in our shape. */
export function fromMp(mp: Mp, level: ProtocolLevel): Packet {
  const v5 = level === 5;
  switch (mp.cmd) {
    case 'connect':
      return {
        type: 'connect',
        protocolName: mp.protocolId,
        level: mp.protocolVersion,
        clean: mp.clean,
        keepAlive: mp.keepalive,
        clientId: mp.clientId,
        will:
          mp.will === undefined
            ? null
            : {
                topic: mp.will.topic,
                payload: mp.will.payload,
                qos: mp.will.qos,
                retain: mp.will.retain,
                props: propsFromMp(mp.will.properties, null),
              },
        username: mp.username ?? null,
        password: mp.password ?? null,
        props: propsFromMp(mp.properties, null),
      };
    case 'connack':
      return {
        type: 'connack',
        sessionPresent: mp.sessionPresent,
        code: v5 ? mp.reasonCode : mp.returnCode,
        props: propsFromMp(mp.properties, null),
      };
    case 'publish': {
      const base = { type: 'publish' as const, dup: mp.dup, qos: mp.qos, retain: mp.retain, topic: mp.topic };
      const props = propsFromMp(mp.properties, 'subIds');
      if (mp.qos === 0) return { ...base, payload: mp.payload, props };
      return { ...base, pid: mp.messageId, payload: mp.payload, props };
    }
    case 'puback':
    case 'pubrec':
    case 'pubrel':
    case 'pubcomp':
      return { type: mp.cmd, pid: mp.messageId, code: mp.reasonCode ?? 0, props: propsFromMp(mp.properties, null) };
    case 'subscribe':
      return {
        type: 'subscribe',
        pid: mp.messageId,
        subs: mp.subscriptions.map((s: Mp) => ({ filter: s.topic, qos: s.qos, nl: s.nl ?? false, rap: s.rap ?? false, rh: s.rh ?? 0 })),
        props: propsFromMp(mp.properties, 'subId'),
      };
    case 'suback':
      return { type: 'suback', pid: mp.messageId, codes: mp.granted, props: propsFromMp(mp.properties, null) };
    case 'unsubscribe':
      return { type: 'unsubscribe', pid: mp.messageId, filters: mp.unsubscriptions, props: propsFromMp(mp.properties, null) };
    case 'unsuback':
      return { type: 'unsuback', pid: mp.messageId, codes: mp.granted ?? [], props: propsFromMp(mp.properties, null) };
    case 'pingreq':
    case 'pingresp':
      return { type: mp.cmd };
    case 'disconnect':
      return { type: 'disconnect', code: mp.reasonCode ?? 0, props: propsFromMp(mp.properties, null) };
    case 'auth':
      return { type: 'auth', code: mp.reasonCode ?? 0, props: propsFromMp(mp.properties, null) };
    default:
      throw new Error(`unexpected mqtt-packet cmd ${mp.cmd}`);
  }
}

/** Our packet in mqtt-packet's shape, for mqtt-packet's generate. */
export function toMp(p: Packet, level: ProtocolLevel): Mp {
  switch (p.type) {
    case 'connect': {
      const mp: Mp = {
        cmd: 'connect',
        protocolId: p.protocolName,
        protocolVersion: p.level,
        clean: p.clean,
        keepalive: p.keepAlive,
        clientId: p.clientId,
      };
      if (p.will !== null) {
        mp.will = { topic: p.will.topic, payload: Buffer.from(p.will.payload), qos: p.will.qos, retain: p.will.retain };
        const wp = propsToMp(p.will.props, null);
        if (wp !== undefined) mp.will.properties = wp;
      }
      if (p.username !== null) mp.username = p.username;
      if (p.password !== null) mp.password = Buffer.from(p.password);
      return withProps(mp, p.props, null);
    }
    case 'connack': {
      const mp: Mp = { cmd: 'connack', sessionPresent: p.sessionPresent };
      if (level === 5) mp.reasonCode = p.code;
      else mp.returnCode = p.code;
      return withProps(mp, p.props, null);
    }
    case 'publish':
      return withProps(
        { cmd: 'publish', dup: p.dup, qos: p.qos, retain: p.retain, topic: p.topic, messageId: p.pid, payload: Buffer.from(p.payload) },
        p.props,
        'subIds',
      );
    case 'puback':
    case 'pubrec':
    case 'pubrel':
    case 'pubcomp':
      return withProps({ cmd: p.type, messageId: p.pid, reasonCode: p.code }, p.props, null);
    case 'subscribe':
      return withProps(
        {
          cmd: 'subscribe',
          messageId: p.pid,
          subscriptions: p.subs.map((s) =>
            level === 5 ? { topic: s.filter, qos: s.qos, nl: s.nl, rap: s.rap, rh: s.rh } : { topic: s.filter, qos: s.qos },
          ),
        },
        p.props,
        'subId',
      );
    case 'suback':
      return withProps({ cmd: 'suback', messageId: p.pid, granted: p.codes }, p.props, null);
    case 'unsubscribe':
      return withProps({ cmd: 'unsubscribe', messageId: p.pid, unsubscriptions: p.filters }, p.props, null);
    case 'unsuback':
      return withProps({ cmd: 'unsuback', messageId: p.pid, granted: p.codes }, p.props, null);
    case 'pingreq':
    case 'pingresp':
      return { cmd: p.type };
    case 'disconnect':
      return withProps({ cmd: 'disconnect', reasonCode: p.code }, p.props, null);
    case 'auth':
      return withProps({ cmd: 'auth', reasonCode: p.code }, p.props, null);
    default: {
      const _: never = p;
      return _;
    }
  }
}

function withProps(mp: Mp, props: Mp, subIdField: 'subId' | 'subIds' | null): Mp {
  const converted = propsToMp(props, subIdField);
  if (converted !== undefined) mp.properties = converted;
  return mp;
}

/** Builds fixture bytes by hand: a fixed header byte and the body, with the remaining length. */
export function frame(byte0: number, ...body: (number | number[])[]): Buffer {
  const flat = body.flat();
  const len: number[] = [];
  let n = flat.length;
  do {
    let b = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) b |= 0x80;
    len.push(b);
  } while (n > 0);
  return Buffer.from([byte0, ...len, ...flat]);
}

/** A UTF-8 Encoded String or Binary Data field: two-byte length and the bytes. */
export function str(s: string | Uint8Array): number[] {
  const b = typeof s === 'string' ? Buffer.from(s, 'utf8') : Buffer.from(s);
  return [b.length >> 8, b.length & 0xff, ...b];
}

export function u16(n: number): number[] {
  return [n >> 8, n & 0xff];
}

export function u32(n: number): number[] {
  return [(n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff];
}
