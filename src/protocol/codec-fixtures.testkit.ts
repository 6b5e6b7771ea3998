// Hand-written packets and their exact bytes, for every packet type and level: the codec's
// fixtures (codec-fixtures.test.ts) and the seed corpus of the MQTT decoder's fuzz target.
// Imported by tests and the fuzz harness only.
import { frame, str, u16, u32 } from './codec.testkit.js';
import type { Packet, ProtocolLevel } from './packets.js';
import { RC } from './reason-codes.js';
export interface Fixture {
  name: string;
  level: ProtocolLevel;
  packet: Packet;
  bytes: Buffer;
  /** Decode as a client (a PUBLISH carrying Subscription Identifiers). */
  toClient?: boolean;
}

/** A property block: the Variable Byte Integer length, then the properties. */
function props(...entries: (number | number[])[]): number[] {
  const flat = entries.flat();
  return [...vbi(flat.length), ...flat];
}

function vbi(n: number): number[] {
  const out: number[] = [];
  let v = n;
  do {
    let b = v % 128;
    v = Math.floor(v / 128);
    if (v > 0) b |= 0x80;
    out.push(b);
  } while (v > 0);
  return out;
}

const user = (k: string, v: string): number[] => [0x26, ...str(k), ...str(v)];
const bin = (s: string): Buffer => Buffer.from(s, 'utf8');

