import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RC } from '../protocol/reason-codes.js';
import { Broker, DEADLINES_PER_ENTRY_MAX } from './broker.js';
import { events, Harness, msg, published, sent, testSettings, text } from './broker-harness.testkit.js';
import type { Command, Effect } from './commands.js';

// The MQTT 3.1.1 behaviour of the state machine, driven by entries only.

describe('broker: sessions (3.1.1)', { timeout: 30_000 }, () => {
  it('answers a new session with CONNACK session present false, and assigns an id derived from the conn', () => {
    const h = new Harness();
    const a = h.conn(1);
    assert.deepEqual(sent(h.connect(a, 'alice'), a), [{ type: 'connack', sessionPresent: false, code: RC.SUCCESS }]);
    const b = h.conn(2);
    assert.deepEqual(sent(h.connect(b, null, { clean: true }), b), [
      { type: 'connack', sessionPresent: false, code: RC.SUCCESS, assignedClientId: `auto-${b}` },
    ]);
  });

  it("assigns a connect's assignedId instead of the derived id, and refuses one beside a client id", () => {
    const h = new Harness();
    const a = h.conn(1);
    assert.deepEqual(sent(h.connect(a, null, { clean: true, assignedId: `auto-${a}-3` }), a), [
      { type: 'connack', sessionPresent: false, code: RC.SUCCESS, assignedClientId: `auto-${a}-3` },
    ]);
    assert.equal(h.broker.clientIdOf(a), `auto-${a}-3`);
    const b = h.conn(2);
    const out = h.connect(b, 'bob', { assignedId: 'auto-x' });
    assert.deepEqual(sent(out, b), [], 'an impossible connect is not applied');
    assert.equal(events(out, 'no-op').length, 1);
  });

  it('resumes a persistent session with session present and its subscriptions', () => {
    const h = new Harness();
    const [a1, a2, p] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(a1, 'alice');
    h.subscribe(a1, 1, [{ filter: 'x', qos: 1 }]);
    h.apply({ t: 'disconnect', conn: a1, reason: RC.SUCCESS, publishWill: false });
    h.connect(p, 'pub', { clean: true });
    h.publish(p, msg('x', 'while away', 1), 1);
    const out = h.connect(a2, 'alice');
    assert.deepEqual(sent(out, a2)[0], { type: 'connack', sessionPresent: true, code: RC.SUCCESS });
    assert.deepEqual(
      published(out, a2).map((x) => text(x.msg)),
      ['while away'],
    );
  });

  it('discards the old session and its queue on a clean connect', () => {
    const h = new Harness();
    const [a1, a2, p] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(a1, 'alice');
    h.subscribe(a1, 1, [{ filter: 'x', qos: 1 }]);
    h.apply({ t: 'disconnect', conn: a1, reason: RC.SUCCESS, publishWill: false });
    h.connect(p, 'pub', { clean: true });
    h.publish(p, msg('x', 'queued', 1), 1);
    const out = h.connect(a2, 'alice', { clean: true });
    assert.deepEqual(sent(out, a2), [{ type: 'connack', sessionPresent: false, code: RC.SUCCESS }]);
    assert.deepEqual(sent(h.publish(p, msg('x', 'after', 1), 2), p), [{ type: 'puback', pid: 2, code: RC.NO_MATCHING_SUBSCRIBERS }]);
  });

  it('ends a clean 3.1.1 session at disconnect', () => {
    const h = new Harness();
    const [a1, a2] = [h.conn(1), h.conn(2)];
    h.connect(a1, 'alice', { clean: true });
    h.subscribe(a1, 1, [{ filter: 'x' }]);
    h.apply({ t: 'disconnect', conn: a1, reason: RC.SUCCESS, publishWill: false });
    assert.equal((sent(h.connect(a2, 'alice'), a2)[0] as { sessionPresent: boolean }).sessionPresent, false);
  });

  it('takes over a live session: closes the old conn with 0x8E and publishes its will', () => {
    const h = new Harness();
    const [w, a1, a2] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(w, 'watcher');
    h.subscribe(w, 1, [{ filter: 'will/#', qos: 1 }]);
    h.connect(a1, 'alice', { will: { msg: msg('will/alice', 'gone', 1), delayS: 0 } });
    const out = h.connect(a2, 'alice');
    assert.deepEqual(
      out.filter((e) => e.t === 'close'),
      [{ t: 'close', conn: a1, reason: RC.SESSION_TAKEN_OVER }],
    );
    assert.deepEqual(
      published(out, w).map((x) => text(x.msg)),
      ['gone'],
    );
    assert.equal(events(out, 'takeover').length, 1);
    assert.deepEqual(sent(out, a2)[0], { type: 'connack', sessionPresent: true, code: RC.SUCCESS });
    // The old connection no longer holds the session: its disconnect changes nothing.
    const late = h.apply({ t: 'disconnect', conn: a1, reason: RC.SUCCESS, publishWill: true });
    assert.equal(events(late, 'no-op').length, 1);
  });

  it('ends a session of expiry 0 with its taken-over connection: the new one starts a new session', () => {
    for (const protocol of [4, 5] as const) {
      const h = new Harness();
      const [w, a1, a2] = [h.conn(1), h.conn(2), h.conn(3)];
      h.connect(w, 'watcher');
      h.subscribe(w, 1, [{ filter: 'will/#', qos: 1 }]);
      // 3.1.1 Clean Session 1, or MQTT 5 with Session Expiry 0: the session lasts as long as the
      // network connection [MQTT-3.1.2-6, MQTT-3.1.2-23].
      h.connect(a1, 'alice', { protocol, clean: protocol === 4, expiryS: 0, will: { msg: msg('will/alice', 'gone', 1), delayS: 30 } });
      h.subscribe(a1, 1, [{ filter: 'old/#', qos: 1 }]);
      const out = h.connect(a2, 'alice', { protocol, clean: false, expiryS: 3600 });
      assert.deepEqual(sent(out, a2)[0], { type: 'connack', sessionPresent: false, code: RC.SUCCESS }, `MQTT ${protocol}`);
      assert.deepEqual([...h.broker.filtersOf(a2)], [], `MQTT ${protocol}: no subscription of the old session`);
      // The old session ended, so its will goes now, whatever its delay.
      assert.deepEqual(
        published(out, w).map((x) => text(x.msg)),
        ['gone'],
      );
      // A persistent session is still resumed by a takeover.
      const [b1, b2] = [h.conn(4), h.conn(5)];
      h.connect(b1, 'bob', { protocol, clean: false, expiryS: 3600 });
      h.subscribe(b1, 1, [{ filter: 'kept/#', qos: 1 }]);
      const resumed = h.connect(b2, 'bob', { protocol, clean: false, expiryS: 3600 });
      assert.deepEqual(sent(resumed, b2)[0], { type: 'connack', sessionPresent: true, code: RC.SUCCESS });
      assert.deepEqual([...h.broker.filtersOf(b2)], ['kept/#']);
    }
  });

  it('publishes the will when a connection ends without DISCONNECT, and not after a normal DISCONNECT', () => {
    const h = new Harness();
    const [w, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(w, 'watcher');
    h.subscribe(w, 1, [{ filter: 'will/+', qos: 0 }]);
    h.connect(a, 'a', { will: { msg: msg('will/a', 'a died', 0), delayS: 0 } });
    h.connect(b, 'b', { will: { msg: msg('will/b', 'b died', 0), delayS: 0 } });
    const outA = h.apply({ t: 'disconnect', conn: a, reason: RC.KEEP_ALIVE_TIMEOUT, publishWill: true });
    const outB = h.apply({ t: 'disconnect', conn: b, reason: RC.SUCCESS, publishWill: false });
    assert.deepEqual(
      published(outA, w).map((x) => text(x.msg)),
      ['a died'],
    );
    assert.deepEqual(published(outB, w), []);
  });
});

describe('broker: subscribe and publish (3.1.1)', { timeout: 30_000 }, () => {
  it('grants min(requested, maxQos) and answers SUBACK with the granted QoS', () => {
    const h = new Harness({ ...testSettings, maxQos: 1 });
    const a = h.conn(1);
    h.connect(a, 'alice');
    const out = h.subscribe(a, 7, [
      { filter: 'a', qos: 0 },
      { filter: 'b', qos: 1 },
      { filter: 'c', qos: 2 },
    ]);
    assert.deepEqual(sent(out, a), [{ type: 'suback', pid: 7, codes: [RC.GRANTED_QOS_0, RC.GRANTED_QOS_1, RC.GRANTED_QOS_1] }]);
  });

  it('replaces the options of a filter subscribed again', () => {
    const h = new Harness();
    const [a, p] = [h.conn(1), h.conn(2)];
    h.connect(a, 'alice');
    h.connect(p, 'pub');
    h.subscribe(a, 1, [{ filter: 'x', qos: 2 }]);
    h.subscribe(a, 2, [{ filter: 'x', qos: 0 }]);
    const got = published(h.publish(p, msg('x', 'm', 2), 1), a);
    assert.deepEqual(
      got.map((x) => x.qos),
      [0],
    );
  });

  it('acknowledges QoS 1 with PUBACK, and says no matching subscribers when nothing matched', () => {
    const h = new Harness();
    const [a, p] = [h.conn(1), h.conn(2)];
    h.connect(a, 'alice');
    h.connect(p, 'pub');
    h.subscribe(a, 1, [{ filter: 'x/+', qos: 1 }]);
    assert.deepEqual(sent(h.publish(p, msg('x/1', 'm', 1), 5), p), [{ type: 'puback', pid: 5, code: RC.SUCCESS }]);
    assert.deepEqual(sent(h.publish(p, msg('y/1', 'm', 1), 6), p), [{ type: 'puback', pid: 6, code: RC.NO_MATCHING_SUBSCRIBERS }]);
  });

  it('delivers once per session at the highest granted QoS of overlapping subscriptions', () => {
    const h = new Harness();
    const [a, p] = [h.conn(1), h.conn(2)];
    h.connect(a, 'alice');
    h.connect(p, 'pub');
    h.subscribe(a, 1, [
      { filter: 'x/#', qos: 0 },
      { filter: 'x/+', qos: 2 },
      { filter: '#', qos: 1 },
    ]);
    const got = published(h.publish(p, msg('x/y', 'm', 2), 1), a);
    assert.equal(got.length, 1);
    assert.equal(got[0].qos, 2);
  });

  it('delivers at min(message QoS, granted QoS)', () => {
    const h = new Harness();
    const [a, p] = [h.conn(1), h.conn(2)];
    h.connect(a, 'alice');
    h.connect(p, 'pub');
    h.subscribe(a, 1, [{ filter: 'x', qos: 1 }]);
    assert.equal(published(h.publish(p, msg('x', 'm', 2), 1), a)[0].qos, 1);
    assert.equal(published(h.publish(p, msg('x', 'm', 0, true)), a)[0].qos, 0);
  });

  it('does not route a duplicate QoS 2 PUBLISH whose id is held, and PUBREL releases the id', () => {
    const h = new Harness();
    const [a, p] = [h.conn(1), h.conn(2)];
    h.connect(a, 'alice');
    h.connect(p, 'pub');
    h.subscribe(a, 1, [{ filter: 'x', qos: 2 }]);
    const first = h.publish(p, msg('x', 'once', 2), 9);
    assert.equal(published(first, a).length, 1);
    assert.deepEqual(sent(first, p), [{ type: 'pubrec', pid: 9, code: RC.SUCCESS }]);
    const dup = h.publish(p, msg('x', 'once', 2), 9);
    assert.deepEqual(published(dup, a), []);
    assert.deepEqual(sent(dup, p), [{ type: 'pubrec', pid: 9, code: RC.SUCCESS }]);
    assert.deepEqual(sent(h.apply({ t: 'pubrel', conn: p, pid: 9 }), p), [{ type: 'pubcomp', pid: 9, code: RC.SUCCESS }]);
    // Released: the same id now starts a new message.
    assert.equal(published(h.publish(p, msg('x', 'again', 2), 9), a).length, 1);
  });

  it('answers PUBREL for an id not held with PUBCOMP (3.1.1 has no reason code)', () => {
    const h = new Harness();
    const p = h.conn(1);
    h.connect(p, 'pub');
    assert.deepEqual(sent(h.apply({ t: 'pubrel', conn: p, pid: 3 }), p), [{ type: 'pubcomp', pid: 3, code: RC.SUCCESS }]);
  });

  it('answers UNSUBSCRIBE per filter and stops delivery', () => {
    const h = new Harness();
    const [a, p] = [h.conn(1), h.conn(2)];
    h.connect(a, 'alice');
    h.connect(p, 'pub');
    h.subscribe(a, 1, [{ filter: 'x', qos: 1 }]);
    const out = h.apply({ t: 'unsubscribe', conn: a, pid: 2, filters: ['x', 'never'] });
    assert.deepEqual(sent(out, a), [{ type: 'unsuback', pid: 2, codes: [RC.SUCCESS, RC.NO_SUBSCRIPTION_EXISTED] }]);
    assert.deepEqual(published(h.publish(p, msg('x', 'm', 1), 1), a), []);
  });

  it('sends QoS 0 only to online sessions', () => {
    const h = new Harness();
    const [a, p, a2] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(a, 'alice');
    h.connect(p, 'pub');
    h.subscribe(a, 1, [{ filter: 'x', qos: 0 }]);
    h.apply({ t: 'disconnect', conn: a, reason: RC.SUCCESS, publishWill: false });
    h.publish(p, msg('x', 'lost', 0, true));
    const out = h.connect(a2, 'alice');
    assert.deepEqual(published(out, a2), []);
  });
});

describe('broker: retained messages (3.1.1)', { timeout: 30_000 }, () => {
  it('stores, replaces and deletes retained messages, and sends them on subscribe with retain set', () => {
    const h = new Harness();
    const [p, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub');
    h.publish(p, msg('s/1', 'old', 1, true), 1);
    h.publish(p, msg('s/1', 'new', 1, true), 2);
    h.publish(p, msg('s/2', 'two', 2, true), 3);
    h.publish(p, msg('s/3', 'gone', 0, true));
    h.publish(p, msg('s/3', '', 0, true));
    h.connect(a, 'alice');
    const got = published(h.subscribe(a, 1, [{ filter: 's/+', qos: 1 }]), a);
    assert.deepEqual(
      got.map((x) => [x.msg.topic, text(x.msg), x.retain, x.qos]),
      [
        ['s/1', 'new', true, 1],
        ['s/2', 'two', true, 1],
      ],
    );
    h.connect(b, 'bob');
    const subback = h.subscribe(b, 1, [{ filter: 's/1', qos: 0 }]);
    assert.equal(
      subback.findIndex((e) => e.t === 'send' && e.packet.type === 'suback'),
      0,
      'SUBACK goes before the retained messages',
    );
  });

  it('clears the retain flag on live delivery', () => {
    const h = new Harness();
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub');
    h.connect(a, 'alice');
    h.subscribe(a, 1, [{ filter: 's', qos: 1 }]);
    const live = published(h.publish(p, msg('s', 'v', 1, true), 1), a);
    assert.equal(live[0].retain, false);
  });

  it('sends retained messages again when a 3.1.1 client subscribes to the same filter again', () => {
    const h = new Harness();
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub');
    h.publish(p, msg('s', 'v', 0, true));
    h.connect(a, 'alice');
    h.subscribe(a, 1, [{ filter: 's', qos: 0 }]);
    assert.equal(published(h.subscribe(a, 2, [{ filter: 's', qos: 0 }]), a).length, 1);
  });
});

describe('broker: outbound QoS 1/2 flows (3.1.1)', { timeout: 60_000 }, () => {
  it('limits inflight to maxInflight, queues the rest, and a PUBACK moves the next one in flight', () => {
    const h = new Harness();
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub');
    h.connect(a, 'alice');
    h.subscribe(a, 1, [{ filter: 'x', qos: 1 }]);
    const out: Effect[] = [];
    for (let i = 1; i <= 6; i++) out.push(...h.publish(p, msg('x', `m${i}`, 1), i));
    assert.deepEqual(
      published(out, a).map((x) => [x.pid, text(x.msg)]),
      [
        [1, 'm1'],
        [2, 'm2'],
        [3, 'm3'],
        [4, 'm4'],
      ],
    );
    const next = published(h.apply({ t: 'ack', conn: a, pid: 2, kind: 'puback' }), a);
    assert.deepEqual(
      next.map((x) => [x.pid, text(x.msg), x.dup]),
      [[5, 'm5', false]],
    );
  });

  it('runs the QoS 2 flow: PUBREC gets PUBREL, PUBCOMP frees the slot', () => {
    const h = new Harness({ ...testSettings, maxInflight: 1 });
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub');
    h.connect(a, 'alice');
    h.subscribe(a, 1, [{ filter: 'x', qos: 2 }]);
    h.publish(p, msg('x', 'one', 2), 1);
    assert.deepEqual(published(h.publish(p, msg('x', 'two', 2), 2), a), [], 'queued behind the inflight one');
    assert.deepEqual(sent(h.apply({ t: 'ack', conn: a, pid: 1, kind: 'pubrec' }), a), [{ type: 'pubrel', pid: 1 }]);
    const freed = published(h.apply({ t: 'ack', conn: a, pid: 1, kind: 'pubcomp' }), a);
    assert.deepEqual(
      freed.map((x) => [x.pid, text(x.msg)]),
      [[2, 'two']],
    );
  });

  it('treats an ack for an unknown packet id as a no-op with an event', () => {
    const h = new Harness();
    const a = h.conn(1);
    h.connect(a, 'alice');
    const out = h.apply({ t: 'ack', conn: a, pid: 77, kind: 'puback' });
    assert.equal(events(out, 'no-op').length, 1);
    assert.equal(h.broker.failed, null);
  });

  it('re-sends unacknowledged PUBLISHes with DUP and the same ids, then pending PUBRELs, in original order, then the queue', () => {
    const h = new Harness({ ...testSettings, maxInflight: 3 });
    const [p, a1, a2] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub');
    h.connect(a1, 'alice');
    h.subscribe(a1, 1, [{ filter: 'x', qos: 2 }]);
    for (let i = 1; i <= 5; i++) h.publish(p, msg('x', `m${i}`, i % 2 === 0 ? 1 : 2), i);
    // In flight: m1 (pid 1, QoS 2), m2 (pid 2, QoS 1), m3 (pid 3, QoS 2); queued: m4, m5.
    h.apply({ t: 'ack', conn: a1, pid: 1, kind: 'pubrec' });
    h.apply({ t: 'disconnect', conn: a1, reason: RC.KEEP_ALIVE_TIMEOUT, publishWill: true });
    const out = sent(h.connect(a2, 'alice'), a2);
    assert.deepEqual(
      out.map((x) => (x.type === 'publish' ? ['publish', x.pid, text(x.msg), x.dup] : x.type === 'pubrel' ? ['pubrel', x.pid] : [x.type])),
      [['connack'], ['pubrel', 1], ['publish', 2, 'm2', true], ['publish', 3, 'm3', true]],
    );
    const after = published(h.apply({ t: 'ack', conn: a2, pid: 1, kind: 'pubcomp' }), a2);
    assert.deepEqual(
      after.map((x) => [x.pid, text(x.msg), x.dup]),
      [[4, 'm4', false]],
    );
  });

  it('reuses packet ids after 65535, skipping ids still in flight', () => {
    const h = new Harness({ ...testSettings, maxInflight: 2 });
    const [p, a] = [h.conn(1), h.conn(2)];
    h.connect(p, 'pub');
    h.connect(a, 'alice');
    h.subscribe(a, 1, [{ filter: 'x', qos: 1 }]);
    h.publish(p, msg('x', 'held', 1), 1); // pid 1 stays in flight throughout
    let last = 0;
    for (let i = 0; i < 65_534; i++) {
      const [pkt] = published(h.publish(p, msg('x', 'm', 1), 2), a);
      last = pkt.pid ?? -1;
      h.apply({ t: 'ack', conn: a, pid: last, kind: 'puback' });
    }
    assert.equal(last, 65_535);
    const [wrapped] = published(h.publish(p, msg('x', 'm', 1), 2), a);
    assert.equal(wrapped.pid, 2, 'pid 1 is still in flight');
  });

  it('admits to the queue by count and by bytes, and counts each drop', () => {
    const h = new Harness({ ...testSettings, maxInflight: 1, maxQueuedMessages: 2, maxQueuedBytes: 1000 });
    const [p, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub');
    h.connect(a, 'a');
    h.connect(b, 'b');
    h.subscribe(a, 1, [{ filter: 'c', qos: 1 }]);
    h.subscribe(b, 1, [{ filter: 'big', qos: 1 }]);
    const byCount: Effect[] = [];
    for (let i = 1; i <= 5; i++) byCount.push(...h.publish(p, msg('c', `m${i}`, 1), i));
    // 1 in flight, 2 queued, 2 dropped; the publisher is still answered SUCCESS.
    assert.equal(events(byCount, 'queue-full').length, 2);
    assert.ok(sent(byCount, p).every((x) => x.type === 'puback' && x.code === RC.SUCCESS));
    const big = 'x'.repeat(600);
    const byBytes: Effect[] = [];
    for (let i = 1; i <= 3; i++) byBytes.push(...h.publish(p, msg('big', big, 1), 10 + i));
    // 1 in flight, 1 queued (603 bytes), the next would exceed 1000 bytes.
    assert.equal(events(byBytes, 'queue-full').length, 1);
    const drained: string[] = [];
    for (let pid = 1; pid <= 3; pid++) {
      drained.push(...published(h.apply({ t: 'ack', conn: a, pid, kind: 'puback' }), a).map((x) => text(x.msg)));
    }
    assert.deepEqual(drained, ['m2', 'm3']);
  });
});

describe('broker: failover and robustness', { timeout: 30_000 }, () => {
  it('ends older connections at serve-start; their wills wait the grace and are dropped on reconnect', () => {
    const h = new Harness();
    const [w, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(w, 'watcher', { clean: false });
    h.subscribe(w, 1, [{ filter: 'will/+', qos: 1 }]);
    h.connect(a, 'a', { clean: true, will: { msg: msg('will/a', 'a died', 1), delayS: 0 } });
    h.connect(b, 'b', { will: { msg: msg('will/b', 'b died', 1), delayS: 0 } });
    const start = h.serveStart(1000);
    assert.deepEqual(
      start.filter((e) => e.t === 'send'),
      [],
      'no will goes out at serve-start',
    );
    assert.equal(h.broker.nextDeadline(), h.time + 30_000);
    // b comes back within the grace: its will is dropped. a does not.
    const b2 = h.conn(1);
    const back = h.connect(b2, 'b');
    assert.deepEqual(sent(back, b2)[0], { type: 'connack', sessionPresent: true, code: RC.SUCCESS });
    assert.equal(events(back, 'will-dropped').length, 1);
    const w2 = h.conn(2);
    h.connect(w2, 'watcher');
    assert.deepEqual(published(h.apply({ t: 'tick' }, 29_999), w2), []);
    const fired = h.apply({ t: 'tick' }, 1);
    assert.deepEqual(
      published(fired, w2).map((x) => text(x.msg)),
      ['a died'],
    );
    assert.equal(h.broker.nextDeadline(), undefined);
  });

  it('refuses a connect from an ended serving period', () => {
    const h = new Harness();
    const old = h.conn(1);
    h.serveStart();
    const out = h.connect(old, 'late');
    assert.deepEqual(sent(out, old), []);
    assert.equal(events(out, 'no-op').length, 1);
  });

  it('turns commands from connections that hold no session into no-ops with an event', () => {
    const h = new Harness();
    const ghost = h.conn(9);
    const cmds: Command[] = [
      { t: 'subscribe', conn: ghost, pid: 1, subs: [{ filter: 'x', qos: 1, nl: false, rap: false, rh: 0 }] },
      { t: 'unsubscribe', conn: ghost, pid: 1, filters: ['x'] },
      { t: 'pubrel', conn: ghost, pid: 1 },
      { t: 'ack', conn: ghost, pid: 1, kind: 'puback' },
      { t: 'disconnect', conn: ghost, reason: 0, publishWill: true },
    ];
    for (const cmd of cmds) {
      const out = h.apply(cmd);
      assert.deepEqual(
        out.filter((e) => e.t !== 'event'),
        [],
      );
      assert.equal(events(out, 'no-op').length, 1, cmd.t);
    }
    assert.equal(h.broker.failed, null);
  });

  it('never throws on malformed commands, and makes each a no-op', () => {
    const h = new Harness();
    const before = h.broker.digest();
    const bad: unknown[] = [
      null,
      7,
      'x',
      [],
      { t: 'nope' },
      { t: 'connect', conn: '1.1' },
      { t: 'publish', conn: '1.1', msg: { topic: 'a/#' } },
      { t: 'subscribe', conn: '1.1', pid: 0, subs: [] },
      { t: 'settings', settings: { maxQos: 5 } },
      { t: 'check' },
    ];
    for (const cmd of bad) {
      const out = h.apply(cmd as never);
      assert.equal(events(out, 'no-op').length, 1);
    }
    assert.equal(h.broker.failed, null);
    assert.notEqual(h.broker.digest(), before, 'the applied index moved on');
  });

  it('keeps the old settings when new ones are invalid', () => {
    const h = new Harness({ ...testSettings, maxQos: 1 });
    const a = h.conn(1);
    h.apply({ t: 'settings', settings: { ...testSettings, maxInflight: 0 } });
    h.connect(a, 'alice');
    assert.deepEqual(sent(h.subscribe(a, 1, [{ filter: 'x', qos: 2 }]), a), [{ type: 'suback', pid: 1, codes: [RC.GRANTED_QOS_1] }]);
  });

  it('hashes nothing when it applies a check entry, and never fails on the digest it carries', () => {
    // Replicas compare digests outside apply (src/server/digest-runner.ts): hashing the whole state
    // inside apply stalled every node at once. A check only moves the applied index on.
    const h = new Harness();
    let hashed = 0;
    const original = h.broker.digest.bind(h.broker);
    h.broker.digest = () => {
      hashed++;
      return original();
    };
    while (h.index < 2000) h.apply({ t: 'tick' }, 1);
    h.apply({ t: 'check', atIndex: 0, digest: '' });
    const out = h.apply({ t: 'check', atIndex: 2001, digest: 'not-it' });
    assert.equal(hashed, 0);
    assert.deepEqual(out, []);
    assert.equal(h.broker.failed, null);
    assert.equal(h.broker.appliedIndex, 2002);
  });

  it('sets failed instead of throwing when apply itself breaks', () => {
    const b = new Broker();
    const out: Effect[] = [];
    assert.doesNotThrow(() => b.apply(null as never, out));
    assert.match(b.failed ?? '', /apply threw/);
    assert.equal(events(out, 'invariant').length, 1);
  });

  it('fails on an entry index that does not move forward', () => {
    const b = new Broker();
    const out: Effect[] = [];
    b.apply({ index: 5, time: 1, cmd: { t: 'tick' } }, out);
    b.apply({ index: 5, time: 1, cmd: { t: 'tick' } }, out);
    assert.match(b.failed ?? '', /entry index 5/);
  });

  it('routes QoS 0 without a log entry and without changing replicated state', () => {
    const h = new Harness();
    const [p, a, b] = [h.conn(1), h.conn(2), h.conn(3)];
    h.connect(p, 'pub');
    h.connect(a, 'alice');
    h.connect(b, 'bob');
    h.subscribe(a, 1, [{ filter: 'q/+', qos: 2 }]);
    h.subscribe(b, 1, [{ filter: 'q/#', qos: 1 }]);
    h.apply({ t: 'disconnect', conn: b, reason: RC.SUCCESS, publishWill: false });
    const before = h.broker.digest();
    const out: Effect[] = [];
    assert.equal(h.broker.routeQos0(p, msg('q/1', 'fast'), out), 2);
    assert.deepEqual(
      published(out, a).map((x) => [x.qos, x.retain, x.pid]),
      [[0, false, undefined]],
    );
    assert.deepEqual(published(out, b), []);
    assert.equal(h.broker.digest(), before);
  });
});

describe('broker: many deadlines due at once', { timeout: 30_000 }, () => {
  /** `n` MQTT 5 sessions with a 1 s expiry and a will delayed 1 s, all disconnected at one time;
   * a watcher subscribed to their wills. */
  function offlineSessions(n: number): { h: Harness; watcher: string; ids: string[] } {
    const h = new Harness();
    const watcher = h.conn(1);
    h.connect(watcher, 'watcher');
    h.subscribe(watcher, 1, [{ filter: 'will/+', qos: 0 }]);
    const ids = Array.from({ length: n }, (_, i) => `c${String(i).padStart(4, '0')}`);
    ids.forEach((id, i) => {
      const conn = h.conn(2 + i);
      h.connect(conn, id, { protocol: 5, clean: true, expiryS: 1, will: { msg: msg(`will/${id}`, id), delayS: 1 } });
    });
    ids.forEach((_, i) => {
      h.apply({ t: 'disconnect', conn: h.conn(2 + i), reason: RC.UNSPECIFIED_ERROR, publishWill: true });
    });
    return { h, watcher, ids };
  }

  it('fires at most DEADLINES_PER_ENTRY_MAX per entry, the rest at the next entries in (time, client id) order', () => {
    const { h, watcher, ids } = offlineSessions(DEADLINES_PER_ENTRY_MAX + 7);
    const willsOrder: string[] = [];
    let expired = 0;
    let entries = 0;
    for (let advance = 1000; entries < 10; advance = 0) {
      const out = h.apply({ t: 'tick' }, advance);
      entries++;
      const fired = published(out, watcher).length + events(out, 'session-expired').length;
      assert.ok(fired <= DEADLINES_PER_ENTRY_MAX, `entry ${entries} fired ${fired}`);
      willsOrder.push(...published(out, watcher).map((p) => text(p.msg)));
      expired += events(out, 'session-expired').length;
      if (!h.broker.deadlinesBacklogged) break;
    }
    // A will and a session end per client: 2 × 39 deadlines over three entries of at most 32.
    assert.equal(entries, Math.ceil((2 * ids.length) / DEADLINES_PER_ENTRY_MAX));
    assert.deepEqual(willsOrder, ids, 'every will once, in client id order');
    assert.equal(expired, ids.length);
    assert.equal(h.broker.nextDeadline(), undefined);
    assert.equal(h.broker.verify(), null);
  });

  it('judges a connect as if every due deadline had fired: the due will goes out, the expired session is gone', () => {
    const { h, watcher, ids } = offlineSessions(DEADLINES_PER_ENTRY_MAX * 2);
    h.apply({ t: 'tick' }, 1000);
    assert.ok(h.broker.deadlinesBacklogged, 'deadlines are left for later entries');
    const last = ids[ids.length - 1] as string;
    const conn = h.conn(10_000);
    const out = h.connect(conn, last, { protocol: 5, clean: false, expiryS: 60 });
    assert.deepEqual(sent(out, conn)[0], { type: 'connack', sessionPresent: false, code: RC.SUCCESS });
    assert.ok(
      published(out, watcher).some((p) => text(p.msg) === last),
      'the due will is published, not cancelled by the resume [MQTT-3.1.3-9]',
    );
    // Draining the rest fires no second will for that client.
    const later: string[] = [];
    for (let i = 0; i < 10 && h.broker.deadlinesBacklogged; i++)
      later.push(...published(h.apply({ t: 'tick' }), watcher).map((p) => text(p.msg)));
    assert.ok(!later.includes(last));
    assert.equal(h.broker.verify(), null);
  });

  it('a snapshot cursor opened before such a connect streams the session as it was', () => {
    const make = (): Harness => {
      const { h } = offlineSessions(DEADLINES_PER_ENTRY_MAX * 2);
      h.apply({ t: 'tick' }, 1000);
      return h;
    };
    const h = make();
    const twin = make();
    const cursor = h.broker.snapshotCursor({ chunkBytes: 64, sortMovesPerPull: 1 });
    const chunks: Uint8Array[] = [];
    const first = cursor.next();
    if (first.done !== true) chunks.push(first.value);
    h.connect(h.conn(10_000), `c${String(DEADLINES_PER_ENTRY_MAX * 2 - 1).padStart(4, '0')}`, { protocol: 5, clean: false, expiryS: 60 });
    for (let r = cursor.next(); r.done !== true; r = cursor.next()) chunks.push(r.value);
    assert.equal(Buffer.concat(chunks).toString('hex'), Buffer.concat([...twin.broker.snapshot()]).toString('hex'));
  });
});
