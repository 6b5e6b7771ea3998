// The server-side paths of the $SYS topics: Broker.routeLocal to live subscribers and
// Broker.sendLocalRetained after a SUBACK, neither of which changes the replicated state.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseAcl } from './acl.js';
import { Harness, msg, published, testSettings, text } from './broker-harness.testkit.js';
import type { AclRule, Effect, Message, SubscribeCommand } from './commands.js';

function rules(text: string): AclRule[] {
  const r = parseAcl(text);
  if ('problem' in r) throw new Error('bad acl');
  return r.rules;
}

const table: [string, Message][] = [
  ['$SYS/broker/uptime', msg('$SYS/broker/uptime', '5 seconds', 0, true)],
  ['$SYS/broker/version', msg('$SYS/broker/version', 'raftmq version x', 0, true)],
];
const match = (filter: string, fn: (topic: string, m: Message) => void): void => {
  for (const [t, m] of table) if (filter === '$SYS/#' || filter === t) fn(t, m);
};

/** Applies a subscribe the way BrokerNode does: the filters held before, then the local table
 * after the SUBACK. */
function subscribeSys(h: Harness, conn: string, pid: number, rh: 0 | 1 | 2, filter = '$SYS/#'): Effect[] {
  const existed = h.broker.filtersOf(conn);
  const cmd: SubscribeCommand = { t: 'subscribe', conn, pid, subs: [{ filter, qos: 1, nl: false, rap: false, rh }] };
  const out = h.apply(cmd);
  const suback = out.find((e) => e.t === 'send' && e.packet.type === 'suback');
  const codes = suback?.t === 'send' && suback.packet.type === 'suback' ? suback.packet.codes : [];
  h.broker.sendLocalRetained(cmd, codes, existed, match, out);
  return out;
}

describe('Broker local delivery ($SYS)', () => {
  it('sends the table after the SUBACK, QoS 0 retained, by Retain Handling, leaving the state alone', () => {
    const h = new Harness();
    h.connect(h.conn(1), 'v5', { protocol: 5 });
    const before = h.broker.digest();
    const first = subscribeSys(h, h.conn(1), 1, 1);
    assert.deepEqual(
      published(first, h.conn(1)).map((p) => [p.msg.topic, p.qos, p.retain]),
      [
        ['$SYS/broker/uptime', 0, true],
        ['$SYS/broker/version', 0, true],
      ],
    );
    const after = h.broker.digest();
    assert.notEqual(before, after, 'the subscription itself is state');
    // Retain Handling 1: the subscription exists now, so nothing again; 2: never.
    assert.equal(published(subscribeSys(h, h.conn(1), 2, 1), h.conn(1)).length, 0);
    assert.equal(published(subscribeSys(h, h.conn(1), 3, 2, '$SYS/broker/version'), h.conn(1)).length, 0);
    // Routed live: to the subscriber, retain flag clear, and no state changed.
    const digest = h.broker.digest();
    const out: Effect[] = [];
    assert.equal(h.broker.routeLocal(msg('$SYS/broker/uptime', '6 seconds', 0, true), out), 1);
    const live = published(out, h.conn(1));
    assert.equal(live.length, 1);
    assert.equal(text(live[0]!.msg), '6 seconds');
    assert.equal(live[0]!.retain, false);
    assert.equal(h.broker.digest(), digest);
  });

  it('gives nothing where the ACL refuses the subscription or denies the topic', () => {
    const acl = rules('topic read $SYS/#\ntopic deny $SYS/broker/version\n');
    const h = new Harness({ ...testSettings, acl });
    h.connect(h.conn(1), 'reader');
    const got = published(subscribeSys(h, h.conn(1), 1, 0), h.conn(1)).map((p) => p.msg.topic);
    assert.deepEqual(got, ['$SYS/broker/uptime']);
    const none = new Harness({ ...testSettings, acl: rules('topic read a/#\n') });
    none.connect(none.conn(1), 'other');
    assert.equal(published(subscribeSys(none, none.conn(1), 1, 0), none.conn(1)).length, 0);
  });
});
