// The embedding API's authorization hooks (src/server/auth/hook-authorizer.ts) on a real node over
// real sockets: authorizePublish for PUBLISH and wills, authorizeSubscribe per filter, their
// answers (true, false, a reason code, a lower QoS), a hook that throws or never answers, and the
// order of packets behind a pending answer, for MQTT 5 and 3.1.1.
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { pino } from 'pino';
import { type AuthorizePublishRequest, type AuthorizeSubscribeRequest, MqttBroker } from '../src/index.js';
import type { ProtocolLevel } from '../src/protocol/packets.js';
import { connectPacket, RawClient } from './helpers.js';
import { LOOPBACK } from './support/net.js';
import { sleep } from './support/wait.js';

const quiet = pino({ level: 'silent' });
const cleanups: Array<() => Promise<void> | void> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** Quiet after a refusal: nothing of a refused message may arrive within this. */
const SETTLE_MS = 300;

async function startBroker(opts: ConstructorParameters<typeof MqttBroker>[0]): Promise<number> {
  const b = new MqttBroker({ host: LOOPBACK, port: 0, logger: quiet, authorizeTimeoutMs: 200, ...opts });
  cleanups.push(() => b.close());
  return (await b.listen()).listeners[0]?.port ?? 0;
}

async function client(
  port: number,
  level: ProtocolLevel,
  clientId: string,
  over: Parameters<typeof connectPacket>[0] = {},
): Promise<RawClient> {
  const c = await RawClient.open(port, level);
  cleanups.push(() => c.destroy());
  c.send(connectPacket({ level, clientId, ...over }));
  return c;
}

async function connected(port: number, level: ProtocolLevel, clientId: string): Promise<RawClient> {
  const c = await client(port, level, clientId);
  await c.waitFor('connack', (p) => p.code === 0);
  return c;
}

function publishPacket(topic: string, qos: 0 | 1 | 2, pid: number, payload = topic) {
  return {
    type: 'publish',
    topic,
    payload: Buffer.from(payload),
    qos,
    pid: qos === 0 ? undefined : pid,
    retain: false,
    dup: false,
    props: {},
  } as const;
}

function payloads(c: RawClient): string[] {
  return (c as unknown as { packets: { type: string; payload?: Uint8Array }[] }).packets
    .filter((p) => p.type === 'publish')
    .map((p) => Buffer.from(p.payload as Uint8Array).toString());
}

