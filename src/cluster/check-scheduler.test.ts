import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { CheckScheduler } from './check-scheduler.js';

describe('check scheduler', { timeout: 10_000 }, () => {
  it('is due after the entry bound or the interval, never while idle or while one is in flight', () => {
    const s = new CheckScheduler({ entriesMax: 10, intervalMs: 1_000 });
    s.reset(0);
    assert.equal(s.due(5_000), false, 'nothing committed: no check, however long');
    s.noteApplied(9, 0);
    assert.equal(s.due(500), false);
    s.noteApplied(1, 0);
    assert.equal(s.due(500), true, 'entry bound reached');
    s.proposed(500);
    s.noteApplied(20, 0);
    assert.equal(s.due(600), false, 'the previous check is not applied yet');
    s.noteApplied(1, 1);
    assert.equal(s.due(600), true);
    s.proposed(600);
    s.noteApplied(2, 1);
    assert.equal(s.due(1_500), false, 'interval not yet passed since the last proposal');
    assert.equal(s.due(1_600), true, 'interval passed with entries committed');
  });

  it('refuses bounds below one', () => {
    assert.throws(() => new CheckScheduler({ entriesMax: 0, intervalMs: 1 }), RangeError);
    assert.throws(() => new CheckScheduler({ entriesMax: 1, intervalMs: 0 }), RangeError);
  });
});
