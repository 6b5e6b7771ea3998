// --auth-http-url against a small HTTP service this test runs, with a real broker process and
// MQTT.js clients of MQTT 5 and 3.1.1: allow, deny, a timeout, a malformed body, a 500, a cache hit
// (the service counts its requests), and the concurrency bound with its queue (CONNECTs beyond the
// requests under way wait their turn; 0x89 beyond the queue).
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type mqtt from 'mqtt';
import { BrokerProcess } from './broker-process.js';
import { connectClient, disconnect, WAIT_MS, withTimeout } from './helpers.js';
import { sleep } from './support/wait.js';

interface AuthRequest {
  clientid: string;
  username: string | null;
  password: string | null;
  remote_address: string;
  remote_port: number;
  protocol: string;
  listener: string;
}

const TIMEOUT_MS = 400;
const CONCURRENCY = 2;
const QUEUE = 1;
const requests: AuthRequest[] = [];
/** Replies held back by the `hold` user; released at the end. */
const held: ServerResponse[] = [];

/** The status and body the service answers each user with; null: held back. */
const REPLIES: Record<string, [number, string] | null> = {
  alice: [200, '{"result":"allow"}'],
  mallory: [200, '{"result":"deny"}'],
  garbage: [200, 'allow, I guess'],
  maybe: [200, '{"result":"maybe"}'],
  broken: [500, '{"result":"allow"}'],
  hold: null,
};

function reply(req: AuthRequest, res: ServerResponse): void {
  const r = REPLIES[req.username ?? ''];
  if (r === null) {
    held.push(res);
    return;
  }
  const [status, body] = r ?? [200, '{"result":"deny"}'];
  res.writeHead(status, { 'content-type': 'application/json' }).end(body);
}

const service = createServer((req: IncomingMessage, res: ServerResponse) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as AuthRequest;
    assert.equal(req.method, 'POST');
    assert.equal(req.headers['content-type'], 'application/json');
    requests.push(body);
    reply(body, res);
  });
});

let broker: BrokerProcess;

before(async () => {
  await new Promise<void>((r) => service.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(service.address() as AddressInfo).port}/mqtt/auth`;
  broker = await BrokerProcess.start([
    '--auth-http-url',
    url,
    '--auth-http-timeout-ms',
    String(TIMEOUT_MS),
    '--auth-http-concurrency',
    String(CONCURRENCY),
    '--auth-http-queue',
    String(QUEUE),
    '--auth-http-cache-ms',
    '60000',
  ]);
});

after(async () => {
  await broker?.stop();
  for (const r of held) r.destroy();
  service.closeAllConnections();
  await new Promise<void>((r) => service.close(() => r()));
});

async function refusal(opts: mqtt.IClientOptions): Promise<number | undefined> {
  const err = await connectClient(broker.port, opts).then(
    () => assert.fail(`${String(opts.username)} connected`),
    (e: Error & { code?: number }) => e,
  );
  return err.code;
}

const countFor = (username: string): number => requests.filter((r) => r.username === username).length;

describe('--auth-http-url', () => {
  for (const level of [5, 4] as const) {
    const rc = (v5: number, v4: number): number => (level === 5 ? v5 : v4);
    it(`MQTT ${level === 5 ? '5' : '3.1.1'}: allow, deny, malformed, 500 and a timeout`, async () => {
      const ok = await connectClient(broker.port, { clientId: `a-${level}`, username: 'alice', password: 'pw', protocolVersion: level });
      await disconnect(ok);
      const sent = requests.find((r) => r.clientid === `a-${level}`);
      assert.deepEqual(sent && { ...sent, remote_port: 0 }, {
        clientid: `a-${level}`,
        username: 'alice',
        password: Buffer.from('pw').toString('base64'),
        remote_address: '127.0.0.1',
        remote_port: 0,
        protocol: level === 5 ? 'mqtt5' : 'mqtt3.1.1',
        listener: 'mqtt',
        cert_identity: null,
      });
      assert.ok((sent?.remote_port ?? 0) > 0);
      assert.equal(await refusal({ clientId: `m-${level}`, username: 'mallory', password: 'x', protocolVersion: level }), rc(0x87, 5));
      assert.equal(await refusal({ clientId: `g-${level}`, username: 'garbage', protocolVersion: level }), rc(0x88, 3));
      assert.equal(await refusal({ clientId: `q-${level}`, username: 'maybe', protocolVersion: level }), rc(0x88, 3));
      assert.equal(await refusal({ clientId: `b-${level}`, username: 'broken', protocolVersion: level }), rc(0x88, 3));
      assert.equal(await refusal({ clientId: `h-${level}`, username: 'hold', protocolVersion: level }), rc(0x88, 3));
    });
  }

  it('logs a line naming what was wrong with each reply that is no decision', async () => {
    const line = (msg: string) => broker.waitForLog((l) => l.msg === msg, WAIT_MS);
    assert.match(String((await line('auth-http-malformed')).problem), /reply body is not JSON: "allow, I guess"/);
    assert.match(String((await line('auth-http-status')).problem), /HTTP status 500, expected 2xx/);
    assert.match(String((await line('auth-http-timeout')).problem), new RegExp(`no reply within --auth-http-timeout-ms ${TIMEOUT_MS}`));
  });

  it('answers a repeated login from the cache: the service hears it once', async () => {
    const before = countFor('carol');
    for (let i = 0; i < 3; i++) assert.equal(await refusal({ clientId: 'c-1', username: 'carol', password: 'same' }), 5);
    assert.equal(countFor('carol') - before, 1, 'one request for three identical logins');
    // A different password is another decision: asked again.
    assert.equal(await refusal({ clientId: 'c-1', username: 'carol', password: 'other' }), 5);
    assert.equal(countFor('carol') - before, 2);
  });

  it(`queues a CONNECT while ${CONCURRENCY} requests are under way, and refuses with 0x89 beyond ${QUEUE} queued`, async () => {
    const holdsBefore = countFor('hold');
    const pending = [0, 1].map((i) => refusal({ clientId: `hold-${i}`, username: 'hold', password: `p${i}`, protocolVersion: 5 }));
    await withTimeout(
      (async () => {
        for (let i = 0; i < 200 && countFor('hold') - holdsBefore < CONCURRENCY; i++) await sleep(10);
      })(),
      WAIT_MS,
      'the service to hold two requests',
    );
    assert.equal(countFor('hold') - holdsBefore, CONCURRENCY);
    const allowsBefore = countFor('alice');
    // Every request slot is taken: this one waits its turn, the next finds the queue full.
    const queued = connectClient(broker.port, { clientId: 'queued', username: 'alice', password: 'fresh', protocolVersion: 5 });
    await sleep(50);
    assert.equal(countFor('alice'), allowsBefore, 'the queued CONNECT is not asked about while every slot is taken');
    assert.equal(await refusal({ clientId: 'busy', username: 'alice', password: 'other', protocolVersion: 5 }), 0x89);
    assert.equal(countFor('alice'), allowsBefore, 'the busy refusal asked nothing');
    // The held requests time out (0x88), and the queued CONNECT gets a slot: allowed.
    assert.deepEqual(await Promise.all(pending), [0x88, 0x88]);
    await disconnect(await queued);
    assert.equal(countFor('alice'), allowsBefore + 1);
    const line = await broker.waitForLog((l) => l.msg === 'auth-http-busy', WAIT_MS);
    assert.equal(line.queued, QUEUE);
  });
});
