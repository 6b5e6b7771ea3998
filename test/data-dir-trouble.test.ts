// A single node with --data-dir in disk trouble, as real processes with MQTT.js clients: low free
// space refuses new QoS 1/2 messages and new persistent sessions with the MQTT 5 and 3.1.1 answers,
// shows in /health, /metrics and the log, and ends when space returns; a failed write stops the node
// with exit 74 naming the segment, and the next start loses nothing acknowledged. And a clean stop
// writes a snapshot, so the next start replays little.
//
// Low space is reached through RAFTMQ_TEST_FREE_BYTES_FILE, the free-space probe for tests (a tiny
// file system would need root to mount). The write error is real: the node runs under
// `ulimit -f` (RLIMIT_FSIZE), so the kernel refuses a segment write past the limit with EFBIG;
// Node ignores SIGXFSZ, so the write fails instead of killing the process.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { RC } from '../src/protocol/reason-codes.js';
import { TEST_FREE_BYTES_ENV } from '../src/server/disk-space.js';
import { BrokerProcess, CLI } from './broker-process.js';
import { connectClient, disconnect, refusedConnect, rejection, subscribe, type TestClient, withTimeout } from './helpers.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'raftmq-trouble-'));
  dirs.push(d);
  return d;
}

const MiB = 1024 * 1024;

async function getJson(port: number, path: string): Promise<Record<string, unknown>> {
  const r = await fetch(`http://127.0.0.1:${port}${path}`);
  return (await r.json()) as Record<string, unknown>;
}

async function metric(port: number, series: string): Promise<number | null> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? null : Number(line.slice(series.length + 1));
}