export const fixtures: Fixture[] = [
  {
    name: '3.1.1 CONNECT, clean, no will, no credentials',
    level: 4,
    packet: {
      type: 'connect',
      protocolName: 'MQTT',
      level: 4,
      clean: true,
      keepAlive: 60,
      clientId: 'c1',
      will: null,
      username: null,
      password: null,
      props: {},
    },
    bytes: frame(0x10, str('MQTT'), 4, 0x02, u16(60), str('c1')),
  },
  {
    name: '3.1 CONNECT with will QoS 2 retained, user name and password',
    level: 3,
    packet: {
      type: 'connect',
      protocolName: 'MQIsdp',
      level: 3,
      clean: true,
      keepAlive: 10,
      clientId: 'cid',
      will: { topic: 'w/t', payload: bin('bye'), qos: 2, retain: true, props: {} },
      username: 'user',
      password: bin('pw'),
      props: {},
    },
    bytes: frame(0x10, str('MQIsdp'), 3, 0xf6, u16(10), str('cid'), str('w/t'), str('bye'), str('user'), str('pw')),
  },
  {
    name: '3.1.1 CONNECT with an empty client id, not clean, user name only, U+FEFF kept',
    level: 4,
    packet: {
      type: 'connect',
      protocolName: 'MQTT',
      level: 4,
      clean: false,
      keepAlive: 0,
      clientId: '',
      will: null,
      username: '\uFEFFu',
      password: null,
      props: {},
    },
    bytes: frame(0x10, str('MQTT'), 4, 0x80, u16(0), str(''), str('\uFEFFu')),
  },
  {
    name: '5.0 CONNECT with properties, will properties and repeated user properties in order',
    level: 5,
    packet: {
      type: 'connect',
      protocolName: 'MQTT',
      level: 5,
      clean: true,
      keepAlive: 30,
      clientId: 'dev-1',
      will: {
        topic: 'status/dev-1',
        payload: bin('offline'),
        qos: 1,
        retain: false,
        props: { payloadFormat: 1, messageExpiry: 600, contentType: 'text/plain', willDelay: 5, userProps: [['w', '1']] },
      },
      username: null,
      password: bin('secret'),
      props: {
        sessionExpiry: 3600,
        authMethod: 'SCRAM',
        authData: bin('x'),
        requestProblemInfo: 0,
        requestResponseInfo: 1,
        receiveMax: 20,
        topicAliasMax: 10,
        maxPacketSize: 65536,
        userProps: [
          ['a', '1'],
          ['b', '2'],
          ['a', '3'],
        ],
      },
    },
    bytes: frame(
      0x10,
      str('MQTT'),
      5,
      0x4e,
      u16(30),
      props(
        [0x11, ...u32(3600)],
        [0x15, ...str('SCRAM')],
        [0x16, ...str('x')],
        [0x17, 0],
        [0x19, 1],
        [0x21, ...u16(20)],
        [0x22, ...u16(10)],
        [0x27, ...u32(65536)],
        user('a', '1'),
        user('b', '2'),
        user('a', '3'),
      ),
      str('dev-1'),
      props([0x01, 1], [0x02, ...u32(600)], [0x03, ...str('text/plain')], [0x18, ...u32(5)], user('w', '1')),
      str('status/dev-1'),
      str('offline'),
      str('secret'),
    ),
  },
  {
    name: '3.1.1 CONNACK with session present',
    level: 4,
    packet: { type: 'connack', sessionPresent: true, code: 0, props: {} },
    bytes: frame(0x20, 1, 0),
  },
  {
    name: '3.1.1 CONNACK refusing bad credentials',
    level: 4,
    packet: { type: 'connack', sessionPresent: false, code: 4, props: {} },
    bytes: frame(0x20, 0, 4),
  },
  {
    name: '5.0 CONNACK with every kind of server property',
    level: 5,
    packet: {
      type: 'connack',
      sessionPresent: false,
      code: RC.SUCCESS,
      props: {
        sessionExpiry: 60,
        assignedClientId: 'auto-1',
        serverKeepAlive: 120,
        responseInfo: 'ri',
        serverReference: 'other:1883',
        reasonString: 'ok',
        receiveMax: 64,
        topicAliasMax: 10,
        maxQos: 1,
        retainAvailable: 0,
        maxPacketSize: 1048576,
        wildcardAvailable: 1,
        subIdAvailable: 1,
        sharedAvailable: 0,
        userProps: [['k', 'v']],
      },
    },
    bytes: frame(
      0x20,
      0,
      0,
      props(
        [0x11, ...u32(60)],
        [0x12, ...str('auto-1')],
        [0x13, ...u16(120)],
        [0x1a, ...str('ri')],
        [0x1c, ...str('other:1883')],
        [0x1f, ...str('ok')],
        [0x21, ...u16(64)],
        [0x22, ...u16(10)],
        [0x24, 1],
        [0x25, 0],
        [0x27, ...u32(1048576)],
        [0x28, 1],
        [0x29, 1],
        [0x2a, 0],
        user('k', 'v'),
      ),
    ),
  },
  {
    name: '5.0 CONNACK refusing with reason code 0x87',
    level: 5,
    packet: { type: 'connack', sessionPresent: false, code: RC.NOT_AUTHORIZED, props: {} },
    bytes: frame(0x20, 0, 0x87, 0),
  },
  {
    name: '3.1.1 PUBLISH QoS 0',
    level: 4,
    packet: { type: 'publish', dup: false, qos: 0, retain: false, topic: 'a/b', payload: bin('hello'), props: {} },
    bytes: frame(0x30, str('a/b'), [...bin('hello')]),
  },
  {
    name: '3.1.1 PUBLISH QoS 1 with DUP and retain and an empty payload',
    level: 4,
    packet: { type: 'publish', dup: true, qos: 1, retain: true, topic: 't', pid: 10, payload: bin(''), props: {} },
    bytes: frame(0x3b, str('t'), u16(10)),
  },
  {
    name: '3.1 PUBLISH QoS 2 with a multi-byte topic',
    level: 3,
    packet: { type: 'publish', dup: false, qos: 2, retain: false, topic: 'домой/€', pid: 1, payload: bin('x'), props: {} },
    bytes: frame(0x34, str('домой/€'), u16(1), [...bin('x')]),
  },
  {
    name: '5.0 PUBLISH QoS 2 with every client property',
    level: 5,
    packet: {
      type: 'publish',
      dup: false,
      qos: 2,
      retain: false,
      topic: 's/x',
      pid: 65535,
      payload: bin('{}'),
      props: {
        payloadFormat: 1,
        messageExpiry: 30,
        contentType: 'application/json',
        responseTopic: 'r/x',
        correlationData: bin('c'),
        topicAlias: 3,
        userProps: [
          ['z', ''],
          ['', 'a'],
        ],
      },
    },
    bytes: frame(
      0x34,
      str('s/x'),
      u16(65535),
      props(
        [0x01, 1],
        [0x02, ...u32(30)],
        [0x03, ...str('application/json')],
        [0x08, ...str('r/x')],
        [0x09, ...str('c')],
        [0x23, ...u16(3)],
        user('z', ''),
        user('', 'a'),
      ),
      [...bin('{}')],
    ),
  },
  {
    name: '5.0 PUBLISH with an empty topic and a Topic Alias',
    level: 5,
    packet: { type: 'publish', dup: false, qos: 0, retain: false, topic: '', payload: bin('p'), props: { topicAlias: 4 } },
    bytes: frame(0x30, str(''), props([0x23, ...u16(4)]), [...bin('p')]),
  },
  {
    name: '5.0 PUBLISH to a client with two Subscription Identifiers',
    level: 5,
    toClient: true,
    packet: { type: 'publish', dup: false, qos: 1, retain: false, topic: 't', pid: 2, payload: bin(''), props: { subIds: [1, 128] } },
    bytes: frame(0x32, str('t'), u16(2), props([0x0b, 1], [0x0b, 0x80, 0x01])),
  },
  {
    name: '3.1.1 PUBACK',
    level: 4,
    packet: { type: 'puback', pid: 1, code: 0, props: {} },
    bytes: frame(0x40, u16(1)),
  },
  {
    name: '5.0 PUBACK with reason code 0 and no properties is two bytes long',
    level: 5,
    packet: { type: 'puback', pid: 5, code: 0, props: {} },
    bytes: frame(0x40, u16(5)),
  },
  {
    name: '5.0 PUBREC with a reason code and no properties',
    level: 5,
    packet: { type: 'pubrec', pid: 2, code: RC.NO_MATCHING_SUBSCRIBERS, props: {} },
    bytes: frame(0x50, u16(2), 0x10),
  },
  {
    name: '3.1.1 PUBREL',
    level: 4,
    packet: { type: 'pubrel', pid: 3, code: 0, props: {} },
    bytes: frame(0x62, u16(3)),
  },
  {
    name: '5.0 PUBREL with a reason string',
    level: 5,
    packet: { type: 'pubrel', pid: 3, code: 0, props: { reasonString: 'again' } },
    bytes: frame(0x62, u16(3), 0, props([0x1f, ...str('again')])),
  },
  {
    name: '5.0 PUBCOMP with a reason code and properties',
    level: 5,
    packet: { type: 'pubcomp', pid: 4, code: RC.PACKET_IDENTIFIER_NOT_FOUND, props: { reasonString: 'gone', userProps: [['a', 'b']] } },
    bytes: frame(0x70, u16(4), 0x92, props([0x1f, ...str('gone')], user('a', 'b'))),
  },
  {
    name: '3.1.1 SUBSCRIBE with two filters',
    level: 4,
    packet: {
      type: 'subscribe',
      pid: 10,
      props: {},
      subs: [
        { filter: 'a/+', qos: 1, nl: false, rap: false, rh: 0 },
        { filter: '#', qos: 2, nl: false, rap: false, rh: 0 },
      ],
    },
    bytes: frame(0x82, u16(10), str('a/+'), 1, str('#'), 2),
  },
  {
    name: '5.0 SUBSCRIBE with a Subscription Identifier and every option',
    level: 5,
    packet: {
      type: 'subscribe',
      pid: 11,
      props: { subId: 300, userProps: [['u', 'v']] },
      subs: [
        { filter: '$share/g/x', qos: 2, nl: true, rap: true, rh: 1 },
        { filter: 'y', qos: 0, nl: false, rap: false, rh: 2 },
      ],
    },
    bytes: frame(0x82, u16(11), props([0x0b, 0xac, 0x02], user('u', 'v')), str('$share/g/x'), 0x1e, str('y'), 0x20),
  },
  {
    name: '3.1.1 SUBACK with a failure',
    level: 4,
    packet: { type: 'suback', pid: 10, codes: [1, 0x80], props: {} },
    bytes: frame(0x90, u16(10), 1, 0x80),
  },
  {
    name: '5.0 SUBACK with a reason string',
    level: 5,
    packet: { type: 'suback', pid: 11, codes: [RC.GRANTED_QOS_2, RC.TOPIC_FILTER_INVALID], props: { reasonString: 'bad filter' } },
    bytes: frame(0x90, u16(11), props([0x1f, ...str('bad filter')]), 2, 0x8f),
  },
  {
    name: '3.1.1 UNSUBSCRIBE',
    level: 4,
    packet: { type: 'unsubscribe', pid: 12, filters: ['a/+', 'b'], props: {} },
    bytes: frame(0xa2, u16(12), str('a/+'), str('b')),
  },
  {
    name: '5.0 UNSUBSCRIBE with a user property',
    level: 5,
    packet: { type: 'unsubscribe', pid: 13, filters: ['x/#'], props: { userProps: [['k', 'v']] } },
    bytes: frame(0xa2, u16(13), props(user('k', 'v')), str('x/#')),
  },
  {
    name: '3.1.1 UNSUBACK',
    level: 4,
    packet: { type: 'unsuback', pid: 12, codes: [], props: {} },
    bytes: frame(0xb0, u16(12)),
  },
  {
    name: '5.0 UNSUBACK with reason codes',
    level: 5,
    packet: { type: 'unsuback', pid: 13, codes: [RC.SUCCESS, RC.NO_SUBSCRIPTION_EXISTED], props: {} },
    bytes: frame(0xb0, u16(13), 0, 0x00, 0x11),
  },
  { name: '3.1.1 PINGREQ', level: 4, packet: { type: 'pingreq' }, bytes: frame(0xc0) },
  { name: '5.0 PINGRESP', level: 5, packet: { type: 'pingresp' }, bytes: frame(0xd0) },
  {
    name: '3.1.1 DISCONNECT',
    level: 4,
    packet: { type: 'disconnect', code: 0, props: {} },
    bytes: frame(0xe0),
  },
  {
    name: '5.0 DISCONNECT with reason code 0 and no properties is empty',
    level: 5,
    packet: { type: 'disconnect', code: 0, props: {} },
    bytes: frame(0xe0),
  },
  {
    name: '5.0 DISCONNECT with only a reason code',
    level: 5,
    packet: { type: 'disconnect', code: RC.DISCONNECT_WITH_WILL, props: {} },
    bytes: frame(0xe0, 0x04),
  },
  {
    name: '5.0 DISCONNECT with a reason code and properties',
    level: 5,
    packet: {
      type: 'disconnect',
      code: RC.SESSION_TAKEN_OVER,
      props: { sessionExpiry: 0, reasonString: 'taken', serverReference: 'b:1883' },
    },
    bytes: frame(0xe0, 0x8e, props([0x11, ...u32(0)], [0x1c, ...str('b:1883')], [0x1f, ...str('taken')])),
  },
  {
    name: '5.0 AUTH continuing an exchange',
    level: 5,
    packet: { type: 'auth', code: RC.CONTINUE_AUTHENTICATION, props: { authMethod: 'SCRAM', authData: bin('nonce') } },
    bytes: frame(0xf0, 0x18, props([0x15, ...str('SCRAM')], [0x16, ...str('nonce')])),
  },
  {
    name: '5.0 AUTH success with no properties is empty',
    level: 5,
    packet: { type: 'auth', code: RC.SUCCESS, props: {} },
    bytes: frame(0xf0),
  },
];
