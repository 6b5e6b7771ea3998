// A single node with --data-dir, as real processes: kill -9 while MQTT.js publishers stream QoS 1
// and QoS 2 to an offline persistent subscriber, then the restart; a torn tail cut at a random
// byte; a flipped byte refused with exit 78 and the directory left as it was; a second process on
// the same directory refused. kill -9 leaves the page cache intact: these tests prove crash
// recovery; power loss is the unit tests' part (src/log/wal/, on the power-cut storage double).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { decodeCommand } from '../src/log/command-codec.js';
import { HEADER_BYTES, scanSegment, WalError } from '../src/log/wal/segment.js';
import { BrokerProcess, CLI } from './broker-process.js';
import { connectClient, disconnect, subscribe, type TestClient, withTimeout } from './helpers.js';

const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'raftmq-data-'));
  dirs.push(d);
  return join(d, 'data');
}

const start = (dir: string, extra: string[] = []): Promise<BrokerProcess> => BrokerProcess.start(['--data-dir', dir, ...extra]);

async function kill9(b: BrokerProcess): Promise<void> {
  assert.equal(await b.stop('SIGKILL'), null, 'killed by the signal');
}

/** Runs the command to its exit (a start that is refused). */
function refusedStart(dir: string): { status: number | null; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, '--host', '127.0.0.1', '--port', '0', '--data-dir', dir], {
    encoding: 'utf8',
    timeout: 20_000,
  });
  return { status: r.status, stderr: r.stderr };
}

const SUBS = [
  { clientId: 'sub-311', protocolVersion: 4 as const, clean: false },
  { clientId: 'sub-v5', protocolVersion: 5 as const, clean: false, properties: { sessionExpiryInterval: 3600 } },
];

async function subscribeOffline(port: number): Promise<void> {
  for (const o of SUBS) {
    const c = await connectClient(port, o);
    await subscribe(c, 'data/#', 2);
    await disconnect(c);
  }
}

/** Publishes QoS 1 and 2 alternately, 16 in flight; once `killAt` are acknowledged, stops reading
 * acks, sends a burst of 32 more and kills the broker with `kill`. */
async function stream(
  port: number,
  killAt: number,
  kill: () => Promise<void>,
  pad = '',
): Promise<{ acked: Set<string>; qos2: Set<string> }> {
  const pub = await connectClient(port, { clientId: 'pub', clean: true });
  const acked = new Set<string>();
  const qos2 = new Set<string>();
  let killed: Promise<void> | null = null;
  let n = 0;
  const inflight = new Set<Promise<void>>();
  const send = (): void => {
    const qos = n % 2 === 0 ? 1 : 2;
    const payload = `q${qos}-${n++}${pad}`;
    if (qos === 2) qos2.add(payload);
    const p: Promise<void> = pub.client.publishAsync(`data/${qos}`, payload, { qos }).then(
      () => {
        acked.add(payload);
      },
      () => undefined,
    );
    const tracked = p.finally(() => inflight.delete(tracked));
    inflight.add(tracked);
  };
  const deadline = Date.now() + 30_000;
  while (killed === null && Date.now() < deadline) {
    while (inflight.size < 16) send();
    await Promise.race(inflight);
    if (acked.size >= killAt) {
      // A burst that the broker writes and acknowledges but whose acks the publisher never reads
      // (its socket paused): entries on disk that no client counts as acknowledged.
      pub.client.stream.pause();
      for (let i = 0; i < 32; i++) send();
      await new Promise((r) => setTimeout(r, 300));
      killed = kill();
    }
  }
  assert.ok(killed !== null, `${acked.size} acknowledged before the deadline`);
  await killed;
  pub.client.end(true);
  return { acked, qos2 };
}

/** Both subscribers reconnect: session present, every acknowledged message, no QoS 2 twice. */
async function checkSubscribers(port: number, acked: Set<string>, qos2: Set<string>): Promise<void> {
  for (const o of SUBS) {
    const c: TestClient = await connectClient(port, o);
    assert.equal(c.connack.sessionPresent, true, `${o.clientId}: session present`);
    const missing = (): string[] => [...acked].filter((p) => !c.messages.some((m) => m.payload === p));
    const deadline = Date.now() + 20_000;
    while (missing().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(missing(), [], `${o.clientId}: every acknowledged message delivered`);
    // Whatever else is queued arrives too, before the duplicate count.
    await new Promise((r) => setTimeout(r, 300));
    const seen = new Map<string, number>();
    for (const m of c.messages) seen.set(m.payload, (seen.get(m.payload) ?? 0) + 1);
    const twice = [...seen].filter(([p, k]) => qos2.has(p) && k > 1);
    assert.deepEqual(twice, [], `${o.clientId}: no QoS 2 message twice`);
    await disconnect(c);
  }
}

const segments = (dir: string): string[] =>
  readdirSync(dir)
    .filter((n) => n.endsWith('.seg'))
    .sort();

/** Every file of the directory but the lock (a refused start takes over a dead process's lock and
 * releases it), as bytes. */
function snapshotOf(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const n of readdirSync(dir).sort()) if (n !== 'lock') out.set(n, readFileSync(join(dir, n)).toString('hex'));
  return out;
}

