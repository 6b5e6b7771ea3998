import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { filterReachesSys, type SysReadings, SysTopics } from './sys-topics.js';

const readings = (over: Partial<SysReadings> = {}): SysReadings => ({
  uptimeS: 10,
  connected: 2,
  disconnected: 1,
  maximum: 3,
  packetsIn: 100,
  packetsOut: 50,
  publishIn: 40,
  publishOut: 20,
  publishDropped: 0,
  bytesIn: 4_000,
  bytesOut: 2_000,
  connections: 5,
  subscriptions: 7,
  retained: 1,
  heapBytes: 1_000_000,
  ...over,
});

const text = (t: SysTopics, topic: string): string | undefined => {
  let v: string | undefined;
  t.match(topic, (_, m) => {
    v = Buffer.from(m.payload).toString('utf8');
  });
  return v;
};

describe('SysTopics', () => {
  it("holds Mosquitto's names with the readings, retained QoS 0, and returns only what changed", () => {
    const t = new SysTopics('1.2.3');
    const first = t.update(readings());
    assert.equal(first.length, t.size, 'the first update changes every topic');
    assert.ok(first.every((m) => m.qos === 0 && m.retain && m.topic.startsWith('$SYS/broker/')));
    assert.equal(text(t, '$SYS/broker/version'), 'raftmq version 1.2.3');
    assert.equal(text(t, '$SYS/broker/uptime'), '10 seconds');
    assert.equal(text(t, '$SYS/broker/clients/connected'), '2');
    assert.equal(text(t, '$SYS/broker/clients/disconnected'), '1');
    assert.equal(text(t, '$SYS/broker/clients/total'), '3');
    assert.equal(text(t, '$SYS/broker/retained messages/count'), '1');
    assert.equal(text(t, '$SYS/broker/cluster/role'), undefined, 'no cluster topics on a single node');
    const second = t.update(readings({ uptimeS: 20, connected: 3 }));
    assert.deepEqual(
      second.map((m) => m.topic).filter((x) => !x.includes('/load/')),
      ['$SYS/broker/clients/active', '$SYS/broker/clients/connected', '$SYS/broker/clients/total', '$SYS/broker/uptime'],
    );
  });

  it("averages each counter's per-minute rate over 1, 5 and 15 minutes as Mosquitto does", () => {
    const t = new SysTopics('x');
    t.update(readings({ uptimeS: 0, publishIn: 0 }));
    // 600 PUBLISH in 60 s: 600 per minute, folded in with weight 1 - e^(-60/period).
    t.update(readings({ uptimeS: 60, publishIn: 600 }));
    assert.equal(text(t, '$SYS/broker/load/publish/received/1min'), (600 * (1 - Math.exp(-1))).toFixed(2));
    assert.equal(text(t, '$SYS/broker/load/publish/received/15min'), (600 * (1 - Math.exp(-60 / 900))).toFixed(2));
  });

  it('adds the cluster topics on a cluster node', () => {
    const t = new SysTopics('x');
    t.update(readings({ cluster: { role: 'leader', leader: 2, term: 7, redundant: true } }));
    assert.equal(text(t, '$SYS/broker/cluster/role'), 'leader');
    assert.equal(text(t, '$SYS/broker/cluster/leader'), '2');
    assert.equal(text(t, '$SYS/broker/cluster/term'), '7');
    assert.equal(text(t, '$SYS/broker/cluster/redundant'), 'true');
  });

  it("adds Mosquitto's bridge state per bridge: 1 while connected, 0 otherwise", () => {
    const t = new SysTopics('x');
    t.update(readings());
    assert.equal(text(t, '$SYS/broker/connection/cloud/state'), undefined, 'no bridge, no topic');
    t.update(readings({ bridges: [{ name: 'cloud', up: false }] }));
    assert.equal(text(t, '$SYS/broker/connection/cloud/state'), '0');
    const changed = t.update(readings({ bridges: [{ name: 'cloud', up: true }] }));
    assert.deepEqual(
      changed.map((m) => m.topic),
      ['$SYS/broker/connection/cloud/state'],
    );
    assert.equal(text(t, '$SYS/broker/connection/cloud/state'), '1');
  });

  it('is reached only by filters whose first level is $SYS, and never by # or + [MQTT-4.7.2-1]', () => {
    const t = new SysTopics('x');
    t.update(readings());
    for (const f of ['#', '+/broker/version', '+/#']) {
      let n = 0;
      t.match(f, () => n++);
      assert.equal(n, 0, f);
      assert.equal(filterReachesSys(f), false, f);
    }
    assert.ok(filterReachesSys('$SYS/#'));
    assert.ok(filterReachesSys('$SYS/broker/+'));
    assert.equal(filterReachesSys('$SYSTEM/x'), false);
  });
});
