import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RC } from '../protocol/reason-codes.js';
import { Broker } from './broker.js';
import { events, Harness, msg, sent, testSettings, text } from './broker-harness.testkit.js';
import type { Effect, OutPacket, Settings } from './commands.js';
import { PID_MAX } from './session.js';

// The packet id fence of a forced epoch (deliver.ts "Fence", docs/design.md "Force-start"): after a
// serve-start of a higher epoch generation, the first use of each outbound packet id sends PUBREL
// first, so a subscriber that still holds that id from a flow of the old epoch releases it, and a
// QoS 2 PUBLISH under it waits for the PUBCOMP.

/** A serve-start as RaftLog proposes it, with the epoch generation of the proposing leader. */
function serveStart(h: Harness, generation: number | undefined, settings: Settings = h.settings): Effect[] {
  const out = h.apply(
    generation === undefined ? { t: 'serve-start', node: 1, settings } : { t: 'serve-start', node: 1, settings, generation },
  );
  h.period = h.index;
  return out;
}

/** A subscriber `sub` to `t/#` at QoS 2 and a publisher `pub`, both online in the current period. */
function clients(h: Harness, seq = 1): { s: string; p: string } {
  const s = h.conn(seq);
  const p = h.conn(seq + 1);
  h.connect(s, 'sub');
  if (seq === 1) h.subscribe(s, 1, [{ filter: 't/#', qos: 2 }]);
  h.connect(p, 'pub', { clean: true });
  return { s, p };
}

const brief = (p: OutPacket): string =>
  p.type === 'publish' ? `publish ${p.pid ?? 0} ${text(p.msg)}${p.dup ? ' dup' : ''}` : `${p.type} ${'pid' in p ? p.pid : ''}`;
const packets = (out: readonly Effect[], conn: string): string[] => sent(out, conn).map(brief);

/** Publishes QoS 1 messages from `p`, each acknowledged by `s`, until one goes out under `pid`;
 * returns the packets `s` got with that one. Bounded by one round of the id space. */
function nextUseOf(h: Harness, s: string, p: string, pid: number): string[] {
  for (let i = 0; i < PID_MAX; i++) {
    const o = sent(h.publish(p, msg('t/a', `m${i}`, 1), 1 + (i % 1000)), s);
    const pub = o.find((x) => x.type === 'publish');
    assert.ok(pub !== undefined && pub.type === 'publish' && pub.pid !== undefined, `message ${i} was sent`);
    if (pub.pid === pid) return o.map(brief);
    h.apply({ t: 'ack', conn: s, pid: pub.pid, kind: 'puback' });
  }
  return [];
}

/** Epoch 1 serves, delivers one QoS 2 message fully (pid 1), then a forced epoch 2 serves. */
function forced(settings: Settings = testSettings): { h: Harness; s: string; p: string } {
  const h = new Harness(settings);
  serveStart(h, 1);
  const c1 = clients(h);
  h.publish(c1.p, msg('t/a', 'old', 2), 1);
  h.apply({ t: 'ack', conn: c1.s, pid: 1, kind: 'pubrec' });
  h.apply({ t: 'ack', conn: c1.s, pid: 1, kind: 'pubcomp' });
  serveStart(h, 2);
  return { h, ...clients(h, 1) };
}

