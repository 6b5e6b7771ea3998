// Authentication with a password file and authorization with an ACL file, end to end with MQTT.js
// (3.1.1 and 5.0) against an in-process node: CONNACK codes, failed-login throttling, SUBACK codes
// per filter, refused publishes, and deliveries filtered by the subscriber's read access.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import mqtt, { type IClientOptions, type Packet } from 'mqtt';
import { parseAcl } from '../src/broker/acl.js';
import type { AclRule } from '../src/broker/commands.js';
import { RC } from '../src/protocol/reason-codes.js';
import { PasswordFileAuthenticator } from '../src/server/auth/password-authenticator.js';
import { formatScram, hashPassword, SCRYPT_DEFAULT } from '../src/server/auth/password-file.js';
import type { BrokerNode } from '../src/server/broker-node.js';
import { SCRAM_SHA_256, ScramClient, ScramSha256, scramCredential } from '../src/server/scram.js';
import {
  connectClient,
  connectPacket,
  counter,
  disconnect,
  publish,
  RawClient,
  startNode,
  subscribe,
  type TestClient,
  WAIT_MS,
  withTimeout,
} from './helpers.js';

/** The CONNACK refusal code MQTT.js reports (3.1.1 return code or MQTT 5 reason code). */
async function refusal(port: number, opts: IClientOptions): Promise<number> {
  const client = mqtt.connect(`mqtt://127.0.0.1:${port}`, { reconnectPeriod: 0, connectTimeout: 10_000, ...opts });
  try {
    return await withTimeout(
      new Promise<number>((resolve, reject) => {
        client.once('connect', () => reject(new Error('connected')));
        client.once('error', (e: Error & { code?: number }) => resolve(e.code ?? -1));
      }),
      10_000,
      'CONNACK refusal',
    );
  } finally {
    client.end(true);
  }
}

/** The SUBACK codes as sent, refusals included (MQTT.js rejects subscribeAsync on a refusal). */
function subackCodes(c: TestClient, filters: string[], qos: 0 | 1 | 2): Promise<number[]> {
  return withTimeout(
    new Promise<number[]>((resolve) => {
      const onPacket = (packet: Packet) => {
        if (packet.cmd !== 'suback') return;
        c.client.off('packetreceive', onPacket);
        resolve(packet.granted.map((g) => (typeof g === 'number' ? g : (g as { qos: number }).qos)));
      };
      c.client.on('packetreceive', onPacket);
      c.client.subscribe(filters, { qos }, () => {});
    }),
    WAIT_MS,
    `SUBACK ${filters.join(',')}`,
  );
}

function acl(text: string): AclRule[] {
  const r = parseAcl(text);
  if ('problem' in r) throw new Error(r.problem.reason);
  return r.rules;
}

