// MQTT 5 end to end: CONNACK properties, Server Keep Alive, limits answered with DISCONNECT reason
// codes, topic aliases, Receive Maximum, payload format, message properties, subscription codes.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import { encode } from '../src/protocol/encoder.js';
import type { Packet } from '../src/protocol/packets.js';
import { RC } from '../src/protocol/reason-codes.js';
import { connectClient, connectPacket, NodeFixture, publish, type RawClient, subscribe, WAIT_MS, withTimeout } from './helpers.js';

function publishPacket(over: Partial<Extract<Packet, { type: 'publish' }>>): Packet {
  return { type: 'publish', dup: false, qos: 0, retain: false, topic: 't', payload: Buffer.from('x'), props: {}, ...over };
}

describe('server over MQTT 5', { timeout: 60_000 }, () => {
  const f = new NodeFixture(5);
  const { start, client } = f;
  /** A raw v5 client past its CONNACK. */
  const raw = (over: Partial<Extract<Packet, { type: 'connect' }>> = {}) => f.raw({ clientId: 'raw5', ...over });

  async function expectDisconnect(r: RawClient, reason: number): Promise<void> {
    const d = await r.waitFor('disconnect');
    assert.equal(d.code, reason);
    await r.waitClosed();
  }

  afterEach(f.cleanup);

  it('announces its limits in CONNACK and assigns a client id to an empty one', async () => {
    await start({ maxQos: 1, retainAvailable: false, receiveMaximum: 20, topicAliasMaximum: 5, maxPacketSize: 4096 });
    const r = await f.rawOpen();
    r.send(connectPacket({ level: 5, clientId: '' }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, RC.SUCCESS);
    assert.equal(ack.props.receiveMax, 20);
    assert.equal(ack.props.maxQos, 1);
    assert.equal(ack.props.retainAvailable, 0);
    assert.equal(ack.props.maxPacketSize, 4096);
    assert.equal(ack.props.topicAliasMax, 5);
    assert.equal(ack.props.wildcardAvailable, 1);
    assert.equal(ack.props.subIdAvailable, 1);
    assert.equal(ack.props.sharedAvailable, 1);
    assert.equal(ack.props.serverKeepAlive, undefined, 'keep-alive 0 is left as the client asked');
    assert.ok((ack.props.assignedClientId ?? '').length > 0, '[MQTT-3.2.2-16]');
  });

  it('assigns a client id to an empty one with Clean Start 0, naming a new session it can resume', async () => {
    // MQTT 5 has no 3.1.1 rule refusing an empty id without a clean session [MQTT-3.1.3-6, -7];
    // paho-mqtt's MQTT 5 suite connects so and expects success.
    await start();
    const r = await f.rawOpen();
    r.send(connectPacket({ level: 5, clientId: '', clean: false, props: { sessionExpiry: 60 } }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, RC.SUCCESS);
    assert.equal(ack.sessionPresent, false, 'an assigned id names a new session');
    const assigned = ack.props.assignedClientId ?? '';
    assert.ok(assigned.length > 0, '[MQTT-3.2.2-16]');
    r.send({ type: 'disconnect', code: RC.SUCCESS, props: {} });
    await r.waitClosed();
    const again = await f.rawOpen();
    again.send(connectPacket({ level: 5, clientId: assigned, clean: false }));
    const resumed = await again.waitFor('connack');
    assert.equal(resumed.code, RC.SUCCESS);
    assert.equal(resumed.sessionPresent, true);
    assert.equal(resumed.props.assignedClientId, undefined);
  });

  it('refuses a CONNECT naming an authentication method with CONNACK 0x8C, then closes', async () => {
    // Enhanced authentication is not offered [MQTT-4.12.0-1].
    await start();
    const r = await f.rawOpen();
    r.send(connectPacket({ level: 5, clientId: 'scram', props: { authMethod: 'SCRAM-SHA-1' } }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, RC.BAD_AUTHENTICATION_METHOD);
    await r.waitClosed();
  });

  it('waits for an asynchronous authenticator and honours its refusal', async () => {
    await start({
      authenticator: {
        authenticate: async (c) => {
          await new Promise((resolve) => setTimeout(resolve, 20));
          return c.username === 'good' ? { ok: true } : { ok: false, reason: RC.NOT_AUTHORIZED };
        },
      },
    });
    const good = await client({ clientId: 'good', username: 'good' });
    assert.equal(good.connack.reasonCode, RC.SUCCESS);
    await subscribe(good, 'auth/x', 0);
    // Packets pipelined behind the CONNECT wait for the verdict and keep their order.
    const r = await f.rawOpen();
    r.sendBytes(
      Buffer.concat([
        encode(connectPacket({ level: 5, clientId: 'piped', username: 'good' }), 5),
        encode({ type: 'subscribe', pid: 1, subs: [{ filter: 'p/x', qos: 1, nl: false, rap: false, rh: 0 }], props: {} }, 5),
        encode({ type: 'pingreq' }, 5),
      ]),
    );
    await r.waitFor('pingresp');
    assert.deepEqual(
      r.packets.map((p) => p.type),
      ['connack', 'suback', 'pingresp'],
    );
    await assert.rejects(connectClient(f.port, { protocolVersion: 5, clientId: 'bad', username: 'bad' }));
  });

  it('refuses a CONNECT whose authenticator throws, and keeps serving others', async () => {
    await start({
      authenticator: {
        authenticate: (c) => {
          if (c.clientId === 'boom') throw new Error('lookup failed');
          return { ok: true };
        },
      },
    });
    const r = await f.rawOpen();
    r.send(connectPacket({ level: 5, clientId: 'boom' }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, RC.UNSPECIFIED_ERROR);
    await r.waitClosed();
    const ok = await client({ clientId: 'fine' });
    assert.equal(ok.connack.reasonCode, RC.SUCCESS);
  });

  it('tells a client asking for a longer keep-alive the maximum with Server Keep Alive', async () => {
    await start({ maxKeepalive: 30 });
    const c = await client({ clientId: 'ka', keepalive: 120 });
    assert.equal(c.connack.properties?.serverKeepAlive, 30);
  });

  it('closes a silent connection with DISCONNECT 0x8D', async () => {
    await start();
    const r = await raw({ keepAlive: 1 });
    await expectDisconnect(r, RC.KEEP_ALIVE_TIMEOUT);
  });

  it('sends DISCONNECT 0x8E to the connection whose session is taken over', async () => {
    await start();
    const first = await raw({ clientId: 'same' });
    await raw({ clientId: 'same' });
    await expectDisconnect(first, RC.SESSION_TAKEN_OVER);
  });

  it('sends DISCONNECT 0x8B to every connection when stopped', async () => {
    await start();
    const r = await raw();
    await f.node!.stop();
    await expectDisconnect(r, RC.SERVER_SHUTTING_DOWN);
  });

  it('refuses a QoS above the maximum with DISCONNECT 0x9B', async () => {
    await start({ maxQos: 1 });
    const r = await raw();
    r.send(publishPacket({ qos: 2, pid: 1 }));
    await expectDisconnect(r, RC.QOS_NOT_SUPPORTED);
  });

  it('refuses retain when not available with DISCONNECT 0x9A', async () => {
    await start({ retainAvailable: false });
    const r = await raw();
    r.send(publishPacket({ retain: true }));
    await expectDisconnect(r, RC.RETAIN_NOT_SUPPORTED);
  });

  it('answers a payload that is not UTF-8 under Payload Format Indicator 1 with 0x99 and does not route it', async () => {
    await start();
    const sub = await client({ clientId: 'pfsub' });
    await subscribe(sub, 'pf/#', 1);
    const r = await raw();
    const bad = Buffer.from([0xff, 0xfe]);
    r.send(publishPacket({ topic: 'pf/bad', qos: 1, pid: 3, payload: bad, props: { payloadFormat: 1 } }));
    const ack = await r.waitFor('puback', (p) => p.pid === 3);
    assert.equal(ack.code, RC.PAYLOAD_FORMAT_INVALID);
    r.send(publishPacket({ topic: 'pf/good', qos: 1, pid: 4, payload: Buffer.from('ok'), props: { payloadFormat: 1 } }));
    await sub.waitFor((m) => m.topic === 'pf/good', 'valid UTF-8 message');
    assert.equal(sub.messages.filter((m) => m.topic === 'pf/bad').length, 0);
  });

  it('resolves inbound topic aliases per connection', async () => {
    await start();
    const sub = await client({ clientId: 'alias-sub' });
    await subscribe(sub, 'alias/#', 0);
    const r = await raw();
    r.send(publishPacket({ topic: 'alias/long/name', payload: Buffer.from('1'), props: { topicAlias: 3 } }));
    r.send(publishPacket({ topic: '', payload: Buffer.from('2'), props: { topicAlias: 3 } }));
    await sub.waitFor((m) => m.payload === '2', 'aliased publish');
    assert.deepEqual(
      sub.messages.map((m) => [m.topic, m.payload]),
      [
        ['alias/long/name', '1'],
        ['alias/long/name', '2'],
      ],
    );
  });

  it('refuses topic alias 0 and aliases above the maximum with DISCONNECT 0x94', async () => {
    await start({ topicAliasMaximum: 2 });
    const zero = await raw({ clientId: 'a0' });
    zero.send(publishPacket({ topic: 'x', props: { topicAlias: 0 } }));
    await expectDisconnect(zero, RC.TOPIC_ALIAS_INVALID);
    const big = await raw({ clientId: 'a3' });
    big.send(publishPacket({ topic: 'x', props: { topicAlias: 3 } }));
    await expectDisconnect(big, RC.TOPIC_ALIAS_INVALID);
  });

  it('disconnects a client that exceeds the Receive Maximum with 0x93', async () => {
    await start({ receiveMaximum: 2 });
    const r = await raw();
    // QoS 2 publishes stay unacknowledged until PUBCOMP, which needs a PUBREL we never send.
    for (const pid of [1, 2, 3]) r.send(publishPacket({ qos: 2, pid, topic: `rm/${pid}` }));
    await expectDisconnect(r, RC.RECEIVE_MAXIMUM_EXCEEDED);
    assert.equal(r.packets.filter((p) => p.type === 'pubrec').length, 2);
  });

  it('answers invalid filters with 0x8F in place and grants the valid ones', async () => {
    await start();
    const r = await raw();
    r.send({
      type: 'subscribe',
      pid: 9,
      subs: [
        { filter: 'ok/1', qos: 1, nl: false, rap: false, rh: 0 },
        { filter: 'bad/#/x', qos: 1, nl: false, rap: false, rh: 0 },
        { filter: 'ok/2', qos: 2, nl: false, rap: false, rh: 0 },
      ],
      props: {},
    });
    const ack = await r.waitFor('suback', (p) => p.pid === 9);
    assert.deepEqual(ack.codes, [RC.GRANTED_QOS_1, RC.TOPIC_FILTER_INVALID, RC.GRANTED_QOS_2]);
  });

  it('passes message properties through and counts down Message Expiry', async () => {
    await start();
    const sub = await client({ clientId: 'props-sub' });
    await subscribe(sub, 'mp/#', 1);
    const pub = await client({ clientId: 'props-pub' });
    await publish(pub, 'mp/1', 'hello', {
      qos: 1,
      properties: {
        payloadFormatIndicator: true,
        messageExpiryInterval: 60,
        contentType: 'text/plain',
        responseTopic: 'mp/reply',
        correlationData: Buffer.from([1, 2, 3]),
        userProperties: { a: '1', b: ['2', '3'] },
      },
    });
    const m = await sub.waitFor((r) => r.topic === 'mp/1', 'message with properties');
    const p = m.packet.properties ?? {};
    assert.equal(p.payloadFormatIndicator, true);
    assert.ok(p.messageExpiryInterval !== undefined && p.messageExpiryInterval <= 60 && p.messageExpiryInterval >= 58);
    assert.equal(p.contentType, 'text/plain');
    assert.equal(p.responseTopic, 'mp/reply');
    assert.deepEqual([...(p.correlationData ?? [])], [1, 2, 3]);
    assert.deepEqual({ ...p.userProperties }, { a: '1', b: ['2', '3'] });
  });

  it('publishes the will after DISCONNECT 0x04 and refuses a session expiry raised from 0', async () => {
    await start();
    const watcher = await client({ clientId: 'w5' });
    await subscribe(watcher, 'will5/#', 0);
    const r = await raw({
      clientId: 'leaver',
      will: { topic: 'will5/a', payload: Buffer.from('bye'), qos: 0, retain: false, props: {} },
    });
    r.send({ type: 'disconnect', code: RC.DISCONNECT_WITH_WILL, props: {} });
    await watcher.waitFor((m) => m.topic === 'will5/a', 'will after DISCONNECT 0x04');

    const bad = await raw({ clientId: 'expiry0' });
    bad.send({ type: 'disconnect', code: RC.SUCCESS, props: { sessionExpiry: 100 } });
    await expectDisconnect(bad, RC.PROTOCOL_ERROR);
  });

  it('does not send a message back to its publisher on a No Local subscription', async () => {
    await start();
    const c = await client({ clientId: 'nl' });
    await withTimeout(c.client.subscribeAsync({ 'nl/own': { qos: 1, nl: true }, 'nl/mark': { qos: 1 } }), WAIT_MS, 'SUBACK');
    await publish(c, 'nl/own', 'mine', { qos: 1 });
    await publish(c, 'nl/mark', 'mark', { qos: 1 });
    await c.waitFor((m) => m.topic === 'nl/mark', 'marker');
    assert.equal(c.messages.filter((m) => m.topic === 'nl/own').length, 0, '[MQTT-3.8.3-3]');
  });

  it('publishes a delayed will when its Will Delay Interval passes while the broker is idle', async () => {
    // Nothing else happens after the drop: only the node's deadline timer (a proposed tick)
    // advances log time past the will's deadline.
    await start();
    const watcher = await client({ clientId: 'wd-watch' });
    await subscribe(watcher, 'will/delayed', 0);
    const r = await raw({
      clientId: 'delayed',
      props: { sessionExpiry: 60 },
      will: { topic: 'will/delayed', payload: Buffer.from('late'), qos: 0, retain: false, props: { willDelay: 1 } },
    });
    const dropped = Date.now();
    r.destroy();
    await watcher.waitFor((m) => m.topic === 'will/delayed', 'delayed will', 4_000);
    const elapsed = Date.now() - dropped;
    assert.ok(elapsed >= 900, `will after ${elapsed} ms, before its 1 s delay [MQTT-3.1.3-9]`);
  });

  it('delivers one QoS 0 message to subscribers of both protocol levels', async () => {
    await start();
    const v5 = await client({ clientId: 'fan5' });
    const v4 = await client({ clientId: 'fan4', protocolVersion: 4 });
    await subscribe(v5, 'fan/#', 0);
    await subscribe(v4, 'fan/#', 0);
    const pub = await client({ clientId: 'fanpub' });
    await publish(pub, 'fan/x', 'both', { qos: 0, properties: { contentType: 'text/plain' } });
    const m5 = await v5.waitFor((m) => m.topic === 'fan/x', 'v5 delivery');
    const m4 = await v4.waitFor((m) => m.topic === 'fan/x', 'v4 delivery');
    assert.equal(m5.payload, 'both');
    assert.equal(m4.payload, 'both');
    assert.equal(m5.packet.properties?.contentType, 'text/plain');
  });

  it('carries the Subscription Identifier to deliveries', async () => {
    await start();
    const c = await client({ clientId: 'subid' });
    await withTimeout(c.client.subscribeAsync('sid/#', { qos: 0, properties: { subscriptionIdentifier: 42 } }), WAIT_MS, 'SUBACK');
    await publish(c, 'sid/x', 'x', { qos: 0 });
    const m = await c.waitFor((r) => r.topic === 'sid/x', 'delivery');
    assert.deepEqual([m.packet.properties?.subscriptionIdentifier].flat(), [42]);
  });
});
