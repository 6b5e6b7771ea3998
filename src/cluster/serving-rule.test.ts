// The serving rule (serving-rule.ts, docs/design.md "One server at a time"): each condition alone
// ends a period, with the reason RaftLog logs, and a period begins only when the rule holds and
// the broker has every delivered entry.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { type ServingFacts, servingBegins, servingEnd, servingHolds } from './serving-rule.js';

/** A leader of term 3 serving a period of term 3: every condition holds. */
const holding: ServingFacts = {
  stopped: false,
  role: 'leader',
  term: 3,
  servingTerm: 3,
  lastAppliedTerm: 3,
  hasLease: true,
  failed: false,
};

describe('serving rule', () => {
  it('holds for a leader of the period term, with an entry of that term applied last, a lease and a sound state machine', () => {
    assert.equal(servingEnd(holding), null);
    assert.equal(servingHolds(holding), true);
  });

  const ends: { name: string; facts: Partial<ServingFacts>; reason: string }[] = [
    { name: 'the node stopped', facts: { stopped: true }, reason: 'stopped' },
    { name: 'it is a follower', facts: { role: 'follower' }, reason: 'not leader' },
    { name: 'it is a candidate', facts: { role: 'candidate', term: 4 }, reason: 'not leader' },
    { name: 'it leads a higher term', facts: { term: 4 }, reason: 'higher term' },
    { name: 'the lease lapsed', facts: { hasLease: false }, reason: 'lease lapsed' },
    { name: 'the last applied entry is of another term', facts: { lastAppliedTerm: 2 }, reason: 'older term applied' },
    { name: 'the state machine failed', facts: { failed: true }, reason: 'state machine failed' },
  ];
  for (const e of ends) {
    it(`ends when ${e.name}`, () => {
      const f = { ...holding, ...e.facts };
      assert.equal(servingEnd(f), e.reason);
      assert.equal(servingHolds(f), false);
    });
  }

  it('names the loss of leadership or term before the lease it takes with it', () => {
    assert.equal(servingEnd({ ...holding, role: 'follower', term: 4, hasLease: false }), 'not leader');
    assert.equal(servingEnd({ ...holding, term: 4, hasLease: false, lastAppliedTerm: 4 }), 'higher term');
    assert.equal(servingEnd({ ...holding, failed: true, hasLease: false }), 'state machine failed');
    assert.equal(servingEnd({ ...holding, stopped: true, role: 'follower' }), 'stopped');
  });

  it('begins only when the rule holds and the broker has every delivered entry', () => {
    assert.equal(servingBegins(holding, true), true);
    assert.equal(servingBegins(holding, false), false);
    assert.equal(servingBegins({ ...holding, hasLease: false }, true), false);
    assert.equal(servingBegins({ ...holding, lastAppliedTerm: 2 }, true), false);
  });
});
