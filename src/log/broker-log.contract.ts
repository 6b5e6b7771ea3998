// The contract every BrokerLog keeps (docs/design.md "The seam"), as one suite run against each
// implementation: LocalLog here, RaftLog in the cluster work.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { testSettings } from '../broker/broker-harness.testkit.js';
import type { Command, Entry, Settings } from '../broker/commands.js';
import type { BrokerLog, LogListener } from './broker-log.js';

/** The tests' settings with a queue bound of its own. */
export const contractSettings: Settings = { ...testSettings, maxQueuedMessages: 10 };

/** A harness makes a started-able log and disposes of it. */
export interface LogHarness {
  log: BrokerLog;
  dispose(): Promise<void>;
}

class Recorder implements LogListener {
  readonly batches: Entry[][] = [];
  readonly servingCalls: [boolean, number][] = [];
  drains = 0;
  private waiters: (() => void)[] = [];
  committed(entries: readonly Entry[]): void {
    this.batches.push([...entries]);
    this.wake();
  }
  serving(on: boolean, period: number): void {
    this.servingCalls.push([on, period]);
    this.wake();
  }
  drain(): void {
    this.drains++;
    this.wake();
  }
  get entries(): Entry[] {
    return this.batches.flat();
  }
  async until(cond: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!cond()) {
      if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }
  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }
}

async function startServing(log: BrokerLog): Promise<Recorder> {
  const rec = new Recorder();
  log.start(rec);
  await rec.until(() => log.serving, 'serving');
  return rec;
}

const publish = (n: number): Command => ({
  t: 'publish',
  conn: '1.1',
  pid: n,
  msg: { topic: `t/${n}`, payload: new Uint8Array([n & 0xff, 0, 255]), qos: 1, retain: false },
});

export function brokerLogContract(name: string, make: () => Promise<LogHarness>): void {
  describe(`BrokerLog contract: ${name}`, { timeout: 60_000 }, () => {
    it('commits serve-start first and then reports serving with its index as the period', async () => {
      const h = await make();
      try {
        const rec = await startServing(h.log);
        const first = rec.entries.find((e) => e.cmd.t === 'serve-start');
        assert.ok(first, 'a serve-start entry was committed');
        assert.deepEqual(rec.servingCalls.at(-1), [true, first.index]);
        assert.equal(h.log.servePeriod, first.index);
        const settings = (first.cmd as Extract<Command, { t: 'serve-start' }>).settings;
        assert.deepEqual(settings, contractSettings);
      } finally {
        await h.dispose();
      }
    });

    it('never calls committed inside propose, and commits one turn of proposals in order', async () => {
      const h = await make();
      try {
        const rec = await startServing(h.log);
        const before = rec.entries.length;
        for (let i = 1; i <= 50; i++) h.log.propose(publish(i));
        assert.equal(rec.entries.length, before, 'nothing committed synchronously');
        await rec.until(() => rec.entries.length >= before + 50, '50 entries');
        const mine = rec.entries.slice(before);
        assert.deepEqual(
          mine.map((e) => (e.cmd as { pid: number }).pid),
          Array.from({ length: 50 }, (_, i) => i + 1),
        );
      } finally {
        await h.dispose();
      }
    });

    it('numbers entries consecutively and stamps non-decreasing integer times', async () => {
      const h = await make();
      try {
        const rec = await startServing(h.log);
        for (let round = 0; round < 5; round++) {
          h.log.propose({ t: 'tick' });
          await new Promise((r) => setTimeout(r, 5));
        }
        await rec.until(() => rec.entries.filter((e) => e.cmd.t === 'tick').length === 5, '5 ticks');
        const all = rec.entries;
        for (let i = 1; i < all.length; i++) {
          assert.equal(all[i]!.index, all[i - 1]!.index + 1);
          assert.ok(all[i]!.time >= all[i - 1]!.time, 'time never decreases');
          assert.ok(Number.isInteger(all[i]!.time));
        }
        assert.ok(h.log.now() >= all.at(-1)!.time, 'now() is not behind the last entry');
      } finally {
        await h.dispose();
      }
    });

    it('applies decoded bytes: binary payloads and nested values round-trip exactly', async () => {
      const h = await make();
      try {
        const rec = await startServing(h.log);
        const cmd: Command = {
          t: 'publish',
          conn: '1.7',
          pid: 65535,
          msg: {
            topic: 'a/ü/€',
            payload: Uint8Array.from([0, 1, 2, 0xfe, 0xff]),
            qos: 2,
            retain: true,
            props: {
              userProps: [
                ['k', 'v'],
                ['k', 'w'],
              ],
              expiryS: 4294967295,
              correlationData: new Uint8Array([9]),
            },
          },
        };
        h.log.propose(cmd);
        await rec.until(() => rec.entries.some((e) => e.cmd.t === 'publish'), 'publish');
        const got = rec.entries.find((e) => e.cmd.t === 'publish')!.cmd as Extract<Command, { t: 'publish' }>;
        assert.notEqual(got, cmd, 'the committed command is a decoded copy');
        assert.equal(got.msg.topic, cmd.msg.topic);
        assert.deepEqual([...got.msg.payload], [...cmd.msg.payload]);
        assert.deepEqual(got.msg.props?.userProps, [
          ['k', 'v'],
          ['k', 'w'],
        ]);
        assert.equal(got.msg.props?.expiryS, 4294967295);
        assert.deepEqual([...(got.msg.props?.correlationData ?? [])], [9]);
      } finally {
        await h.dispose();
      }
    });

    it('makes no listener call after stop()', async () => {
      const h = await make();
      const rec = await startServing(h.log);
      h.log.propose(publish(1));
      await h.log.stop();
      const seen = rec.batches.length + rec.servingCalls.length;
      h.log.propose(publish(2));
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(rec.batches.length + rec.servingCalls.length, seen);
      assert.equal(h.log.serving, false);
      await h.dispose();
    });
  });
}
