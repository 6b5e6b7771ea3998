import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RC } from '../protocol/reason-codes.js';
import { events, Harness, msg, published, sent, testSettings, text } from './broker-harness.testkit.js';
import type { ConnectCommand, Effect } from './commands.js';

// The MQTT 5 behaviour of the state machine: expiry intervals, will delay, subscription options,
// shared subscriptions, flow-control limits the client announced.

const v5 = (opts: Partial<ConnectCommand> = {}): Partial<ConnectCommand> => ({ protocol: 5, ...opts });

describe('broker v5: session expiry and will delay', { timeout: 30_000 }, () => {
  it('keeps an offline session for its expiry interval and ends it on the tick that reaches it', () => {
    const h = new Harness();
    const [a1, a2] = [h.conn(1), h.conn(2)];
    h.connect(a1, 'alice', v5({ expiryS: 10 }));
    h.subscribe(a1, 1, [{ filter: 'x' }]);
    h.apply({ t: 'disconnect', conn: a1, reason: RC.SUCCESS, publishWill: false });
    assert.equal(h.broker.nextDeadline(), h.time + 10_000);
    assert.deepEqual(events(h.apply({ t: 'tick' }, 9_999), 'session-expired'), []);
    assert.equal(events(h.apply({ t: 'tick' }, 1), 'session-expired').length, 1);
    assert.equal((sent(h.connect(a2, 'alice', v5()), a2)[0] as { sessionPresent: boolean }).sessionPresent, false);
  });

  it('lets a v5 DISCONNECT replace the session expiry interval', () => {
    const h = new Harness();
    const [a1, a2] = [h.conn(1), h.conn(2)];
    h.connect(a1, 'alice', v5({ expiryS: 10 }));
    h.apply({ t: 'disconnect', conn: a1, reason: RC.SUCCESS, publishWill: false, expiryS: 100 });
    h.apply({ t: 'tick' }, 50_000);
    assert.equal((sent(h.connect(a2, 'alice', v5()), a2)[0] as { sessionPresent: boolean }).sessionPresent, true);
  });

  it('publishes a delayed will when its delay passes', () => {
    const h = new Harness();
    const [w, a] = [h.conn(1), h.conn(2)];
    h.connect(w, 'watcher', v5());
    h.subscribe(w, 1, [{ filter: 'will', qos: 1 }]);
    h.connect(a, 'a', v5({ expiryS: 100, will: { msg: msg('will', 'late', 1), delayS: 5 } }));
    const gone = h.apply({ t: 'disconnect', conn: a, reason: RC.KEEP_ALIVE_TIMEOUT, publishWill: true });
    assert.deepEqual(published(gone, w), []);
    assert.deepEqual(published(h.apply({ t: 'tick' }, 4_999), w), []);
    const fired = h.apply({ t: 'tick' }, 1);
    assert.deepEqual(
      published(fired, w).map((x) => text(x.msg)),
      ['late'],
    );
    assert.equal(events(fired, 'will-published').length, 1);
  });

  it('publishes a will at the session end when that comes before the will delay', () => {
    const h = new Harness();
    const [w, a] = [h.conn(1), h.conn(2)];
    h.connect(w, 'watcher', v5());
    h.subscribe(w, 1, [{ filter: 'will', qos: 0 }]);
    h.connect(a, 'a', v5({ expiryS: 10, will: { msg: msg('will', 'w'), delayS: 60 } }));
    h.apply({ t: 'disconnect', conn: a, reason: RC.UNSPECIFIED_ERROR, publishWill: true });
    const out = h.apply({ t: 'tick' }, 10_000);
    assert.deepEqual(
      published(out, w).map((x) => text(x.msg)),
      ['w'],
    );
    assert.deepEqual(
      out.filter((e) => e.t === 'event').map((e) => (e as { kind: string }).kind),
      ['session-expired', 'will-published'],
    );
  });

  it('cancels a pending will on a resume, and publishes it at once on a clean start [MQTT-3.1.3-9]', () => {
    const h = new Harness();
    const [w, a1, a2, b1, b2] = [h.conn(1), h.conn(2), h.conn(3), h.conn(4), h.conn(5)];
    h.connect(w, 'watcher', v5());
    h.subscribe(w, 1, [{ filter: 'will/+', qos: 0 }]);
    const will = (who: string) => ({ msg: msg(`will/${who}`, who), delayS: 30 });
    h.connect(a1, 'a', v5({ expiryS: 100, will: will('a') }));
    h.connect(b1, 'b', v5({ expiryS: 100, will: will('b') }));
    h.apply({ t: 'disconnect', conn: a1, reason: RC.UNSPECIFIED_ERROR, publishWill: true });
    h.apply({ t: 'disconnect', conn: b1, reason: RC.UNSPECIFIED_ERROR, publishWill: true });
    assert.equal(events(h.connect(a2, 'a', v5({ expiryS: 100 })), 'will-cancelled').length, 1);
    assert.deepEqual(
      published(h.connect(b2, 'b', v5({ clean: true })), w).map((x) => text(x.msg)),
      ['b'],
    );
    assert.deepEqual(published(h.apply({ t: 'tick' }, 60_000), w), []);
  });

  it('cancels the will of a taken-over connection with a will delay when the new one resumes', () => {
    const h = new Harness();
    const [w, a1, a2] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(w, 'watcher', v5());
    h.subscribe(w, 1, [{ filter: 'will', qos: 0 }]);
    h.connect(a1, 'a', v5({ expiryS: 100, will: { msg: msg('will', 'x'), delayS: 5 } }));
    const out = h.connect(a2, 'a', v5({ expiryS: 100 }));
    assert.equal(events(out, 'will-cancelled').length, 1);
    assert.deepEqual(published(h.apply({ t: 'tick' }, 10_000), w), []);
  });

  it('waits max(grace, will delay) for a failover will even when the session ends sooner', () => {
    const h = new Harness({ ...testSettings, willGraceS: 30 });
    const [w, a] = [h.conn(1), h.conn(2)];
    h.connect(w, 'watcher', v5({ expiryS: 0xffff_ffff }));
    h.subscribe(w, 1, [{ filter: 'will', qos: 1 }]);
    h.connect(a, 'a', v5({ expiryS: 0, will: { msg: msg('will', 'a', 1), delayS: 45 } }));
    h.serveStart();
    const w2 = h.conn(1);
    h.connect(w2, 'watcher', v5({ expiryS: 0xffff_ffff }));
    assert.deepEqual(published(h.apply({ t: 'tick' }, 44_999), w2), []);
    assert.deepEqual(
      published(h.apply({ t: 'tick' }, 1), w2).map((x) => text(x.msg)),
      ['a'],
    );
  });
});

