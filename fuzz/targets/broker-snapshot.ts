// Broker snapshots (src/broker/snapshot.ts decodeImage, through Broker.restore): the bytes a
// leader sends a follower in InstallSnapshot, and a node restores after a restart. Rules: restore
// throws nothing but SnapshotError; a restored broker's indexes agree with its records (verify);
// its digest and a new snapshot can be taken; and it applies a tick and a publish without
// breaking (an image of a broker that had failed restores as failed, and stays so).
import fc from 'fast-check';
import { Packr } from 'msgpackr';
import { Broker } from '../../src/broker/broker.js';
import type { Command, Effect } from '../../src/broker/commands.js';
import { SnapshotError } from '../../src/broker/snapshot.js';
import { check, type FuzzInput, type FuzzTarget, MSGPACK_TOKENS, onlyTyped, valueMutated } from '../harness.js';
import { commandArb } from './command-codec.js';

const T0 = 1_700_000_000_000;
const packr = new Packr({ useRecords: false, mapsAsObjects: true });

/** A broker after these commands (indexes from 1), with the setup of command-codec.ts first. */
function brokerAfter(cmds: readonly Command[]): Broker {
  const b = new Broker();
  const setup: Command[] = [
    {
      t: 'serve-start',
      node: 1,
      settings: {
        maxQueuedMessages: 100,
        maxQueuedBytes: 1 << 20,
        maxInflight: 2,
        maxQos: 2,
        retainAvailable: true,
        maxPacketSize: 1 << 20,
        willGraceS: 30,
        maxSubscriptions: 0,
        acl: [{ kind: 'pattern', user: null, access: 'readwrite', filter: '#' }],
        bridgeRules: [{ bridge: 'up', pattern: '#', direction: 'out', qos: 1, localPrefix: '', remotePrefix: 'r/' }],
        bridgeOutboxMessages: 4,
        bridgeOutboxBytes: 1 << 20,
      },
    },
    ...(['1.1', '1.2'] as const).map(
      (conn, i): Command => ({
        t: 'connect',
        conn,
        clientId: `dev${i + 1}`,
        protocol: 5,
        clean: false,
        expiryS: 600,
        will: {
          msg: { topic: 'w', payload: Uint8Array.of(1), qos: 1, retain: true, props: { expiryS: 60, userProps: [['k', 'v']] } },
          delayS: 5,
        },
        username: 'u',
        receiveMax: 2,
        maxPacketSize: 0,
        problemInfo: true,
      }),
    ),
    { t: 'subscribe', conn: '1.2', pid: 1, subs: [{ filter: 'a/#', qos: 2, nl: false, rap: true, rh: 0 }], subId: 3 },
    { t: 'subscribe', conn: '1.1', pid: 1, subs: [{ filter: '$share/g/a/+', qos: 1, nl: false, rap: false, rh: 0 }] },
    ...cmds,
  ];
  setup.forEach((cmd, i) => {
    b.apply({ index: i + 1, time: T0 + i * 10, cmd }, []);
  });
  return b;
}

function snapshotOf(b: Broker): Uint8Array {
  return new Uint8Array(Buffer.concat([...b.snapshot()]));
}

const images = fc.array(commandArb, { maxLength: 6 }).map((cmds) => snapshotOf(brokerAfter(cmds)));

export function runBrokerSnapshot(input: FuzzInput): void {
  const b = new Broker();
  const restored = onlyTyped(
    () => {
      b.restore([input.data]);
      return true;
    },
    (e) => e instanceof SnapshotError,
    'Broker.restore',
  );
  if (restored === undefined) return;
  const problem = onlyTyped(
    () => b.verify(),
    () => false,
    'verify after restore',
  );
  check(problem === null, `a restored snapshot breaks the broker's indexes: ${problem}`);
  onlyTyped(
    () => {
      b.digest();
      snapshotOf(b);
    },
    () => false,
    'a digest or snapshot of a restored broker',
  );
  // An image may carry a broker that failed before it was taken: replicated state like the rest.
  const failedBefore = b.failed;
  const out: Effect[] = [];
  const at = b.appliedIndex + 1;
  const time = b.appliedTime + 1 + (input.knob % 1000) * 1000;
  b.apply({ index: at, time, cmd: { t: 'tick' } }, out);
  b.apply(
    {
      index: at + 1,
      time,
      cmd: { t: 'publish', conn: '1.1', pid: 9, msg: { topic: 'a/b', payload: Uint8Array.of(7), qos: 2, retain: true } },
    },
    out,
  );
  check(b.failed === failedBefore, `a restored broker breaks on apply: ${b.failed}`);
  check(b.verify() === null, `a restored broker's indexes after apply: ${b.verify()}`);
}

export const brokerSnapshot: FuzzTarget = {
  name: 'broker-snapshot',
  modules: ['src/broker/snapshot.ts', 'src/broker/validate.ts'],
  valid: fc.oneof(
    images,
    valueMutated(images.map((b) => packr.unpack(b))).map((v) => packr.pack(v) as Uint8Array),
  ),
  dictionary: MSGPACK_TOKENS,
  maxBytes: 2048,
  run: runBrokerSnapshot,
  quickRuns: 250,
};

/** Seed corpus: an empty broker, one with sessions, subscriptions, wills, retained messages, a
 * queue and messages in flight, and one with a pending will of a dropped connection. */
export function snapshotCorpus(): Uint8Array[] {
  const busy: Command[] = [
    {
      t: 'publish',
      conn: '1.1',
      pid: 2,
      msg: { topic: 'a/b', payload: Uint8Array.of(1, 2), qos: 2, retain: true, props: { contentType: 't' } },
    },
    { t: 'publish', conn: '1.1', pid: 3, msg: { topic: 'a/c', payload: Uint8Array.of(3), qos: 1, retain: false } },
    { t: 'publish', conn: '1.1', pid: 4, msg: { topic: 'a/d', payload: Uint8Array.of(4), qos: 1, retain: false } },
    { t: 'publish', conn: '1.2', msg: { topic: 'a/e', payload: new Uint8Array(0), qos: 0, retain: false } },
    { t: 'pubrel', conn: '1.1', pid: 2 },
  ];
  const dropped: Command[] = [...busy, { t: 'disconnect', conn: '1.2', reason: 0x8d, publishWill: true }];
  return [snapshotOf(new Broker()), snapshotOf(brokerAfter([])), snapshotOf(brokerAfter(busy)), snapshotOf(brokerAfter(dropped))];
}
