// MQTT 3.1 and 3.1.1 behaviours that need exact control of acknowledgements: QoS 2 in both
// directions across reconnects, redelivery order, queue admission, wills with retain, filters with
// empty levels. MQTT.js is the client where it can express the behaviour; a raw client on our codec
// where a well-behaved client library would hide it (withheld acks, repeated packet ids).
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { BrokerNode } from '../src/server/broker-node.js';
import {
  connectClient,
  connectPacket,
  disconnect,
  dropConnection,
  publish,
  RawClient,
  startNode,
  subscribe,
  type TestClient,
  WAIT_MS,
  withTimeout,
} from './helpers.js';
import { sleep } from './support/wait.js';

const payload = (s: string) => new Uint8Array(Buffer.from(s));
const text = (b: Uint8Array) => Buffer.from(b).toString();

describe('MQTT 3.1.1 flows', { timeout: 90_000 }, () => {
  let node: BrokerNode | null = null;
  const clients: TestClient[] = [];
  const raws: RawClient[] = [];

  async function start(over: Parameters<typeof startNode>[0] = {}): Promise<BrokerNode> {
    node = await startNode(over);
    return node;
  }
  async function client(opts: Parameters<typeof connectClient>[1] = {}): Promise<TestClient> {
    const c = await connectClient(node!.port, opts);
    clients.push(c);
    return c;
  }
  /** A raw 3.1.1 client that has connected with the given id and session flag. */
  async function raw(clientId: string, clean: boolean): Promise<{ r: RawClient; sessionPresent: boolean }> {
    const r = await RawClient.open(node!.port, 4);
    raws.push(r);
    r.send(connectPacket({ clientId, clean }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, 0);
    return { r, sessionPresent: ack.sessionPresent };
  }
  async function subscribeRaw(r: RawClient, pid: number, filter: string, qos: 0 | 1 | 2): Promise<void> {
    r.send({ type: 'subscribe', pid, subs: [{ filter, qos, nl: false, rap: false, rh: 0 }], props: {} });
    await r.waitFor('suback', (p) => p.pid === pid);
  }
  const publishes = (r: RawClient) =>
    r.packets.filter((p) => p.type === 'publish') as Extract<(typeof r.packets)[number], { type: 'publish' }>[];

  afterEach(async () => {
    for (const c of clients.splice(0)) c.client.end(true);
    for (const r of raws.splice(0)) r.destroy();
    await node?.stop();
    node = null;
  });

  it('accepts MQTT 3.1 (protocol name MQIsdp, level 3) clients end to end', async () => {
    await start();
    const sub = await client({ clientId: 'v31-sub', protocolVersion: 3, protocolId: 'MQIsdp' });
    await subscribe(sub, 'old/+', 1);
    const pub = await client({ clientId: 'v31-pub', protocolVersion: 3, protocolId: 'MQIsdp' });
    await publish(pub, 'old/x', 'from 3.1', { qos: 1 });
    const m = await sub.waitFor((x) => x.topic === 'old/x', 'the 3.1 message');
    assert.equal(m.payload, 'from 3.1');
  });

  it('ends a Clean Session 1 session with its connection when a Clean Session 0 CONNECT takes it over', async () => {
    await start();
    const { r: first } = await raw('taken', true);
    await subscribeRaw(first, 1, 'old/#', 1);
    // [MQTT-3.1.2-6]: the clean session lasts as long as its network connection, which the takeover
    // closes; its state is not reused, so the new session is new (as Mosquitto answers too).
    const { r: second, sessionPresent } = await raw('taken', false);
    assert.equal(sessionPresent, false);
    const pub = await client({ clientId: 'taken-pub' });
    await publish(pub, 'old/x', 'to the old subscription', { qos: 1 });
    await subscribeRaw(second, 2, 'new/#', 1);
    await publish(pub, 'new/x', 'to the new one', { qos: 1 });
    await withTimeout(
      (async () => {
        while (!publishes(second).some((p) => p.topic === 'new/x')) await sleep(10);
      })(),
      WAIT_MS,
      'the message to the new subscription',
    );
    assert.deepEqual(
      publishes(second).map((p) => p.topic),
      ['new/x'],
      'nothing reached the new session through the old subscription',
    );
  });

  it('delivers an inbound QoS 2 message once even when the publisher re-sends it before PUBREL', async () => {
    await start();
    const sub = await client({ clientId: 'q2-sub' });
    await subscribe(sub, 'q2/#', 2);
    const { r: pub } = await raw('q2-pub', true);
    const msg = { type: 'publish', dup: false, qos: 2, retain: false, topic: 'q2/a', pid: 7, payload: payload('once'), props: {} } as const;
    pub.send(msg);
    await pub.waitFor('pubrec', (p) => p.pid === 7);
    // Re-sent with DUP before PUBREL: the packet id is still held [MQTT-4.3.3-9 / method A].
    pub.send({ ...msg, dup: true });
    await withTimeout(
      (async () => {
        while (pub.packets.filter((p) => p.type === 'pubrec').length < 2) await sleep(10);
      })(),
      WAIT_MS,
      'second PUBREC',
    );
    pub.send({ type: 'pubrel', pid: 7, code: 0, props: {} });
    await pub.waitFor('pubcomp', (p) => p.pid === 7);
    // After PUBCOMP the id is free: a new PUBLISH with id 7 is a new message.
    pub.send({ ...msg, payload: payload('twice') });
    await pub.waitFor('pubrec', (p) => p.pid === 7);
    await sub.waitFor((m) => m.payload === 'twice', 'the second, new message');
    assert.deepEqual(
      sub.messages.map((m) => m.payload),
      ['once', 'twice'],
    );
  });

  it('re-sends unacknowledged messages in their original order with DUP before the queue on reconnect', async () => {
    await start({ maxInflight: 2 });
    const { r: s1 } = await raw('order', false);
    await subscribeRaw(s1, 1, 'o/#', 1);
    const pub = await client({ clientId: 'order-pub' });
    for (const n of [1, 2, 3, 4]) await publish(pub, 'o/x', `m${n}`, { qos: 1 });
    await withTimeout(
      (async () => {
        while (publishes(s1).length < 2) await sleep(10);
      })(),
      WAIT_MS,
      'two messages in flight',
    );
    await sleep(50);
    assert.deepEqual(
      publishes(s1).map((p) => text(p.payload)),
      ['m1', 'm2'],
      'the inflight window holds two',
    );
    s1.destroy();
    await s1.waitClosed();
    const { r: s2, sessionPresent } = await raw('order', false);
    assert.equal(sessionPresent, true);
    await withTimeout(
      (async () => {
        while (publishes(s2).length < 2) await sleep(10);
      })(),
      WAIT_MS,
      'redelivery',
    );
    const again = publishes(s2);
    assert.deepEqual(
      again.map((p) => [text(p.payload), p.dup]),
      [
        ['m1', true],
        ['m2', true],
      ],
    );
    assert.deepEqual(
      again.map((p) => p.pid),
      publishes(s1).map((p) => p.pid),
      'same packet ids',
    );
    // Acknowledging frees slots; the queue follows in order, as new messages (no DUP).
    for (const p of again) s2.send({ type: 'puback', pid: p.pid!, code: 0, props: {} });
    await withTimeout(
      (async () => {
        while (publishes(s2).length < 4) await sleep(10);
      })(),
      WAIT_MS,
      'queued messages',
    );
    assert.deepEqual(
      publishes(s2)
        .slice(2)
        .map((p) => [text(p.payload), p.dup]),
      [
        ['m3', false],
        ['m4', false],
      ],
    );
  });

  it('re-sends a pending PUBREL on reconnect and completes the outbound QoS 2 flow once', async () => {
    await start();
    const { r: s1 } = await raw('rel', false);
    await subscribeRaw(s1, 1, 'rel/x', 2);
    const pub = await client({ clientId: 'rel-pub' });
    await publish(pub, 'rel/x', 'exactly once', { qos: 2 });
    const delivered = await s1.waitFor('publish');
    s1.send({ type: 'pubrec', pid: delivered.pid!, code: 0, props: {} });
    await s1.waitFor('pubrel', (p) => p.pid === delivered.pid);
    s1.destroy();
    await s1.waitClosed();
    const { r: s2 } = await raw('rel', false);
    const rel = await s2.waitFor('pubrel', (p) => p.pid === delivered.pid);
    assert.equal(rel.pid, delivered.pid);
    s2.send({ type: 'pubcomp', pid: delivered.pid!, code: 0, props: {} });
    await sleep(100);
    assert.equal(publishes(s2).length, 0, 'the message itself is not sent again once PUBREC was received');
  });

  it('admits at most --max-queued-messages for an offline session and counts the drops', async () => {
    const n = await start({ maxQueuedMessages: 3 });
    const s1 = await client({ clientId: 'bounded', clean: false });
    await subscribe(s1, 'b/#', 1);
    await disconnect(s1);
    const pub = await client({ clientId: 'bounded-pub' });
    for (let i = 1; i <= 5; i++) await publish(pub, 'b/x', `m${i}`, { qos: 1 });
    const s2 = await client({ clientId: 'bounded', clean: false });
    await s2.waitFor((m) => m.payload === 'm3', 'the admitted messages');
    await sleep(100);
    assert.deepEqual(
      s2.messages.map((m) => m.payload),
      ['m1', 'm2', 'm3'],
      'the first three were admitted; later ones were not',
    );
    assert.equal(n.counters.get('queue-full'), 2);
  });

  it('admits queued messages by bytes as well as by count', async () => {
    const n = await start({ maxQueuedBytes: 100 });
    const s1 = await client({ clientId: 'bytes', clean: false });
    await subscribe(s1, 'y', 1);
    await disconnect(s1);
    const pub = await client({ clientId: 'bytes-pub' });
    // 1-byte topic + 40-byte payload = 41 bytes each: two fit in 100, the third does not.
    for (let i = 1; i <= 3; i++) await publish(pub, 'y', String(i).repeat(40), { qos: 1 });
    const s2 = await client({ clientId: 'bytes', clean: false });
    await s2.waitFor((m) => m.payload.startsWith('2'), 'two admitted messages');
    await sleep(100);
    assert.equal(s2.messages.length, 2);
    assert.equal(n.counters.get('queue-full'), 1);
  });

  it('discards a persistent session, and its queue, when the client connects with a clean session', async () => {
    await start();
    const s1 = await client({ clientId: 'cleaner', clean: false });
    await subscribe(s1, 'c/x', 1);
    await disconnect(s1);
    const pub = await client({ clientId: 'cleaner-pub' });
    await publish(pub, 'c/x', 'queued', { qos: 1 });
    const s2 = await client({ clientId: 'cleaner', clean: true });
    assert.equal(s2.connack.sessionPresent, false);
    await disconnect(s2);
    const s3 = await client({ clientId: 'cleaner', clean: false });
    assert.equal(s3.connack.sessionPresent, false, 'no session was kept');
    await sleep(100);
    assert.equal(s3.messages.length, 0);
  });

  it('publishes a retained will with its QoS, and a later subscriber receives it retained', async () => {
    await start();
    const dev = await client({ clientId: 'dev', will: { topic: 'status/dev', payload: Buffer.from('offline'), qos: 1, retain: true } });
    await dropConnection(dev);
    await sleep(100);
    const watcher = await client({ clientId: 'watcher' });
    await subscribe(watcher, 'status/+', 1);
    const m = await watcher.waitFor((x) => x.topic === 'status/dev', 'retained will');
    assert.equal(m.payload, 'offline');
    assert.equal(m.packet.retain, true);
    assert.equal(m.packet.qos, 1);
  });

  it('publishes the will of a connection taken over by a new one with the same client id', async () => {
    await start();
    const watcher = await client({ clientId: 'w2' });
    await subscribe(watcher, 'gone/#', 0);
    const first = await client({ clientId: 'tk', will: { topic: 'gone/tk', payload: Buffer.from('taken'), qos: 0, retain: false } });
    await client({ clientId: 'tk' });
    await withTimeout(first.closed, WAIT_MS, 'takeover');
    const m = await watcher.waitFor((x) => x.topic === 'gone/tk', 'will of the taken-over connection');
    assert.equal(m.payload, 'taken');
  });

  it('sends retained messages to a new subscription at the lower QoS, with the retain flag set', async () => {
    await start();
    const pub = await client({ clientId: 'rp' });
    await publish(pub, 'r/a', 'A', { qos: 2, retain: true });
    await publish(pub, 'r/b', 'B', { qos: 0, retain: true });
    const sub = await client({ clientId: 'rs' });
    await subscribe(sub, 'r/+', 1);
    const a = await sub.waitFor((m) => m.topic === 'r/a', 'r/a');
    const b = await sub.waitFor((m) => m.topic === 'r/b', 'r/b');
    assert.deepEqual([a.packet.qos, a.packet.retain], [1, true]);
    assert.deepEqual([b.packet.qos, b.packet.retain], [0, true]);
  });

  it('refuses an invalid filter with 0x80 in its SUBACK position and grants the others', async () => {
    await start();
    // MQTT.js refuses to send invalid filters, so this client is raw.
    const { r } = await raw('filters', true);
    const subs = (
      [
        ['ok/+', 1],
        ['bad/#/x', 1],
        ['a+b', 0],
        ['fine/#', 2],
      ] as const
    ).map(([filter, qos]) => ({ filter, qos, nl: false, rap: false, rh: 0 as const }));
    r.send({ type: 'subscribe', pid: 9, subs, props: {} });
    const ack = await r.waitFor('suback', (p) => p.pid === 9);
    assert.deepEqual(ack.codes, [1, 0x80, 0x80, 2]);
  });

  it('treats empty topic levels as levels: a/+/b matches a//b, and /+ matches /x', async () => {
    await start();
    const sub = await client({ clientId: 'empty-levels' });
    await subscribe(sub, ['a/+/b', '/+'], 0);
    const pub = await client({ clientId: 'el-pub' });
    await publish(pub, 'a//b', 'one', { qos: 1 });
    await publish(pub, '/x', 'two', { qos: 1 });
    await publish(pub, 'a/b', 'not this', { qos: 1 });
    await sub.waitFor((m) => m.topic === '/x', '/x');
    await sleep(50);
    assert.deepEqual(
      sub.messages.map((m) => m.topic),
      ['a//b', '/x'],
    );
  });
});
