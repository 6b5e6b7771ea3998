// The durable LocalLog on the power-cut double: group commit, nothing committed before its fsync,
// snapshots and segment removal, and recovery after a cut keeping every entry ever committed.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { until } from '../../../test/support/wait.js';
import type { Command, Entry } from '../../broker/commands.js';
import { brokerLogContract, contractSettings } from '../broker-log.contract.js';
import type { LogListener } from '../broker-log.js';
import { LocalLog } from '../local-log.js';
import { MemStorage, seededRandom } from './mem-storage.js';
import { recover } from './recover.js';
import type { Storage } from './storage.js';
import { DataDirError, snapshotName, WalIoError, type WalOptions } from './wal.js';

/** A wait for the log's own turns (polled once per event-loop turn). */
const TURNS_WAIT_MS = 20_000;

const quiet = { info() {}, warn() {}, error() {} };

const publish = (pid: number): Command => ({
  t: 'publish',
  conn: '1.1',
  pid,
  msg: { topic: `t/${pid}`, payload: new Uint8Array(40).fill(pid & 0xff), qos: 1, retain: false },
});

/** A small state machine: the pids of the publishes it applied, in order; its snapshot is JSON. */
class Machine implements LogListener {
  index = 0;
  time = 0;
  pids: number[] = [];
  servingOn = false;
  committed(entries: readonly Entry[]): void {
    for (const e of entries) {
      assert.equal(e.index, this.index + 1, 'entries in order, each once');
      this.index = e.index;
      this.time = e.time;
      if (e.cmd.t === 'publish') this.pids.push(e.cmd.pid as number);
    }
  }
  serving(on: boolean): void {
    this.servingOn = on;
  }
  drain(): void {}
  restore(image: Uint8Array): void {
    const v = JSON.parse(new TextDecoder().decode(image)) as { index: number; time: number; pids: number[] };
    if (!Number.isSafeInteger(v.index) || !Array.isArray(v.pids)) throw new Error('not a machine snapshot');
    Object.assign(this, v);
  }
  appliedTime(): number {
    return this.time;
  }
  snapshot(): Iterator<Uint8Array> & { index: number } {
    const bytes = new TextEncoder().encode(JSON.stringify({ index: this.index, time: this.time, pids: this.pids }));
    let at = 0;
    return {
      index: this.index,
      next: () => {
        if (at >= bytes.length) return { done: true, value: undefined };
        const chunk = bytes.subarray(at, at + 100);
        at += 100;
        return { done: false, value: chunk };
      },
    };
  }
}

function walOptions(storage: Storage, over: Partial<WalOptions> = {}): WalOptions {
  return { storage, logger: quiet, segmentBytes: 2048, snapshotLogBytes: 1 << 30, snapshotSliceMs: 5, ...over };
}

interface Running {
  log: LocalLog;
  machine: Machine;
  fatal: Error[];
}

async function open(storage: Storage, over: Partial<WalOptions> = {}): Promise<Running> {
  const machine = new Machine();
  const fatal: Error[] = [];
  const log = new LocalLog({ node: 1, settings: contractSettings, durable: { onFatal: (e) => fatal.push(e) } });
  log.recovered(await recover(machine, walOptions(storage, over)));
  log.attachSnapshots(() => machine.snapshot());
  log.start(machine);
  await until('serving', () => machine.servingOn || fatal.length > 0, TURNS_WAIT_MS, { intervalMs: 0 });
  if (fatal.length > 0) throw fatal[0];
  return { log, machine, fatal };
}

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

brokerLogContract('LocalLog with a WAL', async () => {
  const storage = new MemStorage();
  const log = new LocalLog({ node: 1, settings: contractSettings, durable: { onFatal: (e) => assert.fail(e) } });
  log.recovered(await recover(new Machine(), walOptions(storage)));
  return { log, dispose: () => log.stop() };
});

