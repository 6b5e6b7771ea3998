// The embedding API (src/index.ts) with MQTT.js clients: one MqttBroker in this process, its
// addresses, its events, its `authenticate` hook (answers, timeout, throws, order of the packets
// that follow a pending CONNECT) and close(); then three MqttBrokers in this process as one
// cluster: one serves, the others take over when it closes, and each close writes its state file.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type mqtt from 'mqtt';
import { pino } from 'pino';
import { ConfigError } from '../src/errors.js';
import { type ClientDisconnectedEvent, MqttBroker, type PublishedEvent, type SubscribedEvent } from '../src/index.js';
import { connectClient, connectPacket, disconnect, publish, RawClient, subscribe, WAIT_MS, withTimeout } from './helpers.js';
import { freePort, LOOPBACK } from './support/net.js';

const quiet = pino({ level: 'silent' });
const cleanups: Array<() => Promise<void> | void> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

function started(b: MqttBroker): MqttBroker {
  cleanups.push(() => b.close());
  return b;
}

function next<T>(
  b: MqttBroker,
  event: 'clientConnected' | 'clientDisconnected' | 'subscribed' | 'published' | 'servingStarted',
  what: string,
): Promise<T> {
  return withTimeout(new Promise<T>((resolve) => (b as unknown as NodeJS.EventEmitter).once(event, resolve)), WAIT_MS, what);
}

async function refusal(port: number, opts: mqtt.IClientOptions): Promise<number | undefined> {
  const err = await connectClient(port, opts).then(
    () => assert.fail('connected'),
    (e: Error & { code?: number }) => e,
  );
  return err.code;
}

describe('MqttBroker, one node', () => {
  it('listens on port 0, reports the bound address, and emits the client events', async () => {
    const b = started(new MqttBroker({ host: LOOPBACK, port: 0, logger: quiet }));
    const served = next<{ listeners: { port: number }[] }>(b, 'servingStarted', 'servingStarted');
    b.on('clientConnected', () => {});
    const connected = next<{ clientId: string; protocolVersion: number }>(b, 'clientConnected', 'clientConnected');
    const addresses = await b.listen();
    const port = addresses.listeners[0]?.port ?? 0;
    assert.ok(port > 0);
    assert.equal(addresses.listeners[0]?.url, `mqtt://${LOOPBACK}:${port}`);
    assert.equal((await served).listeners[0]?.port, port);
    const c = await connectClient(port, { clientId: 'emb-1', protocolVersion: 5 });
    assert.deepEqual(await connected, { clientId: 'emb-1', username: null, protocolVersion: 5, sessionPresent: false });
    const subscribed = next<SubscribedEvent>(b, 'subscribed', 'subscribed');
    await subscribe(c, 'e/#', 1);
    assert.deepEqual((await subscribed).subscriptions, [{ filter: 'e/#', qos: 1, reasonCode: 1 }]);
    const seen: PublishedEvent[] = [];
    b.on('published', (e) => seen.push(e));
    await publish(c, 'e/0', 'zero', { qos: 0 });
    await publish(c, 'e/1', 'one', { qos: 1 });
    await c.waitFor((m) => m.topic === 'e/1', 'e/1 back');
    assert.deepEqual(
      seen.map((e) => [e.clientId, e.topic, e.payload.toString(), e.qos]),
      [
        ['emb-1', 'e/0', 'zero', 0],
        ['emb-1', 'e/1', 'one', 1],
      ],
    );
    const gone = next<ClientDisconnectedEvent>(b, 'clientDisconnected', 'clientDisconnected');
    await disconnect(c);
    assert.deepEqual(await gone, { clientId: 'emb-1', reasonCode: 0 });
    await b.close();
    await assert.rejects(connectClient(port, { clientId: 'late' }));
  });

  it('refuses an unknown option or a bad value naming the option', () => {
    assert.throws(
      () => new MqttBroker({ bogusSetting: 1 } as never),
      (e: Error) => e instanceof ConfigError && /option bogusSetting/.test(e.message),
    );
    assert.throws(
      () => new MqttBroker({ maxPacketSize: 3 }),
      (e: Error) => e instanceof ConfigError && /option maxPacketSize: must be at least 64/.test(e.message),
    );
  });

  it('authenticate: true, false, a reason code, a timeout and a throw, for MQTT 5 and 3.1.1', async () => {
    const b = started(
      new MqttBroker({
        host: LOOPBACK,
        port: 0,
        logger: quiet,
        authenticateTimeoutMs: 200,
        authenticate: async (r) => {
          if (r.username === 'slow') return new Promise<boolean>(() => {});
          if (r.username === 'boom') throw new Error('hook failed');
          if (r.username === 'banned') return { reasonCode: 0x8a };
          if (r.username === 'odd') return { reasonCode: 0x00 };
          return r.username === 'ok' && r.password?.toString() === 'pw' && r.remoteAddress === LOOPBACK;
        },
      }),
    );
    const port = (await b.listen()).listeners[0]?.port ?? 0;
    const ok = await connectClient(port, { username: 'ok', password: 'pw', protocolVersion: 5 });
    await disconnect(ok);
    for (const level of [5, 4] as const) {
      const rc = (v5: number, v4: number): number => (level === 5 ? v5 : v4);
      assert.equal(await refusal(port, { username: 'ok', password: 'no', protocolVersion: level }), rc(0x87, 5), 'false');
      assert.equal(await refusal(port, { username: 'banned', protocolVersion: level }), rc(0x8a, 5), 'reasonCode');
      assert.equal(await refusal(port, { username: 'slow', protocolVersion: level }), rc(0x88, 3), 'timeout');
      assert.equal(await refusal(port, { username: 'boom', protocolVersion: level }), rc(0x88, 3), 'throw');
      assert.equal(await refusal(port, { username: 'odd', protocolVersion: level }), rc(0x88, 3), 'not a refusal code');
    }
  });

  it('keeps the packets that follow a pending CONNECT in order', async () => {
    let release: () => void = () => {};
    const pending = new Promise<void>((r) => {
      release = r;
    });
    const b = started(
      new MqttBroker({
        host: LOOPBACK,
        port: 0,
        logger: quiet,
        authenticate: async () => {
          await pending;
          return true;
        },
      }),
    );
    const port = (await b.listen()).listeners[0]?.port ?? 0;
    const raw = await RawClient.open(port, 5);
    cleanups.push(() => raw.destroy());
    raw.send(connectPacket({ level: 5, clientId: 'ordered' }));
    raw.send({ type: 'subscribe', pid: 1, subs: [{ filter: 'o/t', qos: 1, nl: false, rap: false, rh: 0 }], props: {} });
    raw.send({ type: 'publish', topic: 'o/t', payload: Buffer.from('after-sub'), qos: 1, pid: 2, retain: false, dup: false, props: {} });
    release();
    await raw.waitFor('connack', (p) => p.code === 0);
    await raw.waitFor('suback');
    const msg = await raw.waitFor('publish', (p) => p.topic === 'o/t');
    assert.equal(Buffer.from(msg.payload).toString(), 'after-sub');
  });
});

