// Placement (src/scale/placement.ts): XXH32 against the specification's values, and rendezvous
// hashing's promises as properties: one owner from the list, the same for any order of the list,
// about 1/K of ids each, a new shard takes about 1/(K+1) of the ids and takes them only for itself,
// and a removed shard's ids are the only ones that move.
import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { assignedIdHere, Placement, SHARDS_MAX, shardListProblem, shardWeight } from './placement.js';
import { xxh32 } from './xxh32.js';

/** Ids each statistical property places; with the tolerance below a wrong count is off by far
 * more than five standard deviations, and a correct one never is. */
const SAMPLE = 6_000;
const TOLERANCE = 0.25;
const ids = Array.from({ length: SAMPLE }, (_, i) => (i % 3 === 0 ? `device-${i}` : i % 3 === 1 ? `sensor/${i}/é` : `${i}`));

const arbName = fc.stringMatching(/^[a-z0-9](?:[a-z0-9-]{0,6}[a-z0-9])?$/);
const arbList = (min: number, max: number) => fc.uniqueArray(arbName, { minLength: min, maxLength: max });

describe('xxh32', () => {
  it('gives the values of the xxHash specification and reference implementation (seed 0)', () => {
    const cases: Array<[string, number]> = [
      ['', 0x02cc5d05],
      ['a', 0x550d7456],
      ['abc', 0x32d153ff],
      ['Nobody inspects the spammish repetition', 0xe2293b2f],
    ];
    for (const [text, want] of cases) assert.equal(xxh32(Buffer.from(text)), want, JSON.stringify(text));
  });
});

describe('shard list', () => {
  it('takes 1 to 256 unique names of a-z, 0-9 and inner dashes', () => {
    assert.equal(shardListProblem(['a']), null);
    assert.equal(shardListProblem(['eu-1', 'eu-2', 'x9']), null);
    assert.equal(shardListProblem([`a${'b'.repeat(31)}`]), null);
    assert.match(shardListProblem([]) ?? '', /no shard/);
    assert.match(shardListProblem(['a', '', 'b']) ?? '', /empty/);
    assert.match(shardListProblem(['a', 'b', 'a']) ?? '', /twice/);
    for (const bad of ['A', 'a.b', '-a', 'a-', 'a b', 'a*', 'ä', `a${'b'.repeat(32)}`]) {
      assert.match(shardListProblem([bad]) ?? '', /is not 1 to 32/, bad);
    }
    assert.match(shardListProblem(Array.from({ length: SHARDS_MAX + 1 }, (_, i) => `s${i}`)) ?? '', /at most 256/);
    assert.throws(() => new Placement(['a', 'a']), RangeError);
  });
});

describe('rendezvous placement', () => {
  it('gives each id the shard of highest weight, the first name on equal weights, whatever the order of the list', () => {
    fc.assert(
      fc.property(arbList(1, 12), fc.string({ unit: 'grapheme', maxLength: 40 }), fc.infiniteStream(fc.nat()), (list, id, picks) => {
        const owner = new Placement(list).owner(id);
        assert.ok(list.includes(owner));
        const sorted = [...list].sort();
        const weights = sorted.map((s) => shardWeight(id, s));
        const best = Math.max(...weights);
        assert.equal(owner, sorted[weights.indexOf(best)]);
        const shuffled = [...list];
        for (let i = shuffled.length - 1; i > 0; i--) {
          const j = (picks.next().value as number) % (i + 1);
          [shuffled[i], shuffled[j]] = [shuffled[j] as string, shuffled[i] as string];
        }
        assert.equal(new Placement(shuffled).owner(id), owner, 'the same owner for any order of the list');
      }),
      { numRuns: 300 },
    );
  });

  it('gives each shard about 1/K of the ids', () => {
    fc.assert(
      fc.property(arbList(2, 8), (list) => {
        const p = new Placement(list);
        const count = new Map<string, number>();
        for (const id of ids) {
          const o = p.owner(id);
          count.set(o, (count.get(o) ?? 0) + 1);
        }
        for (const s of list) {
          const share = (count.get(s) ?? 0) / SAMPLE;
          assert.ok(Math.abs(share - 1 / list.length) < TOLERANCE / list.length, `${s}: ${share} of ${list.length} shards`);
        }
      }),
      { numRuns: 20 },
    );
  });

  it('moves about 1/(K+1) of the ids to an added shard, and no id anywhere else', () => {
    fc.assert(
      fc.property(arbList(2, 9), (names) => {
        const before = new Placement(names.slice(1));
        const added = names[0] as string;
        const after = new Placement(names);
        let moved = 0;
        for (const id of ids) {
          const a = before.owner(id);
          const b = after.owner(id);
          if (a === b) continue;
          assert.equal(b, added, `${id} moved from ${a} to ${b}, not to the added shard`);
          moved++;
        }
        const share = moved / SAMPLE;
        assert.ok(Math.abs(share - 1 / names.length) < TOLERANCE / names.length, `moved ${share} with ${names.length} shards`);
      }),
      { numRuns: 20 },
    );
  });

  it('moves only the ids of a removed shard', () => {
    fc.assert(
      fc.property(arbList(2, 9), fc.nat(), (names, pick) => {
        const removed = names[pick % names.length] as string;
        const before = new Placement(names);
        const after = new Placement(names.filter((n) => n !== removed));
        for (const id of ids) {
          const a = before.owner(id);
          if (a !== removed) assert.equal(after.owner(id), a, `${id} of ${a} moved when ${removed} was removed`);
        }
      }),
      { numRuns: 20 },
    );
  });
});

describe('assigned ids', () => {
  it('assigns the base itself when it belongs here, else the first base-k that does', () => {
    const p = new Placement(['a', 'b', 'c', 'd']);
    for (let seq = 1; seq <= 200; seq++) {
      const base = `auto-7.${seq}`;
      for (const shard of p.shards) {
        const id = assignedIdHere(base, shard, p);
        assert.ok(id !== null);
        assert.equal(p.owner(id), shard);
        if (p.owner(base) === shard) assert.equal(id, base);
        else {
          const k = Number(id.slice(base.length + 1));
          assert.equal(id, `${base}-${k}`);
          for (let j = 1; j < k; j++) assert.notEqual(p.owner(`${base}-${j}`), shard, 'the first candidate that belongs here');
        }
      }
    }
  });

  it('gives up after a bounded number of candidates', () => {
    // A shard outside the list owns nothing: every candidate fails and the search ends.
    assert.equal(assignedIdHere('auto-1.1', 'z', new Placement(['a', 'b'])), null);
  });
});