describe('LocalLog with a WAL', { timeout: 60_000 }, () => {
  it('commits nothing before its batch is synced, and one turn of proposals is one batch and one sync', async () => {
    const storage = new MemStorage();
    const r = await open(storage);
    await until('serving', () => r.machine.servingOn, TURNS_WAIT_MS, { intervalMs: 0 });
    const syncsBefore = storage.syncs;
    const release = storage.holdSyncs();
    for (let pid = 1; pid <= 20; pid++) r.log.propose(publish(pid));
    await until('the batch waiting for its sync', () => storage.syncsHeld === 1, TURNS_WAIT_MS, { intervalMs: 0 });
    for (let i = 0; i < 20; i++) await turn();
    assert.deepEqual(r.machine.pids, [], 'nothing committed while the sync runs');
    release();
    await until('20 committed', () => r.machine.pids.length === 20, TURNS_WAIT_MS, { intervalMs: 0 });
    assert.equal(storage.syncs, syncsBefore + 1);
    await r.log.stop();
  });

  it('gathers what arrives while a sync runs into the next batch', async () => {
    const storage = new MemStorage();
    const r = await open(storage);
    await until('serving', () => r.machine.servingOn, TURNS_WAIT_MS, { intervalMs: 0 });
    const syncsBefore = storage.syncs;
    const release = storage.holdSyncs();
    r.log.propose(publish(1));
    await until('the first batch waiting for its sync', () => storage.syncsHeld === 1, TURNS_WAIT_MS, { intervalMs: 0 });
    for (let pid = 2; pid <= 6; pid++) {
      r.log.propose(publish(pid));
      await turn();
    }
    release();
    await until('6 committed', () => r.machine.pids.length === 6, TURNS_WAIT_MS, { intervalMs: 0 });
    assert.equal(storage.syncs, syncsBefore + 2, 'one batch, then the five proposed meanwhile');
    await r.log.stop();
  });

  it('starts again with every entry committed before a clean stop, and serves after replaying them', async () => {
    const storage = new MemStorage();
    const a = await open(storage);
    for (let pid = 1; pid <= 50; pid++) {
      a.log.propose(publish(pid));
      if (pid % 7 === 0) await turn();
    }
    await until('50 committed', () => a.machine.pids.length === 50, TURNS_WAIT_MS, { intervalMs: 0 });
    await a.log.stop();
    const b = await open(storage);
    await until('serving again', () => b.machine.servingOn, TURNS_WAIT_MS, { intervalMs: 0 });
    assert.deepEqual(
      b.machine.pids,
      Array.from({ length: 50 }, (_, i) => i + 1),
    );
    assert.equal(b.log.servePeriod, b.machine.index, 'the new serve-start follows the replayed log');
    await b.log.stop();
  });

  it('writes a snapshot at a clean stop, so the next start restores it and replays nothing', async () => {
    const storage = new MemStorage();
    const a = await open(storage);
    for (let pid = 1; pid <= 30; pid++) a.log.propose(publish(pid));
    await until('30 committed', () => a.machine.pids.length === 30, TURNS_WAIT_MS, { intervalMs: 0 });
    const applied = a.machine.index;
    await a.log.stop();
    assert.ok((await storage.list()).includes(snapshotName(applied)), 'a snapshot at the last applied entry');
    const report = await recover(new Machine(), walOptions(storage));
    assert.equal(report.snapshotIndex, applied);
    assert.equal(report.replay.length, 0);
    await report.wal.close();
  });

  it('stops once on a failed fdatasync, naming the segment, commits nothing of the batch and never syncs again', async () => {
    const storage = new MemStorage();
    const r = await open(storage);
    for (let pid = 1; pid <= 5; pid++) r.log.propose(publish(pid));
    await until('5 committed', () => r.machine.pids.length === 5, TURNS_WAIT_MS, { intervalMs: 0 });
    storage.failSyncs(Object.assign(new Error('EIO: i/o error, fdatasync'), { code: 'EIO' }));
    for (let pid = 6; pid <= 10; pid++) r.log.propose(publish(pid));
    await until('the failure reported', () => r.fatal.length > 0, TURNS_WAIT_MS, { intervalMs: 0 });
    for (let pid = 11; pid <= 15; pid++) r.log.propose(publish(pid));
    for (let i = 0; i < 50; i++) await turn();
    assert.equal(r.fatal.length, 1);
    const err = r.fatal[0] as WalIoError;
    assert.ok(err instanceof WalIoError);
    assert.equal(err.op, 'fdatasync');
    assert.match(err.message, /^fdatasync of wal-\d{20}\.seg failed: EIO/);
    assert.deepEqual(r.machine.pids, [1, 2, 3, 4, 5], 'nothing of the failed batch committed');
    assert.equal(storage.failedSyncs, 1, 'the failed fdatasync is never retried, nor any later batch written');
    await r.log.stop();
  });

  it('writes snapshots in the background, removes the segments before them, and recovers from snapshot and log', async () => {
    const storage = new MemStorage();
    const a = await open(storage, { snapshotLogBytes: 4096, segmentBytes: 1024 });
    for (let pid = 1; pid <= 400; pid++) {
      a.log.propose(publish(pid));
      if (pid % 5 === 0) await turn();
    }
    await until('400 committed', () => a.machine.pids.length === 400, TURNS_WAIT_MS, { intervalMs: 0 });
    await until('the last snapshot finished', () => !a.log.snapshotRunning, TURNS_WAIT_MS, { intervalMs: 0 });
    await a.log.stop();
    const names = await storage.list();
    const snaps = names.filter((n) => n.endsWith('.snap'));
    const segs = names.filter((n) => n.endsWith('.seg'));
    assert.equal(snaps.length, 1, `one snapshot kept: ${names.join(' ')}`);
    // 400 entries of about 100 bytes in segments of 1 KiB would be about 40 segments.
    assert.ok(segs.length < 15, `older segments removed: ${segs.length} left`);
    const b = await open(storage);
    await until('serving again', () => b.machine.servingOn, TURNS_WAIT_MS, { intervalMs: 0 });
    assert.deepEqual(
      b.machine.pids,
      Array.from({ length: 400 }, (_, i) => i + 1),
    );
    await b.log.stop();
  });

  it('after a power cut at any moment recovers every committed entry, and only entries that were proposed, in order', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.integer({ min: 1, max: 300 }),
        fc.integer({ min: 1, max: 2 ** 31 }),
        fc.boolean(),
        async (cutAfterTurns, seed, snapshots) => {
          const storage = new MemStorage();
          const over = snapshots ? { snapshotLogBytes: 2048, segmentBytes: 700 } : {};
          const a = await open(storage, over);
          const random = seededRandom(seed);
          let pid = 0;
          for (let t = 0; t < cutAfterTurns; t++) {
            const n = Math.floor(random() * 4);
            for (let i = 0; i < n; i++) a.log.propose(publish(++pid));
            await turn();
          }
          const committed = [...a.machine.pids];
          const after = storage.powerCut(random);
          // The old process dies with the power: its pending I/O fails.
          await a.log.stop().catch(() => undefined);
          const b = await open(after, over);
          await until('serving after the cut', () => b.machine.servingOn, TURNS_WAIT_MS, { intervalMs: 0 });
          const got = b.machine.pids;
          assert.deepEqual(got.slice(0, committed.length), committed, 'every committed entry is back');
          assert.deepEqual(
            got,
            Array.from({ length: got.length }, (_, i) => i + 1),
            'nothing else',
          );
          await b.log.stop();
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('recovery refusals', { timeout: 60_000 }, () => {
  async function filled(over: Partial<WalOptions> = {}, count = 60): Promise<MemStorage> {
    const storage = new MemStorage();
    const a = await open(storage, over);
    for (let pid = 1; pid <= count; pid++) {
      a.log.propose(publish(pid));
      if (pid % 3 === 0) await turn();
    }
    await until('all committed', () => a.machine.pids.length === count, TURNS_WAIT_MS, { intervalMs: 0 });
    await until('no snapshot running', () => !a.log.snapshotRunning, TURNS_WAIT_MS, { intervalMs: 0 });
    // The files as a crash leaves them: a clean stop would add a snapshot at the last entry.
    const files = new Map<string, Uint8Array>();
    for (const n of await storage.list()) files.set(n, storage.bytes(n) as Uint8Array);
    await a.log.stop();
    return new MemStorage(files);
  }

  async function everyFile(s: MemStorage): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    for (const n of await s.list()) out.set(n, Buffer.from(s.bytes(n) ?? []).toString('hex'));
    return out;
  }

  it('refuses a flipped byte in the middle of a segment, naming the file, and changes nothing', async () => {
    const storage = await filled();
    const seg = (await storage.list()).find((n) => n.endsWith('.seg')) as string;
    const size = (storage.bytes(seg) as Uint8Array).length;
    const at = Math.floor(size / 3);
    storage.damage(seg, at, ((storage.bytes(seg) as Uint8Array)[at] as number) ^ 0x10);
    const before = await everyFile(storage);
    await assert.rejects(
      recover(new Machine(), walOptions(storage)),
      (err: unknown) => err instanceof DataDirError && err.code === 'DATA_DIR_CORRUPT' && err.message.includes(seg),
    );
    assert.deepEqual(await everyFile(storage), before);
  });

  it('cuts a torn tail with one log line naming the file and offset', async () => {
    const storage = await filled();
    const seg = (await storage.list()).filter((n) => n.endsWith('.seg')).at(-1) as string;
    const bytes = storage.bytes(seg) as Uint8Array;
    const files = new Map<string, Uint8Array>();
    for (const n of await storage.list()) files.set(n, storage.bytes(n) as Uint8Array);
    files.set(seg, bytes.subarray(0, bytes.length - 5));
    const torn = new MemStorage(files);
    const lines: Record<string, unknown>[] = [];
    const logger = { ...quiet, warn: (f: Record<string, unknown>, msg: string) => lines.push({ ...f, msg }) };
    const r = await recover(new Machine(), walOptions(torn, { logger }));
    const cut = lines.filter((l) => String(l.msg).startsWith('torn tail'));
    assert.equal(cut.length, 1);
    assert.equal(cut[0]?.file, seg);
    assert.equal(typeof cut[0]?.offset, 'number');
    assert.equal((torn.bytes(seg) as Uint8Array).length, cut[0]?.offset);
    await r.wal.close();
  });

  it('falls back to an older snapshot when the newest is corrupt and the log continues from the older', async () => {
    const storage = await filled({ snapshotLogBytes: 1 << 30 }, 30);
    // Two snapshots by hand: an older good one at the current state, a newer one damaged.
    const m = new Machine();
    const r = await recover(m, walOptions(storage));
    await r.wal.writeSnapshot(m.index, m.snapshot());
    const older = (await storage.list()).find((n) => n.endsWith('.snap')) as string;
    const copy = storage.bytes(older) as Uint8Array;
    await r.wal.close();
    const newer = older.replace(/\d{20}/, (d) => String(Number(d) + 1).padStart(20, '0'));
    const withBoth = new Map<string, Uint8Array>();
    for (const n of await storage.list()) withBoth.set(n, storage.bytes(n) as Uint8Array);
    const bad = copy.slice();
    bad[3] = (bad[3] as number) ^ 1;
    withBoth.set(newer, bad);
    const both = new MemStorage(withBoth);
    const m2 = new Machine();
    const r2 = await recover(m2, walOptions(both));
    assert.equal(r2.snapshot, older);
    assert.equal(m2.pids.length + r2.replay.filter((e) => e.cmd.t === 'publish').length, 30);
    await r2.wal.close();
  });

  it('refuses a corrupt snapshot with no older valid one when the log no longer goes back to index 1', async () => {
    const storage = await filled({ snapshotLogBytes: 2048, segmentBytes: 700 }, 200);
    const snap = (await storage.list()).find((n) => n.endsWith('.snap')) as string;
    assert.ok(snap, 'a snapshot was written');
    storage.damage(snap, 5, ((storage.bytes(snap) as Uint8Array)[5] as number) ^ 0xff);
    const before = await everyFile(storage);
    await assert.rejects(
      recover(new Machine(), walOptions(storage)),
      (err: unknown) => err instanceof DataDirError && err.message.includes(snap),
    );
    assert.deepEqual(await everyFile(storage), before);
  });
});
