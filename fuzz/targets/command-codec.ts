// The command codec (src/log/command-codec.ts): the bytes of a raft log entry a broker applies.
// Rules: decodeCommand throws nothing but CommandDecodeError; a command it returns is applied by
// a broker without breaking it (apply judges the content and never throws on it: a command from
// a log entry is as untrusted as a packet), and the broker's indexes still agree with its records.
import fc from 'fast-check';
import { Packr } from 'msgpackr';
import { Broker } from '../../src/broker/broker.js';
import { testSettings } from '../../src/broker/broker-harness.testkit.js';
import type { Command, Effect, Message, Settings } from '../../src/broker/commands.js';
import { CommandDecodeError, decodeCommand, encodeCommand } from '../../src/log/command-codec.js';
import { check, type FuzzInput, type FuzzTarget, MSGPACK_TOKENS, onlyTyped, valueMutated } from '../harness.js';

const T0 = 1_700_000_000_000;
const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });
const SETTINGS: Settings = {
  ...testSettings,
  maxInflight: 8,
  bridgeRules: [{ bridge: 'up', pattern: 'a/#', direction: 'out', qos: 1, localPrefix: '', remotePrefix: 'r/' }],
  bridgeOutboxMessages: 4,
};

/** Connection ids are PERIOD.SEQ: 1 is the serving period of the setup, 0 an ended one. */
const conn = fc.constantFrom('1.1', '1.2', '1.3', '0.9', 'x');
const pid = fc.integer({ min: 0, max: 0x10000 });
const qos = fc.constantFrom<0 | 1 | 2>(0, 1, 2);
const topic = fc.constantFrom('a', 'a/b', '$SYS/x', '', 'a/+', '#');
const message: fc.Arbitrary<Message> = fc.record({
  topic,
  payload: fc.uint8Array({ maxLength: 16 }),
  qos,
  retain: fc.boolean(),
});

/** Commands of every type, mostly valid, applied against a broker with sessions on connections 1.1 and 1.2. */
export const commandArb: fc.Arbitrary<Command> = fc.oneof(
  fc.record({ t: fc.constant('publish' as const), conn, pid: fc.integer({ min: 1, max: 0xffff }), msg: message }),
  fc.record({ t: fc.constant('publish' as const), conn, msg: message }),
  fc.record({ t: fc.constant('ack' as const), conn, pid, kind: fc.constantFrom('puback', 'pubrec', 'pubcomp') }),
  fc.record({
    t: fc.constant('acks' as const),
    conn,
    acks: fc.array(fc.record({ pid, kind: fc.constantFrom('puback', 'pubrec', 'pubcomp') }), { minLength: 1, maxLength: 4 }),
  }),
  fc
    .tuple(
      conn,
      fc.array(fc.record({ pid: fc.option(fc.integer({ min: 1, max: 0xffff }), { nil: undefined }), msg: message, rel: fc.boolean() }), {
        minLength: 2,
        maxLength: 4,
      }),
    )
    .map(
      ([c, items]): Command => ({
        t: 'publishes',
        conn: c,
        pubs: items.map(({ pid: id, msg, rel }) => {
          if (rel) return { t: 'pubrel', conn: c, pid: id ?? 1 };
          return id === undefined ? { t: 'publish', conn: c, msg } : { t: 'publish', conn: c, pid: id, msg };
        }),
      }),
    ),
  fc.record({ t: fc.constant('pubrel' as const), conn, pid }),
  fc.record({
    t: fc.constant('subscribe' as const),
    conn,
    pid,
    subs: fc.array(fc.record({ filter: topic, qos, nl: fc.boolean(), rap: fc.boolean(), rh: qos }), { maxLength: 3 }),
  }),
  fc.record({ t: fc.constant('unsubscribe' as const), conn, pid, filters: fc.array(topic, { maxLength: 3 }) }),
  fc.record({ t: fc.constant('disconnect' as const), conn, reason: fc.integer({ min: 0, max: 255 }), publishWill: fc.boolean() }),
  fc.record({
    t: fc.constant('connect' as const),
    conn,
    clientId: fc.option(fc.constantFrom('dev1', 'dev2')),
    protocol: fc.constantFrom<3 | 4 | 5>(3, 4, 5),
    clean: fc.boolean(),
    expiryS: fc.nat(),
    will: fc.option(fc.record({ msg: message, delayS: fc.nat(100) })),
    username: fc.option(fc.constant('u')),
    receiveMax: fc.integer({ min: 1, max: 0xffff }),
    maxPacketSize: fc.nat(),
    problemInfo: fc.boolean(),
  }),
  fc.constant<Command>({ t: 'tick' }),
  fc.constant<Command>({ t: 'settings', settings: SETTINGS }),
  fc.record({
    t: fc.constant('bridge-position' as const),
    bridge: fc.constantFrom('up', 'down', '', 'a/b'),
    below: fc.integer({ min: -1, max: 40 }),
  }),
  fc.record({
    t: fc.constant('check' as const),
    atIndex: fc.nat(),
    digest: fc.string({ unit: fc.constantFrom(...'0123456789abcdef'), maxLength: 8 }),
  }),
) as fc.Arbitrary<Command>;

