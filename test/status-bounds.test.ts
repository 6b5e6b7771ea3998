// The health port under hostile requests, with raw sockets against a real raftmq process
// (docs/operations.md "Health port bounds"): each gets a clear HTTP error within a bound, the
// broker keeps answering, and the live trace is not evaluated while nobody watches.
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import pino from 'pino';
import { healthSource, singleNodeStatus } from '../src/cluster/cluster-node.js';
import { HealthServer } from '../src/cluster/health.js';
import { TRACE_WATCHERS_MAX } from '../src/server/publish-trace.js';
import { BrokerProcess } from './broker-process.js';
import { connectClient, disconnect, publish, startNode, subscribe, withTimeout } from './helpers.js';
import { parseMetrics } from './prom-text.js';
import { httpGet } from './support/net.js';

const TOKEN = 'open-sesame';
/** Any answer the tests wait for comes within this (the server's own bound is 10 s). */
const ANSWER_MS = 20_000;

/** Writes `bytes` and reads until the server closes the socket or `untilText` is seen. */
function raw(port: number, bytes: string, untilText?: string): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const s: Socket = connect({ host: '127.0.0.1', port });
    let text = '';
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`no answer within ${ANSWER_MS} ms; got ${JSON.stringify(text.slice(0, 200))}`));
    }, ANSWER_MS);
    s.setEncoding('utf8');
    s.on('data', (c: string) => {
      text += c;
      if (untilText !== undefined && text.includes(untilText)) {
        clearTimeout(timer);
        s.destroy();
        resolve({ text, closed: false });
      }
    });
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ text, closed: true });
    });
    s.write(bytes);
  });
}

function get(path: string, headers = ''): string {
  return `GET ${path} HTTP/1.1\r\nHost: x\r\n${headers}\r\n`;
}

async function metric(port: number, name: string): Promise<number> {
  const r = await httpGet(port, '/metrics');
  return parseMetrics(r.text).get(name) ?? Number.NaN;
}

