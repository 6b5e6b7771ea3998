// A reconnect storm against a broker process with small limits: a few thousand bounded connects
// on loopback from several source addresses. Every connect beyond a limit is refused with its
// reason (CONNACK 0x97 or 0x9F, or a close at accept for the pending bound) and the broker's
// counters agree with what the clients saw; the stats lines show the bounded tables and the
// connection counts never above their bounds. RSS before and after is reported, not asserted.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import { encode } from '../src/protocol/encoder.js';
import { BrokerProcess, type LogLine } from './broker-process.js';
import { connectPacket } from './helpers.js';

const MAX_CONNECTIONS = 200;
const MAX_PENDING = 50;
const CONNECT_RATE = 20;
const HELD = 300;
const STORM = 3_000;
const CONCURRENCY = 100;
const ADDRESSES = 20;
const PER_CONNECT_MS = 5_000;

type Outcome = { kind: 'connack'; code: number; socket: Socket } | { kind: 'closed' };

/** One v5 CONNECT from `localAddress`; resolves with the CONNACK code or a close, bounded in time. */
function attempt(port: number, localAddress: string, clientId: string): Promise<Outcome> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress });
    let buf = Buffer.alloc(0);
    let settled = false;
    const done = (o: Outcome): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (o.kind === 'closed') socket.destroy();
      resolve(o);
    };
    const timer = setTimeout(() => done({ kind: 'closed' }), PER_CONNECT_MS);
    socket.on('connect', () => socket.write(encode(connectPacket({ level: 5, clientId }), 5)));
    socket.on('data', (chunk: Buffer) => {
      buf = Buffer.concat([buf, chunk]);
      // CONNACK: 0x20, remaining length, flags, reason code (MQTT 5 §3.2).
      if (buf.length >= 4 && buf[0] === 0x20) done({ kind: 'connack', code: buf[3] as number, socket });
    });
    socket.on('error', () => done({ kind: 'closed' }));
    socket.on('close', () => done({ kind: 'closed' }));
  });
}

async function runBatches(total: number, run: (i: number) => Promise<void>): Promise<void> {
  for (let start = 0; start < total; start += CONCURRENCY) {
    const batch: Promise<void>[] = [];
    for (let i = start; i < Math.min(total, start + CONCURRENCY); i++) batch.push(run(i));
    await Promise.all(batch);
  }
}

function rssKiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m === null ? -1 : Number(m[1]);
}

const statsLines = (b: BrokerProcess): LogLine[] => b.logs.filter((l) => l.msg === 'stats');

describe('reconnect storm', { timeout: 120_000 }, () => {
  it('refuses every connect beyond a limit with its reason, counts it, and keeps every table bounded', async (t) => {
    const broker = await BrokerProcess.start([
      '--log-level',
      'info',
      '--max-connections',
      String(MAX_CONNECTIONS),
      '--max-pending-connections',
      String(MAX_PENDING),
      '--max-connect-rate',
      String(CONNECT_RATE),
      '--stats-interval-ms',
      '100',
    ]);
    const pid = broker.proc.pid as number;
    try {
      const rssBefore = rssKiB(pid);
      const seen = { success: 0, quota: 0, rate: 0, closed: 0, other: 0 };
      const held: Socket[] = [];
      const address = (i: number) => `127.0.0.${2 + (i % ADDRESSES)}`;
      const record = (o: Outcome): void => {
        if (o.kind === 'closed') seen.closed++;
        else if (o.code === 0x00) {
          seen.success++;
          held.push(o.socket);
          return;
        } else if (o.code === 0x97) seen.quota++;
        else if (o.code === 0x9f) seen.rate++;
        else seen.other++;
        if (o.kind === 'connack') o.socket.destroy();
      };
      // Held connections first (spread over addresses, so the rate bound is not hit), then the storm.
      await runBatches(HELD, async (i) => record(await attempt(broker.port, address(i), `held-${i}`)));
      await runBatches(STORM, async (i) => record(await attempt(broker.port, address(i), `storm-${i}`)));
      const finishedAt = broker.logs.length;
      await broker.waitForLog((l) => l.msg === 'stats' && broker.logs.indexOf(l) > finishedAt, 10_000);
      const last = statsLines(broker).at(-1) as LogLine;
      const counters = last.counters as Record<string, number>;
      const rssAfter = rssKiB(pid);
      t.diagnostic(`outcomes ${JSON.stringify(seen)}; broker counters ${JSON.stringify(counters)}`);
      t.diagnostic(`broker RSS before ${rssBefore} KiB, after ${rssAfter} KiB (${HELD + STORM} connects)`);

      assert.equal(seen.success, MAX_CONNECTIONS, 'exactly max-connections admitted');
      assert.equal(seen.other, 0, 'no other CONNACK code');
      assert.equal(seen.success + seen.quota + seen.rate + seen.closed, HELD + STORM);
      assert.equal(counters['limit-max-connections'] ?? 0, seen.quota);
      assert.equal(counters['limit-connect-rate'] ?? 0, seen.rate);
      assert.equal(counters['limit-pending-connections'] ?? 0, seen.closed);
      for (const s of statsLines(broker)) {
        assert.ok((s.connected as number) <= MAX_CONNECTIONS, `connected ${String(s.connected)}`);
        assert.ok((s.pending as number) <= MAX_PENDING, `pending ${String(s.pending)}`);
        assert.ok((s.connectRateTable as number) <= (s.connectRateTableMax as number));
      }
      assert.equal(last.connectRateTable, ADDRESSES);

      // The broker survived: once the held connections go, a new client is admitted.
      for (const s of held) s.destroy();
      let after: Outcome = { kind: 'closed' };
      for (let i = 0; i < 50; i++) {
        after = await attempt(broker.port, '127.0.0.1', `after-${i}`);
        if (after.kind === 'connack' && after.code === 0) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(after.kind === 'connack' ? after.code : -1, 0);
      if (after.kind === 'connack') after.socket.destroy();
    } finally {
      await broker.stop();
    }
  });
});
