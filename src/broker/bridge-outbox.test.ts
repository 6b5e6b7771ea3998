import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { Packr } from 'msgpackr';
import { parseSharedFilter } from '../protocol/topic.js';
import {
  firstAtOrAbove,
  firstAtOrAboveSeq,
  newOutbox,
  OUTBOX_PID_MAX,
  type OutboxItem,
  pushOutbox,
  recordPubrec,
} from './bridge-outbox.js';
import type { BridgeRule } from './bridge-rules.js';
import { Broker } from './broker.js';
import { Harness, msg, published, sent, testSettings } from './broker-harness.testkit.js';
import type { Command, Effect, Settings } from './commands.js';
import { decodeImage, encodeImage, SnapshotError, type StateImage } from './snapshot.js';

const RULES: BridgeRule[] = [
  { bridge: 'cloud', pattern: 'sensors/#', direction: 'out', qos: 1, localPrefix: 'site/', remotePrefix: 'remote/' },
  { bridge: 'archive', pattern: '#', direction: 'out', qos: 0, localPrefix: '', remotePrefix: '' },
];
const SETTINGS: Settings = { ...testSettings, bridgeRules: RULES, bridgeOutboxMessages: 3, bridgeOutboxBytes: 1000 };

const parseShare = (f: string) => {
  const s = parseSharedFilter(f);
  return s === null ? null : { group: s.group, filter: s.filter };
};
const items = (h: Harness, name: string): [number, string, number][] =>
  (h.broker.bridgeOutbox(name)?.items.toArray() ?? []).map((i: OutboxItem) => [i.index, i.topic, i.qos]);