describe('broker v5: message expiry', { timeout: 30_000 }, () => {
  it('delivers with the remaining whole seconds and never sends an expired queued message', () => {
    const h = new Harness({ ...testSettings, maxInflight: 1 });
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'alice', v5({ expiryS: 1000 }));
    h.subscribe(a, 1, [{ filter: 'x', qos: 1 }]);
    const first = published(h.publish(p, msg('x', 'first', 1, false, { expiryS: 60 }), 1), a);
    assert.equal(first[0].expiryS, 60);
    h.publish(p, msg('x', 'short', 1, false, { expiryS: 5 }), 2);
    h.publish(p, msg('x', 'long', 1, false, { expiryS: 100 }), 3);
    h.apply({ t: 'tick' }, 10_500);
    const next = published(h.apply({ t: 'ack', conn: a, pid: 1, kind: 'puback' }), a);
    assert.deepEqual(
      next.map((x) => [text(x.msg), x.expiryS]),
      [['long', 90]],
    );
  });

  it('drops an expired retained message when a subscription matches it', () => {
    const h = new Harness();
    const [p, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub', v5());
    h.publish(p, msg('r', 'v', 1, true, { expiryS: 2 }), 1);
    h.connect(a, 'a', v5());
    assert.deepEqual(
      published(h.subscribe(a, 1, [{ filter: 'r' }]), a).map((x) => x.expiryS),
      [2],
    );
    h.apply({ t: 'tick' }, 2_000);
    h.connect(b, 'b', v5());
    assert.deepEqual(published(h.subscribe(b, 1, [{ filter: 'r' }]), b), []);
  });

  it('drops an expired unacknowledged PUBLISH instead of re-sending it on resume', () => {
    const h = new Harness();
    const [p, a1, a2] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub', v5());
    h.connect(a1, 'alice', v5({ expiryS: 1000 }));
    h.subscribe(a1, 1, [{ filter: 'x', qos: 1 }]);
    h.publish(p, msg('x', 'short', 1, false, { expiryS: 1 }), 1);
    h.publish(p, msg('x', 'plain', 1), 2);
    h.apply({ t: 'disconnect', conn: a1, reason: RC.UNSPECIFIED_ERROR, publishWill: true });
    const out = published(h.connect(a2, 'alice', v5({ expiryS: 1000 })), a2);
    assert.deepEqual(
      out.map((x) => x.pid),
      [1, 2],
    );
    h.apply({ t: 'disconnect', conn: a2, reason: RC.UNSPECIFIED_ERROR, publishWill: true }, 1_000);
    const later = published(h.connect(h.conn(4), 'alice', v5({ expiryS: 1000 })), h.conn(4));
    assert.deepEqual(
      later.map((x) => [x.pid, text(x.msg), x.dup]),
      [[2, 'plain', true]],
    );
  });
});

