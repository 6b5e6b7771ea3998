import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { HealthAlerts, type HealthObservation } from './alerts.js';

const E = 100;
const leading = (now: number, over: Partial<HealthObservation> = {}): HealthObservation => ({
  now,
  role: 'leader',
  term: 2,
  leader: 1,
  lease: true,
  redundancyGap: null,
  needsForceStart: false,
  ...over,
});
const following = (now: number, over: Partial<HealthObservation> = {}): HealthObservation => ({
  now,
  role: 'follower',
  term: 2,
  leader: 2,
  lease: false,
  needsForceStart: false,
  ...over,
});
const msgs = (lines: { msg: string }[]): string[] => lines.map((l) => l.msg);

describe('HealthAlerts', () => {
  it('warns once when redundancy is lost for 2E and says once when it is back', () => {
    const a = new HealthAlerts(1, E);
    const gap = { redundancyGap: 'node 3: link down' };
    assert.deepEqual(a.observe(leading(0)), []);
    assert.deepEqual(a.observe(leading(10, gap)), []);
    assert.deepEqual(a.observe(leading(150, gap)), [], 'not before 2E');
    const lost = a.observe(leading(210, gap));
    assert.deepEqual(msgs(lost), ['redundancy lost']);
    assert.equal(lost[0]?.level, 'warn');
    assert.deepEqual(lost[0]?.fields, { node: 1, term: 2, reason: 'node 3: link down' });
    for (let t = 220; t < 2_000; t += 10) assert.deepEqual(a.observe(leading(t, gap)), [], 'not every tick');
    const back = a.observe(leading(2_000));
    assert.deepEqual(msgs(back), ['redundancy restored']);
    assert.equal(back[0]?.level, 'info');
    assert.deepEqual(a.observe(leading(2_010)), []);
  });

  it('a gap shorter than 2E (a follower catching up) is not reported', () => {
    const a = new HealthAlerts(1, E);
    const gap = { redundancyGap: 'node 2: behind the commit index' };
    assert.deepEqual(a.observe(leading(0, gap)), []);
    assert.deepEqual(a.observe(leading(150, gap)), []);
    assert.deepEqual(a.observe(leading(160)), [], 'caught up in time: nothing to say');
    assert.deepEqual(a.observe(leading(170, gap)), []);
    assert.deepEqual(a.observe(leading(360, gap)), [], 'the gap starts over');
    assert.deepEqual(msgs(a.observe(leading(370, gap))), ['redundancy lost']);
  });

  it('a follower does not judge redundancy; a loss it reported is followed by its restoration', () => {
    const a = new HealthAlerts(1, E);
    a.observe(leading(0));
    a.observe(leading(10, { redundancyGap: 'node 3: link down' }));
    assert.deepEqual(msgs(a.observe(leading(300, { redundancyGap: 'node 3: link down' }))), ['redundancy lost']);
    assert.deepEqual(a.observe(following(310)), []);
    assert.deepEqual(a.observe(following(900, { redundancyGap: 'node 3: link down' })), [], 'a follower cannot judge');
    assert.deepEqual(msgs(a.observe(leading(1_000))), ['redundancy restored'], 'when it leads again');
  });

  it('warns when no leader is known for 3E, and says when there is one again', () => {
    const a = new HealthAlerts(3, E);
    assert.deepEqual(a.observe(following(0)), []);
    assert.deepEqual(a.observe(following(10, { leader: 0, role: 'candidate' })), []);
    assert.deepEqual(a.observe(following(250, { leader: 0, role: 'candidate' })), [], 'an election takes up to 2E');
    const lost = a.observe(following(310, { leader: 0, role: 'candidate', term: 5 }));
    assert.deepEqual(lost, [{ level: 'warn', msg: 'quorum lost', fields: { node: 3, term: 5, reason: 'no leader for 3E' } }]);
    assert.deepEqual(a.observe(following(400, { leader: 0 })), [], 'once per change');
    const back = a.observe(following(500, { leader: 1, term: 6 }));
    assert.deepEqual(back, [{ level: 'info', msg: 'quorum restored', fields: { node: 3, term: 6, leader: 1 } }]);
  });

  it('a failover shorter than 3E is not a lost quorum', () => {
    const a = new HealthAlerts(3, E);
    a.observe(following(0));
    a.observe(following(10, { leader: 0 }));
    assert.deepEqual(a.observe(following(290, { leader: 1 })), []);
    assert.deepEqual(a.observe(following(1_000, { leader: 0 })), []);
  });

  it('a leader without a lease for 3E has lost its quorum', () => {
    const a = new HealthAlerts(1, E);
    a.observe(leading(0));
    a.observe(leading(10, { lease: false }));
    const lost = a.observe(leading(320, { lease: false }));
    assert.deepEqual(msgs(lost), ['quorum lost']);
    assert.equal(lost[0]?.fields.reason, 'leader without a lease');
  });

  it('force-start needed is an error, once, and its end is said', () => {
    const a = new HealthAlerts(2, E);
    const need = a.observe(following(0, { leader: 0, needsForceStart: true }));
    assert.deepEqual(msgs(need), ['force-start needed']);
    assert.equal(need[0]?.level, 'error');
    assert.equal(typeof need[0]?.fields.reason, 'string');
    assert.deepEqual(a.observe(following(10, { leader: 0, needsForceStart: true })), []);
    assert.deepEqual(msgs(a.observe(following(20, { needsForceStart: false }))), ['force-start no longer needed']);
  });

  it('lease lost carries node, term, period and reason', () => {
    assert.deepEqual(new HealthAlerts(1, E).leaseLost(4, 17, 'lease lapsed'), {
      level: 'warn',
      msg: 'lease lost',
      fields: { node: 1, term: 4, period: 17, reason: 'lease lapsed' },
    });
  });
});