describe('single node with --data-dir in disk trouble', { timeout: 120_000 }, () => {
  it('below its free-space bound refuses new QoS 1/2 messages and persistent sessions with 0x97 (3.1.1: close, CONNACK 3), says so, and resumes when space returns', async () => {
    const root = tempDir();
    const freeFile = join(root, 'free');
    writeFileSync(freeFile, String(1024 * MiB));
    process.env[TEST_FREE_BYTES_ENV] = freeFile;
    let b: BrokerProcess;
    try {
      b = await BrokerProcess.start(['--data-dir', join(root, 'data'), '--health-port', '0']);
    } finally {
      delete process.env[TEST_FREE_BYTES_ENV];
    }
    const health = (await b.waitForLog((l) => l.msg === 'health listening')).port as number;
    try {
      const keeper = await connectClient(b.port, {
        protocolVersion: 5,
        clientId: 'keeper',
        clean: false,
        properties: { sessionExpiryInterval: 3600 },
      });
      await subscribe(keeper, 'k/#', 1);
      await disconnect(keeper);
      const p5 = await connectClient(b.port, { protocolVersion: 5, clientId: 'p5' });
      const p4 = await connectClient(b.port, { protocolVersion: 4, clientId: 'p4' });
      await p5.client.publishAsync('k/1', 'before', { qos: 1 });

      writeFileSync(freeFile, String(MiB)); // below the 64 MiB floor
      await b.waitForLog((l) => l.level === 40 && l.msg.startsWith('data directory low on space'));

      assert.equal(await rejection(p5.client.publishAsync('k/2', 'q1', { qos: 1 })), RC.QUOTA_EXCEEDED, 'v5 PUBACK 0x97');
      assert.equal(await rejection(p5.client.publishAsync('k/2', 'q2', { qos: 2 })), RC.QUOTA_EXCEEDED, 'v5 PUBREC 0x97');
      await p5.client.publishAsync('k/2', 'q0', { qos: 0 });
      assert.equal(
        await refusedConnect(b.port, { protocolVersion: 5, clientId: 'new5', properties: { sessionExpiryInterval: 60 } }),
        RC.QUOTA_EXCEEDED,
        'a new v5 persistent session: CONNACK 0x97',
      );
      assert.equal(
        await refusedConnect(b.port, { protocolVersion: 4, clientId: 'new4', clean: false }),
        3,
        'a new 3.1.1 persistent session: CONNACK 3',
      );
      const back = await connectClient(b.port, {
        protocolVersion: 5,
        clientId: 'keeper',
        clean: false,
        properties: { sessionExpiryInterval: 3600 },
      });
      assert.equal(back.connack.sessionPresent, true, 'an existing persistent session resumes, so its queue can drain');
      await back.waitFor((m) => m.payload === 'before', 'the queued message');
      await disconnect(back);
      const clean = await connectClient(b.port, { protocolVersion: 5, clientId: 'clean5' });
      await disconnect(clean);
      // 3.1.1 has no refusing PUBACK: the connection closes and the client keeps the message.
      p4.client.publish('k/3', 'q1-311', { qos: 1 });
      await withTimeout(p4.closed, 5_000, 'the 3.1.1 publisher closed');

      const h = (await getJson(health, '/health')).dataDir as Record<string, unknown>;
      assert.equal(h.path, join(root, 'data'));
      assert.equal(h.lowSpace, true);
      assert.equal(h.freeBytes, MiB);
      assert.equal(h.minFreeBytes, 64 * MiB);
      assert.equal(typeof h.walBytes, 'number');
      assert.equal(await metric(health, 'raftmq_data_dir_low_space'), 1);
      assert.equal(await metric(health, 'raftmq_data_dir_free_bytes'), MiB);
      assert.ok(((await metric(health, 'raftmq_limit_refused_total{limit="storage_low"}')) ?? 0) >= 4, 'refusals counted');

      writeFileSync(freeFile, String(1024 * MiB));
      await b.waitForLog((l) => l.level === 30 && l.msg.startsWith('data directory space returned'));
      await withTimeout(p5.client.publishAsync('k/4', 'after', { qos: 1 }), 5_000, 'PUBACK after space returned');
      assert.equal(((await getJson(health, '/health')).dataDir as Record<string, unknown>).lowSpace, false);
      assert.equal(await metric(health, 'raftmq_data_dir_low_space'), 0);
      assert.equal(b.logs.filter((l) => l.msg.startsWith('data directory low on space')).length, 1, 'warned once');
      await disconnect(p5);
    } finally {
      assert.equal(await b.stop(), 0);
    }
  });

  it('stops with exit 74 naming the segment when a write fails (EFBIG under ulimit -f), and the next start loses nothing acknowledged', async () => {
    const root = tempDir();
    const data = join(root, 'data');
    // First a persistent subscriber, on a node without the limit.
    const first = await BrokerProcess.start(['--data-dir', data]);
    const sub: TestClient = await connectClient(first.port, {
      protocolVersion: 5,
      clientId: 'sub',
      clean: false,
      properties: { sessionExpiryInterval: 3600 },
    });
    await subscribe(sub, 'w/#', 1);
    await disconnect(sub);
    assert.equal(await first.stop(), 0);

    // dash counts ulimit -f in 512-byte blocks: 256 KiB per file.
    const proc = spawn(
      'sh',
      ['-c', 'ulimit -f 512 && exec "$0" "$@"', process.execPath, CLI, '--host', '127.0.0.1', '--port', '0', '--data-dir', data],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    let out = '';
    let stderr = '';
    proc.stdout.setEncoding('utf8').on('data', (c: string) => {
      out += c;
    });
    proc.stderr.setEncoding('utf8').on('data', (c: string) => {
      stderr += c;
    });
    const exited = once(proc, 'exit') as Promise<[number | null]>;
    const deadline = Date.now() + 15_000;
    let port = 0;
    while (port === 0 && Date.now() < deadline && proc.exitCode === null) {
      const m = /"msg":"listening"[^\n]*"port":(\d+)|"port":(\d+)[^\n]*"msg":"listening"/.exec(out);
      if (m !== null) port = Number(m[1] ?? m[2]);
      else await new Promise((r) => setTimeout(r, 20));
    }
    assert.ok(port > 0, `listening; stderr: ${stderr}`);
    const pub = await connectClient(port, { protocolVersion: 5, clientId: 'pub' });
    const acked: string[] = [];
    const payload = 'x'.repeat(4096);
    for (let i = 0; i < 200 && proc.exitCode === null; i++) {
      const body = `${i}:${payload}`;
      const ok = await withTimeout(
        pub.client.publishAsync('w/1', body, { qos: 1 }).then(
          () => true,
          () => false,
        ),
        5_000,
        'PUBACK or close',
      ).catch(() => false);
      if (!ok) break;
      acked.push(body);
    }
    pub.client.end(true);
    const [code] = await withTimeout(exited, 10_000, 'the node exits');
    assert.equal(code, 74, `exit 74; stderr: ${stderr}`);
    assert.match(stderr, /write of wal-\d{20}\.seg failed: EFBIG/);
    assert.ok(acked.length > 10 && acked.length < 200, `${acked.length} acknowledged before the failure`);

    const again = await BrokerProcess.start(['--data-dir', data]);
    try {
      const back = await connectClient(again.port, {
        protocolVersion: 5,
        clientId: 'sub',
        clean: false,
        properties: { sessionExpiryInterval: 3600 },
      });
      assert.equal(back.connack.sessionPresent, true);
      for (const body of acked) await back.waitFor((m) => m.payload === body, `acknowledged message ${body.slice(0, 4)}`, 10_000);
      await disconnect(back);
    } finally {
      assert.equal(await again.stop(), 0);
    }
  });

  it('writes a snapshot at a clean stop, and the next start restores it and says so on its start line', async () => {
    const root = tempDir();
    const data = join(root, 'data');
    const a = await BrokerProcess.start(['--data-dir', data]);
    const sub = await connectClient(a.port, { protocolVersion: 4, clientId: 'sub', clean: false });
    await subscribe(sub, 's/#', 1);
    await disconnect(sub);
    const pub = await connectClient(a.port, { protocolVersion: 5, clientId: 'pub' });
    for (let i = 0; i < 100; i++) await pub.client.publishAsync('s/1', `m${i}`, { qos: 1 });
    await disconnect(pub);
    assert.equal(await a.stop('SIGTERM'), 0);
    assert.ok(
      readdirSync(data).some((n) => n.endsWith('.snap')),
      `a snapshot on disk: ${readdirSync(data).join(' ')}`,
    );

    const b = await BrokerProcess.start(['--data-dir', data]);
    try {
      const started = await b.waitForLog((l) => l.msg === 'started');
      const r = started.recovered as { snapshotIndex: number; replayed: number; ms: number };
      // About 110 entries were written; the snapshot covers all but what was in flight at the stop.
      assert.ok(r.snapshotIndex > 100, `snapshot index ${r.snapshotIndex}`);
      assert.ok(r.replayed < 5, `${r.replayed} entries replayed`);
      assert.equal(typeof r.ms, 'number');
      const back = await connectClient(b.port, { protocolVersion: 4, clientId: 'sub', clean: false });
      assert.equal(back.connack.sessionPresent, true);
      await back.waitFor((m) => m.payload === 'm99', 'the last message', 10_000);
      assert.equal(new Set(back.messages.map((m) => m.payload)).size, 100);
      await disconnect(back);
    } finally {
      assert.equal(await b.stop(), 0);
    }
  });
});