describe('broker v5: subscription options', { timeout: 30_000 }, () => {
  it('skips the publisher own session with No Local', () => {
    const h = new Harness();
    const [a, b] = [h.conn(1), h.conn(2)];
    h.connect(a, 'a', v5());
    h.connect(b, 'b', v5());
    h.subscribe(a, 1, [{ filter: 'chat', qos: 1, nl: true }]);
    h.subscribe(b, 1, [{ filter: 'chat', qos: 1, nl: true }]);
    const out = h.publish(a, msg('chat', 'hi', 1), 1);
    assert.deepEqual(published(out, a), []);
    assert.equal(published(out, b).length, 1);
    assert.deepEqual(sent(out, a), [{ type: 'puback', pid: 1, code: RC.SUCCESS }]);
  });

  it('keeps the retain flag on live delivery with Retain As Published', () => {
    const h = new Harness();
    const [p, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'a', v5());
    h.connect(b, 'b', v5());
    h.subscribe(a, 1, [{ filter: 's', qos: 1, rap: true }]);
    h.subscribe(b, 1, [{ filter: 's', qos: 1, rap: false }]);
    const out = h.publish(p, msg('s', 'v', 1, true), 1);
    assert.equal(published(out, a)[0].retain, true);
    assert.equal(published(out, b)[0].retain, false);
    assert.equal(published(h.publish(p, msg('s', 'w', 1, false), 2), a)[0].retain, false);
  });

  it('sends retained messages by Retain Handling: 0 always, 1 only for a new subscription, 2 never', () => {
    const h = new Harness();
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub', v5());
    h.publish(p, msg('r/1', 'v', 0, true));
    h.connect(a, 'a', v5());
    const count = (out: Effect[]) => published(out, a).length;
    assert.equal(count(h.subscribe(a, 1, [{ filter: 'r/1', rh: 0 }])), 1);
    assert.equal(count(h.subscribe(a, 2, [{ filter: 'r/1', rh: 0 }])), 1);
    assert.equal(count(h.subscribe(a, 3, [{ filter: 'r/+', rh: 1 }])), 1);
    assert.equal(count(h.subscribe(a, 4, [{ filter: 'r/+', rh: 1 }])), 0);
    assert.equal(count(h.subscribe(a, 5, [{ filter: 'r/#', rh: 2 }])), 0);
  });

  it('collects the Subscription Identifiers of every matching subscription', () => {
    const h = new Harness();
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'a', v5());
    h.subscribe(a, 1, [{ filter: 'x/+', qos: 1 }], 11);
    h.subscribe(a, 2, [{ filter: 'x/#', qos: 0 }], 22);
    h.subscribe(a, 3, [{ filter: '#', qos: 0 }]);
    const [pkt] = published(h.publish(p, msg('x/y', 'm', 1), 1), a);
    assert.deepEqual(
      [...(pkt.subIds ?? [])].sort((x, y) => x - y),
      [11, 22],
    );
    assert.equal(pkt.qos, 1);
  });
});