describe('bridge outboxes in the replicated state', () => {
  it('copies each committed message an outbound rule matches, remapped, in log order', () => {
    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('site/sensors/t1', 'a', 1), 1);
    const first = h.index;
    h.publish(h.conn(1), msg('other', 'b', 2), 2);
    h.publish(h.conn(1), msg('site/sensors', 'c', 0, true));
    assert.deepEqual(items(h, 'cloud'), [
      [first, 'remote/sensors/t1', 1],
      [first + 2, 'remote/sensors', 0],
    ]);
    assert.deepEqual(items(h, 'archive'), [
      [first, 'site/sensors/t1', 0],
      [first + 1, 'other', 0],
      [first + 2, 'site/sensors', 0],
    ]);
    assert.equal(h.broker.verify(), null);
  });

  it('starts an outbox at the serve-start that first names its bridge, and drops it when no rule names it', () => {
    const h = new Harness();
    assert.equal(h.broker.bridgeOutbox('cloud'), undefined);
    h.serveStart(0, SETTINGS);
    assert.equal(h.broker.bridgeOutbox('cloud')?.position, h.index);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('x', 'a', 1), 1);
    const out = h.apply({ t: 'settings', settings: { ...SETTINGS, bridgeRules: [RULES[0] as BridgeRule] } });
    assert.equal(h.broker.bridgeOutbox('archive'), undefined);
    assert.ok(out.some((e) => e.t === 'event' && e.kind === 'bridge-outbox-removed' && e.detail?.bridge === 'archive'));
  });

  it('does not admit a message beyond the bounds in messages or bytes, and counts the refusal', () => {
    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub');
    for (let i = 1; i <= 3; i++) h.publish(h.conn(1), msg(`t${i}`, 'x', 1), i);
    const out = h.publish(h.conn(1), msg('t4', 'x', 1), 4);
    assert.deepEqual(
      items(h, 'archive').map((i) => i[1]),
      ['t1', 't2', 't3'],
    );
    assert.ok(out.some((e) => e.t === 'event' && e.kind === 'bridge-outbox-refused' && e.detail?.bridge === 'archive'));
    const big = new Harness({ ...SETTINGS, bridgeOutboxBytes: 10 });
    big.connect(big.conn(1), 'pub');
    big.publish(big.conn(1), msg('t', 'x'.repeat(20), 1), 1);
    assert.equal(big.broker.bridgeOutbox('archive')?.items.length, 0);
  });

  it('refuses a QoS 1/2 publish a full outbox would take, entirely: MQTT 5 0x97, 3.1.1 a close', () => {
    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub5', { protocol: 5, clean: true, expiryS: 0 });
    h.connect(h.conn(2), 'pub4', { protocol: 4 });
    h.connect(h.conn(3), 'sub');
    h.subscribe(h.conn(3), 1, [{ filter: '#', qos: 1 }]);
    for (let i = 1; i <= 3; i++) h.publish(h.conn(1), msg(`t${i}`, 'x', 1), i);
    const before = h.broker.counts().retained;
    const q1 = h.publish(h.conn(1), msg('t4', 'x', 1, true), 4);
    assert.deepEqual(sent(q1, h.conn(1)), [{ type: 'puback', pid: 4, code: 0x97 }]);
    assert.deepEqual(published(q1, h.conn(3)), [], 'not routed');
    assert.equal(h.broker.counts().retained, before, 'not retained');
    assert.ok(q1.some((e) => e.t === 'event' && e.kind === 'bridge-outbox-refused' && e.detail?.bridge === 'archive'));
    const q2 = h.publish(h.conn(1), msg('t5', 'x', 2), 5);
    assert.deepEqual(sent(q2, h.conn(1)), [{ type: 'pubrec', pid: 5, code: 0x97 }]);
    // No id held: a PUBREL for it gets PUBCOMP 0x92 (packet identifier not found).
    const rel = h.apply({ t: 'pubrel', conn: h.conn(1), pid: 5 });
    assert.equal((sent(rel, h.conn(1))[0] as { code: number }).code, 0x92);
    const q4 = h.publish(h.conn(2), msg('t6', 'x', 1), 1);
    assert.deepEqual(sent(q4, h.conn(2)), [], 'no PUBACK for 3.1.1');
    assert.ok(q4.some((e) => e.t === 'close' && e.conn === h.conn(2)));
    // QoS 0 (retained, so it has an entry) is routed and retained, and dropped from the outbox.
    const q0 = h.publish(h.conn(1), msg('t7', 'x', 0, true));
    assert.equal(published(q0, h.conn(3)).length, 1);
    assert.ok(q0.some((e) => e.t === 'event' && e.kind === 'bridge-outbox-full'));
    assert.equal(h.broker.bridgeOutbox('archive')?.items.length, 3);
    // Once the remote completed some, the outbox takes messages again.
    h.apply({ t: 'bridge-position', bridge: 'archive', below: h.index });
    assert.deepEqual(sent(h.publish(h.conn(1), msg('t8', 'x', 1), 6), h.conn(1)), [{ type: 'puback', pid: 6, code: 0x00 }]);
    assert.equal(h.broker.verify(), null);
  });

  it('moves the position forward only: bridge-position removes what is below it', () => {
    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('a', '1', 1), 1);
    const a = h.index;
    h.publish(h.conn(1), msg('b', '2', 1), 2);
    const b = h.index;
    h.apply({ t: 'bridge-position', bridge: 'archive', below: b });
    assert.deepEqual(
      items(h, 'archive').map((i) => i[0]),
      [b],
    );
    assert.equal(h.broker.bridgeOutbox('archive')?.position, b);
    // Backwards, unknown bridge, beyond its own entry: no-ops.
    for (const cmd of [
      { t: 'bridge-position' as const, bridge: 'archive', below: a },
      { t: 'bridge-position' as const, bridge: 'nope', below: b + 1 },
      { t: 'bridge-position' as const, bridge: 'archive', below: h.index + 10 },
    ]) {
      const out = h.apply(cmd);
      assert.ok(
        out.some((e) => e.t === 'event' && e.kind === 'no-op'),
        JSON.stringify(cmd),
      );
    }
    assert.equal(h.broker.bridgeOutbox('archive')?.position, b);
    h.apply({ t: 'bridge-position', bridge: 'archive', below: h.index + 1 });
    assert.equal(h.broker.bridgeOutbox('archive')?.items.length, 0);
    assert.equal(h.broker.bridgeOutbox('archive')?.bytes, 0);
    // The other bridge's outbox still starts at the first serve-start.
    assert.equal(h.broker.bridgeOutbox('cloud')?.position, 1);
  });

  it('numbers apart the messages one entry puts in: several wills of one tick, each found by its seq', () => {
    const h = new Harness(SETTINGS);
    for (const i of [1, 2, 3]) {
      h.connect(h.conn(i), `w${i}`, { protocol: 5, clean: true, expiryS: 60, will: { msg: msg(`t/w${i}`, 'x', 1), delayS: 1 } });
    }
    for (const i of [1, 2, 3]) h.apply({ t: 'disconnect', conn: h.conn(i), reason: 0x80, publishWill: true });
    h.connect(h.conn(9), 'pub');
    h.publish(h.conn(9), msg('before', 'x', 1), 1);
    h.apply({ t: 'bridge-position', bridge: 'archive', below: h.index + 1 });
    h.apply({ t: 'tick' }, 1000);
    const o = h.broker.bridgeOutbox('archive');
    const got = o?.items.toArray() ?? [];
    assert.deepEqual(
      got.map((it) => [it.index, it.topic]),
      [
        [h.index, 't/w1'],
        [h.index, 't/w2'],
        [h.index, 't/w3'],
      ],
    );
    // Numbered on after the removed ones, increasing: the send cursor can stop between two of them.
    assert.deepEqual(
      got.map((it) => it.seq),
      [1, 2, 3],
    );
    assert.equal(o === undefined ? -1 : firstAtOrAboveSeq(o, 2), 1);
    assert.equal(o === undefined ? -1 : firstAtOrAboveSeq(o, 4), 3);
    assert.equal(o === undefined ? -1 : firstAtOrAbove(o, h.index), 0);
  });

  it('keeps the outboxes in the snapshot: a restored broker has the same items, positions and digest', () => {
    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('site/sensors/a', 'x', 1, false, { expiryS: 60, userProps: [['k', 'v']] }), 1);
    h.publish(h.conn(1), msg('site/sensors/b', 'y', 1), 2);
    h.apply({ t: 'bridge-position', bridge: 'archive', below: h.index });
    const bytes = Buffer.concat([...h.broker.snapshot()]);
    const b = new Broker();
    b.restore([bytes]);
    assert.equal(b.digest(), h.broker.digest());
    for (const name of ['cloud', 'archive']) {
      const o = b.bridgeOutbox(name);
      const want = h.broker.bridgeOutbox(name);
      assert.equal(o?.position, want?.position);
      assert.equal(o?.bytes, want?.bytes);
      // The seq of an item is derived (the serving node's send cursor counts in it): a restored
      // outbox numbers its items again, in order.
      const unnumbered = (x: typeof o) => (x?.items.toArray() ?? []).map(({ seq, ...m }) => m);
      assert.deepEqual(unnumbered(o), unnumbered(want));
      assert.deepEqual(
        o?.items.toArray().map((it) => it.seq),
        o?.items.toArray().map((_, i) => i),
      );
      assert.equal(o?.nextSeq, o?.items.length);
    }
    // And apply goes on from it as from the original.
    const cmd = { t: 'bridge-position' as const, bridge: 'cloud', below: h.index };
    h.apply(cmd);
    b.apply({ index: h.index, time: h.time, cmd }, []);
    assert.equal(b.digest(), h.broker.digest());
  });

  it('snapshots taken while apply goes on hold the outbox of the opening index', () => {
    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('a', '1', 1), 1);
    const atOpen = h.broker.digest();
    const cursor = h.broker.snapshot();
    h.publish(h.conn(1), msg('b', '2', 1), 2);
    h.apply({ t: 'bridge-position', bridge: 'archive', below: h.index });
    const b = new Broker();
    b.restore([Buffer.concat([...cursor])]);
    assert.equal(b.digest(), atOpen);
  });

  it('refuses a snapshot whose outboxes do not match its rules or its log', () => {
    const h = new Harness(SETTINGS);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('a', '1', 1), 1);
    const img = decodeImage(Buffer.concat([...h.broker.snapshot()]), parseShare);
    assert.equal(img.bridges.length, 2);
    type Outbox = StateImage['bridges'][number];
    const bad: StateImage[] = [
      { ...img, bridges: img.bridges.slice(1) },
      {
        ...img,
        bridges: img.bridges.map(([n, p, it, q, ids]): Outbox => [n, p, it.map((x) => ({ ...x, index: img.appliedIndex + 1 })), q, ids]),
      },
      { ...img, bridges: img.bridges.map(([n, , it, q, ids]): Outbox => [n, img.appliedIndex + 5, it, q, ids]) },
      // A packet id on an item below QoS 2, a next id outside the range, inbound ids twice or out of range.
      { ...img, bridges: img.bridges.map(([n, p, it, q, ids]): Outbox => [n, p, it.map((x) => ({ ...x, pid: 7 })), q, ids]) },
      { ...img, bridges: img.bridges.map(([n, p, it, , ids]): Outbox => [n, p, it, OUTBOX_PID_MAX + 1, ids]) },
      { ...img, bridges: img.bridges.map(([n, p, it, q]): Outbox => [n, p, it, q, [3, 3]]) },
      { ...img, bridges: img.bridges.map(([n, p, it, q]): Outbox => [n, p, it, q, [0x10000]]) },
    ];
    for (const x of bad) assert.throws(() => decodeImage(encodeImage(x), parseShare), SnapshotError);
  });

  it("publishes a bridge-in message without the ACL, acknowledges it to the bridge, and keeps it out of that bridge's outbox", () => {
    const rules: BridgeRule[] = [
      { bridge: 'cloud', pattern: '#', direction: 'both', qos: 1, localPrefix: '', remotePrefix: '' },
      { bridge: 'archive', pattern: '#', direction: 'out', qos: 1, localPrefix: '', remotePrefix: '' },
    ];
    // An ACL that lets nobody write: a bridge's input is not judged by it.
    const acl: Settings['acl'] = [{ kind: 'topic', user: null, access: 'read', filter: '#' }];
    const h = new Harness({ ...SETTINGS, bridgeRules: rules, acl });
    h.connect(h.conn(1), 'sub');
    h.subscribe(h.conn(1), 1, [{ filter: 'in/#', qos: 1 }]);
    const link = h.conn(2);
    const out = h.apply({ t: 'bridge-in', bridge: 'cloud', conn: link, pid: 7, msg: msg('in/a', 'x', 1, true) });
    assert.deepEqual(sent(out, link), [{ type: 'puback', pid: 7, code: 0 }]);
    assert.equal(published(out, h.conn(1)).length, 1, 'routed to the local subscriber');
    assert.equal(h.broker.bridgeOutbox('cloud')?.items.length, 0, 'not sent back to the remote it came from');
    assert.equal(h.broker.bridgeOutbox('archive')?.items.length, 1, 'forwarded to the other bridge');
    assert.equal(h.broker.counts().retained, 1, 'retained as received');
    // The other bridge's outbox is full (3 messages): refused with 0x97, so the bridge does not
    // acknowledge it and the remote sends it again.
    for (let i = 0; i < 2; i++) h.apply({ t: 'bridge-in', bridge: 'cloud', conn: link, pid: 8 + i, msg: msg('in/b', 'y', 1) });
    const refused = h.apply({ t: 'bridge-in', bridge: 'cloud', conn: link, pid: 20, msg: msg('in/c', 'z', 1) });
    assert.deepEqual(sent(refused, link), [{ type: 'puback', pid: 20, code: 0x97 }]);
    assert.equal(published(refused, h.conn(1)).length, 0, 'neither routed');
    const unknown = h.apply({ t: 'bridge-in', bridge: 'gone', conn: link, pid: 21, msg: msg('in/d', 'z', 1) });
    assert.deepEqual(sent(unknown, link), [], 'no acknowledgement for a bridge the rules do not name');
    assert.equal(h.broker.verify(), null);
  });
});

