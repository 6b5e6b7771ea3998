// MQTT 3.1.1 end to end: an in-process BrokerNode over LocalLog on 127.0.0.1 port 0, with MQTT.js
// as the client we did not write, and a raw client on our codec for what MQTT.js will not send.
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, it } from 'node:test';
import pino from 'pino';
import { LocalLog } from '../src/log/local-log.js';
import { encode } from '../src/protocol/encoder.js';
import type { Packet } from '../src/protocol/packets.js';
import { BrokerNode, settingsFrom } from '../src/server/broker-node.js';
import {
  connectClient,
  connectPacket,
  disconnect,
  dropConnection,
  nodeOptions,
  publish,
  RawClient,
  startNode,
  subscribe,
  type TestClient,
  WAIT_MS,
  withTimeout,
} from './helpers.js';

describe('server over MQTT 3.1.1', { timeout: 60_000 }, () => {
  let node: BrokerNode;
  const clients: TestClient[] = [];
  const raws: RawClient[] = [];

  async function client(opts: Parameters<typeof connectClient>[1] = {}): Promise<TestClient> {
    const c = await connectClient(node.port, opts);
    clients.push(c);
    return c;
  }

  async function raw(): Promise<RawClient> {
    const r = await RawClient.open(node.port, 4);
    raws.push(r);
    return r;
  }

  /** A QoS 1 round trip through the log: everything proposed before it has been applied. */
  async function marker(sub: TestClient, pub: TestClient, topic: string): Promise<void> {
    await publish(pub, topic, 'marker', { qos: 1 });
    await sub.waitFor((m) => m.topic === topic, `marker on ${topic}`);
  }

  beforeEach(async () => {
    node = await startNode();
  });

  afterEach(async () => {
    for (const c of clients.splice(0)) c.client.end(true);
    for (const r of raws.splice(0)) r.destroy();
    await node.stop();
  });

  it('accepts a clean connection without a session present', async () => {
    const c = await client({ clientId: 'c1', clean: true });
    assert.equal(c.connack.sessionPresent, false);
  });

  it('delivers QoS 0, 1 and 2 end to end at the lower of the two QoS', async () => {
    const sub = await client({ clientId: 'sub' });
    const pub = await client({ clientId: 'pub' });
    assert.deepEqual(await subscribe(sub, 'q/+', 1), [1]);
    await publish(pub, 'q/0', 'zero', { qos: 0 });
    await publish(pub, 'q/1', 'one', { qos: 1 });
    await publish(pub, 'q/2', 'two', { qos: 2 });
    const two = await sub.waitFor((m) => m.topic === 'q/2', 'QoS 2 message');
    assert.deepEqual(
      sub.messages.map((m) => [m.topic, m.payload, m.packet.qos]),
      [
        ['q/0', 'zero', 0],
        ['q/1', 'one', 1],
        ['q/2', 'two', 1],
      ],
    );
    assert.equal(two.packet.retain, false);
  });

  it('delivers QoS 2 to a QoS 2 subscriber exactly once', async () => {
    const sub = await client({ clientId: 'sub2' });
    const pub = await client({ clientId: 'pub2' });
    await subscribe(sub, ['x/2', 'x/2-marker'], 2);
    await publish(pub, 'x/2', 'once', { qos: 2 });
    const m = await sub.waitFor((r) => r.topic === 'x/2', 'QoS 2 message');
    assert.equal(m.packet.qos, 2);
    await marker(sub, pub, 'x/2-marker');
    assert.equal(sub.messages.filter((r) => r.topic === 'x/2').length, 1);
  });

  it('keeps retained messages: set, replace, delete, and retain cleared on live delivery', async () => {
    const pub = await client({ clientId: 'rpub' });
    const live = await client({ clientId: 'rlive' });
    await subscribe(live, 'r/#', 1);
    await publish(pub, 'r/a', 'first', { qos: 1, retain: true });
    const liveMsg = await live.waitFor((m) => m.payload === 'first', 'live delivery');
    assert.equal(liveMsg.packet.retain, false, 'a live delivery has retain cleared [MQTT-3.3.1-9]');

    const late = await client({ clientId: 'rlate1' });
    await subscribe(late, 'r/+', 1);
    const got = await late.waitFor((m) => m.topic === 'r/a', 'retained delivery');
    assert.equal(got.payload, 'first');
    assert.equal(got.packet.retain, true, 'a retained delivery on subscribe carries retain [MQTT-3.3.1-8]');

    await publish(pub, 'r/a', 'second', { qos: 0, retain: true });
    await marker(live, pub, 'r/m1');
    const late2 = await client({ clientId: 'rlate2' });
    await subscribe(late2, 'r/a', 0);
    const replaced = await late2.waitFor((m) => m.topic === 'r/a', 'replaced retained');
    assert.equal(replaced.payload, 'second');

    await publish(pub, 'r/a', '', { qos: 1, retain: true });
    const late3 = await client({ clientId: 'rlate3' });
    await subscribe(late3, ['r/a', 'r/m2'], 1);
    await marker(late3, pub, 'r/m2');
    assert.equal(late3.messages.filter((m) => m.topic === 'r/a').length, 0, 'empty payload deletes [MQTT-3.3.1-10]');
  });

  it('queues QoS 1 messages for an offline persistent session and delivers them on reconnect', async () => {
    const s1 = await client({ clientId: 'persist', clean: false });
    assert.equal(s1.connack.sessionPresent, false);
    await subscribe(s1, 'p/#', 1);
    await disconnect(s1);
    const pub = await client({ clientId: 'ppub' });
    for (const n of [1, 2, 3]) await publish(pub, `p/${n}`, `m${n}`, { qos: 1 });
    const s2 = await client({ clientId: 'persist', clean: false });
    assert.equal(s2.connack.sessionPresent, true);
    await s2.waitFor((m) => m.topic === 'p/3', 'third queued message');
    assert.deepEqual(
      s2.messages.map((m) => m.payload),
      ['m1', 'm2', 'm3'],
    );
  });

  it('redelivers an unacknowledged QoS 1 message with DUP after reconnect', async () => {
    const s1 = await client({ clientId: 'dup', clean: false });
    await subscribe(s1, 'd/x', 1);
    // Never acknowledge: MQTT.js sends PUBACK only after handleMessage calls back.
    s1.client.handleMessage = () => {};
    const pub = await client({ clientId: 'dpub' });
    await publish(pub, 'd/x', 'again', { qos: 1 });
    const first = await s1.waitFor((m) => m.topic === 'd/x', 'first delivery');
    assert.equal(first.packet.dup, false);
    await dropConnection(s1);
    const s2 = await client({ clientId: 'dup', clean: false });
    const again = await s2.waitFor((m) => m.topic === 'd/x', 'redelivery');
    assert.equal(again.payload, 'again');
    assert.equal(again.packet.dup, true, '[MQTT-3.3.1-1]');
    assert.equal(again.packet.messageId, first.packet.messageId, 'same packet id');
  });

  it('closes the first connection when a second connects with the same client id', async () => {
    const first = await client({ clientId: 'twin' });
    await client({ clientId: 'twin' });
    await withTimeout(first.closed, WAIT_MS, 'first connection closed by takeover [MQTT-3.1.4-2]');
  });

  it('publishes the will when a connection drops and not after a normal DISCONNECT', async () => {
    const watcher = await client({ clientId: 'watcher' });
    await subscribe(watcher, ['will/#', 'mark'], 1);
    const pub = await client({ clientId: 'wpub' });

    const polite = await client({ clientId: 'polite', will: { topic: 'will/polite', payload: Buffer.from('p'), qos: 1, retain: false } });
    await disconnect(polite);
    await marker(watcher, pub, 'mark');
    assert.equal(watcher.messages.filter((m) => m.topic === 'will/polite').length, 0, '[MQTT-3.1.2-10]');

    const rude = await client({ clientId: 'rude', will: { topic: 'will/rude', payload: Buffer.from('gone'), qos: 1, retain: false } });
    await dropConnection(rude);
    const will = await watcher.waitFor((m) => m.topic === 'will/rude', 'will after drop');
    assert.equal(will.payload, 'gone');
  });

  it('closes a silent connection after one and a half keep-alives and publishes its will', async () => {
    const watcher = await client({ clientId: 'kwatch' });
    await subscribe(watcher, 'will/silent', 0);
    const r = await raw();
    r.send(
      connectPacket({
        clientId: 'silent',
        keepAlive: 1,
        will: { topic: 'will/silent', payload: Buffer.from('timeout'), qos: 0, retain: false, props: {} },
      }),
    );
    await r.waitFor('connack', (p) => p.code === 0);
    const started = Date.now();
    await r.waitClosed(4_000);
    const elapsed = Date.now() - started;
    assert.ok(elapsed >= 1_000, `closed after ${elapsed} ms, before 1.5 × keep-alive [MQTT-3.1.2-24]`);
    const will = await watcher.waitFor((m) => m.topic === 'will/silent', 'will after keep-alive timeout');
    assert.equal(will.payload, 'timeout');
  });

  it('answers PINGREQ with PINGRESP', async () => {
    const r = await raw();
    r.send(connectPacket({ clientId: 'pinger' }));
    await r.waitFor('connack');
    r.send({ type: 'pingreq' });
    await r.waitFor('pingresp');
  });

  it('stops delivering after UNSUBSCRIBE', async () => {
    const sub = await client({ clientId: 'unsub' });
    const pub = await client({ clientId: 'upub' });
    await subscribe(sub, ['u/a', 'u/mark'], 1);
    await publish(pub, 'u/a', 'before', { qos: 1 });
    await sub.waitFor((m) => m.topic === 'u/a', 'message before unsubscribe');
    await withTimeout(sub.client.unsubscribeAsync('u/a'), WAIT_MS, 'UNSUBACK');
    await publish(pub, 'u/a', 'after', { qos: 1 });
    await marker(sub, pub, 'u/mark');
    assert.deepEqual(
      sub.messages.filter((m) => m.topic === 'u/a').map((m) => m.payload),
      ['before'],
    );
  });

  it('delivers a message once to a client whose subscriptions overlap', async () => {
    const sub = await client({ clientId: 'overlap' });
    const pub = await client({ clientId: 'opub' });
    await subscribe(sub, ['o/#', 'o/+', 'o/x', 'mark'], 1);
    await publish(pub, 'o/x', 'one', { qos: 1 });
    await marker(sub, pub, 'mark');
    assert.equal(sub.messages.filter((m) => m.topic === 'o/x').length, 1);
  });

  it('does not match $-topics with # or + at the first level', async () => {
    const wild = await client({ clientId: 'wild' });
    const dollar = await client({ clientId: 'dollar' });
    const pub = await client({ clientId: 'dpub2' });
    await subscribe(wild, ['#', '+/x'], 1);
    await subscribe(dollar, '$test/#', 1);
    await publish(pub, '$test/x', 'sys', { qos: 1 });
    await dollar.waitFor((m) => m.topic === '$test/x', 'explicit $ subscription');
    await marker(wild, pub, 'plain/x');
    assert.equal(wild.messages.filter((m) => m.topic.startsWith('$')).length, 0, '[MQTT-4.7.2-1]');
  });

  it('answers CONNACK 0x02 to an empty client id with a persistent session, then closes', async () => {
    const r = await raw();
    r.send(connectPacket({ clientId: '', clean: false }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, 2, '[MQTT-3.1.3-8]');
    await r.waitClosed();
  });

  it('accepts an empty client id with a clean session', async () => {
    const r = await raw();
    r.send(connectPacket({ clientId: '', clean: true }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, 0, '[MQTT-3.1.3-6]');
  });

  it('answers CONNACK 0x01 to an unsupported protocol level, then closes', async () => {
    const r = await raw();
    // CONNECT, protocol name "MQTT", level 9, clean, keep-alive 0, client id "x".
    r.sendBytes(Buffer.from([0x10, 13, 0, 4, 0x4d, 0x51, 0x54, 0x54, 9, 0x02, 0, 0, 0, 1, 0x78]));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, 1, '[MQTT-3.1.2-2]');
    await r.waitClosed();
  });

  it('closes a connection whose first packet is not CONNECT, leaving others unaffected', async () => {
    const other = await client({ clientId: 'bystander' });
    const r = await raw();
    r.send({ type: 'pingreq' });
    await r.waitClosed();
    await subscribe(other, 'still/here', 0);
    assert.equal(other.client.connected, true);
  });

  it('closes a connection that sends a second CONNECT [MQTT-3.1.0-2]', async () => {
    const r = await raw();
    r.send(connectPacket({ clientId: 'twice' }));
    await r.waitFor('connack');
    r.send(connectPacket({ clientId: 'twice' }));
    await r.waitClosed();
  });

  it('refuses new connections and closes existing ones once stopped', async () => {
    const c = await client({ clientId: 'stopme' });
    const port = node.port;
    await node.stop();
    await withTimeout(c.closed, WAIT_MS, 'close on stop');
    await assert.rejects(RawClient.open(port, 4));
    node = await startNode();
  });

  it('pauses reading while the log is over its bound and loses nothing', async () => {
    // A log that refuses more than 4 KiB of uncommitted commands: a burst of 1 KiB publishes
    // must pause every socket until drain, then resume, with every message delivered in order.
    await node.stop();
    const opts = nodeOptions();
    node = new BrokerNode(opts, new LocalLog({ node: 1, settings: settingsFrom(opts), pendingBytesMax: 4096 }));
    await withTimeout(node.start(), WAIT_MS, 'node start');
    const sub = await client({ clientId: 'bp-sub' });
    await subscribe(sub, 'bp/#', 1);
    const pub = await client({ clientId: 'bp-pub' });
    const body = 'x'.repeat(1024);
    const count = 100;
    await Promise.all(Array.from({ length: count }, (_, i) => publish(pub, `bp/${i}`, body, { qos: 1 })));
    await sub.waitFor((m) => m.topic === `bp/${count - 1}`, 'last message', 10_000);
    assert.deepEqual(
      sub.messages.map((m) => m.topic),
      Array.from({ length: count }, (_, i) => `bp/${i}`),
    );
    assert.ok((node.counters.get('reads-paused') ?? 0) >= 1, 'reading was paused at least once');
  });

  it('logs protocol errors once per reason per window and counts every one', async () => {
    await node.stop();
    const lines: { key?: string; level?: number }[] = [];
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(JSON.parse(String(chunk)));
        done();
      },
    });
    node = await startNode({ logger: pino({ level: 'info' }, sink) });
    for (let i = 0; i < 3; i++) {
      const r = await raw();
      r.send({ type: 'pingreq' }); // not a CONNECT
      await r.waitClosed();
    }
    const protocolLines = lines.filter((l) => l.key?.startsWith('protocol:'));
    assert.equal(protocolLines.length, 1, JSON.stringify(protocolLines));
    const counted = [...node.counters].filter(([k]) => k.startsWith('protocol-error:'));
    assert.deepEqual(
      counted.map(([, n]) => n),
      [3],
    );
  });

  it('keeps replies in arrival order behind unapplied proposals', async () => {
    // A QoS 1 publish (through the log) then a PINGREQ (answered locally) in one TCP segment:
    // the PUBACK must come first.
    const r = await raw();
    r.send(connectPacket({ clientId: 'order' }));
    await r.waitFor('connack');
    r.sendBytes(
      Buffer.concat([
        encodeFor({ type: 'publish', dup: false, qos: 1, retain: false, topic: 'o/r', pid: 7, payload: Buffer.from('x'), props: {} }),
        encodeFor({ type: 'pingreq' }),
      ]),
    );
    await r.waitFor('pingresp');
    const kinds = r.packets.map((p) => p.type);
    assert.deepEqual(kinds.slice(1), ['puback', 'pingresp']);
  });
});

function encodeFor(p: Packet): Buffer {
  return encode(p, 4);
}
