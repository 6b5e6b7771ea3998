import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { Harness, msg } from '../broker/broker-harness.testkit.js';
import type { Command } from '../broker/commands.js';
import { DIGESTS_KEPT, DigestRunner, type Verdict } from './digest-runner.js';

// A digest run hashes a snapshot cursor a slice per turn while apply goes on; its digest must be
// the one Broker.digest() computes in one go at the run's index, or replicas would disagree.

/** Scheduler and clock stepped by hand: each step() runs one pending slice, and each clock read
 * advances 1 ms, so a slice of sliceMs takes about sliceMs chunks. */
class Manual {
  pending: (() => void)[] = [];
  ms = 0;
  readonly clock = (): number => this.ms++;
  readonly schedule = (step: () => void): void => {
    this.pending.push(step);
  };
  step(): boolean {
    const next = this.pending.shift();
    if (next === undefined) return false;
    next();
    return true;
  }
}

interface Seen {
  verdicts: [number, Verdict][];
  runs: number;
}

function runner(m: Manual, sliceMs = 2): { r: DigestRunner; seen: Seen } {
  const seen: Seen = { verdicts: [], runs: 0 };
  const r = new DigestRunner({
    sliceMs,
    clock: m.clock,
    schedule: m.schedule,
    onRun: () => {
      seen.runs++;
    },
    onVerdict: (atIndex, verdict) => {
      seen.verdicts.push([atIndex, verdict]);
    },
  });
  return { r, seen };
}

const CLIENTS = ['a', 'b', 'c'];

/** Commands that mutate sessions in place (queues, inflight windows, subscriptions), so the
 * cursor's copy-on-write is exercised between slices. */
const op = (): fc.Arbitrary<(h: Harness) => Command> =>
  fc.oneof(
    fc.tuple(fc.nat({ max: 2 }), fc.boolean()).map(
      ([c, clean]) =>
        (h: Harness): Command => ({
          t: 'connect',
          conn: h.conn(c + 1),
          clientId: CLIENTS[c] as string,
          protocol: 5,
          clean,
          expiryS: 3600,
          will: null,
          username: null,
          receiveMax: 65535,
          maxPacketSize: 0,
          problemInfo: true,
        }),
    ),
    fc.tuple(fc.nat({ max: 2 }), fc.constantFrom('t/1', 't/+', '#'), fc.constantFrom(0 as const, 1 as const, 2 as const)).map(
      ([c, filter, qos]) =>
        (h: Harness): Command => ({ t: 'subscribe', conn: h.conn(c + 1), pid: 1, subs: [{ filter, qos, nl: false, rap: false, rh: 0 }] }),
    ),
    fc.tuple(fc.nat({ max: 2 }), fc.constantFrom(1 as const, 2 as const), fc.integer({ min: 1, max: 9 }), fc.string({ maxLength: 20 })).map(
      ([c, qos, pid, payload]) =>
        (h: Harness): Command => ({ t: 'publish', conn: h.conn(c + 1), pid, msg: msg('t/1', payload, qos) }),
    ),
    fc
      .tuple(fc.nat({ max: 2 }), fc.integer({ min: 1, max: 9 }), fc.constantFrom('puback' as const, 'pubrec' as const, 'pubcomp' as const))
      .map(
        ([c, pid, kind]) =>
          (h: Harness): Command => ({ t: 'ack', conn: h.conn(c + 1), pid, kind }),
      ),
    fc.nat({ max: 2 }).map(
      (c) =>
        (h: Harness): Command => ({ t: 'disconnect', conn: h.conn(c + 1), reason: 0, publishWill: false }),
    ),
    fc.constant((): Command => ({ t: 'tick' })),
  );