describe('password file authentication', { timeout: 60_000 }, () => {
  let node: BrokerNode;
  let auth: PasswordFileAuthenticator;
  /** The authenticator's monotonic clock, moved by the tests so backoff windows never race. */
  let clockMs = 0;
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-auth-'));
    const file = join(dir, 'passwords');
    // Cheaper parameters keep the test quick; the format and the check are the same.
    const cheap = { ...SCRYPT_DEFAULT, N: 1024 };
    writeFileSync(file, `# users\nalice:${hashPassword('wonderland', cheap)}\n\nbob:${hashPassword('builder', cheap)}\n`);
    auth = new PasswordFileAuthenticator(file, false, { event: (k, f) => node.event(k, f) }, () => clockMs);
    node = await startNode({ authenticator: auth });
  });
  after(() => node.stop());

  it('admits a user with the right password over 3.1.1 and 5.0', async () => {
    for (const protocolVersion of [4, 5] as const) {
      const c = await connectClient(node.port, {
        protocolVersion,
        username: 'alice',
        password: 'wonderland',
        clientId: `a${protocolVersion}`,
      });
      assert.equal(c.connack.reasonCode ?? 0, 0);
      await disconnect(c);
    }
  });

  it('refuses a wrong password or unknown user with 0x86 (3.1.1: 4)', async () => {
    assert.equal(
      await refusal(node.port, { protocolVersion: 5, username: 'bob', password: 'wrong', clientId: 'b5' }),
      RC.BAD_USER_NAME_OR_PASSWORD,
    );
    clockMs += 60_000;
    assert.equal(await refusal(node.port, { protocolVersion: 4, username: 'mallory', password: 'x', clientId: 'm4' }), 4);
    clockMs += 60_000;
  });

  it('refuses anonymous clients with 0x87 (3.1.1: 5) once a password file is configured', async () => {
    assert.equal(await refusal(node.port, { protocolVersion: 5, clientId: 'anon5' }), RC.NOT_AUTHORIZED);
    assert.equal(await refusal(node.port, { protocolVersion: 4, clientId: 'anon4' }), 5);
  });

  it('throttles repeated failures per username: later attempts are refused without a password check', async () => {
    const failed = counter(node, 'auth-failed');
    const throttled = counter(node, 'auth-throttled');
    const guess = (i: number) => refusal(node.port, { protocolVersion: 5, username: 'carol', password: 'guess', clientId: `g${i}` });
    assert.equal(await guess(1), RC.BAD_USER_NAME_OR_PASSWORD);
    assert.equal(counter(node, 'auth-failed'), failed + 1);
    // The clock has not moved: the window of the first failure is still open.
    assert.equal(await guess(2), RC.BAD_USER_NAME_OR_PASSWORD);
    assert.equal(await guess(3), RC.BAD_USER_NAME_OR_PASSWORD);
    assert.equal(counter(node, 'auth-throttled'), throttled + 2);
    assert.equal(counter(node, 'auth-failed'), failed + 1);
    // Also from this address: a right password waits out the window too.
    assert.equal(
      await refusal(node.port, { protocolVersion: 5, username: 'alice', password: 'wonderland', clientId: 'a-early' }),
      RC.BAD_USER_NAME_OR_PASSWORD,
    );
    assert.ok(auth.throttle.byUser.size <= auth.throttle.byUser.max);
    clockMs += 60_000;
    const ok = await connectClient(node.port, { protocolVersion: 5, username: 'alice', password: 'wonderland', clientId: 'a-after' });
    await disconnect(ok);
  });
});

describe('SCRAM-SHA-256 over the password file, under the same failed-login backoff', { timeout: 60_000 }, () => {
  let node: BrokerNode;
  let clockMs = 0;
  before(async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'raftmq-scram-')), 'passwords');
    writeFileSync(file, `dave:${formatScram(scramCredential('secret'))}\n`);
    const auth = new PasswordFileAuthenticator(file, false, { event: (k, f) => node.event(k, f) }, () => clockMs);
    node = await startNode({ authenticator: auth, enhancedAuth: [new ScramSha256({ store: auth })] });
  });
  after(() => node.stop());

  /** A SCRAM exchange on raw packets (MQTT.js runs one only through its own hook); the CONNACK,
   * and whether the server sent its challenge. */
  async function scramLogin(password: string, clientId: string): Promise<{ code: number; challenged: boolean }> {
    const r = await RawClient.open(node.port, 5);
    try {
      const scram = new ScramClient('dave', password);
      r.send(connectPacket({ level: 5, clientId, props: { authMethod: SCRAM_SHA_256, authData: scram.first() } }));
      const first = await Promise.race([r.waitFor('auth'), r.waitFor('connack')]);
      if (first.type === 'connack') return { code: first.code, challenged: false };
      const data = first.props.authData as Uint8Array;
      r.send({ type: 'auth', code: RC.CONTINUE_AUTHENTICATION, props: { authMethod: SCRAM_SHA_256, authData: scram.final(data) } });
      return { code: (await r.waitFor('connack')).code, challenged: true };
    } finally {
      r.destroy();
    }
  }

  it('counts a wrong SCRAM proof as a failed login, so SCRAM and plain passwords from the address wait out the backoff', async () => {
    assert.deepEqual(await scramLogin('wrong', 's1'), { code: RC.BAD_USER_NAME_OR_PASSWORD, challenged: true });
    assert.equal(counter(node, 'auth-failed'), 1);
    assert.equal(counter(node, 'protocol-error:enhanced-auth'), 0);
    // The clock has not moved: the right password is refused at CONNECT, without an exchange.
    assert.deepEqual(await scramLogin('secret', 's2'), { code: RC.BAD_USER_NAME_OR_PASSWORD, challenged: false });
    assert.equal(
      await refusal(node.port, { protocolVersion: 5, username: 'dave', password: 'secret', clientId: 'p1' }),
      RC.BAD_USER_NAME_OR_PASSWORD,
    );
    assert.equal(counter(node, 'auth-throttled'), 2);
    clockMs += 60_000;
    assert.deepEqual(await scramLogin('secret', 's3'), { code: RC.SUCCESS, challenged: true });
  });
});