/** The bridges named by the `bridge-outbox-expired` events among `out`, in order. */
const expiredIn = (out: Effect[]): string[] =>
  out.flatMap((e) => (e.t === 'event' && e.kind === 'bridge-outbox-expired' ? [String(e.detail?.bridge)] : []));

describe('message expiry in bridge outboxes', () => {
  const ONE: BridgeRule[] = [{ bridge: 'cloud', pattern: '#', direction: 'out', qos: 1, localPrefix: '', remotePrefix: '' }];
  const expiring = (h: Harness, topic: string, expiryS: number | undefined, pid: number): void => {
    h.publish(h.conn(1), msg(topic, topic, 1, false, expiryS === undefined ? undefined : { expiryS }), pid);
  };
  const topics = (h: Harness): string[] => (h.broker.bridgeOutbox('cloud')?.items.toArray() ?? []).map((i) => i.topic);

  it('drops a message at the first entry whose time reaches its expiry, counted; one without expiry stays', () => {
    const h = new Harness({ ...SETTINGS, bridgeRules: ONE });
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    expiring(h, 'a', 1, 1);
    const publishedAt = h.time;
    expiring(h, 'b', undefined, 2);
    assert.equal(h.broker.bridgeOutbox('cloud')?.items.at(0)?.expiresAt, publishedAt + 1000);
    // The next deadline of the state is the expiry, so an idle serving node proposes a tick then.
    assert.equal(h.broker.nextDeadline(), publishedAt + 1000);
    assert.deepEqual(expiredIn(h.apply({ t: 'tick' }, 999)), [], 'not yet at 999 ms');
    assert.deepEqual(topics(h), ['a', 'b']);
    assert.deepEqual(expiredIn(h.apply({ t: 'tick' }, 1)), ['cloud'], 'gone at 1000 ms');
    assert.deepEqual(topics(h), ['b']);
    assert.equal(h.broker.bridgeOutbox('cloud')?.bytes, 2);
    assert.equal(h.broker.nextDeadline(), undefined);
    assert.equal(h.broker.verify(), null);
  });

  it('drops what expires behind a message that does not, keeping the rest in log order', () => {
    const h = new Harness({ ...SETTINGS, bridgeRules: ONE, bridgeOutboxMessages: 10 });
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    expiring(h, 'long', 10, 1);
    expiring(h, 'short1', 1, 2);
    expiring(h, 'never', undefined, 3);
    expiring(h, 'short2', 2, 4);
    expiring(h, 'last', undefined, 5);
    h.apply({ t: 'tick' }, 1000);
    assert.deepEqual(topics(h), ['long', 'never', 'short2', 'last']);
    const out = h.apply({ t: 'tick' }, 1000);
    assert.deepEqual(expiredIn(out), ['cloud']);
    assert.deepEqual(topics(h), ['long', 'never', 'last']);
    // One entry far later drops everything due at once.
    h.apply({ t: 'tick' }, 60_000);
    assert.deepEqual(topics(h), ['never', 'last']);
    assert.equal(h.broker.verify(), null);
  });

  it('drops on any entry, not only ticks, before the entry itself is applied', () => {
    const h = new Harness({ ...SETTINGS, bridgeRules: ONE });
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    expiring(h, 'a', 1, 1);
    h.time += 5000;
    const out = h.publish(h.conn(1), msg('b', 'b', 1), 2);
    assert.deepEqual(expiredIn(out), ['cloud']);
    assert.deepEqual(topics(h), ['b']);
  });

  it('does not admit a message whose Message Expiry Interval is 0, and counts it', () => {
    const h = new Harness({ ...SETTINGS, bridgeRules: ONE });
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    h.connect(h.conn(2), 'sub');
    h.subscribe(h.conn(2), 1, [{ filter: '#', qos: 1 }]);
    const out = h.publish(h.conn(1), msg('z', 'z', 1, false, { expiryS: 0 }), 1);
    assert.deepEqual(expiredIn(out), ['cloud']);
    assert.deepEqual(topics(h), []);
    assert.equal(h.broker.verify(), null);
  });

  it('forgets the expiry of a message the remote completed: no deadline is left for it', () => {
    const h = new Harness({ ...SETTINGS, bridgeRules: ONE });
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    expiring(h, 'a', 5, 1);
    h.apply({ t: 'bridge-position', bridge: 'cloud', below: h.index + 1 });
    assert.deepEqual(topics(h), []);
    assert.equal(h.broker.nextDeadline(), undefined);
    assert.deepEqual(expiredIn(h.apply({ t: 'tick' }, 10_000)), [], 'a completed message is not counted as expired');
  });

  it('replicas agree: a restored broker drops the same messages at the same entry and keeps the same digest', () => {
    const h = new Harness({ ...SETTINGS, bridgeRules: ONE });
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    expiring(h, 'a', 2, 1);
    expiring(h, 'b', 1, 2);
    expiring(h, 'c', undefined, 3);
    const b = new Broker();
    b.restore([Buffer.concat([...h.broker.snapshot()])]);
    assert.equal(b.digest(), h.broker.digest());
    assert.equal(b.nextDeadline(), h.broker.nextDeadline());
    for (const step of [1000, 1000]) {
      const want = expiredIn(h.apply({ t: 'tick' }, step));
      const out: Effect[] = [];
      b.apply({ index: h.index, time: h.time, cmd: { t: 'tick' } }, out);
      assert.deepEqual(expiredIn(out), want);
      assert.equal(b.digest(), h.broker.digest());
    }
    assert.deepEqual(topics(h), ['c']);
  });

  it('restores a format 6 snapshot, which kept no expiry time: its items expire that long after the snapshot', () => {
    const h = new Harness({ ...SETTINGS, bridgeRules: ONE });
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    expiring(h, 'a', 3, 1);
    expiring(h, 'b', undefined, 2);
    const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });
    const root = packr.unpack(Buffer.concat([...h.broker.snapshot()])) as unknown[];
    assert.equal(root[0], 9);
    root[0] = 6;
    // Format 8 added the shard outboxes and the high-water marks, a thirteenth and fourteenth element.
    assert.deepEqual(root.splice(12), [[], []]);
    // Format 9 added each outbox's next packet id and each item's id and record.
    const outboxes = (root[11] as unknown[][]).map((o) => o.slice(0, 3) as [string, number, unknown[][]]);
    root[11] = outboxes;
    for (const o of outboxes) o[2] = o[2].map((it) => it.slice(0, 4));
    const img = decodeImage(packr.pack(root), parseShare);
    const at = img.appliedTime;
    assert.deepEqual(
      img.bridges[0]?.[2].map((it) => it.expiresAt),
      [at + 3000, null],
    );
    // A current snapshot holding an item already expired at its own time is refused.
    const bad = packr.unpack(Buffer.concat([...h.broker.snapshot()])) as unknown[];
    ((bad[11] as [string, number, unknown[][]][])[0]?.[2][0] as unknown[])[4] = at;
    assert.throws(() => decodeImage(packr.pack(bad), parseShare), /outbox cloud item expired/);
  });

  type Step =
    | { t: 'pub'; expiryS: number | undefined; advance: number }
    | { t: 'tick'; advance: number }
    | { t: 'position'; keep: number; advance: number };
  const step: fc.Arbitrary<Step> = fc.oneof(
    fc.record({
      t: fc.constant('pub' as const),
      expiryS: fc.option(fc.integer({ min: 0, max: 6 }), { nil: undefined }),
      advance: fc.integer({ min: 0, max: 2500 }),
    }),
    fc.record({ t: fc.constant('tick' as const), advance: fc.integer({ min: 0, max: 4000 }) }),
    fc.record({ t: fc.constant('position' as const), keep: fc.integer({ min: 0, max: 4 }), advance: fc.integer({ min: 0, max: 500 }) }),
  );

  it('holds exactly the messages neither completed nor expired, in log order, and a restored copy agrees (property)', () => {
    fc.assert(
      fc.property(fc.array(step, { minLength: 1, maxLength: 60 }), (steps) => {
        const h = new Harness({ ...SETTINGS, bridgeRules: ONE, bridgeOutboxMessages: 1000 });
        h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
        // The model: [log index, expiry time or null] of what the outbox should hold.
        let model: [number, number | null][] = [];
        let pid = 0;
        for (const st of steps) {
          h.time += st.advance;
          model = model.filter(([, at]) => at === null || at > h.time);
          if (st.t === 'pub') {
            h.publish(h.conn(1), msg('t', 'x', 1, false, st.expiryS === undefined ? undefined : { expiryS: st.expiryS }), ++pid);
            if (st.expiryS !== 0) model.push([h.index, st.expiryS === undefined ? null : h.time + st.expiryS * 1000]);
          } else if (st.t === 'tick') h.apply({ t: 'tick' });
          else {
            // The remote completed all but the last `keep` messages.
            const kept = model[model.length - st.keep];
            const below = st.keep === 0 ? h.index + 1 : kept?.[0];
            if (below === undefined) continue;
            h.apply({ t: 'bridge-position', bridge: 'cloud', below });
            model = model.filter(([i]) => i >= below);
          }
          const held = (h.broker.bridgeOutbox('cloud')?.items.toArray() ?? []).map((it): [number, number | null] => [
            it.index,
            it.expiresAt,
          ]);
          assert.deepEqual(held, model);
          const soonest = model.reduce<number | undefined>((m, [, at]) => (at !== null && (m === undefined || at < m) ? at : m), undefined);
          assert.equal(h.broker.nextDeadline(), soonest);
          assert.equal(h.broker.verify(), null);
        }
        const b = new Broker();
        b.restore([Buffer.concat([...h.broker.snapshot()])]);
        assert.equal(b.digest(), h.broker.digest());
        assert.equal(b.nextDeadline(), h.broker.nextDeadline());
        const later: Effect[] = [];
        b.apply({ index: h.index + 1, time: h.time + 10_000, cmd: { t: 'tick' } }, later);
        assert.deepEqual(expiredIn(later), expiredIn(h.apply({ t: 'tick' }, 10_000)));
        assert.equal(b.digest(), h.broker.digest());
      }),
      { numRuns: 300 },
    );
  });
});

