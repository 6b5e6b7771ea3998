import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { KeepAliveWheel, type WheelMember } from './keepalive-wheel.js';

// The wheel replaces a timer per connection: a deadline may fire up to one slot late, never early,
// and exactly once per schedule, however deadlines, cancellations and clock jumps interleave.

class Member implements WheelMember {
  wheelAt = 0;
  wheelSlot = -1;
  wheelIndex = 0;
  readonly fired: number[] = [];
  constructor(readonly onDue?: (m: Member, now: number) => void) {}
  wheelDue(now: number): void {
    this.fired.push(now);
    this.onDue?.(this, now);
  }
}

const manual = (slotMs = 100, slotCount = 8) => new KeepAliveWheel({ slotMs, slotCount, clock: () => 0, autoTick: false });

describe('KeepAliveWheel', { timeout: 30_000 }, () => {
  it('fires a deadline in the first tick at or after it, not before', () => {
    const wheel = manual();
    const m = new Member();
    wheel.schedule(m, 250);
    wheel.advance(249);
    assert.deepEqual(m.fired, []);
    wheel.advance(299);
    assert.deepEqual(m.fired, []);
    wheel.advance(300);
    assert.deepEqual(m.fired, [300]);
    assert.equal(wheel.size, 0);
    assert.equal(m.wheelSlot, -1);
  });

  it('keeps a deadline beyond one lap for the lap in which it falls due', () => {
    const wheel = manual(100, 4);
    const m = new Member();
    wheel.schedule(m, 1_050);
    for (let now = 0; now < 1_100; now += 100) wheel.advance(now);
    assert.deepEqual(m.fired, []);
    wheel.advance(1_100);
    assert.deepEqual(m.fired, [1_100]);
  });

  it('cancels, reschedules and lets a member reschedule itself from its callback', () => {
    const wheel = manual();
    const gone = new Member();
    const moved = new Member();
    const again = new Member((m, now) => {
      if (m.fired.length === 1) wheel.schedule(m, now + 150);
    });
    wheel.schedule(gone, 100);
    wheel.schedule(moved, 100);
    wheel.schedule(again, 100);
    wheel.cancel(gone);
    wheel.schedule(moved, 400);
    wheel.advance(100);
    assert.deepEqual([gone.fired, moved.fired, again.fired], [[], [], [100]]);
    wheel.advance(300);
    assert.deepEqual(again.fired, [100, 300]);
    wheel.advance(400);
    assert.deepEqual(moved.fired, [400]);
    assert.equal(wheel.size, 0);
  });

  it('fires every due deadline once after the clock jumps past many laps', () => {
    const wheel = manual(100, 4);
    const members = Array.from({ length: 10 }, () => new Member());
    for (const [i, m] of members.entries()) wheel.schedule(m, 100 * i);
    wheel.advance(50_000);
    assert.deepEqual(
      members.map((m) => m.fired),
      members.map(() => [50_000]),
    );
  });

  it('fires each scheduled deadline exactly once, never early and at most one slot late', () => {
    const op = fc.oneof(
      fc.record({ k: fc.constant('schedule' as const), who: fc.nat(5), delay: fc.nat(3_000) }),
      fc.record({ k: fc.constant('cancel' as const), who: fc.nat(5) }),
      fc.record({ k: fc.constant('advance' as const), by: fc.nat(700) }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        const slotMs = 100;
        const wheel = manual(slotMs, 8);
        const members = Array.from({ length: 6 }, () => new Member());
        const pending = new Map<Member, number>();
        // The first tick that may fire each: the deadline's, or the wheel's next unprocessed one
        // when the deadline's tick was processed before the schedule.
        const firstTick = new Map<Member, number>();
        let nextTick = 0;
        let now = 0;
        const check = (): void => {
          for (const m of members) {
            const at = pending.get(m);
            if (m.fired.length > 0) {
              assert.ok(at !== undefined, 'fired without a deadline');
              assert.equal(m.fired.length, 1, 'fired once');
              assert.ok(m.fired[0]! >= at, 'never early');
              pending.delete(m);
              m.fired.length = 0;
            } else if (at !== undefined) {
              assert.ok(now < (firstTick.get(m) as number) * slotMs, 'fired in the first tick at or after the deadline');
            }
          }
        };
        const step = (t: number): void => {
          now = t;
          wheel.advance(t);
          nextTick = Math.max(nextTick, Math.floor(t / slotMs) + 1);
          check();
        };
        for (const o of ops) {
          if (o.k === 'schedule') {
            wheel.schedule(members[o.who]!, now + o.delay);
            pending.set(members[o.who]!, Math.ceil(now + o.delay));
            firstTick.set(members[o.who]!, Math.max(Math.ceil(Math.ceil(now + o.delay) / slotMs), nextTick));
          } else if (o.k === 'cancel') {
            wheel.cancel(members[o.who]!);
            pending.delete(members[o.who]!);
          } else {
            const target = now + o.by;
            for (let t = now + slotMs; t < target; t += slotMs) step(t);
            step(target);
          }
          assert.equal(wheel.size, pending.size);
        }
      }),
      { numRuns: 500 },
    );
  });
});
