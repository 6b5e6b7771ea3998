import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Packr } from 'msgpackr';
import { Broker } from './broker.js';
import { testSettings } from './broker-harness.testkit.js';
import type { Command } from './commands.js';
import { SNAPSHOT_ERROR, SnapshotError } from './snapshot.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });

/** An MQTT 5 client 'dev' with a persistent session (expiry 60 s) on connection 1.1. */
const DEV_CONNECT: Command = {
  t: 'connect',
  conn: '1.1',
  clientId: 'dev',
  protocol: 5,
  clean: false,
  expiryS: 60,
  will: null,
  username: null,
  receiveMax: 5,
  maxPacketSize: 0,
  problemInfo: true,
};

/** Applies the commands at indexes 1, 2, … and times 1000, 1001, …, effects dropped. */
function applyAll(b: Broker, cmds: readonly Command[]): void {
  cmds.forEach((cmd, i) => {
    b.apply({ index: i + 1, time: 1000 + i, cmd }, []);
  });
}

describe('snapshot restore of hostile images (found by fuzz/targets/broker-snapshot.ts)', () => {
  it('refuses a version that is a map with a toString key with SnapshotError, not a TypeError', () => {
    // The root array's version field as {toString: 1}: String() of it threw in the refusal.
    const image = Buffer.from('9bde0001a8746f537472696e670106cb4278bcfe56832000019964ce001000000802c3ce001000001e00c0c00090909090', 'hex');
    for (const bytes of [image, packr.pack([{ toString: 1 }, 0, 0, 0, null, null, 0, [], [], [], []]), packr.pack([3n ** 40n])]) {
      assert.throws(
        () => new Broker().restore([bytes]),
        (e: unknown) =>
          e instanceof SnapshotError && e.code === SNAPSHOT_ERROR.CORRUPT && /^corrupt snapshot: (version of type|root)/.test(e.message),
      );
    }
    assert.throws(() => new Broker().restore([packr.pack([99, 0, 0, 0, null, null, 0, [], [], [], []])]), /corrupt snapshot: version 99/);
  });

  it('refuses packet ids outside 1..65535 in a session, which left the broker unable to assign one', () => {
    // A session's next packet id of 0 passed, and the next delivery broke the broker with "no
    // free packet id" (its state machine failed).
    const b = new Broker();
    const settings = { ...testSettings };
    const cmds: Command[] = [
      { t: 'serve-start', node: 1, settings },
      DEV_CONNECT,
      { t: 'subscribe', conn: '1.1', pid: 1, subs: [{ filter: 'a', qos: 1, nl: false, rap: false, rh: 0 }] },
      { t: 'publish', conn: '1.1', pid: 2, msg: { topic: 'a', payload: Uint8Array.of(1), qos: 1, retain: false } },
    ];
    applyAll(b, cmds);
    const image = packr.unpack(Buffer.concat([...b.snapshot()])) as unknown[];
    const session = (image[7] as unknown[][])[0] as unknown[];
    const cases: [number, unknown][] = [
      [12, 0],
      [12, 70_000],
      [9, [0]],
      [10, [[65_536, 'publish', ((session[10] as unknown[][])[0] as unknown[])[2]]]],
    ];
    for (const [field, value] of cases) {
      const copy = structuredClone(image) as unknown[];
      ((copy[7] as unknown[][])[0] as unknown[])[field] = value;
      assert.throws(
        () => new Broker().restore([packr.pack(copy)]),
        (e: unknown) => e instanceof SnapshotError && /^corrupt snapshot: (nextPid|inbound pid|pid)$/.test(e.message),
        `field ${field} = ${JSON.stringify(value)}`,
      );
    }
    const again = new Broker();
    again.restore([packr.pack(image)]);
    assert.equal(again.verify(), null);
  });

  it('refuses a session that breaks a rule apply keeps, before any state is replaced', () => {
    // An online session with an expiry deadline restored and then failed the broker's own check;
    // its deadline would have ended a connected session.
    const b = new Broker();
    const cmds: Command[] = [{ t: 'serve-start', node: 1, settings: { ...testSettings } }, DEV_CONNECT];
    applyAll(b, cmds);
    const image = packr.unpack(Buffer.concat([...b.snapshot()])) as unknown[];
    const will = [['w', Uint8Array.of(1), 0, false, null], 0];
    const cases: [number, unknown, string][] = [
      [13, 5000, 'online with an expiry deadline'],
      [1, null, 'offline with a connection will'],
    ];
    for (const [field, value, problem] of cases) {
      const copy = structuredClone(image) as unknown[];
      const session = (copy[7] as unknown[][])[0] as unknown[];
      session[field] = value;
      if (field === 1) session[5] = will;
      const target = new Broker();
      const before = target.digest();
      assert.throws(
        () => target.restore([packr.pack(copy)]),
        (e: unknown) => e instanceof SnapshotError && e.message === `corrupt snapshot: session dev: ${problem}`,
      );
      assert.equal(target.digest(), before, 'a refused image leaves the broker as it was');
    }
  });
});
