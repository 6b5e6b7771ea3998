// Two scrapers at once see the same values: nothing a scrape reads is reset by it, and the
// event-loop delay is the last complete window's, not "since the previous scrape".
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Registry } from 'prom-client';
import { healthSource, singleNodeStatus } from '../src/cluster/cluster-node.js';
import { NodeMetrics } from '../src/cluster/metrics.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { connectClient, disconnect, publish, startNode } from './helpers.js';
import { parseMetrics } from './prom-text.js';
import { sleep } from './support/wait.js';

describe('NodeMetrics', { timeout: 30_000 }, () => {
  let node: BrokerNode;
  let metrics: NodeMetrics;
  before(async () => {
    node = await startNode();
    metrics = new NodeMetrics(
      new Registry(),
      healthSource(node, () => singleNodeStatus(node)),
      100,
    );
  });
  after(async () => {
    metrics?.close();
    await node?.stop();
  });

  it('gives two concurrent scrapes the same counters and the same event-loop window', async () => {
    const c = await connectClient(node.port, { clientId: 'window' });
    await publish(c, 'a', 'b', { qos: 1 });
    await disconnect(c);
    // The first window closes after 100 ms; wait (bounded) until its quantiles are there.
    let m = parseMetrics(await metrics.scrape());
    for (let i = 0; i < 100 && !m.has('raftmq_event_loop_delay_seconds{quantile="0.99"}'); i++) {
      await sleep(20);
      m = parseMetrics(await metrics.scrape());
    }
    assert.ok(m.has('raftmq_event_loop_delay_seconds{quantile="1"}'), 'a complete window');
    const [a, b] = await Promise.all([metrics.scrape(), metrics.scrape()]);
    const pa = parseMetrics(a);
    const pb = parseMetrics(b);
    for (const [series, v] of pa) {
      if (series.startsWith('raftmq_')) assert.equal(pb.get(series), v, series);
    }
    assert.equal(pa.get('raftmq_messages_received_total{qos="1"}'), 1);
  });
});
