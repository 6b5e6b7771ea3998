// Node limits against an in-process node with small bounds: each refusal carries its reason code
// (or is a close where 3.1.1 has none) and is counted.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { encode } from '../src/protocol/encoder.js';
import type { Packet } from '../src/protocol/packets.js';
import { RC } from '../src/protocol/reason-codes.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import type { NodeLimits } from '../src/server/limits.js';
import { connectClient, connectPacket, counter, disconnect, publish, RawClient, startNode, subscribe } from './helpers.js';
import { sleep } from './support/wait.js';

async function withNode(limits: Partial<NodeLimits>, body: (node: BrokerNode) => Promise<void>): Promise<void> {
  const node = await startNode({ nodeLimits: limits });
  try {
    await body(node);
  } finally {
    await node.stop();
  }
}

async function rawConnect(node: BrokerNode, level: 4 | 5, clientId: string): Promise<RawClient> {
  const c = await RawClient.open(node.port, level);
  c.send(connectPacket({ level, clientId }));
  return c;
}

const acksOf = (c: RawClient, type: 'puback' | 'pubrec'): [number, number][] =>
  c.packets.flatMap((p) => (p.type === type ? [[p.pid, p.code] as [number, number]] : []));
const EMPTY = new Uint8Array(0);
const qos0 = (topic: string): Packet => ({ type: 'publish', topic, payload: EMPTY, qos: 0, retain: false, dup: false, props: {} });
const qos1 = (topic: string, pid: number): Packet => ({
  type: 'publish',
  topic,
  pid,
  payload: EMPTY,
  qos: 1,
  retain: false,
  dup: false,
  props: {},
});
const qos2 = (pid: number, dup: boolean): Packet => ({
  type: 'publish',
  topic: 'q2',
  pid,
  payload: EMPTY,
  qos: 2,
  retain: false,
  dup,
  props: {},
});