describe('ACL file authorization', { timeout: 60_000 }, () => {
  let node: BrokerNode;
  before(async () => {
    node = await startNode({
      acl: acl(
        [
          'topic read public/#',
          'user alice',
          'topic readwrite alice/#',
          'topic read public/#',
          'user bob',
          'topic write alice/inbox',
          'topic write public/#',
          'pattern readwrite devices/%c/#',
        ].join('\n'),
      ),
    });
  });
  after(() => node.stop());

  it('answers SUBSCRIBE per filter: 0x87 in MQTT 5, 0x80 in 3.1.1', async () => {
    const a5 = await connectClient(node.port, { protocolVersion: 5, username: 'alice', clientId: 'alice5' });
    assert.deepEqual(await subackCodes(a5, ['alice/#', 'bob/#', 'devices/alice5/+'], 1), [1, RC.NOT_AUTHORIZED, 1]);
    const a4 = await connectClient(node.port, { protocolVersion: 4, username: 'alice', clientId: 'alice4' });
    assert.deepEqual(await subackCodes(a4, ['alice/#', 'bob/#'], 1), [1, 0x80]);
    await disconnect(a5);
    await disconnect(a4);
  });

  it('refuses a v5 QoS 1 publish without write access with PUBACK 0x87', async () => {
    const b = await connectClient(node.port, { protocolVersion: 5, username: 'bob', clientId: 'bob5' });
    await assert.rejects(publish(b, 'alice/private', 'x', { qos: 1 }), (e: Error & { code?: number }) => e.code === RC.NOT_AUTHORIZED);
    await disconnect(b);
  });

  it('acknowledges and drops a 3.1.1 publish without write access; allowed topics get through', async () => {
    const a = await connectClient(node.port, { protocolVersion: 4, username: 'alice', clientId: 'alice-sub', clean: true });
    await subscribe(a, ['alice/#', 'public/#'], 1);
    const b = await connectClient(node.port, { protocolVersion: 4, username: 'bob', clientId: 'bob4' });
    await publish(b, 'alice/private', 'forbidden', { qos: 1 });
    await publish(b, 'alice/inbox', 'hello', { qos: 1 });
    await publish(b, 'public/news', 'news', { qos: 0 });
    await a.waitFor((m) => m.topic === 'public/news', 'public news');
    assert.deepEqual(
      a.messages.map((m) => m.topic),
      ['alice/inbox', 'public/news'],
    );
    assert.ok(counter(node, 'acl-denied') >= 1);
    await disconnect(a);
    await disconnect(b);
  });

  it('limits a device to its own subtree through pattern readwrite devices/%c/#', async () => {
    const d1 = await connectClient(node.port, { protocolVersion: 5, clientId: 'd1' });
    const d2 = await connectClient(node.port, { protocolVersion: 5, clientId: 'd2' });
    assert.deepEqual(await subackCodes(d1, ['devices/d1/#', 'devices/d2/#'], 1), [1, RC.NOT_AUTHORIZED]);
    await assert.rejects(
      publish(d2, 'devices/d1/cmd', 'spoof', { qos: 1 }),
      (e: Error & { code?: number }) => e.code === RC.NOT_AUTHORIZED,
    );
    await publish(d1, 'devices/d1/cmd', 'own', { qos: 1 });
    await d1.waitFor((m) => m.topic === 'devices/d1/cmd', 'own message', WAIT_MS);
    assert.deepEqual(
      d1.messages.map((m) => m.payload),
      ['own'],
    );
    await disconnect(d1);
    await disconnect(d2);
  });
});
