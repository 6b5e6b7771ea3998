import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogEntry, Message } from './messages.js';
import { Prng } from './prng.js';
import type { DurableState } from './raft.js';
import { RaftCore } from './raft.js';
import { staticEnvelope, TestCluster } from './test-cluster.js';

const E = 100;
const enc = new TextEncoder();
const bytes = (s: string): Uint8Array => enc.encode(s);

/** A log whose entry k (1-based) has terms[k-1]. */
function logOf(terms: readonly number[]): LogEntry[] {
  return terms.map((term, k) => ({ index: k + 1, term, time: 0, data: bytes(`e${k + 1}`) }));
}

function restored(map: Record<number, DurableState>): Map<number, DurableState> {
  return new Map(Object.entries(map).map(([k, v]) => [Number(k), v]));
}

const termsOf = (n: RaftCore): number[] => n.entries().map((e) => e.term);

function electedCluster(opts: ConstructorParameters<typeof TestCluster>[0] = {}): TestCluster {
  const c = new TestCluster({ electionTimeoutMs: E, ...opts });
  c.node(1).campaign();
  c.stabilize();
  assert.equal(c.node(1).role, 'leader');
  return c;
}

describe('raft core: the paper, section by section', { timeout: 30_000 }, () => {
  it('§5.2 a candidate with a majority of votes becomes leader of a new term and the others follow', () => {
    const c = new TestCluster({ electionTimeoutMs: E, node: { preVote: false } });
    c.node(1).campaign();
    assert.equal(c.node(1).role, 'candidate');
    assert.equal(c.node(1).currentTerm, 1);
    c.stabilize();
    assert.equal(c.node(1).role, 'leader');
    for (const id of [2, 3]) {
      assert.equal(c.node(id).role, 'follower');
      assert.equal(c.node(id).softState().leader, 1);
      assert.equal(c.node(id).currentTerm, 1);
    }
  });

  it('§5.2 election timeouts are drawn from [E, 2E): nobody campaigns before E, someone by 2E', () => {
    for (let seed = 1; seed <= 20; seed++) {
      const c = new TestCluster({ electionTimeoutMs: E, seed });
      c.tick(E - 1);
      assert.ok(
        c.running().every((n) => n.role === 'follower'),
        `seed ${seed}: campaign before E`,
      );
      c.tick(E);
      assert.ok(
        c.running().some((n) => n.role !== 'follower'),
        `seed ${seed}: no campaign by 2E`,
      );
    }
  });

  it('§5.2 a split vote elects nobody in that term, and a later timeout elects a leader', () => {
    const c = new TestCluster({ electionTimeoutMs: E, node: { preVote: false } });
    c.partition([[1, 2], [3]]);
    c.node(1).campaign();
    c.node(2).campaign();
    c.stabilize();
    c.heal();
    assert.equal(c.leader(), undefined, 'each candidate voted for itself and refused the other');
    c.node(1).campaign();
    c.stabilize();
    const leader = c.leader();
    assert.equal(leader?.id, 1);
    assert.equal(leader?.currentTerm, 2);
  });

  it('§5.2 a node grants at most one vote per term', () => {
    const c = new TestCluster({ electionTimeoutMs: E, node: { preVote: false } });
    c.partition([[1, 3], [2]]);
    c.node(1).campaign();
    c.stabilize();
    assert.equal(c.node(3).durableState().vote, 1);
    const request: Message = {
      ...staticEnvelope,
      type: 'vote-request',
      from: 2,
      to: 3,
      term: 1,
      lastIndex: 9,
      lastTerm: 1,
      transfer: false,
      sentAt: 0,
    };
    const n3 = new RaftCore({
      id: 3,
      voters: [1, 2, 3],
      electionTimeoutMs: E,
      random: new Prng(1),
      now: 0,
      restore: { term: 1, vote: 1, entries: [] },
    });
    n3.step(request);
    const answer = n3.takeReady().messages.find((m) => m.type === 'vote-response');
    assert.equal(answer?.type === 'vote-response' && answer.granted, false);
  });

  it('§5.1 a stale leader steps down when it hears a higher term, and its unreplicated entries go (§5.3)', () => {
    // Without check-quorum the cut-off leader keeps believing it leads until it hears the new term.
    const c = electedCluster({ node: { checkQuorum: false } });
    c.partition([[1], [2, 3]]);
    assert.equal(c.node(1).propose([bytes('lost')]).ok, true);
    c.run(3 * E);
    const next = [c.node(2), c.node(3)].find((n) => n.role === 'leader');
    assert.ok(next !== undefined, 'the majority side elected a leader');
    assert.equal(c.node(1).role, 'leader', 'the old leader does not know yet');
    c.heal();
    c.run(E / 5);
    assert.equal(c.node(1).role, 'follower');
    assert.equal(c.node(1).currentTerm, next.currentTerm);
    assert.deepEqual(termsOf(c.node(1)), termsOf(next));
    assert.ok(
      c
        .node(1)
        .entries()
        .every((e) => e.data === null),
      'the unreplicated "lost" entry was deleted',
    );
  });

  it('§5.3 Figure 7: a new leader brings every kind of divergent follower log to its own', () => {
    const leaderLog = [1, 1, 1, 4, 4, 5, 5, 6, 6, 6];
    const followers: Record<string, number[]> = {
      a: [1, 1, 1, 4, 4, 5, 5, 6, 6],
      b: [1, 1, 1, 4],
      c: [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 6],
      d: [1, 1, 1, 4, 4, 5, 5, 6, 6, 6, 7, 7],
      e: [1, 1, 1, 4, 4, 4, 4],
      f: [1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3],
    };
    for (const [name, log] of Object.entries(followers)) {
      const c = new TestCluster({
        electionTimeoutMs: E,
        node: { entriesPerAppendMax: 3 },
        restore: restored({
          1: { term: 7, vote: 0, entries: logOf(leaderLog) },
          2: { term: 7, vote: 0, entries: logOf(log) },
          3: { term: 7, vote: 0, entries: [] },
        }),
      });
      c.node(1).campaign();
      c.stabilize();
      assert.equal(c.node(1).role, 'leader', `case ${name}`);
      assert.equal(c.node(1).currentTerm, 8);
      assert.deepEqual(termsOf(c.node(2)), [...leaderLog, 8], `case (${name}) repaired`);
      assert.deepEqual(termsOf(c.node(3)), [...leaderLog, 8]);
      assert.equal(c.node(1).commitIndex, 11, `case (${name}) commits through the new term's entry`);
    }
  });

  function figure8(unsafe: boolean): TestCluster {
    // Three-node version of Figure 8: S1 led term 2 and wrote 2/2 only to itself; S3 led term 3
    // and wrote 2/3 only to itself. S1 now wins term 4 with S2's vote and copies 2/2 to S2.
    const c = new TestCluster({
      electionTimeoutMs: E,
      node: { entriesPerAppendMax: 1, ...(unsafe ? { unsafe: 'commit-old-terms' as const } : {}) },
      restore: restored({
        1: { term: 3, vote: 0, entries: logOf([1, 2]) },
        2: { term: 3, vote: 0, entries: logOf([1]) },
        3: { term: 3, vote: 3, entries: logOf([1, 3]) },
      }),
    });
    c.partition([[1, 2], [3]]);
    c.node(1).campaign();
    // S2 refuses the first probe (it lacks index 2) and is sent 2/2; every later copy of 3/4 is lost.
    let probes = 0;
    c.stabilize((m) => !(m.type === 'append' && m.entries.some((e) => e.index === 3) && probes++ > 0));
    assert.equal(c.node(1).currentTerm, 4);
    assert.deepEqual(termsOf(c.node(2)), [1, 2], 'index 2 of term 2 is now on a majority');
    return c;
  }

  it('§5.4.2 Figure 8: an entry of an earlier term on a majority is not committed by counting', () => {
    const c = figure8(false);
    assert.equal(c.node(1).commitIndex, 0);
    c.run(E / 5);
    assert.equal(c.node(1).commitIndex, 3, 'the entry of term 4 commits, and index 2 with it');
  });

  it('§5.4.2 Figure 8: committing by counting would let a later leader erase a "committed" entry', () => {
    const c = figure8(true);
    assert.equal(c.node(1).commitIndex, 2, 'the unsafe rule commits 2/2');
    c.crash(1);
    c.heal();
    c.run(5 * E);
    assert.equal(c.node(3).role, 'leader', 'S3 (last term 3) wins with S2 (last term 2)');
    assert.deepEqual(termsOf(c.node(2)).slice(0, 2), [1, 3], 'the entry the old leader called committed is gone');
  });

  it('§5.4.1 a voter refuses a candidate whose log is less up-to-date', () => {
    const c = new TestCluster({
      electionTimeoutMs: E,
      node: { preVote: false },
      restore: restored({
        1: { term: 2, vote: 0, entries: logOf([1]) },
        2: { term: 2, vote: 0, entries: logOf([1, 2]) },
        3: { term: 2, vote: 0, entries: logOf([1, 2]) },
      }),
    });
    c.node(1).campaign();
    c.stabilize();
    assert.notEqual(c.node(1).role, 'leader');
    assert.equal(c.leader(), undefined);
  });

  it('§8 a new leader appends an empty entry of its term and commits it', () => {
    const c = electedCluster();
    const last = c.node(1).entries().at(-1);
    assert.deepEqual(last, { index: 1, term: 1, time: 0, data: null });
    assert.equal(c.node(1).commitIndex, 1);
  });
});