describe('node limits', { timeout: 60_000 }, () => {
  it('refuses the CONNECT beyond max-connections with 0x97 (3.1.1: code 3) and counts it', async () => {
    await withNode({ maxConnections: 2 }, async (node) => {
      const a = await connectClient(node.port, { protocolVersion: 5, clientId: 'a' });
      const b = await connectClient(node.port, { protocolVersion: 4, clientId: 'b' });
      const v5 = await rawConnect(node, 5, 'c5');
      assert.equal((await v5.waitFor('connack')).code, RC.QUOTA_EXCEEDED);
      const v4 = await rawConnect(node, 4, 'c4');
      assert.equal((await v4.waitFor('connack')).code, 3);
      await v4.waitClosed();
      assert.equal(counter(node, 'limit-max-connections'), 2);
      await disconnect(a);
      await disconnect(b);
    });
  });

  it('closes a socket beyond max-pending-connections at accept, and one silent past connect-timeout-ms', async () => {
    await withNode({ maxPendingConnections: 2, connectTimeoutMs: 300 }, async (node) => {
      const silent = [await RawClient.open(node.port, 4), await RawClient.open(node.port, 4)];
      const extra = await RawClient.open(node.port, 4);
      await extra.waitClosed();
      assert.equal(counter(node, 'limit-pending-connections'), 1);
      for (const s of silent) await s.waitClosed();
      assert.equal(counter(node, 'connect-timeout'), 2);
      // The server forgets a socket on its own close event, which may follow the client's.
      for (let i = 0; i < 100 && node.stats().pending !== 0; i++) await sleep(20);
      const c = await connectClient(node.port, { protocolVersion: 5, clientId: 'after' });
      await disconnect(c);
    });
  });

  it('refuses filters over max-topic-levels with 0x8F and a PUBLISH over it with DISCONNECT 0x90', async () => {
    await withNode({ maxTopicLevels: 3 }, async (node) => {
      const c = await rawConnect(node, 5, 'deep');
      await c.waitFor('connack');
      c.send({
        type: 'subscribe',
        pid: 1,
        subs: [
          { filter: 'a/b/c', qos: 0, nl: false, rap: false, rh: 0 },
          { filter: 'a/b/c/d', qos: 0, nl: false, rap: false, rh: 0 },
        ],
        props: {},
      });
      assert.deepEqual((await c.waitFor('suback')).codes, [0, RC.TOPIC_FILTER_INVALID]);
      c.send({ type: 'publish', topic: 'a/b/c/d', payload: new Uint8Array(0), qos: 0, retain: false, dup: false, props: {} });
      assert.equal((await c.waitFor('disconnect')).code, RC.TOPIC_NAME_INVALID);
      await c.waitClosed();
      // Both are a limit, counted as one, and neither is a protocol error.
      assert.equal(counter(node, 'limit-topic'), 2);
      assert.equal(counter(node, 'protocol-error:topic-name-invalid'), 0);
    });
  });

  it('refuses a will topic over max-topic-length with CONNACK 0x90 and counts it as limit-topic', async () => {
    await withNode({ maxTopicLength: 8 }, async (node) => {
      const will = { topic: 'wills/too/long', payload: new Uint8Array(0), qos: 0 as const, retain: false, props: {} };
      const v5 = await RawClient.open(node.port, 5);
      v5.send(connectPacket({ level: 5, clientId: 'w5', will }));
      assert.equal((await v5.waitFor('connack')).code, RC.TOPIC_NAME_INVALID);
      await v5.waitClosed();
      const short = await RawClient.open(node.port, 5);
      short.send(connectPacket({ level: 5, clientId: 'w-ok', will: { ...will, topic: 'wills/ok' } }));
      assert.equal((await short.waitFor('connack')).code, RC.SUCCESS);
      assert.equal(counter(node, 'limit-topic'), 1);
      assert.equal(counter(node, 'protocol-error:topic-name-invalid'), 0);
      short.destroy();
    });
  });

  it('drops QoS 0 over max-publish-rate and disconnects a publisher at more than twice the rate with 0x96 (3.1.1: close)', async () => {
    await withNode({ publishRate: 5 }, async (node) => {
      for (const level of [5, 4] as const) {
        const c = await rawConnect(node, level, `fast${level}`);
        await c.waitFor('connack');
        // 5 within the rate, 5 dropped as over it, the 11th is the excess beyond the rate again.
        c.sendBytes(Buffer.concat(Array.from({ length: 20 }, () => encode(qos0('t'), level))));
        if (level === 5) assert.equal((await c.waitFor('disconnect')).code, RC.MESSAGE_RATE_TOO_HIGH);
        await c.waitClosed();
      }
      assert.equal(counter(node, 'limit-publish-rate'), 12);
      assert.equal(counter(node, 'protocol-error:publish-rate'), 2);
    });
  });

  it('answers QoS 1 over max-publish-rate with PUBACK 0x97, unrouted, after the acks of earlier packets', async () => {
    await withNode({ publishRate: 2 }, async (node) => {
      const sub = await connectClient(node.port, { protocolVersion: 5, clientId: 'sub' });
      await subscribe(sub, 'q/#', 1);
      const c = await rawConnect(node, 5, 'quota1');
      await c.waitFor('connack');
      // One write: pids 1 and 2 are proposed, 3 and 4 are refused at once by the connection, yet
      // their answers must not overtake those of 1 and 2, which wait for the log.
      c.sendBytes(Buffer.concat([1, 2, 3, 4].map((pid) => encode(qos1(`q/${pid}`, pid), 5))));
      await c.waitFor('puback', (p) => p.pid === 4);
      const acks = acksOf(c, 'puback');
      assert.deepEqual(acks, [
        [1, RC.SUCCESS],
        [2, RC.SUCCESS],
        [3, RC.QUOTA_EXCEEDED],
        [4, RC.QUOTA_EXCEEDED],
      ]);
      const other = await connectClient(node.port, { protocolVersion: 5, clientId: 'other' });
      await publish(other, 'q/marker', 'm', { qos: 1 });
      await sub.waitFor((m) => m.topic === 'q/marker', 'marker');
      assert.deepEqual(
        sub.messages.map((m) => m.topic),
        ['q/1', 'q/2', 'q/marker'],
      );
      assert.equal(counter(node, 'limit-publish-rate'), 2);
      c.destroy();
      await disconnect(other);
      await disconnect(sub);
    });
  });

  it('answers QoS 2 over max-publish-rate with PUBREC 0x97, except a retry of an id held, and disconnects at twice the rate', async () => {
    await withNode({ publishRate: 3 }, async (node) => {
      const c = await rawConnect(node, 5, 'quota2');
      await c.waitFor('connack');
      const packets = [qos2(1, false), qos2(2, false), qos2(3, false), qos2(1, true), qos2(4, true), qos2(5, false), qos2(6, false)];
      c.sendBytes(Buffer.concat(packets.map((p) => encode(p, 5))));
      assert.equal((await c.waitFor('disconnect')).code, RC.MESSAGE_RATE_TOO_HIGH);
      const recs = acksOf(c, 'pubrec');
      assert.deepEqual(recs, [
        [1, RC.NO_MATCHING_SUBSCRIBERS],
        [2, RC.NO_MATCHING_SUBSCRIBERS],
        [3, RC.NO_MATCHING_SUBSCRIBERS],
        [1, RC.SUCCESS],
        [4, RC.QUOTA_EXCEEDED],
        [5, RC.QUOTA_EXCEEDED],
      ]);
      assert.equal(c.packets.at(-1)?.type, 'disconnect');
      await c.waitClosed();
    });
  });

  it('tells an MQTT.js v5 publisher over max-publish-rate 0x97 in the publish callback', async () => {
    await withNode({ publishRate: 1 }, async (node) => {
      const c = await connectClient(node.port, { protocolVersion: 5, clientId: 'mqttjs-quota' });
      const results = await Promise.allSettled([publish(c, 'a', '1', { qos: 1 }), publish(c, 'a', '2', { qos: 1 })]);
      assert.equal(results[0].status, 'fulfilled');
      assert.equal(results[1].status, 'rejected');
      assert.equal(((results[1] as PromiseRejectedResult).reason as { code?: number }).code, RC.QUOTA_EXCEEDED);
      await disconnect(c);
    });
  });

  it('closes a 3.1.1 publisher whose QoS 1 PUBLISH is over max-publish-rate, after acknowledging the earlier ones', async () => {
    await withNode({ publishRate: 2 }, async (node) => {
      const c = await rawConnect(node, 4, 'quota311');
      await c.waitFor('connack');
      c.sendBytes(Buffer.concat([1, 2, 3].map((pid) => encode(qos1('t', pid), 4))));
      await c.waitClosed();
      assert.deepEqual(
        acksOf(c, 'puback').map(([pid]) => pid),
        [1, 2],
      );
    });
  });

  it('refuses CONNECTs over max-connect-rate per address with 0x9F, and closes 3.1.1 ones without CONNACK', async () => {
    await withNode({ connectRatePerAddress: 2 }, async (node) => {
      const ok = [await rawConnect(node, 5, 'r1'), await rawConnect(node, 5, 'r2')];
      for (const c of ok) assert.equal((await c.waitFor('connack')).code, RC.SUCCESS);
      const v5 = await rawConnect(node, 5, 'r3');
      assert.equal((await v5.waitFor('connack')).code, RC.CONNECTION_RATE_EXCEEDED);
      const v4 = await rawConnect(node, 4, 'r4');
      await v4.waitClosed();
      assert.equal(v4.packets.length, 0);
      assert.equal(counter(node, 'limit-connect-rate'), 2);
      for (const c of ok) c.destroy();
    });
  });
});