describe('digest runner', { timeout: 60_000 }, () => {
  it('gives the digest of the state at its index while entries are applied between slices', () => {
    fc.assert(
      fc.property(
        fc.array(op(), { minLength: 1, maxLength: 60 }),
        fc.array(op(), { minLength: 1, maxLength: 60 }),
        fc.array(fc.nat({ max: 3 }), { minLength: 1, maxLength: 20 }),
        fc.integer({ min: 1, max: 64 }),
        fc.integer({ min: 1, max: 4 }),
        fc.boolean(),
        (before, after, slicesPerEntry, chunkBytes, sliceMs, reuseChunk) => {
          const h = new Harness();
          for (const f of before) h.apply(f(h), 100);
          const index = h.index;
          const atOpen = h.broker.digest();
          const m = new Manual();
          const { r } = runner(m, sliceMs);
          // Tiny chunks and sort steps, so the run straddles many applies.
          r.open(index, h.broker.snapshotCursor({ chunkBytes, sortMovesPerPull: 1, reuseChunk }));
          for (const [i, f] of after.entries()) {
            for (let s = slicesPerEntry[i % slicesPerEntry.length] as number; s > 0; s--) m.step();
            h.apply(f(h), 100);
          }
          let turns = 0;
          while (m.step()) assert.ok(++turns < 100_000, 'the run ends');
          assert.equal(r.running, null);
          assert.deepEqual(r.latest(), { index, digest: atOpen });
          assert.equal(h.broker.cursorOpen, false, 'the cursor closed itself at its end');
        },
      ),
      { numRuns: 300 },
    );
  });

  it('compares at once, when the awaited run ends, or not at all for an index it never hashed', () => {
    const h = new Harness();
    h.connect(h.conn(1), 'a');
    const m = new Manual();
    const { r, seen } = runner(m);
    const at = h.index;
    const good = h.broker.digest();
    r.open(at, h.broker.snapshotCursor({ chunkBytes: 8, sortMovesPerPull: 1 }));
    r.expect(at, good);
    r.expect(at, 'f'.repeat(64));
    r.expect(at - 1, good);
    assert.deepEqual(seen.verdicts, [[at - 1, 'unknown']], 'the comparisons for the open run wait');
    while (m.step());
    assert.deepEqual(seen.verdicts.slice(1), [
      [at, 'match'],
      [at, 'mismatch'],
    ]);
    r.expect(at, good);
    assert.deepEqual(seen.verdicts.at(-1), [at, 'match'], 'a finished digest compares at once');
  });

  it('ends the comparisons waiting for a cancelled run as unknown and releases its cursor', () => {
    const h = new Harness();
    const m = new Manual();
    const { r, seen } = runner(m);
    r.open(h.index, h.broker.snapshotCursor({ chunkBytes: 1, sortMovesPerPull: 1 }));
    m.step();
    r.expect(h.index, 'x');
    r.cancel();
    assert.equal(h.broker.cursorOpen, false);
    assert.deepEqual(seen.verdicts, [[h.index, 'unknown']]);
    while (m.step());
    assert.equal(r.latest(), null, 'the stale slice did nothing');
    assert.equal(seen.runs, 0);
  });

  it('has no digest when a newer cursor cancels its own, instead of hashing a truncated state', () => {
    const h = new Harness();
    const m = new Manual();
    const { r, seen } = runner(m);
    r.open(h.index, h.broker.snapshotCursor({ chunkBytes: 1, sortMovesPerPull: 1 }));
    r.expect(h.index, 'x');
    h.broker.snapshotCursor();
    while (m.step());
    assert.equal(r.latest(), null);
    assert.equal(r.running, null);
    assert.deepEqual(seen.verdicts, [[h.index, 'unknown']]);
  });

  it('keeps the newest digests only, and forgets them all on reset', () => {
    const h = new Harness();
    const m = new Manual();
    const { r } = runner(m);
    const first = h.index + 1;
    for (let i = 0; i < DIGESTS_KEPT + 3; i++) {
      h.apply({ t: 'tick' }, 1);
      r.open(h.index, h.broker.snapshot());
      while (m.step());
    }
    assert.equal(r.digestAt(first), undefined);
    assert.equal(r.digestAt(h.index), h.broker.digest());
    assert.equal(r.digestAt(h.index - DIGESTS_KEPT + 1) === undefined, false);
    assert.equal(r.latest()?.index, h.index);
    r.reset();
    assert.equal(r.latest(), null);
  });

  it('refuses a second run while one is open', () => {
    const h = new Harness();
    const m = new Manual();
    const { r } = runner(m);
    r.open(h.index, h.broker.snapshotCursor({ chunkBytes: 1, sortMovesPerPull: 1 }));
    assert.throws(() => r.open(h.index, []), /still open/);
  });
});
