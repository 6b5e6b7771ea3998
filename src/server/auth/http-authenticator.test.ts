// The request slots and the queue of --auth-http-url, against a local HTTP service that answers
// each request after a fixed delay: CONNECTs beyond the slots are asked about in arrival order, one
// that waits --auth-http-timeout-ms for a slot gets 0x89, and a full queue refuses at once.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { EventKind } from '../../events.js';
import type { ConnectPacket } from '../../protocol/packets.js';
import { RC } from '../../protocol/reason-codes.js';
import type { AuthResult } from '../authenticator.js';
import type { Transport } from '../transport.js';
import { HttpAuthenticator } from './http-authenticator.js';

/** Each reply comes this long after its request: with one slot, the k-th CONNECT of a burst is
 * asked about at k × DELAY_MS. */
const DELAY_MS = 300;
/** Between the second CONNECT's start (300) and the third's (600): the third waits too long. */
const TIMEOUT_MS = 450;

const asked: string[] = [];
let server: Server;
let url = '';

before(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      asked.push((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { clientid: string }).clientid);
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"result":"allow"}'), DELAY_MS);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/auth`;
});

after(async () => {
  server.closeAllConnections();
  await new Promise<void>((r) => server.close(() => r()));
});

const transport: Transport = {
  kind: 'mqtt',
  remoteAddress: '127.0.0.1',
  remotePort: 1,
  certIdentity: null,
  clientIdMustMatchIdentity: false,
};

function connect(clientId: string): ConnectPacket {
  return {
    type: 'connect',
    protocolName: 'MQTT',
    level: 5,
    clean: true,
    keepAlive: 60,
    clientId,
    will: null,
    username: 'u',
    password: null,
    props: {},
  } as ConnectPacket;
}

function authenticator(queue: number, events: { kind: EventKind; fields?: Record<string, unknown> }[]): HttpAuthenticator {
  return new HttpAuthenticator({
    url,
    timeoutMs: TIMEOUT_MS,
    cacheMs: 0,
    concurrency: 1,
    queue,
    events: { event: (kind, fields) => events.push({ kind, fields }) },
  });
}

const code = (r: AuthResult): number => (r.ok ? RC.SUCCESS : r.reason);

describe('--auth-http-concurrency and --auth-http-queue', () => {
  it('asks about waiting CONNECTs in arrival order and refuses one that waited too long', async () => {
    asked.length = 0;
    const events: { kind: EventKind; fields?: Record<string, unknown> }[] = [];
    const a = authenticator(10, events);
    const answers = await Promise.all(
      ['first', 'second', 'third'].map(async (id) => code(await a.authenticate(connect(id), '127.0.0.1', transport))),
    );
    assert.deepEqual(answers, [RC.SUCCESS, RC.SUCCESS, RC.SERVER_BUSY]);
    assert.deepEqual(asked, ['first', 'second'], 'the third was never asked about');
    const busy = events.filter((e) => e.kind === 'auth-http-busy');
    assert.equal(busy.length, 1);
    assert.equal(busy[0]?.fields?.clientId, 'third');
    assert.ok(Number(busy[0]?.fields?.waitedMs) >= TIMEOUT_MS - 1);
    assert.deepEqual(a.gauges(), { authHttpInflight: 0, authHttpQueued: 0, authHttpCached: 0 });
  });

  it('refuses at once beyond the queue, and with no queue beyond the slots', async () => {
    for (const queue of [0, 1]) {
      asked.length = 0;
      const a = authenticator(queue, []);
      const ids = Array.from({ length: queue + 2 }, (_, i) => `q${queue}-${i}`);
      const pending = ids.map((id) => a.authenticate(connect(id), '127.0.0.1', transport));
      // The last one found every slot taken and the queue full: answered before anything replied.
      const last = pending[pending.length - 1] as AuthResult;
      assert.equal(code(last), RC.SERVER_BUSY, `queue ${queue}`);
      const answers = (await Promise.all(pending)).map(code);
      assert.deepEqual(answers, [...ids.slice(0, -1).map(() => RC.SUCCESS), RC.SERVER_BUSY]);
      assert.deepEqual(asked, ids.slice(0, -1));
    }
  });
});