describe('broker v5: shared subscriptions', { timeout: 30_000 }, () => {
  it('gives each message to one member, round robin over online members', () => {
    const h = new Harness();
    const [p, a, b, c] = [h.conn(1), h.conn(2), h.conn(3), h.conn(4)];
    h.connect(p, 'pub', v5());
    for (const [conn, id] of [
      [a, 'a'],
      [b, 'b'],
      [c, 'c'],
    ] as const) {
      h.connect(conn, id, v5({ expiryS: 1000 }));
      h.subscribe(conn, 1, [{ filter: '$share/g/jobs/+', qos: 1 }]);
    }
    const who = (out: Effect[]) => [a, b, c].filter((conn) => published(out, conn).length === 1).map((x) => x.split('.')[1]);
    const order: string[][] = [];
    for (let i = 1; i <= 4; i++) order.push(who(h.publish(p, msg('jobs/1', `j${i}`, 1), i)));
    assert.deepEqual(order, [['2'], ['3'], ['4'], ['2']]);
    h.apply({ t: 'disconnect', conn: b, reason: RC.SUCCESS, publishWill: false });
    const skip: string[][] = [];
    for (let i = 5; i <= 7; i++) skip.push(who(h.publish(p, msg('jobs/1', `j${i}`, 1), i)));
    assert.deepEqual(skip, [['4'], ['2'], ['4']]);
  });

  it('queues for an offline member only when no member is online, and sends no retained on a shared subscribe', () => {
    const h = new Harness();
    const [p, a1, a2] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub', v5());
    h.publish(p, msg('jobs/r', 'retained', 1, true), 1);
    h.connect(a1, 'a', v5({ expiryS: 1000 }));
    assert.deepEqual(published(h.subscribe(a1, 1, [{ filter: '$share/g/jobs/#', qos: 1 }]), a1), []);
    h.apply({ t: 'disconnect', conn: a1, reason: RC.SUCCESS, publishWill: false });
    assert.deepEqual(sent(h.publish(p, msg('jobs/x', 'held', 1), 2), p), [{ type: 'puback', pid: 2, code: RC.SUCCESS }]);
    assert.deepEqual(
      published(h.connect(a2, 'a', v5({ expiryS: 1000 })), a2).map((x) => text(x.msg)),
      ['held'],
    );
  });

  it('passes a message on to the next member when the chosen one cannot take it', () => {
    // a's client allows packets of 30 bytes: the long message is too large for a and goes to b,
    // and the short one still reaches a in its turn.
    const h = new Harness();
    const [p, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'a', v5({ maxPacketSize: 30 }));
    h.connect(b, 'b', v5());
    h.subscribe(a, 1, [{ filter: '$share/g/q', qos: 1 }]);
    h.subscribe(b, 1, [{ filter: '$share/g/q', qos: 1 }]);
    const long = h.publish(p, msg('q', 'x'.repeat(64), 1), 1);
    assert.deepEqual([published(long, a).length, published(long, b).length], [0, 1]);
    assert.equal(events(long, 'too-large').length, 0, 'passed on, not dropped');
    const short = h.publish(p, msg('q', 'y', 1), 2);
    assert.deepEqual([published(short, a).length, published(short, b).length], [1, 0]);
  });

  it('delivers to a share and to a plain subscription of the same session separately', () => {
    const h = new Harness();
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'a', v5());
    h.subscribe(a, 1, [
      { filter: '$share/g/t', qos: 1 },
      { filter: 't', qos: 1 },
    ]);
    assert.equal(published(h.publish(p, msg('t', 'm', 1), 1), a).length, 2);
    h.apply({ t: 'unsubscribe', conn: a, pid: 2, filters: ['$share/g/t'] });
    assert.equal(published(h.publish(p, msg('t', 'm', 1), 2), a).length, 1);
  });
});

