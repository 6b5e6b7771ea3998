// MQTT 5 end to end, what the broker sends as each client asked: outbound topic aliases, problem
// and response information, the client's Maximum Packet Size on acks, shared subscriptions with
// MQTT.js, ack reason codes (0x10, 0x11, 0x92), will properties, and property errors from a raw
// socket.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { Packet } from '../src/protocol/packets.js';
import { RC } from '../src/protocol/reason-codes.js';
import { connectPacket, dropConnection, NodeFixture, publish, subscribe, WAIT_MS, withTimeout } from './helpers.js';

function publishPacket(over: Partial<Extract<Packet, { type: 'publish' }>>): Packet {
  return { type: 'publish', dup: false, qos: 0, retain: false, topic: 't', payload: Buffer.from('x'), props: {}, ...over };
}

const NOT_UTF8 = Buffer.from([0xc3, 0x28]);

describe('server over MQTT 5: output shaped by the client', { timeout: 60_000 }, () => {
  const f = new NodeFixture(5);
  const { start, client } = f;
  /** A raw v5 client past its CONNACK. */
  const raw = (over: Partial<Extract<Packet, { type: 'connect' }>> = {}) => f.raw({ clientId: 'raw5', ...over });

  afterEach(f.cleanup);

  it('aliases outbound topics within the client maximum, replacing the least recently used', async () => {
    await start({ topicAliasMaximum: 10 });
    const r = await raw({ clientId: 'alias-out', props: { topicAliasMax: 2 } });
    r.send({ type: 'subscribe', pid: 1, subs: [{ filter: 'ao/#', qos: 0, nl: false, rap: false, rh: 0 }], props: {} });
    await r.waitFor('suback');
    const pub = await client({ clientId: 'alias-pub' });
    for (const t of ['ao/a', 'ao/a', 'ao/b', 'ao/a', 'ao/c', 'ao/b']) await publish(pub, t, t, { qos: 1 });
    await r.waitFor('publish', () => r.packets.filter((p) => p.type === 'publish').length === 6);
    const got = r.packets.filter((p) => p.type === 'publish').map((p) => [p.topic, p.props.topicAlias, Buffer.from(p.payload).toString()]);
    assert.deepEqual(got, [
      ['ao/a', 1, 'ao/a'],
      ['', 1, 'ao/a'],
      ['ao/b', 2, 'ao/b'],
      ['', 1, 'ao/a'],
      // b is least recently used: c takes alias 2, and b comes back with the topic.
      ['ao/c', 2, 'ao/c'],
      ['ao/b', 1, 'ao/b'],
    ]);
  });

  it('lets MQTT.js resolve outbound aliases, and sends none to a client that allows none', async () => {
    await start({ topicAliasMaximum: 1 });
    const aliased = await client({ clientId: 'js-alias', properties: { topicAliasMaximum: 5 } });
    const plain = await client({ clientId: 'js-plain' });
    await subscribe(aliased, 'js/#', 1);
    await subscribe(plain, 'js/#', 1);
    for (const t of ['js/one', 'js/two', 'js/one']) await publish(plain, t, t, { qos: 1 });
    await aliased.waitFor(() => aliased.messages.length === 3, 'three aliased deliveries');
    await plain.waitFor(() => plain.messages.length === 3, 'three plain deliveries');
    assert.deepEqual(
      aliased.messages.map((m) => [m.topic, m.payload]),
      [
        ['js/one', 'js/one'],
        ['js/two', 'js/two'],
        ['js/one', 'js/one'],
      ],
    );
    // The broker's own maximum (1) bounds the aliases it uses even though the client allows 5.
    assert.ok(aliased.messages.every((m) => m.packet.properties?.topicAlias === 1));
    assert.ok(
      plain.messages.every((m) => m.packet.properties?.topicAlias === undefined),
      '[MQTT-3.3.2-9]',
    );
  });

  it('puts Reason Strings on failing acks only for clients that did not ask for no problem information', async () => {
    await start();
    const chatty = await raw({ clientId: 'pi-default' });
    const quiet = await raw({ clientId: 'pi-off', props: { requestProblemInfo: 0 } });
    for (const r of [chatty, quiet]) {
      r.send(publishPacket({ qos: 1, pid: 7, topic: 'pi/x', payload: NOT_UTF8, props: { payloadFormat: 1 } }));
      r.send({ type: 'subscribe', pid: 8, subs: [{ filter: 'pi/#/bad', qos: 0, nl: false, rap: false, rh: 0 }], props: {} });
    }
    const loud = await chatty.waitFor('puback', (p) => p.pid === 7);
    assert.equal(loud.code, RC.PAYLOAD_FORMAT_INVALID);
    assert.equal(loud.props.reasonString, 'payload format invalid');
    assert.equal((await chatty.waitFor('suback')).props.reasonString, 'topic filter invalid');
    const hushed = await quiet.waitFor('puback', (p) => p.pid === 7);
    assert.equal(hushed.code, RC.PAYLOAD_FORMAT_INVALID);
    assert.deepEqual(hushed.props, {}, '[MQTT-3.1.2-29]');
    assert.deepEqual((await quiet.waitFor('suback')).props, {});
    // DISCONNECT may carry a Reason String whatever the client asked.
    quiet.send(publishPacket({ topic: 'x', props: { topicAlias: 0 } }));
    const d = await quiet.waitFor('disconnect');
    assert.equal(d.code, RC.TOPIC_ALIAS_INVALID);
    assert.equal(d.props.reasonString, 'topic alias invalid');
  });

  it('drops the Reason String from an ack that would exceed the client Maximum Packet Size [MQTT-3.1.2-25]', async () => {
    await start();
    // 24 bytes fits the CONNACK but not a PUBACK with 'payload format invalid' (31 bytes).
    const small = await raw({ clientId: 'tiny', props: { maxPacketSize: 24 } });
    small.send(publishPacket({ qos: 1, pid: 3, topic: 'mps/x', payload: NOT_UTF8, props: { payloadFormat: 1 } }));
    const ack = await small.waitFor('puback', (p) => p.pid === 3);
    assert.equal(ack.code, RC.PAYLOAD_FORMAT_INVALID);
    assert.equal(ack.props.reasonString, undefined);
    assert.equal(small.isClosed, false);
  });

  it('answers Request Response Information with response/<client id>/ and gives none unasked', async () => {
    await start();
    const asking = await client({ clientId: 'rri', properties: { requestResponseInformation: true } });
    assert.equal(asking.connack.properties?.responseInformation, 'response/rri/');
    const silent = await client({ clientId: 'no-rri' });
    assert.equal(silent.connack.properties?.responseInformation, undefined);
    // The prefix works as a Response Topic: a responder answers there and the requester gets it.
    await subscribe(asking, 'response/rri/#', 1);
    const responder = await client({ clientId: 'responder' });
    await publish(responder, 'response/rri/42', 'answer', { qos: 1 });
    await asking.waitFor((m) => m.topic === 'response/rri/42', 'response');
  });

  it('builds Response Information from the assigned client id when the client sent none', async () => {
    await start();
    const r = await f.rawOpen();
    r.send(connectPacket({ level: 5, clientId: '', props: { requestResponseInfo: 1 } }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.props.responseInfo, `response/${ack.props.assignedClientId}/`);
  });

  it('shares a $share group between two MQTT.js members, sends no retained message, and gives everything to the member left after one leaves', async () => {
    await start();
    const pub = await client({ clientId: 'sh-pub' });
    await publish(pub, 'sh/retained', 'old', { qos: 1, retain: true });
    const a = await client({ clientId: 'sh-a' });
    const b = await client({ clientId: 'sh-b' });
    await subscribe(a, '$share/g/sh/#', 1);
    await subscribe(b, '$share/g/sh/#', 1);
    for (let i = 0; i < 6; i++) await publish(pub, 'sh/live', `m${i}`, { qos: 1 });
    await a.waitFor(() => a.messages.length + b.messages.length === 6, 'six shared deliveries');
    const all = [...a.messages, ...b.messages].map((m) => m.payload).sort();
    assert.deepEqual(all, ['m0', 'm1', 'm2', 'm3', 'm4', 'm5'], 'each message to exactly one member');
    assert.equal(a.messages.length, 3, 'round robin between two connected members');
    assert.ok(!all.includes('old'), 'no retained message on a shared subscribe (§4.8.2)');
    // A member leaves the group (UNSUBACK is decided at its log position, so later publishes see it).
    await withTimeout(a.client.unsubscribeAsync('$share/g/sh/#'), WAIT_MS, 'UNSUBACK');
    for (let i = 6; i < 9; i++) await publish(pub, 'sh/live', `m${i}`, { qos: 1 });
    await b.waitFor(() => b.messages.filter((m) => ['m6', 'm7', 'm8'].includes(m.payload)).length === 3, 'the rest to b');
  });

  it('gives another MQTT.js member the shared messages a member left unacknowledged when its session ended', async () => {
    await start();
    const pub = await client({ clientId: 'sr-pub' });
    // sr-a (raw: MQTT.js stalls its input while a PUBACK is withheld) never acknowledges; its
    // Session Expiry Interval is 0, so its session ends with its DISCONNECT.
    const a = await raw({ clientId: 'sr-a' });
    a.send({ type: 'subscribe', pid: 1, subs: [{ filter: '$share/g/sr/#', qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
    await a.waitFor('suback');
    const b = await client({ clientId: 'sr-b' });
    await subscribe(b, '$share/g/sr/#', 1);
    for (let i = 0; i < 4; i++) await publish(pub, 'sr/job', `j${i}`, { qos: 1 });
    await b.waitFor(() => b.messages.length === 2, 'two deliveries to b');
    const toA = () => a.packets.flatMap((p) => (p.type === 'publish' ? [Buffer.from(p.payload).toString()] : []));
    await a.waitFor('publish', () => toA().length === 2);
    assert.deepEqual(toA(), ['j0', 'j2']);
    a.send({ type: 'disconnect', code: RC.SUCCESS, props: {} });
    await b.waitFor(() => b.messages.length === 4, 'the held ones to b');
    assert.deepEqual(
      b.messages.map((m) => m.payload),
      ['j1', 'j3', 'j0', 'j2'],
    );
  });

  it('answers a QoS 1 and 2 publish with no subscriber 0x10, an unknown unsubscribe 0x11, an unknown PUBREL 0x92', async () => {
    await start();
    const r = await raw({ clientId: 'codes' });
    r.send(publishPacket({ qos: 1, pid: 1, topic: 'nobody/here' }));
    assert.equal((await r.waitFor('puback', (p) => p.pid === 1)).code, RC.NO_MATCHING_SUBSCRIBERS);
    r.send(publishPacket({ qos: 2, pid: 2, topic: 'nobody/here' }));
    assert.equal((await r.waitFor('pubrec', (p) => p.pid === 2)).code, RC.NO_MATCHING_SUBSCRIBERS);
    r.send({ type: 'subscribe', pid: 3, subs: [{ filter: 'mine', qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
    await r.waitFor('suback', (p) => p.pid === 3);
    r.send({ type: 'unsubscribe', pid: 4, filters: ['mine', 'never'], props: {} });
    assert.deepEqual((await r.waitFor('unsuback', (p) => p.pid === 4)).codes, [RC.SUCCESS, RC.NO_SUBSCRIPTION_EXISTED]);
    r.send({ type: 'pubrel', pid: 99, code: RC.SUCCESS, props: {} });
    assert.equal((await r.waitFor('pubcomp', (p) => p.pid === 99)).code, RC.PACKET_IDENTIFIER_NOT_FOUND);
    // The publish answered 0x10 still completes its QoS 2 flow.
    r.send({ type: 'pubrel', pid: 2, code: RC.SUCCESS, props: {} });
    assert.equal((await r.waitFor('pubcomp', (p) => p.pid === 2)).code, RC.SUCCESS);
  });

  it('answers a QoS 1 PUBLISH reusing the id of a QoS 2 flow awaiting PUBREL with 0x91, and a QoS 2 retry 0x00', async () => {
    await start();
    const watcher = await client({ clientId: 'pid-watch' });
    await subscribe(watcher, 'pid/#', 1);
    const r = await raw({ clientId: 'pid-reuse' });
    r.send(publishPacket({ qos: 2, pid: 7, topic: 'pid/two' }));
    assert.equal((await r.waitFor('pubrec', (p) => p.pid === 7)).code, RC.SUCCESS);
    r.send(publishPacket({ qos: 1, pid: 7, topic: 'pid/one' }));
    assert.equal((await r.waitFor('puback', (p) => p.pid === 7)).code, RC.PACKET_IDENTIFIER_IN_USE);
    r.send(publishPacket({ qos: 2, pid: 7, topic: 'pid/two', dup: true }));
    const pubrecs = () => r.packets.filter((p) => p.type === 'pubrec');
    await r.waitFor('pubrec', () => pubrecs().length === 2);
    assert.equal((pubrecs()[1] as { code: number }).code, RC.SUCCESS);
    r.send({ type: 'pubrel', pid: 7, code: RC.SUCCESS, props: {} });
    await r.waitFor('pubcomp', (p) => p.pid === 7);
    r.send(publishPacket({ qos: 1, pid: 7, topic: 'pid/end' }));
    await watcher.waitFor((m) => m.topic === 'pid/end', 'pid/end');
    assert.deepEqual(
      watcher.messages.map((m) => m.topic),
      ['pid/two', 'pid/end'],
    );
  });

  it('tells an MQTT.js v5 publisher 0x10 when nobody subscribes, without failing the publish', async () => {
    await start();
    const pub = await client({ clientId: 'js-0x10' });
    const acks: number[] = [];
    pub.client.on('packetreceive', (p) => {
      if (p.cmd === 'puback') acks.push(p.reasonCode ?? 0);
    });
    await publish(pub, 'void/x', 'x', { qos: 1 });
    assert.deepEqual(acks, [RC.NO_MATCHING_SUBSCRIBERS]);
  });

  it('publishes a will with every property it was given', async () => {
    await start();
    const watcher = await client({ clientId: 'will-watch' });
    await subscribe(watcher, 'wp/#', 1);
    const leaver = await client({
      clientId: 'will-props',
      will: {
        topic: 'wp/gone',
        payload: Buffer.from('bye'),
        qos: 1,
        retain: false,
        properties: {
          payloadFormatIndicator: true,
          messageExpiryInterval: 300,
          contentType: 'text/plain',
          responseTopic: 'wp/reply',
          correlationData: Buffer.from([9, 8]),
          userProperties: { why: 'test', n: ['1', '2'] },
        },
      },
    });
    await dropConnection(leaver);
    const m = await watcher.waitFor((x) => x.topic === 'wp/gone', 'will');
    const p = m.packet.properties ?? {};
    assert.equal(m.payload, 'bye');
    assert.equal(p.payloadFormatIndicator, true);
    assert.ok(p.messageExpiryInterval !== undefined && p.messageExpiryInterval <= 300 && p.messageExpiryInterval > 290);
    assert.equal(p.contentType, 'text/plain');
    assert.equal(p.responseTopic, 'wp/reply');
    assert.deepEqual([...(p.correlationData ?? [])], [9, 8]);
    assert.deepEqual({ ...p.userProperties }, { why: 'test', n: ['1', '2'] });
  });

  it('disconnects with 0x81 for a property a PUBLISH may not carry and 0x82 for a duplicate property', async () => {
    await start();
    const topic = Buffer.concat([Buffer.from([0, 1]), Buffer.from('p')]);
    const publishWith = (props: number[]): Buffer => {
      const body = Buffer.concat([topic, Buffer.from([props.length, ...props]), Buffer.from('x')]);
      return Buffer.concat([Buffer.from([0x30, body.length]), body]);
    };
    const wrong = await raw({ clientId: 'prop-wrong' });
    wrong.sendBytes(publishWith([0x11, 0, 0, 0, 10])); // Session Expiry Interval is a CONNECT property
    assert.equal((await wrong.waitFor('disconnect')).code, RC.MALFORMED_PACKET);
    await wrong.waitClosed();
    const dup = await raw({ clientId: 'prop-dup' });
    dup.sendBytes(publishWith([0x02, 0, 0, 0, 10, 0x02, 0, 0, 0, 20])); // Message Expiry twice
    assert.equal((await dup.waitFor('disconnect')).code, RC.PROTOCOL_ERROR);
    await dup.waitClosed();
  });
});