describe('broker: the packet id fence after a force-start', { timeout: 60_000 }, () => {
  it('sends PUBREL before the first QoS 2 PUBLISH under an id, and the PUBLISH only once the PUBCOMP is applied', () => {
    const { h, s, p } = forced();
    const out = h.publish(p, msg('t/a', 'new', 2), 7);
    assert.deepEqual(packets(out, s), ['pubrel 2'], 'the fence PUBREL goes alone');
    assert.deepEqual(packets(out, p), ['pubrec 7'], 'the publisher is answered as usual');
    assert.deepEqual(packets(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubcomp' }), s), ['publish 2 new']);
    assert.deepEqual(packets(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubrec' }), s), ['pubrel 2']);
    h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubcomp' });
    assert.equal(h.broker.verify(), null);
    // The next id is fenced too: each id once, the first time it is used.
    assert.deepEqual(packets(h.publish(p, msg('t/a', 'next', 2), 8), s), ['pubrel 3']);
  });

  it('sends a QoS 1 PUBLISH right after its fence PUBREL, since a PUBREL never releases a QoS 1 flow', () => {
    const { h, s, p } = forced();
    assert.deepEqual(packets(h.publish(p, msg('t/a', 'q1', 1), 7), s), ['pubrel 2', 'publish 2 q1']);
    // The PUBCOMP of the fence ends the fence only; the PUBACK completes the flow.
    assert.equal(events(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubcomp' }), 'no-op').length, 0);
    assert.equal(events(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'puback' }), 'no-op').length, 0);
    assert.equal(events(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'puback' }), 'no-op').length, 1, 'the flow is complete');
  });

  it('fences only after a serve-start whose generation is above a non-zero one seen before', () => {
    const h = new Harness();
    serveStart(h, 1);
    let c = clients(h);
    assert.deepEqual(packets(h.publish(c.p, msg('t/a', 'a', 2), 1), c.s), ['publish 1 a'], 'the first epoch fences nothing');
    serveStart(h, 1);
    c = clients(h);
    assert.deepEqual(packets(h.publish(c.p, msg('t/a', 'b', 2), 1), c.s), ['publish 2 b'], 'a failover within the epoch fences nothing');
    serveStart(h, undefined);
    c = clients(h);
    assert.deepEqual(
      packets(h.publish(c.p, msg('t/a', 'c', 2), 1), c.s),
      ['publish 3 c'],
      'a serve-start without generation fences nothing',
    );
    const fresh = new Harness();
    serveStart(fresh, 2);
    const f = clients(fresh);
    assert.deepEqual(
      packets(fresh.publish(f.p, msg('t/a', 'd', 2), 1), f.s),
      ['publish 1 d'],
      'a first serve-start of generation 2 has nothing to fence',
    );
  });

  it('fences every id exactly once in the round after a force-start, and none after it', () => {
    const { h, s, p } = forced({ ...testSettings, maxInflight: 1 });
    const fences = new Map<number, number>();
    let unfenced = 0;
    for (let i = 0; i < PID_MAX + 10; i++) {
      const out = sent(h.publish(p, msg('t/a', 'x', 1), 1 + (i % 1000)), s);
      const pub = out.find((x) => x.type === 'publish');
      assert.ok(pub !== undefined && pub.type === 'publish' && pub.pid !== undefined, `message ${i} was sent`);
      if (out[0]?.type === 'pubrel') fences.set(pub.pid as number, (fences.get(pub.pid as number) ?? 0) + 1);
      else unfenced++;
      h.apply({ t: 'ack', conn: s, pid: pub.pid as number, kind: 'puback' });
    }
    assert.equal(fences.size, PID_MAX, 'every id fenced');
    assert.ok(
      [...fences.values()].every((n) => n === 1),
      'each id fenced once',
    );
    assert.equal(unfenced, 10, 'ids used again after the round are not fenced');
  });

  it('re-sends the fence on reconnect and still holds back the QoS 2 PUBLISH until its PUBCOMP', () => {
    const { h, s, p } = forced();
    h.publish(p, msg('t/a', 'new', 2), 7);
    h.apply({ t: 'disconnect', conn: s, reason: RC.SUCCESS, publishWill: false });
    const s2 = h.conn(9);
    const out = h.connect(s2, 'sub');
    assert.deepEqual(packets(out, s2), ['connack ', 'pubrel 2']);
    assert.deepEqual(packets(h.apply({ t: 'ack', conn: s2, pid: 2, kind: 'pubcomp' }), s2), ['publish 2 new']);
  });

  it('does not let a PUBCOMP or a stale PUBREC of a fenced id complete or advance the flow', () => {
    const { h, s, p } = forced();
    h.publish(p, msg('t/a', 'new', 2), 7);
    // A PUBREC for pid 2 before its PUBLISH was sent answers an old epoch's PUBLISH: ignored.
    assert.equal(events(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubrec' }), 'no-op').length, 1);
    assert.deepEqual(packets(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubcomp' }), s), ['publish 2 new']);
    // A second PUBCOMP while the PUBLISH awaits its PUBREC is not a completion.
    assert.equal(events(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubcomp' }), 'no-op').length, 1);
    assert.deepEqual(packets(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubrec' }), s), ['pubrel 2']);
    assert.equal(events(h.apply({ t: 'ack', conn: s, pid: 2, kind: 'pubcomp' }), 'no-op').length, 0);
    assert.equal(h.broker.verify(), null);
  });

  it('fences at its next use a QoS 1 id that was in flight when the fence opened', () => {
    const h = new Harness();
    serveStart(h, 1);
    const c = clients(h);
    h.publish(c.p, msg('t/a', 'q1', 1), 1);
    serveStart(h, 2);
    const { s, p } = clients(h);
    // pid 1 stays in flight while the fence's round of the scan passes it; after the round the
    // scan fences no id, but pid 1 is owed its fence (the client may hold it from the old epoch).
    for (let i = 0; i < PID_MAX - 1; i++) {
      const o = sent(h.publish(p, msg('t/a', 'r', 1), 1 + (i % 1000)), s);
      const pub = o.find((x) => x.type === 'publish');
      assert.ok(pub !== undefined && pub.type === 'publish' && pub.pid !== undefined && pub.pid !== 1);
      h.apply({ t: 'ack', conn: s, pid: pub.pid, kind: 'puback' });
    }
    assert.deepEqual(packets(h.publish(p, msg('t/a', 'after the round', 1), 999), s), ['publish 2 after the round']);
    h.apply({ t: 'ack', conn: s, pid: 2, kind: 'puback' });
    h.apply({ t: 'ack', conn: s, pid: 1, kind: 'puback' });
    assert.deepEqual(nextUseOf(h, s, p, 1).slice(0, 1), ['pubrel 1']);
    assert.equal(h.broker.verify(), null);
  });

  it('owes the fence again for an id whose fenced message expired before its PUBCOMP', () => {
    const { h, s, p } = forced();
    h.publish(p, msg('t/a', 'short', 2, false, { expiryS: 1 }), 7);
    h.apply({ t: 'disconnect', conn: s, reason: RC.SUCCESS, publishWill: false });
    const s2 = h.conn(9);
    h.apply({ t: 'tick' }, 2_000);
    const out = h.connect(s2, 'sub');
    assert.deepEqual(packets(out, s2), ['connack '], 'expired: neither fence nor PUBLISH');
    // pid 2 is free again; the scan's round has passed it, so only the debt fences it next time,
    // and it survives a snapshot.
    const copy = new Broker();
    copy.restore(h.broker.snapshot());
    assert.equal(copy.digest(), h.broker.digest());
    assert.deepEqual(nextUseOf(h, s2, p, 2).slice(0, 1), ['pubrel 2']);
    assert.equal(h.broker.verify(), null);
  });

  it('keeps the generation, the open fence, owed ids and a fenced flow across snapshot and restore', () => {
    const { h, s, p } = forced();
    h.publish(p, msg('t/a', 'new', 2), 7);
    const copy = new Broker();
    copy.restore(h.broker.snapshot());
    assert.equal(copy.digest(), h.broker.digest());
    // The copy continues as the original does: the PUBCOMP sends the held PUBLISH, the next id is fenced.
    const next = (b: Broker, index: number, cmd: Parameters<Harness['apply']>[0]): string[] => {
      const out: Effect[] = [];
      b.apply({ index, time: h.time, cmd }, out);
      return packets(out, s);
    };
    const i = h.index;
    for (const b of [h.broker, copy]) {
      assert.deepEqual(next(b, i + 1, { t: 'ack', conn: s, pid: 2, kind: 'pubcomp' }), ['publish 2 new']);
      assert.deepEqual(next(b, i + 2, { t: 'publish', conn: p, pid: 8, msg: msg('t/a', 'more', 2) }), ['pubrel 3']);
      // The generation is kept: another serve-start of generation 2 opens no fence.
      assert.equal(
        events(
          ((): Effect[] => {
            const out: Effect[] = [];
            b.apply({ index: i + 3, time: h.time, cmd: { t: 'serve-start', node: 1, settings: testSettings, generation: 2 } }, out);
            return out;
          })(),
          'packet-id-fence',
        ).length,
        0,
      );
    }
    assert.equal(copy.digest(), h.broker.digest());
  });
});