describe('QoS 2 to the remote: packet ids and PUBREC records in the replicated state', () => {
  const Q2: BridgeRule[] = [{ bridge: 'cloud', pattern: '#', direction: 'out', qos: 2, localPrefix: '', remotePrefix: '' }];
  const Q2_SETTINGS: Settings = { ...testSettings, bridgeRules: Q2, bridgeOutboxMessages: 100, bridgeOutboxBytes: 100_000 };
  const outbox = (h: Harness) => h.broker.bridgeOutbox('cloud')?.items.toArray() ?? [];

  it('gives each QoS 2 item the next packet id in log order, and none to QoS 0 and 1 items', () => {
    const h = new Harness(Q2_SETTINGS);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('a', '1', 2), 1);
    h.publish(h.conn(1), msg('b', '2', 1), 2);
    h.publish(h.conn(1), msg('c', '3', 2), 3);
    assert.deepEqual(
      outbox(h).map((it) => [it.topic, it.qos, it.pid, it.rec]),
      [
        ['a', 2, 1, false],
        ['b', 1, 0, false],
        ['c', 2, 2, false],
      ],
    );
    assert.equal(h.broker.bridgeOutbox('cloud')?.nextPid, 3);
  });

  it('wraps the packet ids after OUTBOX_PID_MAX', () => {
    const h = new Harness(Q2_SETTINGS);
    h.connect(h.conn(1), 'pub');
    // Through apply: the outbox's next id set near the end of the range, as a long run leaves it.
    (h.broker.bridgeOutbox('cloud') as { nextPid: number }).nextPid = OUTBOX_PID_MAX;
    h.publish(h.conn(1), msg('a', '1', 2), 1);
    h.publish(h.conn(1), msg('b', '2', 2), 2);
    assert.deepEqual(
      outbox(h).map((it) => it.pid),
      [OUTBOX_PID_MAX, 1],
    );
    assert.equal(h.broker.bridgeOutbox('cloud')?.nextPid, 2);
  });

  it('records a PUBREC on the item, answers PUBREL to the connection for each, and no-ops an unknown bridge', () => {
    const h = new Harness(Q2_SETTINGS);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('a', '1', 2), 1);
    const first = h.index;
    h.publish(h.conn(1), msg('b', '2', 2), 2);
    const link = h.conn(2);
    const out = h.apply({
      t: 'bridge-pubrec',
      bridge: 'cloud',
      conn: link,
      recs: [
        [first, 1],
        [first, 9],
      ],
    });
    assert.deepEqual(
      outbox(h).map((it) => it.rec),
      [true, false],
    );
    // The second names no item of the outbox (a completed or expired one): its PUBREL goes too.
    assert.deepEqual(
      out.filter((e) => e.t === 'send').map((e) => (e.t === 'send' ? [e.conn, e.packet.type, 'pid' in e.packet ? e.packet.pid : 0] : [])),
      [
        [link, 'pubrel', 1],
        [link, 'pubrel', 9],
      ],
    );
    const none = h.apply({ t: 'bridge-pubrec', bridge: 'nope', conn: link, recs: [[first, 1]] });
    assert.ok(none.some((e) => e.t === 'event' && e.kind === 'no-op' && e.detail?.command === 'bridge-pubrec'));
    assert.equal(h.broker.verify(), null);
  });

  it('keeps ids, records and the next id through a snapshot, and does not expire a recorded item', () => {
    const h = new Harness(Q2_SETTINGS);
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    h.publish(h.conn(1), { ...msg('a', '1', 2), props: { expiryS: 1 } }, 1);
    const first = h.index;
    h.publish(h.conn(1), msg('b', '2', 2), 2);
    h.apply({ t: 'bridge-pubrec', bridge: 'cloud', conn: h.conn(2), recs: [[first, 1]] });
    const b = new Broker();
    b.restore([Buffer.concat([...h.broker.snapshot()])]);
    assert.equal(b.digest(), h.broker.digest());
    const restored = b.bridgeOutbox('cloud');
    assert.deepEqual(
      restored?.items.toArray().map((it) => [it.pid, it.rec]),
      [
        [1, true],
        [2, false],
      ],
    );
    assert.equal(restored?.nextPid, 3);
    // The remote answered PUBREC for 'a': it holds the id until PUBREL, so the item stays past
    // its expiry, as a release that expires no more, until PUBCOMP's position passes it; it was
    // delivered, so it is not counted as expired. A snapshot after that restores.
    assert.deepEqual(expiredIn(h.apply({ t: 'tick' }, 1_500)), []);
    assert.deepEqual(
      outbox(h).map((it) => [it.topic, it.rec, it.expiresAt]),
      [
        ['a', true, null],
        ['b', false, null],
      ],
    );
    assert.equal(h.broker.verify(), null);
    assert.equal(h.broker.nextDeadline(), undefined);
    const c = new Broker();
    c.restore([Buffer.concat([...h.broker.snapshot()])]);
    assert.equal(c.digest(), h.broker.digest());
  });

  it('turns an expired QoS 2 item into a release without its payload, and leaves a recorded one', () => {
    const h = new Harness(Q2_SETTINGS);
    h.connect(h.conn(1), 'pub', { protocol: 5, clean: true, expiryS: 0 });
    h.publish(h.conn(1), { ...msg('a', '1', 2), props: { expiryS: 1 } }, 1);
    h.publish(h.conn(1), { ...msg('b', '2', 2), props: { expiryS: 1 } }, 2);
    h.publish(h.conn(1), { ...msg('c', '3', 2), props: { expiryS: 1 } }, 3);
    const third = h.index;
    h.apply({ t: 'bridge-pubrec', bridge: 'cloud', conn: h.conn(2), recs: [[third, 3]] });
    const bytesBefore = h.broker.bridgeOutbox('cloud')?.bytes ?? 0;
    const out = h.apply({ t: 'tick' }, 1_000);
    // Counted as expired (not 'c', which the remote has), never forwarded again, but kept for the
    // PUBREL that frees its id.
    assert.deepEqual(expiredIn(out), ['cloud', 'cloud']);
    assert.deepEqual(
      outbox(h).map((it) => [it.topic, it.pid, it.rec, it.msg.payload.length, it.expiresAt]),
      [
        ['a', 1, true, 0, null],
        ['b', 2, true, 0, null],
        ['c', 3, true, 0, null],
      ],
    );
    assert.equal(h.broker.bridgeOutbox('cloud')?.bytes, bytesBefore - 3);
    assert.equal(h.broker.verify(), null);
    // A restored replica holds the same releases.
    const b = new Broker();
    b.restore([Buffer.concat([...h.broker.snapshot()])]);
    assert.equal(b.digest(), h.broker.digest());
  });

  it('reads a format 8 snapshot, giving its QoS 2 items ids in log order', () => {
    const h = new Harness(Q2_SETTINGS);
    h.connect(h.conn(1), 'pub');
    h.publish(h.conn(1), msg('a', '1', 2), 1);
    h.publish(h.conn(1), msg('b', '2', 1), 2);
    h.publish(h.conn(1), msg('c', '3', 2), 3);
    const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });
    const root = packr.unpack(Buffer.concat([...h.broker.snapshot()])) as unknown[];
    root[0] = 8;
    root[11] = (root[11] as unknown[][]).map(([n, p, it]) => [n, p, (it as unknown[][]).map((x) => x.slice(0, 5))]);
    const img = decodeImage(packr.pack(root), parseShare);
    assert.deepEqual(
      img.bridges[0]?.[2].map((it) => [it.topic, it.pid, it.rec]),
      [
        ['a', 1, false],
        ['b', 0, false],
        ['c', 2, false],
      ],
    );
    assert.equal(img.bridges[0]?.[3], 3);
  });

  it('recordPubrec finds the item by entry and id, and not one of another entry', () => {
    const o = newOutbox('cloud', 1);
    const m = msg('a', '1', 2);
    pushOutbox(o, { index: 5, topic: 'a', qos: 2, msg: m, expiresAt: null, pid: 1, rec: false });
    pushOutbox(o, { index: 5, topic: 'a', qos: 2, msg: m, expiresAt: null, pid: 2, rec: false });
    pushOutbox(o, { index: 6, topic: 'a', qos: 2, msg: m, expiresAt: null, pid: 3, rec: false });
    assert.equal(recordPubrec(o, 5, 2), true);
    assert.equal(recordPubrec(o, 5, 3), false);
    assert.equal(recordPubrec(o, 4, 1), false);
    assert.deepEqual(
      o.items.toArray().map((it) => it.rec),
      [false, true, false],
    );
  });
});

