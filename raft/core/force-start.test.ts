import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Member } from './membership.js';
import type { LogEntry, Message } from './messages.js';
import { Prng } from './prng.js';
import { forceStartProbeE, RaftCore } from './raft.js';

// docs/design.md "Force-start", one core at a time: the probe, the forced epoch, its refusals and its
// timeout. The simulator's force-start scenarios cover the cluster-wide rules.
const E = 100;
const TIMEOUT = 10 * E;
const old = { generation: 1, id: 'old' };
const members: Member[] = [
  { node: 1, inc: 'a1' },
  { node: 2, inc: 'b1' },
  { node: 3, inc: 'c1' },
];
const fileLog: LogEntry[] = [
  { index: 1, term: 1, time: 0, data: null, config: members },
  { index: 2, term: 1, time: 10, data: new Uint8Array([1]) },
  { index: 3, term: 2, time: 20, data: new Uint8Array([2]) },
];

function forcing(above = 0): RaftCore {
  return new RaftCore({
    forceStartAbove: above,
    id: 1,
    nodes: [1, 2, 3],
    incarnation: 'a2',
    membership: 'amnesiac',
    epoch: old,
    restore: { term: 2, vote: 1, voteInc: 'a1', entries: fileLog, baseConfig: null },
    forceStart: true,
    forceStartTimeoutMs: TIMEOUT,
    electionTimeoutMs: E,
    random: new Prng(7),
    now: 0,
  });
}

/** A message from node `from` of the old epoch, addressed to the forcing member. */
function fromOld<T extends Message['type']>(
  from: number,
  body: Omit<Extract<Message, { type: T }>, keyof Envelope> & { type: T },
  term = 2,
): Message {
  return {
    ...body,
    from,
    to: 1,
    term,
    cluster: 'raftmq',
    epoch: old.generation,
    epochId: old.id,
    fromInc: `${'abc'[from - 1]}1`,
    toInc: body.type === 'announce' ? '' : 'a2',
  } as unknown as Message;
}
type Envelope = Pick<Message, 'from' | 'to' | 'term' | 'cluster' | 'epoch' | 'epochId' | 'fromInc' | 'toInc'>;

const announce = (from: number, over: { leader?: number; lastIndex?: number; lastTerm?: number } = {}): Message =>
  fromOld<'announce'>(from, {
    type: 'announce',
    membership: 'member',
    peers: '1,2,3',
    lastIndex: over.lastIndex ?? 3,
    lastTerm: over.lastTerm ?? 2,
    voter: true,
    stuck: true,
    leader: over.leader ?? 0,
    committedVoters: 0,
  });

function runTo(n: RaftCore, until: number, from = 0): void {
  for (let t = from; t <= until; t += 5) n.tick(t, 1_700_000_000_000 + t);
}

describe('raft force-start (docs/design.md "Force-start")', { timeout: 10_000 }, () => {
  it('after the probe it leads the next epoch alone, in a term above the file, with the whole file committed, and does not serve', () => {
    const n = forcing();
    runTo(n, forceStartProbeE * E - 5);
    assert.equal(n.forceStartPhase, 'probing');
    assert.equal(n.role, 'follower');
    runTo(n, forceStartProbeE * E + 5, forceStartProbeE * E);
    assert.equal(n.forceStartPhase, 'waiting');
    assert.equal(n.epoch.generation, 2);
    assert.notEqual(n.epoch.id, old.id);
    assert.equal(n.role, 'leader');
    assert.equal(n.currentTerm, 3);
    assert.deepEqual(n.configuration, [{ node: 1, inc: 'a2' }]);
    assert.deepEqual(
      n
        .entries()
        .slice(0, 3)
        .map((e) => [e.index, e.term]),
      fileLog.map((e) => [e.index, e.term]),
      "the new epoch's log starts with the file's",
    );
    assert.equal(n.commitIndex, n.lastIndex, 'the file and the new entries are committed');
    const r = n.propose([new Uint8Array([9])]);
    assert.ok(!r.ok && r.error.code === 'RAFT_NOT_SERVING');
    assert.equal(n.hasLease(forceStartProbeE * E + 5), false);
  });

  it('makes its epoch newer than one the membership record shows, when that is newer than the file', () => {
    const n = forcing(4);
    runTo(n, forceStartProbeE * E + 5);
    assert.equal(n.epoch.generation, 5);
  });

  it('gives up when no second node id votes in the new epoch within its timeout', () => {
    const n = forcing();
    runTo(n, forceStartProbeE * E + TIMEOUT + 10);
    assert.equal(n.forceStartPhase, 'failed');
    assert.match(n.forceStartFailure() ?? '', /no second voter/);
    assert.notEqual(n.role, 'leader');
  });

  it('is refused by an append from a leader of the old epoch', () => {
    const n = forcing();
    runTo(n, E);
    const append = fromOld<'append'>(2, { type: 'append', prevIndex: 3, prevTerm: 2, entries: [], commit: 3, sentAt: 0 });
    assert.equal(n.step(append), null);
    assert.equal(n.forceStartPhase, 'failed');
    assert.match(n.forceStartFailure() ?? '', /node 2 leads epoch 1/);
    runTo(n, forceStartProbeE * E + 10, E);
    assert.equal(n.epoch.generation, 1, 'a refused force-start makes no epoch');
  });

  it('is refused by a peer that shows a leader, and by one with a newer log; a stuck peer with an older log does not refuse it', () => {
    const led = forcing();
    led.step(announce(2, { leader: 3 }));
    assert.match(led.forceStartFailure() ?? '', /follows leader 3/);

    const newer = forcing();
    newer.step(announce(3, { lastIndex: 4, lastTerm: 2 }));
    assert.match(newer.forceStartFailure() ?? '', /newer log/);

    const older = forcing();
    older.step(announce(3, { lastIndex: 2, lastTerm: 1 }));
    assert.equal(older.forceStartPhase, 'probing');
    runTo(older, forceStartProbeE * E + 5);
    assert.equal(older.forceStartPhase, 'waiting');
  });
});