describe('raft core: pre-vote, check-quorum and the vote-ignoring rule', { timeout: 30_000 }, () => {
  it('thesis §9.6 a partitioned node that rejoins does not inflate its term or depose the leader', () => {
    const c = electedCluster();
    const term = c.node(1).currentTerm;
    c.partition([[1, 2], [3]]);
    c.run(10 * E);
    assert.equal(c.node(3).currentTerm, term, 'pre-vote kept the isolated node at its term');
    c.heal();
    c.run(2 * E);
    assert.equal(c.node(1).role, 'leader');
    assert.equal(c.node(1).currentTerm, term);
    assert.equal(c.node(3).softState().leader, 1);
  });

  it('without pre-vote the same rejoin inflates the term and forces a new election (the contrast)', () => {
    const c = electedCluster({ node: { preVote: false } });
    const term = c.node(1).currentTerm;
    c.partition([[1, 2], [3]]);
    c.run(10 * E);
    assert.ok(c.node(3).currentTerm > term + 3);
    c.heal();
    c.run(3 * E);
    assert.ok(c.node(1).currentTerm > term, 'the leader was deposed by the inflated term');
  });

  it('check-quorum: a leader that hears from no majority within E steps down', () => {
    const c = electedCluster();
    c.partition([[1], [2, 3]]);
    c.run(E - 10);
    assert.equal(c.node(1).role, 'leader');
    c.run(30);
    assert.equal(c.node(1).role, 'follower');
    c.run(3 * E);
    assert.ok(c.node(2).role === 'leader' || c.node(3).role === 'leader');
  });

  it('a follower that heard from its leader within E ignores a vote request and its higher term', () => {
    const c = electedCluster();
    c.tick(E / 2);
    c.stabilize();
    const n2 = c.node(2);
    const term = n2.currentTerm;
    n2.step({
      ...staticEnvelope,
      type: 'vote-request',
      from: 3,
      to: 2,
      term: term + 5,
      lastIndex: 99,
      lastTerm: term + 4,
      transfer: false,
      sentAt: 0,
    });
    assert.equal(n2.currentTerm, term);
    assert.equal(n2.takeReady().messages.length, 0, 'no answer at all');
  });

  it('heartbeats go out every E/5 and keep followers from campaigning', () => {
    const c = electedCluster();
    c.drainOutput();
    c.run(E, E / 5);
    const heartbeats = c.drainOutput().filter((l) => l.startsWith('1->2 heartbeat '));
    assert.equal(heartbeats.length, 5);
    c.run(5 * E);
    assert.equal(c.node(1).role, 'leader');
    assert.equal(c.node(1).currentTerm, 1);
  });
});