describe('MqttBroker, three nodes of one cluster in this process', { timeout: 120_000 }, () => {
  it('one serves; after it closes another serves the same subscriptions; each close writes its state file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-embed-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const ports = [await freePort(), await freePort(), await freePort()];
    const clusterPeers = ports.map((p, i) => `${i + 1}=${LOOPBACK}:${p}`).join(',');
    const nodes = [1, 2, 3].map((id) =>
      started(
        new MqttBroker({
          host: LOOPBACK,
          port: 0,
          logger: quiet,
          clusterNode: id,
          clusterPeers,
          clusterElectionTimeoutMs: 300,
          stateFile: join(dir, `node${id}.state`),
        }),
      ),
    );
    const firstServing = Promise.race(
      nodes.map((b, i) => next<{ listeners: { port: number }[] }>(b, 'servingStarted', 'a leader').then((e) => ({ i, e }))),
    );
    for (const b of nodes) {
      const a = await b.listen();
      assert.ok(a.raftPort > 0);
      assert.equal(a.listeners[0]?.port, 0, 'a cluster node listens for MQTT only while it serves');
    }
    const { i: leader, e } = await withTimeout(firstServing, 30_000, 'a serving node');
    const port = e.listeners[0]?.port ?? 0;
    const sub = await connectClient(port, { clientId: 'cl-sub', clean: false, protocolVersion: 4 });
    await subscribe(sub, 'c/#', 1);
    await disconnect(sub);

    const rest = nodes.filter((_, i) => i !== leader);
    const takeover = Promise.race(rest.map((b) => next<{ listeners: { port: number }[] }>(b, 'servingStarted', 'a new leader')));
    await (nodes[leader] as MqttBroker).close();
    assert.ok(existsSync(join(dir, `node${leader + 1}.state`)), 'the closed node wrote its state file');
    const port2 = (await withTimeout(takeover, 30_000, 'a takeover')).listeners[0]?.port ?? 0;
    const pub = await connectClient(port2, { clientId: 'cl-pub', protocolVersion: 5 });
    await publish(pub, 'c/x', 'kept', { qos: 1 });
    await disconnect(pub);
    const back = await connectClient(port2, { clientId: 'cl-sub', clean: false, protocolVersion: 4 });
    assert.equal(back.connack.sessionPresent, true);
    await back.waitFor((m) => m.topic === 'c/x' && m.payload === 'kept', 'the queued message');
    await disconnect(back);
    for (const b of rest) await b.close();
    for (const id of [1, 2, 3]) assert.ok(existsSync(join(dir, `node${id}.state`)), `node ${id} wrote its state file`);
  });
});
