import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { Packr } from 'msgpackr';
import { parseSharedFilter } from '../protocol/topic.js';
import { Broker } from './broker.js';
import { completeSettings, DEFAULT_SETTINGS, isSettings, pickSettings, SETTING_NAMES, type Settings } from './settings.js';
import { decodeImage, SNAPSHOT_VERSION, SnapshotError } from './snapshot.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true });
const FIXTURE = new URL('../../../test/fixtures/snapshot-format-4/broker.snapshot', import.meta.url);

/** The settings the format-4 fixture was written with (its README). */
const FIXTURE_SETTINGS: Settings = {
  maxQueuedMessages: 500,
  maxQueuedBytes: 1_000_000,
  maxInflight: 7,
  maxQos: 1,
  retainAvailable: false,
  maxPacketSize: 65_536,
  willGraceS: 12,
  maxSubscriptions: 40,
  acl: [
    { kind: 'topic', user: null, access: 'read', filter: 'public/#' },
    { kind: 'pattern', user: null, access: 'readwrite', filter: 'devices/%c/#' },
  ],
  bridgeRules: [],
  bridgeOutboxMessages: 10_000,
  bridgeOutboxBytes: 64 * 1024 * 1024,
};

const parseShare = (f: string) => {
  const s = parseSharedFilter(f);
  return s === null ? null : { group: s.group, filter: s.filter };
};

describe('replicated settings from one table', () => {
  it('starts with the values apply used before the first serve-start', () => {
    assert.deepEqual(DEFAULT_SETTINGS, {
      maxQueuedMessages: 10_000,
      maxQueuedBytes: 64 * 1024 * 1024,
      maxInflight: 32,
      maxQos: 2,
      retainAvailable: true,
      maxPacketSize: 1024 * 1024,
      willGraceS: 30,
      maxSubscriptions: 0,
      acl: null,
      bridgeRules: [],
      bridgeOutboxMessages: 10_000,
      bridgeOutboxBytes: 64 * 1024 * 1024,
    });
    assert.ok(isSettings(DEFAULT_SETTINGS));
  });

  it('gives a setting a record leaves out its initial value, and refuses an invalid one', () => {
    const { maxSubscriptions: _left, ...older } = FIXTURE_SETTINGS;
    assert.equal(isSettings(older), false);
    assert.deepEqual(completeSettings(older), { ...FIXTURE_SETTINGS, maxSubscriptions: 0 });
    assert.equal(completeSettings({ ...FIXTURE_SETTINGS, maxInflight: 0 }), null);
    assert.equal(completeSettings({ ...FIXTURE_SETTINGS, maxQos: 3 }), null);
    assert.equal(completeSettings({ ...FIXTURE_SETTINGS, acl: [{ kind: 'pattern', user: 'u', access: 'read', filter: 'a' }] }), null);
    assert.equal(completeSettings([1, 2]), null);
    assert.deepEqual(Object.keys(completeSettings({ ...FIXTURE_SETTINGS, later: 1 }) ?? {}), SETTING_NAMES);
  });

  it("takes the settings from a node's options, leaving out the rest", () => {
    const opts = { ...FIXTURE_SETTINGS, port: 1, acl: undefined, maxSubscriptions: undefined };
    assert.deepEqual(pickSettings(opts), { ...FIXTURE_SETTINGS, acl: null, maxSubscriptions: 0 });
  });

  it('applies a serve-start whose settings predate a setting, with that setting initial', () => {
    const { maxInflight: _left, ...older } = FIXTURE_SETTINGS;
    const b = new Broker();
    b.apply({ index: 1, time: 1000, cmd: { t: 'serve-start', node: 1, settings: older as Settings } }, []);
    assert.equal(b.verify(), null);
    const img = decodeImage(Buffer.concat([...b.snapshot()]), parseShare);
    assert.deepEqual(img.settings, { ...FIXTURE_SETTINGS, maxInflight: 32 });
  });
});

describe('settings in snapshots', () => {
  it('restores a snapshot of format 4 (positional settings) written by the previous encoder', () => {
    const bytes = readFileSync(FIXTURE);
    assert.equal((packr.unpack(bytes) as unknown[])[0], 4);
    const img = decodeImage(bytes, parseShare);
    assert.deepEqual(img.settings, FIXTURE_SETTINGS);
    assert.equal(img.sessions.length, 1);
    const b = new Broker();
    b.restore([bytes]);
    assert.equal(b.verify(), null);
    assert.deepEqual(b.totals(), { sessions: 1, online: 1, subscriptions: 1, retained: 0, queuedMessages: 0, queuedBytes: 0, inflight: 1 });
    // Written again in the current format, it restores to the same state.
    const again = Buffer.concat([...b.snapshot()]);
    assert.equal((packr.unpack(again) as unknown[])[0], SNAPSHOT_VERSION);
    const img2 = decodeImage(again, parseShare);
    assert.deepEqual(img2.settings, FIXTURE_SETTINGS);
    assert.deepEqual(img2.sessions, img.sessions);
  });

  it('stores settings as name and value pairs; a missing one restores as initial', () => {
    const b = new Broker();
    b.apply({ index: 1, time: 1000, cmd: { t: 'serve-start', node: 1, settings: FIXTURE_SETTINGS } }, []);
    const image = packr.unpack(Buffer.concat([...b.snapshot()])) as unknown[];
    const pairs = image[4] as [string, unknown][];
    assert.deepEqual(
      pairs.map((p) => p[0]),
      SETTING_NAMES,
    );
    const without = structuredClone(image);
    without[4] = pairs.filter((p) => p[0] !== 'willGraceS');
    assert.deepEqual(decodeImage(packr.pack(without), parseShare).settings, { ...FIXTURE_SETTINGS, willGraceS: 30 });
  });

  it('refuses an unknown, repeated or invalid setting in a snapshot with SnapshotError', () => {
    const b = new Broker();
    b.apply({ index: 1, time: 1000, cmd: { t: 'serve-start', node: 1, settings: FIXTURE_SETTINGS } }, []);
    const image = packr.unpack(Buffer.concat([...b.snapshot()])) as unknown[];
    const pairs = image[4] as [string, unknown][];
    const cases: [unknown, RegExp][] = [
      [[...pairs, ['maxRetained', 5]], /setting "maxRetained"/],
      [[...pairs, ['__proto__', 5]], /setting "__proto__"/],
      [[...pairs, ['maxQos', 1]], /setting maxQos given twice/],
      [[...pairs, [7, 1]], /setting name of type number/],
      [pairs.map((p) => (p[0] === 'maxInflight' ? ['maxInflight', -1] : p)), /settings$/],
      [[['maxQos']], /setting/],
      [{ maxQos: 1 }, /settings/],
    ];
    for (const [settings, message] of cases) {
      const copy = structuredClone(image);
      copy[4] = settings;
      assert.throws(
        () => new Broker().restore([packr.pack(copy)]),
        (e: unknown) => e instanceof SnapshotError && message.test(e.message),
        JSON.stringify(settings),
      );
    }
  });
});