describe('broker v5: shared messages of a member that leaves (§4.8.2)', { timeout: 30_000 }, () => {
  /** pub, and members a (Receive Maximum 1) and b of $share/g/q at QoS 1; m1 and m3 go to a (m3
   * queued behind the unacknowledged m1), m2 and m4 to b. */
  function twoMembers(aOpts: Partial<ConnectCommand> = {}) {
    const h = new Harness();
    const [p, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'a', v5({ receiveMax: 1, ...aOpts }));
    h.connect(b, 'b', v5({ expiryS: 1000 }));
    h.subscribe(a, 1, [{ filter: '$share/g/q', qos: 1 }]);
    h.subscribe(b, 1, [{ filter: '$share/g/q', qos: 1 }]);
    const toA: string[] = [];
    for (let i = 1; i <= 4; i++) {
      const out = h.publish(p, msg('q', `m${i}`, 1), i);
      toA.push(...published(out, a).map((x) => text(x.msg)));
    }
    assert.deepEqual(toA, ['m1'], 'm3 waits in a queue');
    return { h, p, a, b };
  }
  const texts = (out: Effect[], conn: string) => published(out, conn).map((x) => text(x.msg));

  it('re-sends to another member what a member held unacknowledged or queued when its session ends', () => {
    const { h, a, b } = twoMembers();
    const out = h.apply({ t: 'disconnect', conn: a, reason: RC.SUCCESS, publishWill: false });
    assert.deepEqual(texts(out, b), ['m1', 'm3']);
    assert.equal(events(out, 'shared-redelivered').length, 2);
    assert.equal(h.broker.verify(), null);
  });

  it('re-sends them when a clean start takes the member session over', () => {
    const { h, b } = twoMembers({ expiryS: 1000 });
    const out = h.connect(h.conn(4), 'a', v5({ clean: true }));
    assert.deepEqual(texts(out, b), ['m1', 'm3']);
  });

  it('re-sends them when an offline member session expires, to an offline member queue if none is online', () => {
    const { h, a, b } = twoMembers({ expiryS: 10 });
    h.apply({ t: 'disconnect', conn: b, reason: RC.SUCCESS, publishWill: false });
    h.apply({ t: 'disconnect', conn: a, reason: RC.SUCCESS, publishWill: false });
    const expired = h.apply({ t: 'tick' }, 10_000);
    assert.equal(events(expired, 'session-expired').length, 1);
    assert.equal(events(expired, 'shared-redelivered').length, 2);
    const b2 = h.conn(5);
    // b resumes: its own unacknowledged m2 and m4 again, then its queue.
    assert.deepEqual(texts(h.connect(b2, 'b', v5({ expiryS: 1000 })), b2), ['m2', 'm4', 'm1', 'm3']);
  });

  it('gives the queued ones of a member that unsubscribes to another, and lets it complete the one it was sent [MQTT-3.10.4-3]', () => {
    const { h, a, b } = twoMembers();
    const out = h.apply({ t: 'unsubscribe', conn: a, pid: 9, filters: ['$share/g/q'] });
    assert.deepEqual(texts(out, b), ['m3']);
    assert.deepEqual(texts(out, a), []);
    h.apply({ t: 'ack', conn: a, pid: 1, kind: 'puback' });
    assert.equal(h.broker.verify(), null);
  });

  it('drops and counts them when no member is left, and keeps what a member already received (PUBREL pending)', () => {
    const h = new Harness();
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'a', v5());
    h.subscribe(a, 1, [{ filter: '$share/g/q', qos: 2 }]);
    h.publish(p, msg('q', 'two', 2), 1);
    h.publish(p, msg('q', 'one', 1), 2);
    h.apply({ t: 'ack', conn: a, pid: 1, kind: 'pubrec' });
    const out = h.apply({ t: 'disconnect', conn: a, reason: RC.SUCCESS, publishWill: false });
    assert.deepEqual(
      events(out, 'shared-dropped').map((e) => (e.t === 'event' ? e.detail?.topic : undefined)),
      ['q'],
    );
  });

  it('restores the share of each held message from a snapshot, so a replica re-sends the same', () => {
    const { h, a, b } = twoMembers();
    const copy = new Harness();
    copy.broker.restore(h.broker.snapshot());
    assert.equal(copy.broker.digest(), h.broker.digest());
    copy.index = h.index;
    copy.time = h.time;
    const cmd = { t: 'disconnect', conn: a, reason: RC.SUCCESS, publishWill: false } as const;
    assert.deepEqual(copy.apply(cmd), h.apply(cmd));
    assert.deepEqual(texts(copy.log, b).slice(-2), ['m1', 'm3']);
  });
});

