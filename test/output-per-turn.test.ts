// Output decided in one commit turn for more connections than one event-loop turn writes
// (FLUSHES_PER_TURN_MAX) is written over the next turns: every client still gets its packets, in
// order, and the node counts each turn that left output for later.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { Packet } from '../src/protocol/packets.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { FLUSHES_PER_TURN_MAX } from '../src/server/outbox.js';
import { connectPacket, RawClient, startNode } from './helpers.js';

/** Enough subscribers that one publish's fan-out needs three flush turns. */
const SUBSCRIBERS = FLUSHES_PER_TURN_MAX * 2 + 9;
const TOPIC = 'fan/out';

function publishPacket(pid: number, payload: string): Packet {
  return { type: 'publish', topic: TOPIC, pid, payload: Buffer.from(payload), qos: 1, retain: false, dup: false, props: {} };
}

describe('output written a bounded number of connections per turn', { timeout: 60_000 }, () => {
  let node: BrokerNode | null = null;
  const clients: RawClient[] = [];

  afterEach(async () => {
    for (const c of clients.splice(0)) c.destroy();
    await node?.stop();
    node = null;
  });

  it('delivers a QoS 1 fan-out to more subscribers than one turn writes, in order, over several turns', async () => {
    node = await startNode();
    for (let i = 0; i < SUBSCRIBERS; i++) {
      const c = await RawClient.open(node.port, 4);
      clients.push(c);
      c.send(connectPacket({ clientId: `s${i}` }));
      await c.waitFor('connack');
      c.send({ type: 'subscribe', pid: 1, subs: [{ filter: TOPIC, qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
      await c.waitFor('suback');
    }
    const publisher = await RawClient.open(node.port, 4);
    clients.push(publisher);
    publisher.send(connectPacket({ clientId: 'pub' }));
    await publisher.waitFor('connack');
    const before = node.counters.get('flush-continued') ?? 0;
    publisher.send(publishPacket(1, 'first'));
    publisher.send(publishPacket(2, 'second'));
    await publisher.waitFor('puback', (p) => p.pid === 2);
    for (const c of clients.slice(0, SUBSCRIBERS)) {
      await c.waitFor('publish', (p) => Buffer.from(p.payload).toString() === 'second');
      const got = c.packets.flatMap((p) => (p.type === 'publish' ? [Buffer.from(p.payload).toString()] : []));
      assert.deepEqual(got, ['first', 'second']);
    }
    assert.ok((node.counters.get('flush-continued') ?? 0) - before >= 2, 'the fan-out was written over at least three turns');
  });
});
