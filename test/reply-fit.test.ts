// Replies that must be encodable and fit the client's Maximum Packet Size [MQTT-3.1.2-24], sized
// before their request is proposed: an over-long client id asking Response Information, a CONNACK
// over a tiny Maximum Packet Size, a SUBSCRIBE whose SUBACK the client could not take. Each either
// gets its answer or is refused before anything reaches the log, so a reconnect finds exactly the
// session the client was told of.
import assert from 'node:assert/strict';
import { afterEach, describe, it } from 'node:test';
import type { Packet } from '../src/protocol/packets.js';
import { RC } from '../src/protocol/reason-codes.js';
import { connectPacket, NodeFixture, type RawClient } from './helpers.js';

type Connect = Partial<Extract<Packet, { type: 'connect' }>>;

describe('replies sized before proposing', { timeout: 60_000 }, () => {
  const f = new NodeFixture(5);
  afterEach(f.cleanup);

  async function connack(over: Connect): Promise<{ r: RawClient; ack: Extract<Packet, { type: 'connack' }> }> {
    const r = await f.rawOpen();
    r.send(connectPacket({ level: 5, ...over }));
    return { r, ack: await r.waitFor('connack') };
  }

  /** Connects again as `clientId` asking to resume, and returns Session Present. */
  async function sessionPresent(clientId: string): Promise<boolean> {
    const { r, ack } = await connack({ clientId, clean: false, props: { sessionExpiry: 60 } });
    assert.equal(ack.code, RC.SUCCESS);
    r.send({ type: 'disconnect', code: RC.SUCCESS, props: {} });
    await r.waitClosed();
    return ack.sessionPresent;
  }

  it('leaves Response Information out for a client id too long to carry it, and still answers', async () => {
    await f.start();
    // 'response/' + id + '/' is 10 bytes more than the id: 65,525 bytes make an MQTT string of
    // exactly 65,535 bytes, 65,526 one byte too many.
    const longest = 'a'.repeat(65_525);
    const fits = await connack({ clientId: longest, clean: false, props: { sessionExpiry: 60, requestResponseInfo: 1 } });
    assert.equal(fits.ack.code, RC.SUCCESS);
    assert.equal(fits.ack.props.responseInfo, `response/${longest}/`);
    fits.r.destroy();

    const id = 'b'.repeat(65_526);
    const over = await connack({ clientId: id, clean: false, props: { sessionExpiry: 60, requestResponseInfo: 1 } });
    assert.equal(over.ack.code, RC.SUCCESS);
    assert.equal(over.ack.sessionPresent, false);
    assert.equal(over.ack.props.responseInfo, undefined, 'a shortened prefix would not be the client’s own');
    over.r.send({ type: 'disconnect', code: RC.SUCCESS, props: {} });
    await over.r.waitClosed();
    assert.equal(await sessionPresent(id), true, 'the session the CONNACK announced is there');

    const longestId = 'c'.repeat(65_535);
    const max = await connack({ clientId: longestId, props: { requestResponseInfo: 1 } });
    assert.equal(max.ack.code, RC.SUCCESS);
    assert.equal(max.ack.props.responseInfo, undefined);
    assert.equal(f.node!.counters.get('protocol-error:internal'), undefined);
  });

  it('drops Response Information that would push the CONNACK over the client Maximum Packet Size', async () => {
    await f.start();
    // 24 bytes hold the CONNACK but not with 'response/fit/' (16 bytes more).
    const { r, ack } = await connack({ clientId: 'fit', props: { maxPacketSize: 24, requestResponseInfo: 1 } });
    assert.equal(ack.code, RC.SUCCESS);
    assert.equal(ack.props.responseInfo, undefined);
    assert.equal(r.isClosed, false);
    assert.equal(f.node!.counters.get('response-info-omitted'), 1);
  });

  it('refuses with 0x95 a CONNECT whose CONNACK cannot fit its Maximum Packet Size, and makes no session', async () => {
    await f.start();
    // A successful CONNACK is 19 bytes; the refusal without its Reason String is 5.
    const { r, ack } = await connack({ clientId: 'too-tiny', clean: false, props: { maxPacketSize: 8, sessionExpiry: 60 } });
    assert.equal(ack.code, RC.PACKET_TOO_LARGE);
    assert.equal(ack.sessionPresent, false);
    assert.equal(ack.props.reasonString, undefined, 'the Reason String would not fit either');
    await r.waitClosed();
    assert.equal(f.node!.counters.get('connack-too-large-for-client'), 1);
    assert.equal(await sessionPresent('too-tiny'), false, 'the refused CONNECT made no session');
  });

  it('fails with 0x95 a SUBSCRIBE whose SUBACK cannot fit, without making its subscriptions', async () => {
    await f.start();
    const { r, ack } = await connack({ clientId: 'many-subs', clean: false, props: { maxPacketSize: 24, sessionExpiry: 60 } });
    assert.equal(ack.code, RC.SUCCESS);
    // 30 filters need a SUBACK of 35 bytes.
    const subs = Array.from({ length: 30 }, (_, i) => ({ filter: `many/${i}`, qos: 1 as const, nl: false, rap: false, rh: 0 as const }));
    r.send({ type: 'subscribe', pid: 1, subs, props: {} });
    const d = await r.waitFor('disconnect');
    assert.equal(d.code, RC.PACKET_TOO_LARGE);
    await r.waitClosed();
    assert.equal(
      r.packets.some((p) => p.type === 'suback'),
      false,
    );

    // The session stays, without the refused subscriptions: a message to one of those filters is
    // not queued for it, one to a filter it did subscribe is.
    const again = await connack({ clientId: 'many-subs', clean: false, props: { sessionExpiry: 60 } });
    assert.equal(again.ack.sessionPresent, true);
    again.r.send({ type: 'subscribe', pid: 2, subs: [{ filter: 'marker', qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
    await again.r.waitFor('suback', (p) => p.pid === 2);
    const pub = await connack({ clientId: 'many-pub' });
    for (const topic of ['many/3', 'marker']) {
      pub.r.send({
        type: 'publish',
        dup: false,
        qos: 1,
        retain: false,
        topic,
        pid: topic === 'marker' ? 2 : 1,
        payload: Buffer.from('x'),
        props: {},
      });
    }
    await again.r.waitFor('publish', (p) => p.topic === 'marker');
    assert.deepEqual(
      again.r.packets.filter((p) => p.type === 'publish').map((p) => (p as { topic: string }).topic),
      ['marker'],
    );
  });
});
