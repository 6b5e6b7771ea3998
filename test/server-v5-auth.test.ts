// MQTT 5 enhanced authentication end to end with SCRAM-SHA-256 (§4.12): MQTT.js for the first
// exchange through its handleAuth hook, raw packets for re-authentication (MQTT.js cannot start
// one) and for the protocol errors a real client would not make.
import assert from 'node:assert/strict';
import { afterEach, before, describe, it } from 'node:test';
import mqtt, { type IConnackPacket, type MqttClient } from 'mqtt';
import type { Packet } from '../src/protocol/packets.js';
import { RC } from '../src/protocol/reason-codes.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { MemoryScramStore, SCRAM_SHA_256, ScramClient, ScramSha256 } from '../src/server/scram.js';
import {
  connectClient,
  connectPacket,
  type PacketOf,
  RawClient,
  startNode,
  subscribe,
  type TestClient,
  WAIT_MS,
  withTimeout,
} from './helpers.js';

function auth(code: number, data: Uint8Array | undefined, method = SCRAM_SHA_256): Packet {
  return { type: 'auth', code, props: data === undefined ? { authMethod: method } : { authMethod: method, authData: data } };
}

describe('MQTT 5 enhanced authentication with SCRAM-SHA-256', { timeout: 60_000 }, () => {
  let store: MemoryScramStore;
  let node: BrokerNode | null = null;
  const raws: RawClient[] = [];
  const clients: MqttClient[] = [];
  const testClients: TestClient[] = [];

  before(() => {
    store = new MemoryScramStore([
      ['alice', 'wonderland'],
      ['bob', 'builder'],
    ]);
  });

  async function start(): Promise<BrokerNode> {
    node = await startNode({ enhancedAuth: [new ScramSha256({ store })] });
    return node;
  }

  async function rawConnect(): Promise<RawClient> {
    const r = await RawClient.open((node as BrokerNode).port, 5);
    raws.push(r);
    return r;
  }

  /** A raw client through the whole first exchange, past its CONNACK. */
  async function rawAuthenticated(clientId: string, user: string, password: string): Promise<RawClient> {
    const r = await rawConnect();
    const scram = new ScramClient(user, password);
    r.send(connectPacket({ level: 5, clientId, props: { authMethod: SCRAM_SHA_256, authData: scram.first() } }));
    const challenge = await r.waitFor('auth');
    r.send(auth(RC.CONTINUE_AUTHENTICATION, scram.final(challenge.props.authData as Uint8Array)));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, RC.SUCCESS);
    assert.ok(scram.verify(ack.props.authData as Uint8Array), 'CONNACK carries a valid server-final');
    return r;
  }

  /** The next AUTH from the server after everything already received. */
  function nextAuth(r: RawClient): Promise<PacketOf<'auth'>> {
    const seen = r.packets.length;
    return r.waitFor('auth', (p) => r.packets.indexOf(p) >= seen);
  }

  afterEach(async () => {
    for (const c of clients.splice(0)) c.end(true);
    for (const c of testClients.splice(0)) c.client.end(true);
    for (const r of raws.splice(0)) r.destroy();
    await node?.stop();
    node = null;
  });

  it('authenticates an MQTT.js client through AUTH 0x18 and proves the server in CONNACK', async () => {
    await start();
    const scram = new ScramClient('alice', 'wonderland');
    const client = mqtt.connect(`mqtt://127.0.0.1:${(node as BrokerNode).port}`, {
      protocolVersion: 5,
      clientId: 'scram-js',
      reconnectPeriod: 0,
      connectTimeout: WAIT_MS,
      properties: { authenticationMethod: SCRAM_SHA_256, authenticationData: scram.first() },
    });
    clients.push(client);
    const challenges: number[] = [];
    client.handleAuth = (packet, callback) => {
      challenges.push(packet.reasonCode ?? -1);
      const data = packet.properties?.authenticationData as Buffer;
      callback(undefined, {
        cmd: 'auth',
        reasonCode: RC.CONTINUE_AUTHENTICATION,
        properties: { authenticationMethod: SCRAM_SHA_256, authenticationData: scram.final(data) },
      });
    };
    const connack = await withTimeout(
      new Promise<IConnackPacket>((resolve, reject) => {
        client.once('connect', resolve);
        client.once('error', reject);
      }),
      WAIT_MS,
      'CONNACK',
    );
    assert.deepEqual(challenges, [RC.CONTINUE_AUTHENTICATION]);
    assert.equal(connack.reasonCode, RC.SUCCESS);
    assert.equal(connack.properties?.authenticationMethod, SCRAM_SHA_256);
    assert.ok(scram.verify(connack.properties?.authenticationData as Buffer), 'server-final verifies');
    // The session then works like any other.
    const got = new Promise<string>((resolve) => client.once('message', (_t, payload) => resolve(payload.toString())));
    await withTimeout(client.subscribeAsync('scram/echo', { qos: 1 }), WAIT_MS, 'SUBACK');
    await withTimeout(client.publishAsync('scram/echo', 'hi', { qos: 1 }), WAIT_MS, 'PUBACK');
    assert.equal(await withTimeout(got, WAIT_MS, 'echo'), 'hi');
  });

  it('refuses a wrong password with CONNACK 0x86 and an unknown user the same way', async () => {
    await start();
    for (const [user, password] of [
      ['alice', 'wrong'],
      ['mallory', 'anything'],
    ] as const) {
      const r = await rawConnect();
      const scram = new ScramClient(user, password);
      r.send(connectPacket({ level: 5, clientId: `bad-${user}`, props: { authMethod: SCRAM_SHA_256, authData: scram.first() } }));
      const challenge = await r.waitFor('auth');
      assert.equal(challenge.code, RC.CONTINUE_AUTHENTICATION, 'an unknown user gets a challenge too (RFC 5802 §9)');
      r.send(auth(RC.CONTINUE_AUTHENTICATION, scram.final(challenge.props.authData as Uint8Array)));
      const ack = await r.waitFor('connack');
      assert.equal(ack.code, RC.BAD_USER_NAME_OR_PASSWORD);
      await r.waitClosed();
    }
  });

  it('refuses a method it does not offer with CONNACK 0x8C', async () => {
    await start();
    const r = await rawConnect();
    r.send(connectPacket({ level: 5, clientId: 'sha1', props: { authMethod: 'SCRAM-SHA-1', authData: Buffer.from('n,,n=a,r=x') } }));
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, RC.BAD_AUTHENTICATION_METHOD);
    await r.waitClosed();
  });

  it('refuses a PUBLISH sent before the CONNACK of an exchange with CONNACK 0x82 [MQTT-3.1.2-30]', async () => {
    await start();
    const r = await rawConnect();
    const scram = new ScramClient('alice', 'wonderland');
    r.send(connectPacket({ level: 5, clientId: 'eager', props: { authMethod: SCRAM_SHA_256, authData: scram.first() } }));
    await r.waitFor('auth');
    r.send({ type: 'publish', dup: false, qos: 0, retain: false, topic: 'early', payload: Buffer.from('x'), props: {} });
    const ack = await r.waitFor('connack');
    assert.equal(ack.code, RC.PROTOCOL_ERROR);
    await r.waitClosed();
  });

  it('re-authenticates with AUTH 0x19 while messages keep flowing, and answers AUTH 0x00 with server-final', async () => {
    await start();
    const sub = await connectClient((node as BrokerNode).port, { protocolVersion: 5, clientId: 'reauth-watch' });
    testClients.push(sub);
    await subscribe(sub, 'reauth/#', 1);
    const r = await rawAuthenticated('reauth', 'alice', 'wonderland');
    const again = new ScramClient('alice', 'wonderland');
    const pending = nextAuth(r);
    r.send(auth(RC.REAUTHENTICATE, again.first()));
    const challenge = await pending;
    assert.equal(challenge.code, RC.CONTINUE_AUTHENTICATION);
    // Other packets may flow during a re-authentication (§4.12.1).
    r.send({ type: 'publish', dup: false, qos: 1, pid: 5, retain: false, topic: 'reauth/during', payload: Buffer.from('d'), props: {} });
    await r.waitFor('puback', (p) => p.pid === 5);
    r.send(auth(RC.CONTINUE_AUTHENTICATION, again.final(challenge.props.authData as Uint8Array)));
    const done = await r.waitFor('auth', (p) => p.code === RC.SUCCESS);
    assert.equal(done.props.authMethod, SCRAM_SHA_256);
    assert.ok(again.verify(done.props.authData as Uint8Array));
    await sub.waitFor((m) => m.topic === 'reauth/during', 'publish made during re-authentication');
    assert.equal(r.isClosed, false);
  });

  it('disconnects with 0x87 when re-authentication fails', async () => {
    await start();
    const r = await rawAuthenticated('reauth-bad', 'alice', 'wonderland');
    const wrong = new ScramClient('alice', 'not-it');
    const pending = nextAuth(r);
    r.send(auth(RC.REAUTHENTICATE, wrong.first()));
    const challenge = await pending;
    r.send(auth(RC.CONTINUE_AUTHENTICATION, wrong.final(challenge.props.authData as Uint8Array)));
    const d = await r.waitFor('disconnect');
    assert.equal(d.code, RC.NOT_AUTHORIZED);
    await r.waitClosed();
  });

  it('disconnects with 0x87 when re-authentication proves another user', async () => {
    await start();
    const r = await rawAuthenticated('reauth-other', 'alice', 'wonderland');
    const bob = new ScramClient('bob', 'builder');
    const pending = nextAuth(r);
    r.send(auth(RC.REAUTHENTICATE, bob.first()));
    const challenge = await pending;
    r.send(auth(RC.CONTINUE_AUTHENTICATION, bob.final(challenge.props.authData as Uint8Array)));
    const d = await r.waitFor('disconnect');
    assert.equal(d.code, RC.NOT_AUTHORIZED);
  });

  it('disconnects with 0x82 on re-authentication with another method or out of sequence [MQTT-4.12.1-1]', async () => {
    await start();
    const other = await rawAuthenticated('reauth-method', 'alice', 'wonderland');
    other.send(auth(RC.REAUTHENTICATE, Buffer.from('n,,n=alice,r=abc'), 'PLAIN'));
    assert.equal((await other.waitFor('disconnect')).code, RC.PROTOCOL_ERROR);
    const early = await rawAuthenticated('reauth-seq', 'alice', 'wonderland');
    early.send(auth(RC.CONTINUE_AUTHENTICATION, Buffer.from('c=biws,r=x,p=AAAA')));
    assert.equal((await early.waitFor('disconnect')).code, RC.PROTOCOL_ERROR);
  });

  it('disconnects with 0x82 on AUTH from a client that did not use enhanced authentication', async () => {
    await start();
    const r = await rawConnect();
    r.send(connectPacket({ level: 5, clientId: 'plain' }));
    await r.waitFor('connack');
    r.send(auth(RC.REAUTHENTICATE, Buffer.from('n,,n=alice,r=abc')));
    assert.equal((await r.waitFor('disconnect')).code, RC.PROTOCOL_ERROR);
    await r.waitClosed();
  });
});