describe('authorizePublish', () => {
  it('refuses with the answer code (v5), acknowledges and drops (3.1.1), routes only what it allows', async () => {
    const seen: AuthorizePublishRequest[] = [];
    const port = await startBroker({
      authorizePublish: (r) => {
        seen.push(r);
        if (r.topic.startsWith('deny/')) return false;
        if (r.topic.startsWith('quota/')) return { reasonCode: 0x97 };
        return true;
      },
    });
    const sub = await connected(port, 5, 'ap-sub');
    sub.send({ type: 'subscribe', pid: 1, subs: [{ filter: '#', qos: 2, nl: false, rap: false, rh: 0 }], props: {} });
    await sub.waitFor('suback');
    for (const level of [5, 4] as const) {
      const pub = await connected(port, level, `ap-pub-${level}`);
      pub.send(publishPacket(`deny/${level}`, 1, 1));
      pub.send(publishPacket(`quota/${level}`, 2, 2));
      pub.send(publishPacket(`deny/${level}/q0`, 0, 0));
      pub.send(publishPacket(`ok/${level}`, 1, 3));
      const denied = await pub.waitFor('puback', (p) => p.pid === 1);
      const quota = await pub.waitFor('pubrec', (p) => p.pid === 2);
      const ok = await pub.waitFor('puback', (p) => p.pid === 3);
      if (level === 5) {
        assert.equal(denied.code, 0x87, 'false: 0x87 Not authorized');
        assert.equal(quota.code, 0x97, '{ reasonCode }: that code');
      }
      assert.equal(ok.code, 0);
      await sub.waitFor('publish', (p) => p.topic === `ok/${level}`);
    }
    await sleep(SETTLE_MS);
    assert.deepEqual(payloads(sub), ['ok/5', 'ok/4'], 'only the allowed messages were routed');
    const first = seen.find((r) => r.topic === 'deny/5');
    assert.deepEqual(
      { ...first, payload: first?.payload.toString() },
      { clientId: 'ap-pub-5', username: null, topic: 'deny/5', payload: 'deny/5', qos: 1, retain: false, will: false },
    );
  });

  it('keeps the order of the publishes behind a pending answer', async () => {
    let release: () => void = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    const port = await startBroker({
      authorizeTimeoutMs: 10_000,
      authorizePublish: async (r) => {
        if (r.topic === 'o/first') await held;
        return true;
      },
    });
    const sub = await connected(port, 5, 'ord-sub');
    sub.send({ type: 'subscribe', pid: 1, subs: [{ filter: 'o/#', qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
    await sub.waitFor('suback');
    const pub = await connected(port, 5, 'ord-pub');
    pub.send(publishPacket('o/first', 1, 1, 'one'));
    pub.send(publishPacket('o/second', 1, 2, 'two'));
    pub.send(publishPacket('o/third', 1, 3, 'three'));
    await sleep(SETTLE_MS);
    assert.deepEqual(payloads(sub), [], 'nothing passes the pending answer');
    release();
    await sub.waitFor('publish', (p) => p.topic === 'o/third');
    assert.deepEqual(payloads(sub), ['one', 'two', 'three']);
  });

  it('closes the connection with nothing acknowledged when the hook throws or does not answer', async () => {
    const port = await startBroker({
      authorizePublish: (r) => {
        if (r.topic === 'boom') throw new Error('hook failed');
        if (r.topic === 'slow') return new Promise<boolean>(() => {});
        if (r.topic === 'odd') return { reasonCode: 0x00 };
        return true;
      },
    });
    for (const level of [5, 4] as const) {
      for (const topic of ['boom', 'slow', 'odd']) {
        const pub = await connected(port, level, `fail-${topic}-${level}`);
        pub.send(publishPacket(topic, 1, 7));
        await pub.waitClosed();
        const got = (pub as unknown as { packets: { type: string; code?: number }[] }).packets;
        assert.equal(
          got.some((p) => p.type === 'puback'),
          false,
          `${topic}: no PUBACK`,
        );
        if (level === 5) assert.equal(got.find((p) => p.type === 'disconnect')?.code, 0x80, `${topic}: DISCONNECT 0x80`);
      }
    }
  });

  it('decides the will at CONNECT: refused with the code (3.1.1: return code 5), allowed otherwise', async () => {
    const port = await startBroker({
      authorizePublish: async (r) => (r.will && r.topic === 'will/denied' ? false : r.topic === 'will/broken' ? { reasonCode: 1 } : true),
    });
    const will = (topic: string) => ({ topic, payload: Buffer.from('gone'), qos: 1 as const, retain: false, props: {} });
    for (const level of [5, 4] as const) {
      const denied = await client(port, level, `w-denied-${level}`, { will: will('will/denied') });
      assert.equal((await denied.waitFor('connack')).code, level === 5 ? 0x87 : 5);
      const broken = await client(port, level, `w-broken-${level}`, { will: will('will/broken') });
      assert.equal((await broken.waitFor('connack')).code, level === 5 ? 0x88 : 3, 'a hook answer that is not a code: 0x88');
      const ok = await client(port, level, `w-ok-${level}`, { will: will('will/ok') });
      assert.equal((await ok.waitFor('connack')).code, 0);
    }
  });
});

describe('authorizeSubscribe', () => {
  it('refuses, lowers the QoS or allows each filter; a failing hook refuses with 0x80', async () => {
    const seen: AuthorizeSubscribeRequest[] = [];
    const port = await startBroker({
      authorizeSubscribe: async (r) => {
        seen.push(r);
        if (r.filter.startsWith('deny/')) return false;
        if (r.filter.startsWith('low/')) return { qos: 0 };
        if (r.filter.startsWith('quota/')) return { reasonCode: 0x97 };
        if (r.filter.startsWith('boom/')) throw new Error('hook failed');
        return true;
      },
    });
    for (const level of [5, 4] as const) {
      const sub = await connected(port, level, `as-sub-${level}`);
      const filters = ['deny/#', 'low/#', 'quota/#', 'boom/#', 'ok/#', 'bad/#/x'];
      sub.send({ type: 'subscribe', pid: 5, subs: filters.map((filter) => ({ filter, qos: 2, nl: false, rap: false, rh: 0 })), props: {} });
      const ack = await sub.waitFor('suback');
      const failure = (v5: number): number => (level === 5 ? v5 : 0x80);
      assert.deepEqual(ack.codes, [failure(0x87), 0, failure(0x97), 0x80, 2, failure(0x8f)]);
      const pub = await connected(port, 5, `as-pub-${level}`);
      const topics = ['deny/a', 'quota/a', 'boom/a', 'low/a', 'ok/a'];
      for (let i = 0; i < topics.length; i++) pub.send(publishPacket(topics[i] as string, 1, i + 1));
      const low = await sub.waitFor('publish', (p) => p.topic === 'low/a');
      assert.equal(low.qos, 0, 'granted at the lower QoS');
      await sub.waitFor('publish', (p) => p.topic === 'ok/a');
      await sleep(SETTLE_MS);
      assert.deepEqual(payloads(sub).sort(), ['low/a', 'ok/a']);
      pub.destroy();
      sub.destroy();
    }
    assert.deepEqual(seen[1], { clientId: 'as-sub-5', username: null, filter: 'low/#', qos: 2 });
    assert.equal(
      seen.some((r) => r.filter === 'bad/#/x'),
      false,
      'an invalid filter never reaches the hook',
    );
  });
});