/** Publish payloads of the entries of segment bytes (several of one entry when it is a `publishes`). */
function payloadsOf(bytes: Uint8Array): { index: number; payload: string }[] {
  const out: { index: number; payload: string }[] = [];
  for (const e of scanSegment(bytes).entries) {
    const cmd = decodeCommand(e.data);
    const pubs = cmd.t === 'publish' ? [cmd] : cmd.t === 'publishes' ? cmd.pubs : [];
    for (const p of pubs) if (p.t === 'publish') out.push({ index: e.index, payload: Buffer.from(p.msg.payload).toString() });
  }
  return out;
}

describe('single node with --data-dir', { timeout: 180_000 }, () => {
  it('after kill -9 mid-stream, every acknowledged QoS 1 and 2 message reaches the offline persistent subscribers, no QoS 2 twice', async () => {
    const dir = tempDir();
    const a = await start(dir);
    await subscribeOffline(a.port);
    const { acked, qos2 } = await stream(a.port, 400, () => kill9(a));
    const b = await start(dir);
    try {
      await checkSubscribers(b.port, acked, qos2);
    } finally {
      await b.stop();
    }
  });

  it('after kill -9 and the last segment cut at a random byte past the last acknowledged entry, starts and loses nothing acknowledged', async () => {
    const dir = tempDir();
    const a = await start(dir);
    await subscribeOffline(a.port);
    const { acked, qos2 } = await stream(a.port, 300, () => kill9(a));
    const last = segments(dir).at(-1) as string;
    const path = join(dir, last);
    const bytes = readFileSync(path);
    const entries = payloadsOf(bytes);
    const lastAcked = Math.max(0, ...entries.filter((e) => acked.has(e.payload)).map((e) => e.index));
    // The shortest prefix that still holds the batch of the last acknowledged entry.
    let lo = HEADER_BYTES;
    let hi = bytes.length;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      if (scanSegment(bytes.subarray(0, mid)).entries.some((e) => e.index >= lastAcked)) hi = mid;
      else lo = mid + 1;
    }
    assert.ok(lo < bytes.length, 'the burst left entries on disk that no client counts as acknowledged');
    const cut = lo + Math.floor(Math.random() * (bytes.length - lo));
    truncateSync(path, cut);
    const torn = scanSegment(readFileSync(path)).tail;
    const b = await start(dir);
    try {
      if (torn !== null) {
        const line = await b.waitForLog((l) => String(l.msg).startsWith('torn tail'));
        assert.equal(line.file, last);
        assert.equal(line.offset, torn.offset);
      }
      await checkSubscribers(b.port, acked, qos2);
    } finally {
      await b.stop();
    }
  });

  it('with snapshots every 64 KiB of log, kill -9 and a restart from the newest snapshot lose nothing acknowledged', async () => {
    const dir = tempDir();
    const small = ['--snapshot-log-bytes', '64KiB'];
    const a = await start(dir, small);
    await subscribeOffline(a.port);
    const { acked, qos2 } = await stream(a.port, 400, () => kill9(a), 'x'.repeat(1000));
    assert.ok(
      a.logs.some((l) => l.msg === 'snapshot written' && (l.removedSegments as number) > 0),
      'snapshots were written and segments removed before the kill',
    );
    const b = await start(dir, small);
    try {
      const recovered = await b.waitForLog((l) => l.msg === 'data directory recovered');
      assert.match(String(recovered.snapshot), /^snap-\d{20}\.snap$/);
      assert.ok(segments(dir)[0] !== 'wal-00000000000000000001.seg', 'the first segment was removed');
      await checkSubscribers(b.port, acked, qos2);
    } finally {
      await b.stop();
    }
  });

  it('refuses a flipped byte in the middle of a segment with exit 78 naming the file, and changes nothing', async () => {
    const dir = tempDir();
    const a = await start(dir);
    await subscribeOffline(a.port);
    await stream(a.port, 200, () => kill9(a));
    const seg = segments(dir).at(-1) as string;
    const path = join(dir, seg);
    const bytes = readFileSync(path);
    const at = Math.floor(bytes.length / 2);
    bytes[at] = (bytes[at] as number) ^ 0x40;
    writeFileSync(path, bytes);
    assert.throws(() => scanSegment(bytes), WalError, 'the byte lies before the last valid commit record');
    const before = snapshotOf(dir);
    const r = refusedStart(dir);
    assert.equal(r.status, 78, r.stderr);
    assert.match(r.stderr, new RegExp(seg.replace('.', '\\.')));
    assert.deepEqual(snapshotOf(dir), before, 'the directory is as it was');
  });

  it('refuses a second process on the same directory with exit 78', async () => {
    const dir = tempDir();
    const a = await start(dir);
    try {
      const r = refusedStart(dir);
      assert.equal(r.status, 78, r.stderr);
      assert.match(r.stderr, /held by live process/);
      const c = await withTimeout(connectClient(a.port), 5_000, 'the first process still serves');
      await disconnect(c);
    } finally {
      await a.stop();
    }
  });
});