describe('health port bounds of a real process', { timeout: 120_000 }, () => {
  let broker: BrokerProcess;
  let hp = 0;
  const auth = `Authorization: Bearer ${TOKEN}\r\n`;

  before(async () => {
    broker = await BrokerProcess.start(['--health-port', '0', '--status-token', TOKEN]);
    hp = (await broker.waitForLog((l) => l.msg === 'health listening')).port as number;
  });
  after(async () => {
    await broker.stop();
  });

  it('answers 431 to headers over 8 KiB (under the 16 KiB Node default)', async () => {
    const r = await raw(hp, get('/health', `X-Big: ${'a'.repeat(12_000)}\r\n`));
    assert.match(r.text, /^HTTP\/1\.1 431 /);
  });

  it('closes a request whose headers never finish (slowloris) with 408', async () => {
    // Half a request line, then silence: the headers timeout ends it, not the client.
    const r = await raw(hp, 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    assert.ok(r.closed, 'socket closed by the server');
    assert.match(r.text, /^HTTP\/1\.1 408 /);
  });

  it('answers 404 naming the paths for an unknown one', async () => {
    const r = await raw(hp, get('/nothing-here', 'Connection: close\r\n'));
    assert.match(r.text, /^HTTP\/1\.1 404 /);
    assert.match(r.text, /\/status\.json/);
  });

  it('refuses a request body with 413 and closes', async () => {
    const r = await raw(hp, `POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello`);
    assert.match(r.text, /^HTTP\/1\.1 413 /);
    assert.match(r.text, /no request body/);
    assert.ok(r.closed);
  });

  it('asks for the token on / and the trace, and keeps /health and /live open', async () => {
    const page = await raw(hp, get('/', 'Connection: close\r\n'));
    assert.match(page.text, /^HTTP\/1\.1 401 /);
    assert.match(page.text, /--status-token/);
    const wrong = await raw(hp, get('/status.json', 'Connection: close\r\nAuthorization: Bearer nope\r\n'));
    assert.match(wrong.text, /^HTTP\/1\.1 401 /);
    const trace = await raw(hp, get('/trace?filter=a', 'Connection: close\r\n'));
    assert.match(trace.text, /^HTTP\/1\.1 401 /);
    const ok = await raw(hp, get(`/?token=${TOKEN}`, 'Connection: close\r\n'));
    assert.match(ok.text, /^HTTP\/1\.1 200 /);
    assert.match(ok.text, /<title>raftmq status<\/title>/);
    assert.equal((await httpGet(hp, '/live')).code, 200);
    assert.equal((await httpGet(hp, '/health')).code, 200);
  });

  it('answers 400 naming the problem for a trace filter that is not a topic filter', async () => {
    for (const [filter, problem] of [
      ['a%2F%23%2Fb', /# not alone as the last level/],
      ['a%2Fb%2B', /\+ not alone in its level/],
      ['', /give \?filter=/],
      ['%24share%2Fg%2Fa', /shared subscription/],
    ] as const) {
      const r = await raw(hp, get(`/trace?filter=${filter}`, `Connection: close\r\n${auth}`));
      assert.match(r.text, /^HTTP\/1\.1 400 /, filter);
      assert.match(r.text, problem, filter);
    }
  });

  it('holds at most 16 trace watchers, answers 503 to the next, and frees a closed one', async () => {
    const open: Socket[] = [];
    try {
      for (let i = 0; i < TRACE_WATCHERS_MAX; i++) {
        const s = connect({ host: '127.0.0.1', port: hp });
        open.push(s);
        s.setEncoding('utf8');
        let text = '';
        const seen = new Promise<void>((resolve, reject) => {
          const timer = setTimeout(() => reject(new Error(`watcher ${i} not opened`)), ANSWER_MS);
          s.on('data', (c: string) => {
            text += c;
            if (text.includes('event: open')) {
              clearTimeout(timer);
              resolve();
            }
          });
        });
        s.write(get(`/trace?filter=w%2F${i}`, auth));
        await seen;
      }
      assert.equal(await metric(hp, 'raftmq_trace_watchers'), TRACE_WATCHERS_MAX);
      const refused = await raw(hp, get('/trace?filter=x', `Connection: close\r\n${auth}`));
      assert.match(refused.text, /^HTTP\/1\.1 503 /);
      assert.match(refused.text, /16 watchers/);
    } finally {
      for (const s of open) s.destroy();
    }
    // Closed watchers are freed: a new one opens (bounded wait for the server to see the closes).
    const deadline = Date.now() + ANSWER_MS;
    while ((await metric(hp, 'raftmq_trace_watchers')) !== 0) {
      assert.ok(Date.now() < deadline, 'watchers freed after their sockets closed');
      await new Promise((r) => setTimeout(r, 50));
    }
    const again = await raw(hp, get('/trace?filter=x', auth), 'event: open');
    assert.match(again.text, /^HTTP\/1\.1 200 /);
  });

  it('evaluates no trace while none is open, and traces a publish while one is', async () => {
    const mqttPort = broker.port;
    const sub = await connectClient(mqttPort, { clientId: 'bound-sub' });
    const pub = await connectClient(mqttPort, { clientId: 'bound-pub' });
    await subscribe(sub, 't/#', 1);
    // Wait until no watcher from an earlier test is left.
    const deadline = Date.now() + ANSWER_MS;
    while ((await metric(hp, 'raftmq_trace_watchers')) !== 0) {
      assert.ok(Date.now() < deadline, 'no watcher left');
      await new Promise((r) => setTimeout(r, 50));
    }
    const before = await metric(hp, 'raftmq_trace_evaluations_total');
    for (let i = 0; i < 20; i++) await publish(pub, `t/${i}`, 'x', { qos: (i % 2) as 0 | 1 });
    assert.equal(await metric(hp, 'raftmq_trace_evaluations_total'), before, 'no evaluation without a watcher');

    const s = connect({ host: '127.0.0.1', port: hp });
    s.setEncoding('utf8');
    let text = '';
    let published = false;
    const acked = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`trace of t/traced not complete: ${text}`)), ANSWER_MS);
      s.on('data', (c: string) => {
        text += c;
        if (text.includes('event: open') && !published) {
          published = true;
          void publish(pub, 't/traced', 'y', { qos: 1 });
        }
        if (/"topic":"t\/traced".*"ack":"puback"/.test(text)) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    s.write(get('/trace?filter=t%2Ftraced', auth));
    await acked;
    s.destroy();
    const record = JSON.parse((/data: (\{"seq".*"ack":"puback".*\})/.exec(text) as RegExpExecArray)[1] as string);
    assert.equal(record.client, 'bound-pub');
    assert.equal(record.delivered, 1);
    assert.ok(record.index > 0 && record.appliedAt >= record.readAt);
    assert.ok((await metric(hp, 'raftmq_trace_evaluations_total')) > before);
    await withTimeout(Promise.all([disconnect(sub), disconnect(pub)]), 5_000, 'disconnect');
  });

  it('still answers /health after all of the above', async () => {
    assert.equal((await httpGet(hp, '/health')).code, 200);
  });
});

describe('status page on a non-loopback bind without --status-token', () => {
  it('answers / with 403 naming the flag, and keeps /health and /live open', async () => {
    // The bind decision is made from --health-host; here the server is told it is not loopback
    // (tests bind 127.0.0.1 only).
    const node = await startNode({ logger: pino({ level: 'silent' }) });
    const server = new HealthServer(
      healthSource(node, () => singleNodeStatus(node)),
      { token: '', openWithoutToken: false },
    );
    try {
      const port = await server.listen('127.0.0.1', 0);
      for (const path of ['/', '/status.json', '/trace?filter=a']) {
        const r = await httpGet(port, path);
        assert.equal(r.code, 403, path);
        assert.match(r.text, /--status-token/);
      }
      assert.equal((await httpGet(port, '/health')).code, 200);
      assert.equal((await httpGet(port, '/live')).code, 200);
    } finally {
      await server.close();
      await node.stop();
    }
  });
});
