// /metrics of a real raftmq process under a small load from MQTT.js: the counters match what the
// clients counted, two scrapes never see a counter go down (nothing resets on scrape), labels come
// from fixed sets, and prom-client's process metrics are there without the ones that reset.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { BrokerProcess } from './broker-process.js';
import { connectClient, disconnect, publish, subscribe, type TestClient, withTimeout } from './helpers.js';
import { parseMetrics } from './prom-text.js';
import { httpGet } from './support/net.js';

async function scrape(port: number): Promise<Map<string, number>> {
  const r = await httpGet(port, '/metrics');
  assert.equal(r.code, 200);
  return parseMetrics(r.text);
}

const PER_QOS = { 0: 60, 1: 40, 2: 20 } as const;

describe('Prometheus metrics of a single node', { timeout: 60_000 }, () => {
  let broker: BrokerProcess;
  let healthPort = 0;
  before(async () => {
    broker = await BrokerProcess.start(['--health-port', '0']);
    healthPort = (await broker.waitForLog((l) => l.msg === 'health listening')).port as number;
  });
  after(async () => {
    await broker?.stop();
  });

  it('counts what MQTT.js clients sent and received, by QoS, and every connection', async () => {
    const before = await scrape(healthPort);
    assert.equal(before.get('raftmq_connections_total'), 0);
    const sub = await connectClient(broker.port, { clientId: 'm-sub' });
    await subscribe(sub, 'load/#', 2);
    const pubs: TestClient[] = [];
    for (let i = 0; i < 3; i++) pubs.push(await connectClient(broker.port, { clientId: `m-pub-${i}`, protocolVersion: 5 }));
    let payloadBytes = 0;
    const sends: Promise<void>[] = [];
    let mid: Map<string, number> | null = null;
    for (const qos of [0, 1, 2] as const) {
      for (let n = 0; n < PER_QOS[qos]; n++) {
        const payload = `q${qos}-${n}`;
        payloadBytes += payload.length;
        sends.push(publish(pubs[n % pubs.length] as TestClient, `load/${qos}`, payload, { qos }));
      }
      // A scrape in the middle of the load.
      if (qos === 1) mid = await scrape(healthPort);
    }
    await withTimeout(Promise.all(sends), 10_000, 'every publish acknowledged');
    const total = PER_QOS[0] + PER_QOS[1] + PER_QOS[2];
    await sub.waitFor(() => sub.messages.length === total, 'every message at the subscriber', 10_000);
    const m = await scrape(healthPort);
    for (const qos of [0, 1, 2] as const) {
      assert.equal(m.get(`raftmq_messages_received_total{qos="${qos}"}`), PER_QOS[qos], `received at QoS ${qos}`);
      const got = sub.messages.filter((r) => r.packet.qos === qos).length;
      assert.equal(got, PER_QOS[qos]);
      assert.equal(m.get(`raftmq_messages_sent_total{qos="${qos}"}`), got, `sent at QoS ${qos}`);
    }
    const inBytes = [0, 1, 2].reduce((n, q) => n + (m.get(`raftmq_messages_received_bytes_total{qos="${q}"}`) ?? 0), 0);
    assert.equal(inBytes, payloadBytes);
    assert.equal(m.get('raftmq_connections_total'), 4);
    assert.equal(m.get('raftmq_connections'), 4);
    assert.equal(m.get('raftmq_sessions{state="online"}'), 4);
    assert.equal(m.get('raftmq_subscriptions'), 1);
    assert.ok((m.get('raftmq_network_received_bytes_total') ?? 0) > payloadBytes);
    assert.ok((m.get('raftmq_network_sent_bytes_total') ?? 0) > payloadBytes);

    // One PUBLISH in 32 is offered as a latency probe: 120 of them give at least one sample.
    const count = m.get('raftmq_publish_delivery_latency_seconds_count') ?? 0;
    assert.ok(count >= 1, 'publish-to-delivery latency sampled');
    assert.equal(m.get('raftmq_publish_delivery_latency_seconds_bucket{le="+Inf"}'), count);
    let cumulative = 0;
    for (const [series, v] of m) {
      if (!series.startsWith('raftmq_publish_delivery_latency_seconds_bucket')) continue;
      assert.ok(v >= cumulative, `${series} is cumulative`);
      cumulative = v;
    }

    // Two scrapes in a row, and the one during the load: no counter ever goes down.
    const again = await scrape(healthPort);
    for (const [earlier, later] of [
      [mid as Map<string, number>, m],
      [m, again],
    ] as const) {
      for (const [series, v] of earlier) {
        if (!/^raftmq_.*_total(\{|$)/.test(series)) continue;
        const w = later.get(series);
        assert.ok(w !== undefined, `${series} still present`);
        assert.ok(w >= v, `${series} went from ${v} to ${w}`);
      }
    }
    for (const c of [sub, ...pubs]) await disconnect(c);
  });

  it('has refusal series by reason, process metrics, and no series that resets on scrape', async () => {
    const m = await scrape(healthPort);
    for (const series of [
      'raftmq_connections_refused_total{reason="connack"}',
      'raftmq_auth_refused_total{reason="bad_credentials"}',
      'raftmq_acl_denied_total{access="subscribe"}',
      'raftmq_tls_refused_total{reason="handshake"}',
      'raftmq_limit_refused_total{limit="publish_rate"}',
      'raftmq_messages_dropped_total{reason="queue_full"}',
      'raftmq_raft_role{role="leader"}',
      'raftmq_queued_messages',
      'raftmq_inflight_messages',
      'raftmq_retained_messages',
      'process_cpu_user_seconds_total',
      'nodejs_heap_size_used_bytes',
    ]) {
      assert.ok(m.has(series), series);
    }
    assert.equal(m.get('raftmq_raft_role{role="leader"}'), 1);
    for (const name of m.keys()) assert.ok(!name.startsWith('nodejs_eventloop_lag'), `${name} resets at every scrape`);
  });
});