describe('QoS 2 from the remote: the inbound session in the replicated state', () => {
  const IN2: BridgeRule[] = [{ bridge: 'cloud', pattern: '#', direction: 'in', qos: 2, localPrefix: '', remotePrefix: '' }];
  const S: Settings = { ...testSettings, bridgeRules: IN2 };

  it('publishes once per id held, answers PUBREC each time, and PUBCOMP at the PUBREL that lets the id go', () => {
    const h = new Harness(S);
    h.connect(h.conn(1), 'sub');
    h.subscribe(h.conn(1), 1, [{ filter: 'in/#', qos: 2 }]);
    const link = h.conn(2);
    const cmd = { t: 'bridge-in' as const, bridge: 'cloud', conn: link, pid: 5, q2: true as const, msg: msg('in/a', 'x', 2) };
    const first = h.apply(cmd);
    assert.deepEqual(sent(first, link), [{ type: 'pubrec', pid: 5, code: 0 }]);
    assert.equal(published(first, h.conn(1)).length, 1);
    assert.deepEqual([...(h.broker.bridgeOutbox('cloud')?.inIds ?? [])], [5]);
    // The remote sends it again (DUP) to this leader or a later one: answered, not published.
    const again = h.apply(cmd);
    assert.deepEqual(sent(again, link), [{ type: 'pubrec', pid: 5, code: 0 }]);
    assert.equal(published(again, h.conn(1)).length, 0, 'not published twice');
    const rel = h.apply({ t: 'bridge-in-rel', bridge: 'cloud', conn: link, pid: 5 });
    assert.deepEqual(sent(rel, link), [{ type: 'pubcomp', pid: 5, code: 0 }]);
    assert.equal(h.broker.bridgeOutbox('cloud')?.inIds.size, 0);
    // The id free again: a new message under it is published.
    assert.equal(published(h.apply(cmd), h.conn(1)).length, 1);
    // A PUBREL for an id not held (the remote's session was dropped meanwhile): PUBCOMP 0x92.
    assert.deepEqual(sent(h.apply({ t: 'bridge-in-rel', bridge: 'cloud', conn: link, pid: 9 }), link), [
      { type: 'pubcomp', pid: 9, code: 0x92 },
    ]);
    assert.equal(h.broker.verify(), null);
  });

  it('keeps the ids held through a snapshot, and lets them all go at bridge-in-reset', () => {
    const h = new Harness(S);
    const link = h.conn(2);
    for (const pid of [9, 3, 40]) h.apply({ t: 'bridge-in', bridge: 'cloud', conn: link, pid, q2: true, msg: msg('in/a', String(pid), 2) });
    const b = new Broker();
    b.restore([Buffer.concat([...h.broker.snapshot()])]);
    assert.equal(b.digest(), h.broker.digest());
    assert.deepEqual(
      [...(b.bridgeOutbox('cloud')?.inIds ?? [])].sort((x, y) => x - y),
      [3, 9, 40],
    );
    h.apply({ t: 'bridge-in-reset', bridge: 'cloud' });
    assert.equal(h.broker.bridgeOutbox('cloud')?.inIds.size, 0);
    assert.notEqual(b.digest(), h.broker.digest(), 'the ids are part of the state the digest covers');
  });

  it('refuses a QoS 2 bridge-in without its id or flow, and a QoS 2 message without the flag', () => {
    const h = new Harness(S);
    const link = h.conn(2);
    const bad = [
      { t: 'bridge-in', bridge: 'cloud', conn: link, q2: true, msg: msg('in/a', 'x', 2) },
      { t: 'bridge-in', bridge: 'cloud', conn: link, pid: 1, msg: msg('in/a', 'x', 2) },
      { t: 'bridge-in', bridge: 'cloud', conn: link, pid: 1, q2: false, msg: msg('in/a', 'x', 1) },
      { t: 'bridge-in-rel', bridge: 'cloud', conn: link, pid: 0 },
      { t: 'bridge-in-reset', bridge: '' },
    ] as unknown as Command[];
    for (const c of bad) {
      const out = h.apply(c);
      assert.ok(
        out.some((e) => e.t === 'event' && e.kind === 'no-op' && String(e.detail?.reason).startsWith('bad bridge-in')),
        JSON.stringify(c),
      );
    }
  });
});
