// Fault schedules are a pure function of the seed: the same seed gives the same windows; windows
// never overlap and each is followed by a quiet gap; they start after the lead-in and leave the
// tail of the workload quiet; a drawn schedule uses only the classes asked for; a fixed plan yields
// exactly its faults (a class listed twice runs twice) or refuses, naming the duration it needs.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { FAULT_CLASSES, type FaultClass, LEAD_IN_MS, makeSchedule, parseClasses, stopsProcesses, type Window } from './schedule.js';

const E = fc.integer({ min: 50, max: 1_000 });
const classes = fc.subarray([...FAULT_CLASSES], { minLength: 1 });

function assertWellFormed(ws: readonly Window[], durationMs: number, e: number): void {
  for (let i = 0; i < ws.length; i++) {
    const w = ws[i]!;
    assert.ok(w.forMs >= 0);
    if (i === 0) assert.equal(w.atMs, LEAD_IN_MS);
    else assert.ok(w.atMs >= ws[i - 1]!.atMs + ws[i - 1]!.forMs + 3 * e, `window ${i} starts after the previous one and its gap`);
    assert.ok(w.atMs + w.forMs + 3 * e <= durationMs - 4 * e, `window ${i} and its gap end before the quiet tail`);
  }
}

describe('jepsen fault schedules', { timeout: 30_000 }, () => {
  it('draw from the classes asked for, the same windows for the same seed, apart and inside the run', () => {
    fc.assert(
      fc.property(fc.nat(), fc.integer({ min: 10, max: 600 }), classes, E, (seed, durationS, cs, e) => {
        const o = { seed, durationMs: durationS * 1000, classes: cs, electionTimeoutMs: e };
        const ws = makeSchedule(o);
        assert.deepEqual(ws, makeSchedule(o));
        for (const w of ws) assert.ok(cs.includes(w.fault.kind));
        assertWellFormed(ws, o.durationMs, e);
      }),
      { numRuns: 300 },
    );
  });

  it('run a plan exactly, each listed fault as often as listed, or refuse with the duration it needs', () => {
    const plan = fc.array(fc.constantFrom(...FAULT_CLASSES), { minLength: 1, maxLength: 12 });
    fc.assert(
      fc.property(fc.nat(), fc.integer({ min: 10, max: 300 }), plan, E, (seed, durationS, p, e) => {
        const o = { seed, durationMs: durationS * 1000, classes: [], electionTimeoutMs: e, plan: p };
        let ws: Window[];
        try {
          ws = makeSchedule(o);
        } catch (err) {
          const need = /needs (\d+) s/.exec((err as Error).message);
          assert.ok(need !== null && Number(need[1]) > durationS, (err as Error).message);
          // The duration it names is enough.
          ws = makeSchedule({ ...o, durationMs: Number(need[1]) * 1000 });
          assertWellFormed(ws, Number(need[1]) * 1000, e);
        }
        assert.deepEqual(ws.map((w) => w.fault.kind).sort(), [...p].sort());
      }),
      { numRuns: 300 },
    );
  });

  it('treat kill, restart and restart-all as the faults that stop processes, and nothing else', () => {
    const stopping: FaultClass[] = FAULT_CLASSES.filter(stopsProcesses);
    assert.deepEqual(stopping, ['kill', 'restart', 'restart-all']);
  });

  it('parse a fault list once per class and refuse an unknown class by name', () => {
    assert.deepEqual(parseClasses('kill, restart,kill,,restart-all'), ['kill', 'restart', 'restart-all']);
    assert.throws(() => parseClasses('kill,reboot'), /unknown fault "reboot"/);
  });
});
