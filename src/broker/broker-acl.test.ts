// Apply decides access from the ACL table in Settings: publishes (v5 0x87, 3.1.1 acknowledged and
// dropped), subscriptions per filter, and every delivery (live, retained, wills) checked against
// the subscriber at the entry's position; plus the per-session subscription bound.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RC } from '../protocol/reason-codes.js';
import { parseAcl } from './acl.js';
import { events, Harness, msg, published, sent, testSettings } from './broker-harness.testkit.js';
import type { AclRule, ConnectCommand, Settings } from './commands.js';

function table(text: string): AclRule[] {
  const r = parseAcl(text);
  if ('problem' in r) throw new Error(r.problem.reason);
  return r.rules;
}

const ACL = table(
  [
    'user alice',
    'topic readwrite alice/#',
    'topic read shared/#',
    'user bob',
    'topic write shared/#',
    'topic write alice/inbox',
    'pattern readwrite devices/%c/#',
  ].join('\n'),
);
const withAcl: Settings = { ...testSettings, acl: ACL };
const as = (username: string, protocol: 4 | 5 = 5): Partial<ConnectCommand> => ({ username, protocol });

describe('broker ACL', { timeout: 30_000 }, () => {
  it('answers a v5 QoS 1 publish without write access with PUBACK 0x87 and routes nothing', () => {
    const h = new Harness(withAcl);
    const [a, b] = [h.conn(1), h.conn(2)];
    h.connect(a, 'a1', as('alice'));
    h.subscribe(a, 1, [{ filter: 'alice/#' }]);
    h.connect(b, 'b1', as('bob'));
    const out = h.publish(b, msg('alice/private', 'x', 1), 7);
    assert.deepEqual(sent(out, b), [{ type: 'puback', pid: 7, code: RC.NOT_AUTHORIZED }]);
    assert.equal(published(out, a).length, 0);
    assert.equal(events(out, 'acl-denied').length, 1);
  });

  it('acknowledges and drops a 3.1.1 publish without write access, as Mosquitto does', () => {
    const h = new Harness(withAcl);
    const [a, b] = [h.conn(1), h.conn(2)];
    h.connect(a, 'a1', as('alice', 4));
    h.subscribe(a, 1, [{ filter: 'alice/#' }]);
    h.connect(b, 'b1', as('bob', 4));
    const q1 = h.publish(b, msg('alice/private', 'x', 1), 7);
    assert.deepEqual(sent(q1, b), [{ type: 'puback', pid: 7, code: RC.SUCCESS }]);
    assert.equal(published(q1, a).length, 0);
    const q2 = h.publish(b, msg('alice/private', 'x', 2), 8);
    assert.deepEqual(sent(q2, b), [{ type: 'pubrec', pid: 8, code: RC.SUCCESS }]);
    assert.deepEqual(sent(h.apply({ t: 'pubrel', conn: b, pid: 8 }), b), [{ type: 'pubcomp', pid: 8, code: RC.SUCCESS }]);
  });

  it('refuses each SUBSCRIBE filter without read access on its own, granting the others', () => {
    const h = new Harness(withAcl);
    const a = h.conn(1);
    h.connect(a, 'a1', as('alice'));
    const out = h.subscribe(a, 3, [
      { filter: 'alice/+', qos: 1 },
      { filter: '#' },
      { filter: 'devices/a1/#', qos: 0 },
      { filter: 'devices/b1/#' },
    ]);
    assert.deepEqual(sent(out, a), [{ type: 'suback', pid: 3, codes: [1, RC.NOT_AUTHORIZED, 0, RC.NOT_AUTHORIZED] }]);
  });

  it('delivers a live message only to subscribers with read access at that moment', () => {
    const h = new Harness({ ...testSettings, acl: table('user alice\ntopic read shared/#\nuser bob\ntopic readwrite shared/#') });
    const [a, b] = [h.conn(1), h.conn(2)];
    h.connect(a, 'a1', as('alice'));
    h.subscribe(a, 1, [{ filter: 'shared/#' }]);
    h.connect(b, 'b1', as('bob'));
    h.subscribe(b, 1, [{ filter: 'shared/#' }]);
    assert.equal(published(h.publish(b, msg('shared/x', 'one', 1), 1), a).length, 1);
    // A reload takes alice's read access away: her existing subscription stops receiving.
    h.apply({ t: 'settings', settings: { ...testSettings, acl: table('user bob\ntopic readwrite shared/#') } });
    const out = h.publish(b, msg('shared/x', 'two', 1), 2);
    assert.equal(published(out, a).length, 0);
    assert.equal(published(out, b).length, 1);
  });

  it('sends a retained message only where the subscriber may read its topic', () => {
    const h = new Harness({ ...testSettings, acl: table('user alice\ntopic read s/#\ntopic deny s/secret\nuser bob\ntopic write s/#') });
    const [a, b] = [h.conn(1), h.conn(2)];
    h.connect(b, 'b1', as('bob'));
    h.publish(b, msg('s/open', 'o', 1, true), 1);
    h.publish(b, msg('s/secret', 's', 1, true), 2);
    h.connect(a, 'a1', as('alice'));
    const got = published(h.subscribe(a, 1, [{ filter: 's/#' }]), a).map((p) => p.msg.topic);
    assert.deepEqual(got, ['s/open']);
  });

  it('refuses a CONNECT whose will the client may not publish with CONNACK 0x87', () => {
    const h = new Harness(withAcl);
    const b = h.conn(1);
    const out = h.connect(b, 'b1', { ...as('bob'), will: { msg: msg('alice/secret', 'w'), delayS: 0 } });
    assert.deepEqual(sent(out, b), [{ type: 'connack', sessionPresent: false, code: RC.NOT_AUTHORIZED }]);
    assert.equal(h.broker.verify(), null);
  });

  it('delivers a will only to subscribers allowed to read it', () => {
    const h = new Harness({
      ...testSettings,
      acl: table('user alice\ntopic read w/#\nuser bob\ntopic write w/#\nuser carol\ntopic read x'),
    });
    const [a, b, c] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(a, 'a1', as('alice'));
    h.subscribe(a, 1, [{ filter: 'w/#' }]);
    h.connect(c, 'c1', as('carol'));
    h.subscribe(c, 1, [{ filter: 'x' }]);
    h.connect(b, 'b1', { ...as('bob'), will: { msg: msg('w/gone', 'bye', 1), delayS: 0 } });
    const out = h.apply({ t: 'disconnect', conn: b, reason: RC.UNSPECIFIED_ERROR, publishWill: true });
    assert.equal(published(out, a).length, 1);
    assert.equal(published(out, c).length, 0);
  });

  it('refuses a new subscription beyond maxSubscriptions with 0x97, but replacing one is fine', () => {
    const h = new Harness({ ...testSettings, maxSubscriptions: 2 });
    const a = h.conn(1);
    h.connect(a, 'a1', { protocol: 5 });
    const out = h.subscribe(a, 1, [
      { filter: 'x', qos: 0 },
      { filter: 'y', qos: 0 },
      { filter: 'z', qos: 0 },
      { filter: 'x', qos: 1 },
    ]);
    assert.deepEqual(sent(out, a), [{ type: 'suback', pid: 1, codes: [0, 0, RC.QUOTA_EXCEEDED, 1] }]);
  });

  it('keeps the ACL table and the subscription bound across a snapshot', () => {
    const h = new Harness({ ...withAcl, maxSubscriptions: 5 });
    const copy = new Harness();
    copy.broker.restore(h.broker.snapshot());
    assert.equal(copy.broker.digest(), h.broker.digest());
  });
});