describe('broker v5: client limits', { timeout: 30_000 }, () => {
  it('limits inflight by the client Receive Maximum', () => {
    const h = new Harness({ ...testSettings, maxInflight: 10 });
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'a', v5({ receiveMax: 2 }));
    h.subscribe(a, 1, [{ filter: 'x', qos: 1 }]);
    const out: Effect[] = [];
    for (let i = 1; i <= 4; i++) out.push(...h.publish(p, msg('x', `m${i}`, 1), i));
    assert.deepEqual(
      published(out, a).map((x) => x.pid),
      [1, 2],
    );
  });

  it('drops a message larger than the client Maximum Packet Size for that client only [MQTT-3.1.2-25]', () => {
    const h = new Harness();
    const [p, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub', v5());
    h.connect(a, 'a', v5({ maxPacketSize: 64 }));
    h.connect(b, 'b', v5());
    h.subscribe(a, 1, [{ filter: 'x', qos: 1 }]);
    h.subscribe(b, 1, [{ filter: 'x', qos: 1 }]);
    const small = h.publish(p, msg('x', 'y'.repeat(40), 1), 1);
    assert.equal(published(small, a).length, 1);
    const big = h.publish(p, msg('x', 'y'.repeat(80), 1), 2);
    assert.deepEqual(published(big, a), []);
    assert.equal(published(big, b).length, 1);
    assert.equal(events(big, 'too-large').length, 1);
  });

  it('answers a QoS 2 retry over the publisher quota by whether its id is held: 0x00 if held, else 0x97 and nothing routed', () => {
    const h = new Harness();
    const [p, s] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub', v5());
    h.connect(s, 'sub', v5());
    h.subscribe(s, 1, [{ filter: 'q', qos: 2 }]);
    h.publish(p, msg('q', 'first', 2), 7);
    const refused = (pid: number) => h.apply({ t: 'publish', conn: p, pid, msg: msg('q', '', 2), quotaExceeded: true });
    const held = refused(7);
    assert.deepEqual(sent(held, p), [{ type: 'pubrec', pid: 7, code: RC.SUCCESS }]);
    const fresh = refused(8);
    assert.deepEqual(sent(fresh, p), [{ type: 'pubrec', pid: 8, code: RC.QUOTA_EXCEEDED }]);
    assert.deepEqual(published(fresh, s), []);
    // Nothing is held for the refused id: its PUBREL finds nothing.
    assert.deepEqual(sent(h.apply({ t: 'pubrel', conn: p, pid: 8 }), p), [
      { type: 'pubcomp', pid: 8, code: RC.PACKET_IDENTIFIER_NOT_FOUND },
    ]);
  });

  it('refuses a QoS 1 PUBLISH reusing the id of a QoS 2 flow awaiting PUBREL with 0x91, unrouted (3.1.1: routed)', () => {
    const h = new Harness();
    const [p, p4, s] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub', v5());
    h.connect(p4, 'pub4');
    h.connect(s, 'sub', v5());
    h.subscribe(s, 1, [{ filter: 'q', qos: 1 }]);
    h.publish(p, msg('q', 'two', 2), 5);
    const reused = h.publish(p, msg('q', 'one', 1), 5);
    assert.deepEqual(sent(reused, p), [{ type: 'puback', pid: 5, code: RC.PACKET_IDENTIFIER_IN_USE }]);
    assert.deepEqual(published(reused, s), []);
    // Once released, the id is free again.
    h.apply({ t: 'pubrel', conn: p, pid: 5 });
    assert.deepEqual(sent(h.publish(p, msg('q', 'one', 1), 5), p), [{ type: 'puback', pid: 5, code: RC.SUCCESS }]);
    // 3.1.1 has no reason code to say it with: acknowledged and routed, as before.
    h.publish(p4, msg('q', 'two', 2), 9);
    const v4 = h.publish(p4, msg('q', 'one', 1), 9);
    assert.deepEqual(sent(v4, p4), [{ type: 'puback', pid: 9, code: RC.SUCCESS }]);
    assert.equal(published(v4, s).length, 1);
  });

  it('answers PUBREL for an id not held with PACKET_IDENTIFIER_NOT_FOUND', () => {
    const h = new Harness();
    const p = h.conn(1);
    h.connect(p, 'pub', v5());
    assert.deepEqual(sent(h.apply({ t: 'pubrel', conn: p, pid: 4 }), p), [
      { type: 'pubcomp', pid: 4, code: RC.PACKET_IDENTIFIER_NOT_FOUND },
    ]);
  });
});