function connectOf(c: string, clientId: string): Command {
  return {
    t: 'connect',
    conn: c,
    clientId,
    protocol: 5,
    clean: false,
    expiryS: 60,
    will: { msg: { topic: 'w', payload: new Uint8Array(1), qos: 1, retain: false }, delayS: 1 },
    username: null,
    receiveMax: 10,
    maxPacketSize: 0,
    problemInfo: true,
  };
}

/** A broker that serves, with two sessions and a subscription, so that commands reach their code. */
function newBroker(): { b: Broker; index: number } {
  const b = new Broker();
  const setup: Command[] = [
    { t: 'serve-start', node: 1, settings: SETTINGS },
    connectOf('1.1', 'dev1'),
    connectOf('1.2', 'dev2'),
    { t: 'subscribe', conn: '1.2', pid: 1, subs: [{ filter: 'a/#', qos: 2, nl: false, rap: false, rh: 0 }] },
  ];
  setup.forEach((cmd, i) => {
    b.apply({ index: i + 1, time: T0 + i, cmd }, []);
  });
  return { b, index: setup.length };
}

export function runCommandCodec(input: FuzzInput): void {
  const cmd = onlyTyped(
    () => decodeCommand(input.data),
    (e) => e instanceof CommandDecodeError,
    'decodeCommand',
  );
  if (cmd === undefined) return;
  const { b, index } = newBroker();
  const out: Effect[] = [];
  b.apply({ index: index + 1, time: T0 + 10, cmd }, out);
  // A tick far later fires every deadline the command may have set.
  b.apply({ index: index + 2, time: T0 + 10 + (input.knob % 100_000) * 1000, cmd: { t: 'tick' } }, out);
  check(b.failed === null, `applying a decoded ${String((cmd as { t?: unknown }).t)} broke the broker: ${b.failed}`);
  const problem = b.verify();
  check(problem === null, `after a decoded ${String((cmd as { t?: unknown }).t)}: ${problem}`);
}

export const commandCodec: FuzzTarget = {
  name: 'command-codec',
  modules: ['src/log/command-codec.ts', 'src/broker/validate.ts'],
  valid: fc.oneof(
    commandArb.map((c) => encodeCommand(c)),
    valueMutated(commandArb).map((v) => packr.pack(v) as Uint8Array),
  ),
  dictionary: MSGPACK_TOKENS,
  run: runCommandCodec,
  quickRuns: 300,
};

/** Seed corpus: one command of each kind. */
export function commandCorpus(): Uint8Array[] {
  const msg: Message = { topic: 'a/b', payload: Uint8Array.of(1, 2, 3), qos: 1, retain: true };
  const cmds: Command[] = [
    { t: 'serve-start', node: 1, settings: SETTINGS, configHash: 'ab', generation: 1 },
    { t: 'settings', settings: SETTINGS },
    connectOf('1.1', 'dev1'),
    { t: 'disconnect', conn: '1.1', reason: 0, publishWill: true, expiryS: 5 },
    { t: 'subscribe', conn: '1.1', pid: 2, subs: [{ filter: 'a/+', qos: 1, nl: true, rap: false, rh: 2 }], subId: 7 },
    { t: 'unsubscribe', conn: '1.1', pid: 3, filters: ['a/+'] },
    { t: 'publish', conn: '1.1', pid: 4, msg },
    { t: 'publish', conn: '1.1', msg: { ...msg, qos: 0, retain: false } },
    { t: 'publish', conn: '1.1', pid: 5, msg: { ...msg, props: { expiryS: 3, contentType: 'x', userProps: [['k', 'v']] } } },
    {
      t: 'publishes',
      conn: '1.1',
      pubs: [
        { t: 'publish', conn: '1.1', pid: 6, msg },
        { t: 'publish', conn: '1.1', msg: { ...msg, qos: 0 } },
        { t: 'pubrel', conn: '1.1', pid: 6 },
      ],
    },
    { t: 'pubrel', conn: '1.1', pid: 4 },
    { t: 'ack', conn: '1.2', pid: 1, kind: 'puback' },
    {
      t: 'acks',
      conn: '1.2',
      acks: [
        { pid: 1, kind: 'pubrec' },
        { pid: 2, kind: 'pubcomp' },
      ],
    },
    { t: 'tick' },
    { t: 'check', atIndex: 3, digest: '00ff' },
  ];
  return cmds.map((c) => encodeCommand(c));
}