describe('raft core: replication flow control and input checks', { timeout: 30_000 }, () => {
  it('all proposals of one call travel as one append per follower', () => {
    const c = electedCluster();
    const r = c.node(1).propose([bytes('a'), bytes('b'), bytes('c')]);
    assert.deepEqual(r, { ok: true, firstIndex: 2, lastIndex: 4 });
    const sent = c.node(1).takeReady().messages;
    const appends = sent.filter((m) => m.type === 'append');
    assert.equal(appends.length, 2);
    for (const m of appends) assert.equal(m.type === 'append' && m.entries.length, 3);
  });

  it('appends are pipelined up to the in-flight limit, in bounded messages', () => {
    const c = electedCluster({ node: { inflightAppendsMax: 2, entriesPerAppendMax: 2 } });
    assert.equal(c.node(1).progressOf(2)?.state, 'replicate');
    c.node(1).propose(['a', 'b', 'c', 'd', 'e', 'f', 'g'].map(bytes));
    const sent = c.node(1).takeReady().messages;
    const toTwo = sent.filter((m) => m.to === 2 && m.type === 'append');
    assert.deepEqual(
      toTwo.map((m) => (m.type === 'append' ? m.entries.length : -1)),
      [2, 2],
    );
    c.queue.push(...sent);
    c.stabilize();
    assert.equal(c.node(2).lastIndex, 8);
    assert.equal(c.node(1).commitIndex, 8);
  });

  it('a lost append in replicate state is repaired by the next heartbeat round', () => {
    const c = electedCluster();
    c.node(1).propose([bytes('x')]);
    c.stabilize((m) => !(m.type === 'append' && m.to === 2));
    assert.equal(c.node(2).lastIndex, 1);
    c.tick(E / 5);
    c.stabilize();
    assert.equal(c.node(2).lastIndex, 2);
  });

  it('propose on a follower is refused with RAFT_NOT_LEADER and names the leader', () => {
    const c = electedCluster();
    const r = c.node(2).propose([bytes('x')]);
    assert.equal(r.ok, false);
    assert.equal(!r.ok && r.error.code, 'RAFT_NOT_LEADER');
    assert.equal(!r.ok && r.leader, 1);
  });

  it('propose over the uncommitted bound is refused with RAFT_PROPOSALS_FULL', () => {
    const c = electedCluster({ node: { uncommittedEntriesMax: 3 } });
    c.partition([[1], [2, 3]]);
    assert.equal(c.node(1).propose([bytes('a'), bytes('b')]).ok, true);
    const r = c.node(1).propose([bytes('c'), bytes('d')]);
    assert.equal(!r.ok && r.error.code, 'RAFT_PROPOSALS_FULL');
  });

  it('malformed or misaddressed messages are refused with a code and change nothing', () => {
    const n = new RaftCore({ id: 2, voters: [1, 2, 3], electionTimeoutMs: E, random: new Prng(1), now: 0 });
    n.takeReady();
    const bad: unknown[] = [
      null,
      { type: 'nope', from: 1, to: 2, term: 1 },
      { type: 'heartbeat', from: 1, to: 2, term: -1, commit: 0, sentAt: 0 },
      { type: 'heartbeat', from: 1, to: 2, term: 1, commit: 0, sentAt: Number.NaN },
      {
        type: 'append',
        from: 1,
        to: 2,
        term: 1,
        prevIndex: 0,
        prevTerm: 0,
        commit: 0,
        sentAt: 0,
        entries: [{ index: 2, term: 1, time: 0, data: null }],
      },
      {
        type: 'append',
        from: 1,
        to: 2,
        term: 1,
        prevIndex: 0,
        prevTerm: 0,
        commit: 0,
        sentAt: 0,
        entries: [{ index: 1, term: 5, time: 0, data: null }],
      },
      {
        type: 'append',
        from: 1,
        to: 2,
        term: 1,
        prevIndex: 0,
        prevTerm: 0,
        commit: 0,
        sentAt: 0,
        entries: [
          { index: 1, term: 1, time: 9, data: null },
          { index: 2, term: 1, time: 8, data: null },
        ],
      },
      {
        type: 'append',
        from: 1,
        to: 2,
        term: 1,
        prevIndex: 0,
        prevTerm: 0,
        commit: 0,
        sentAt: 0,
        entries: [{ index: 1, term: 1, time: 0.5, data: null }],
      },
      { type: 'vote-request', from: 1, to: 2, term: 1, lastIndex: 'x', lastTerm: 0, transfer: false, sentAt: 0 },
      { type: 'vote-request', from: 1, to: 2, term: 1, lastIndex: 0, lastTerm: 0, transfer: 'yes', sentAt: 0 },
      { type: 'heartbeat-response', from: 1, to: 2, term: 1, sentAt: 0 },
    ];
    for (const m of bad)
      assert.equal(n.step((m === null ? m : { ...staticEnvelope, ...m }) as Message)?.code, 'RAFT_BAD_MESSAGE', JSON.stringify(m));
    assert.equal(
      n.step({ ...staticEnvelope, type: 'heartbeat', from: 7, to: 2, term: 1, commit: 0, sentAt: 0 })?.code,
      'RAFT_UNKNOWN_PEER',
    );
    assert.equal(
      n.step({ ...staticEnvelope, type: 'heartbeat', from: 1, to: 3, term: 1, commit: 0, sentAt: 0 })?.code,
      'RAFT_UNKNOWN_PEER',
    );
    assert.equal(n.currentTerm, 0);
    assert.equal(n.hasReady(), false);
  });

  it('a restarted node keeps term, vote and log but starts with commit 0 as a follower', () => {
    const c = electedCluster();
    c.node(1).propose([bytes('x')]);
    c.stabilize();
    c.crash(2);
    c.restart(2);
    const n2 = c.node(2);
    assert.equal(n2.currentTerm, 1);
    assert.equal(n2.lastIndex, 2);
    assert.equal(n2.commitIndex, 0);
    c.tick(E / 5);
    c.stabilize();
    assert.equal(n2.commitIndex, 2);
    assert.equal(c.applied.get(2)?.length, 2, 'the new process applies the committed prefix again');
  });

  it('the PRNG is deterministic per seed and stays inside its range', () => {
    const a = new Prng(42);
    const b = new Prng(42);
    for (let k = 0; k < 1000; k++) {
      const x = a.int(7);
      assert.equal(x, b.int(7));
      assert.ok(x >= 0 && x < 7);
    }
    assert.notEqual(new Prng(1).nextU32(), new Prng(2).nextU32());
  });
});
