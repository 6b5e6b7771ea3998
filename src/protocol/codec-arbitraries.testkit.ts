// fast-check arbitraries of valid packets for each protocol level and direction. Imported by tests
// only.
import fc from 'fast-check';
import { CODES_V4, CODES_V5 } from './codec-rules.js';
import type { Packet, ProtocolLevel, QoS, UserProperties } from './packets.js';

/** Valid MQTT strings: any Unicode scalar value but U+0000, with U+FEFF now and then. */
const text = (maxLength = 12): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 5, arbitrary: fc.string({ unit: 'binary', maxLength }).map((s) => s.replaceAll('\0', '')) },
    { weight: 1, arbitrary: fc.string({ maxLength }).map((s) => `\uFEFF${s.replaceAll('\0', '')}`) },
  );
const nonEmpty = (a: fc.Arbitrary<string>): fc.Arbitrary<string> => a.map((s) => (s.length === 0 ? 'x' : s));
/** A Topic Name: non-empty, no wildcards. */
const topicName = nonEmpty(text().map((s) => s.replace(/[+#]/g, '_')));
const filter = nonEmpty(text());
const bytes = (maxLength = 24): fc.Arbitrary<Buffer> => fc.uint8Array({ maxLength }).map((a) => Buffer.from(a));
const u16 = fc.integer({ min: 0, max: 0xffff });
const u32 = fc.integer({ min: 0, max: 0xffffffff });
const pid = fc.integer({ min: 1, max: 0xffff });
const qos = fc.constantFrom<QoS>(0, 1, 2);
const bit = fc.constantFrom<0 | 1>(0, 1);
const subId = fc.integer({ min: 1, max: 268_435_455 });
const userProps: fc.Arbitrary<UserProperties> = fc.array(fc.tuple(text(6), text(6)), { minLength: 1, maxLength: 4 });
const codeFrom = (codes: ReadonlySet<number>): fc.Arbitrary<number> => fc.constantFrom(...codes);

/** Plain objects: fast-check's default null prototype would fail deepStrictEqual against decoded packets. */
function record<T>(model: { [K in keyof T]: fc.Arbitrary<T[K]> }): fc.Arbitrary<T> {
  return fc.record(model, { noNullPrototype: true }) as fc.Arbitrary<T>;
}
const opt = <T extends Record<string, fc.Arbitrary<unknown>>>(model: T) => fc.record(model, { requiredKeys: [], noNullPrototype: true });

const connectProps = opt({
  sessionExpiry: u32,
  receiveMax: fc.integer({ min: 1, max: 0xffff }),
  maxPacketSize: fc.integer({ min: 1, max: 0xffffffff }),
  topicAliasMax: u16,
  requestResponseInfo: bit,
  requestProblemInfo: bit,
  userProps,
  authMethod: text(),
  authData: bytes(),
}).map((p) => {
  // Authentication Data needs an Authentication Method (§3.1.2.11.10).
  if (p.authData !== undefined && p.authMethod === undefined) p.authMethod = 'm';
  return p;
});

const willProps = opt({
  willDelay: u32,
  payloadFormat: bit,
  messageExpiry: u32,
  contentType: text(),
  responseTopic: topicName,
  correlationData: bytes(),
  userProps,
});

const connackProps = opt({
  sessionExpiry: u32,
  receiveMax: fc.integer({ min: 1, max: 0xffff }),
  maxQos: bit,
  retainAvailable: bit,
  maxPacketSize: fc.integer({ min: 1, max: 0xffffffff }),
  assignedClientId: text(),
  topicAliasMax: u16,
  reasonString: text(),
  userProps,
  wildcardAvailable: bit,
  subIdAvailable: bit,
  sharedAvailable: bit,
  serverKeepAlive: u16,
  responseInfo: text(),
  serverReference: text(),
  authMethod: text(),
  authData: bytes(),
});

const publishProps = (toClient: boolean) =>
  opt({
    payloadFormat: bit,
    messageExpiry: u32,
    topicAlias: fc.integer({ min: 1, max: 0xffff }),
    responseTopic: topicName,
    correlationData: bytes(),
    userProps,
    contentType: text(),
    // Subscription Identifiers travel only to clients [MQTT-3.3.4-6].
    ...(toClient ? { subIds: fc.array(subId, { minLength: 1, maxLength: 3 }) } : {}),
  });

const ackProps = opt({ reasonString: text(), userProps });
const disconnectProps = opt({ sessionExpiry: u32, reasonString: text(), userProps, serverReference: text() });
const authProps = opt({ authMethod: text(), authData: bytes(), reasonString: text(), userProps });

const v5 = <T>(level: ProtocolLevel, a: fc.Arbitrary<T>): fc.Arbitrary<T | Record<string, never>> => (level === 5 ? a : fc.constant({}));

export function connect(level: ProtocolLevel): fc.Arbitrary<Packet> {
  const will = fc.option(record({ topic: topicName, payload: bytes(), qos, retain: fc.boolean(), props: v5(level, willProps) }), {
    nil: null,
  });
  return fc
    .record({
      clean: fc.boolean(),
      keepAlive: u16,
      clientId: text(),
      will,
      username: fc.option(text(), { nil: null }),
      password: fc.option(bytes(), { nil: null }),
      props: v5(level, connectProps),
    })
    .map((r) => ({
      type: 'connect' as const,
      protocolName: level === 3 ? ('MQIsdp' as const) : ('MQTT' as const),
      level,
      ...r,
      // Before 5.0 a password needs a user name [MQTT-3.1.2-22].
      password: level < 5 && r.username === null ? null : r.password,
    }));
}

export function connack(level: ProtocolLevel): fc.Arbitrary<Packet> {
  return record({
    type: fc.constant('connack' as const),
    sessionPresent: fc.boolean(),
    code: codeFrom(level === 5 ? CODES_V5.connack : CODES_V4.connack),
    props: v5(level, connackProps),
  });
}

export function publish(level: ProtocolLevel, toClient: boolean): fc.Arbitrary<Packet> {
  return fc
    .record({
      qos,
      dup: fc.boolean(),
      retain: fc.boolean(),
      topic: topicName,
      pid,
      payload: bytes(64),
      props: v5(level, publishProps(toClient)),
      aliasOnly: fc.boolean(),
    })
    .map(({ qos: q, dup, retain, topic, pid: id, payload, props, aliasOnly }) => {
      // With a Topic Alias the topic may be empty in 5.0 [MQTT-3.3.2-1].
      const t = aliasOnly && (props as { topicAlias?: number }).topicAlias !== undefined ? '' : topic;
      const base = { type: 'publish' as const, dup: q > 0 && dup, qos: q, retain, topic: t };
      return q === 0 ? { ...base, payload, props } : { ...base, pid: id, payload, props };
    });
}

export function ack(level: ProtocolLevel): fc.Arbitrary<Packet> {
  return fc.constantFrom('puback' as const, 'pubrec' as const, 'pubrel' as const, 'pubcomp' as const).chain((type) =>
    record({
      type: fc.constant(type),
      pid,
      code: level === 5 ? codeFrom(type === 'puback' || type === 'pubrec' ? CODES_V5.puback : CODES_V5.pubrel) : fc.constant(0),
      props: v5(level, ackProps),
    }),
  );
}

export function subscribe(level: ProtocolLevel): fc.Arbitrary<Packet> {
  const sub =
    level === 5
      ? record({ filter, qos, nl: fc.boolean(), rap: fc.boolean(), rh: fc.constantFrom<0 | 1 | 2>(0, 1, 2) })
      : record({ filter, qos, nl: fc.constant(false), rap: fc.constant(false), rh: fc.constant<0>(0) });
  return record({
    type: fc.constant('subscribe' as const),
    pid,
    subs: fc.array(sub, { minLength: 1, maxLength: 4 }),
    props: v5(level, opt({ subId, userProps })),
  });
}

export function suback(level: ProtocolLevel): fc.Arbitrary<Packet> {
  return record({
    type: fc.constant('suback' as const),
    pid,
    codes: fc.array(codeFrom(level === 5 ? CODES_V5.suback : CODES_V4.suback), { minLength: 1, maxLength: 4 }),
    props: v5(level, ackProps),
  });
}

export function unsubscribe(level: ProtocolLevel): fc.Arbitrary<Packet> {
  return record({
    type: fc.constant('unsubscribe' as const),
    pid,
    filters: fc.array(filter, { minLength: 1, maxLength: 4 }),
    props: v5(level, opt({ userProps })),
  });
}

export function unsuback(level: ProtocolLevel): fc.Arbitrary<Packet> {
  return record({
    type: fc.constant('unsuback' as const),
    pid,
    codes: level === 5 ? fc.array(codeFrom(CODES_V5.unsuback), { minLength: 1, maxLength: 4 }) : fc.constant<number[]>([]),
    props: v5(level, ackProps),
  });
}

export function disconnect(level: ProtocolLevel): fc.Arbitrary<Packet> {
  return record({
    type: fc.constant('disconnect' as const),
    code: level === 5 ? codeFrom(CODES_V5.disconnect) : fc.constant(0),
    props: v5(level, disconnectProps),
  });
}

export function auth(): fc.Arbitrary<Packet> {
  return record({ type: fc.constant('auth' as const), code: codeFrom(CODES_V5.auth), props: authProps });
}

/** Packets a client sends (CONNECT excluded: it opens the stream). */
export function toServer(level: ProtocolLevel): fc.Arbitrary<Packet> {
  const list = [
    publish(level, false),
    ack(level),
    subscribe(level),
    unsubscribe(level),
    fc.constant<Packet>({ type: 'pingreq' }),
    disconnect(level),
  ];
  return fc.oneof(...(level === 5 ? [...list, auth()] : list));
}

/** Packets a server sends. */
export function toClient(level: ProtocolLevel): fc.Arbitrary<Packet> {
  const list = [
    connack(level),
    publish(level, true),
    ack(level),
    suback(level),
    unsuback(level),
    fc.constant<Packet>({ type: 'pingresp' }),
    disconnect(level),
  ];
  return fc.oneof(...(level === 5 ? [...list, auth()] : list));
}

export const level = fc.constantFrom<ProtocolLevel>(3, 4, 5);
