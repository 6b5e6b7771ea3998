import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Message } from './messages.js';
import { Prng } from './prng.js';
import { RaftCore, type RaftOptions } from './raft.js';
import { staticEnvelope } from './test-cluster.js';

// docs/raft.md "Persistence": with awaitStorage the core learns what is durable from persisted()
// and persistedHardState(). These tests play the storage by hand.

const E = 100;
const ids = [1, 2, 3];
const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);
const pumpRoundsMax = 1000;

class Net {
  readonly cores = new Map<number, RaftCore>();
  /** Nodes whose storage acknowledges every write at once. */
  readonly instant = new Set<number>(ids);
  /** Nodes whose messages, both ways, are lost. */
  readonly cut = new Set<number>();
  readonly sent: Message[] = [];
  now = 0;

  constructor(opts: Partial<RaftOptions> = {}) {
    const prng = new Prng(7);
    for (const id of ids) {
      this.cores.set(id, new RaftCore({ id, voters: ids, electionTimeoutMs: E, random: prng.fork(), now: 0, awaitStorage: true, ...opts }));
    }
  }

  core(id: number): RaftCore {
    const c = this.cores.get(id);
    assert.ok(c !== undefined);
    return c;
  }

  /** What a storage that holds everything written reports. */
  persistAll(id: number): void {
    const c = this.core(id);
    c.persistedHardState(c.hardState());
    c.persisted(c.lastIndex, c.termAt(c.lastIndex) ?? 0);
  }

  /** Takes Readies and delivers messages until nothing moves. */
  pump(): void {
    for (let round = 0; round < pumpRoundsMax; round++) {
      const queue: Message[] = [];
      for (const [id, c] of this.cores) {
        while (c.hasReady()) {
          const rd = c.takeReady();
          queue.push(...rd.messages);
          if (this.instant.has(id)) this.persistAll(id);
        }
      }
      if (queue.length === 0) return;
      for (const m of queue) {
        this.sent.push(m);
        if (this.cut.has(m.from) || this.cut.has(m.to)) continue;
        const error = this.core(m.to).step(m);
        assert.equal(error, null);
      }
    }
    assert.fail('the cluster never went quiet');
  }

  elect(id: number): void {
    this.core(id).campaign();
    this.pump();
    assert.equal(this.core(id).role, 'leader');
  }
}

describe('raft core: the persisted-index rule (awaitStorage)', () => {
  it('without awaitStorage every write is durable at once and the reports change nothing', () => {
    const prng = new Prng(1);
    const c = new RaftCore({ id: 1, voters: [1], electionTimeoutMs: E, random: prng, now: 0, preVote: false });
    c.campaign();
    assert.equal(c.role, 'leader');
    c.propose([bytes('a')]);
    assert.equal(c.durableIndex, c.lastIndex);
    assert.equal(c.commitIndex, 2, 'a lone voter commits its own entries at once');
    c.persisted(0, 0);
    c.persistedHardState({ term: 0, vote: 0, voteInc: '' });
    assert.equal(c.durableIndex, c.lastIndex);
    assert.equal(c.heldMessages, 0);
  });

  it('the leader counts itself toward a commit only up to its persisted index', () => {
    const net = new Net();
    net.elect(1);
    const commit = net.core(1).commitIndex;
    net.instant.delete(1);
    net.cut.add(3);
    net.core(1).propose([bytes('x')]);
    net.pump();
    const leader = net.core(1);
    assert.equal(leader.progressOf(2)?.match, leader.lastIndex, 'node 2 acknowledged the entry');
    assert.equal(leader.commitIndex, commit, 'one durable copy of two is not a majority');
    leader.persisted(leader.lastIndex, leader.currentTerm);
    assert.equal(leader.commitIndex, leader.lastIndex);
  });

  it("a follower's append acknowledgement leaves only once the entries are durable", () => {
    const net = new Net();
    net.elect(1);
    net.instant.delete(2);
    net.cut.add(3);
    const leader = net.core(1);
    const commit = leader.commitIndex;
    leader.propose([bytes('x'), bytes('y')]);
    net.pump();
    const follower = net.core(2);
    assert.equal(follower.lastIndex, leader.lastIndex, 'the follower holds the entries');
    assert.equal(follower.heldMessages, 1, 'its acknowledgement waits');
    assert.equal(leader.commitIndex, commit);
    follower.persisted(follower.lastIndex - 1, follower.currentTerm);
    net.pump();
    assert.equal(follower.heldMessages, 1, 'durable through the first entry only: the ack of both still waits');
    follower.persisted(follower.lastIndex, follower.currentTerm);
    net.pump();
    assert.equal(follower.heldMessages, 0);
    assert.equal(leader.commitIndex, leader.lastIndex);
  });

  it('a report that does not match the log (another term at that index) is ignored', () => {
    const net = new Net();
    net.elect(1);
    net.instant.delete(2);
    net.cut.add(3);
    net.core(1).propose([bytes('x')]);
    net.pump();
    const follower = net.core(2);
    const before = follower.durableIndex;
    follower.persisted(follower.lastIndex, follower.currentTerm + 1);
    assert.equal(follower.durableIndex, before);
    follower.persisted(follower.lastIndex + 5, follower.currentTerm);
    assert.equal(follower.durableIndex, before);
    assert.equal(follower.heldMessages, 1);
  });

  it('a vote grant leaves only once the vote is durable; a candidate counts its own vote once durable', () => {
    const net = new Net({ preVote: false });
    net.instant.clear();
    net.cut.add(3);
    const cand = net.core(1);
    cand.campaign();
    net.pump();
    const voter = net.core(2);
    assert.equal(voter.hardState().vote, 1, 'node 2 voted for node 1');
    assert.equal(voter.heldMessages, 1, 'its grant waits for the vote to be durable');
    assert.equal(cand.role, 'candidate');
    voter.persistedHardState({ term: voter.currentTerm, vote: 2, voteInc: '0' });
    assert.equal(voter.heldMessages, 1, 'another vote durable in the term does not release the grant');
    voter.persistedHardState(voter.hardState());
    net.pump();
    assert.equal(voter.heldMessages, 0);
    assert.equal(cand.role, 'candidate', 'a grant and a vote for itself that is not durable yet: no majority');
    cand.persistedHardState(cand.hardState());
    assert.equal(cand.role, 'leader');
  });

  it('answers held in an earlier term are dropped, not sent, once the term moves on', () => {
    const net = new Net({ preVote: false });
    net.elect(1);
    net.instant.delete(2);
    net.cut.add(3);
    net.core(1).propose([bytes('x')]);
    net.pump();
    const follower = net.core(2);
    assert.equal(follower.heldMessages, 1);
    net.cut.add(1);
    follower.campaign();
    follower.persistedHardState(follower.hardState());
    follower.persisted(follower.lastIndex, follower.termAt(follower.lastIndex) ?? 0);
    assert.equal(follower.heldMessages, 0);
    const rd = follower.takeReady();
    assert.ok(
      rd.messages.every((m) => m.type !== 'append-response'),
      'the old term acknowledgement is not sent',
    );
  });

  it('a restarted core holds as durable what it was restored from', () => {
    const net = new Net();
    net.elect(1);
    net.core(1).propose([bytes('x')]);
    net.pump();
    const before = net.core(2);
    const after = new RaftCore({
      id: 2,
      voters: ids,
      electionTimeoutMs: E,
      random: new Prng(3),
      now: 0,
      awaitStorage: true,
      restore: before.durableState(),
    });
    assert.equal(after.durableIndex, before.lastIndex);
  });

  it('a node back in the term it led with a shorter log ignores acks for the tail it lost', () => {
    const net = new Net();
    net.elect(1);
    net.core(1).propose([bytes('x'), bytes('y')]);
    net.pump();
    const before = net.core(1).durableState();
    // Power lost before the last two entries were synced: the term survives, the tail does not.
    const after = new RaftCore({
      id: 1,
      voters: ids,
      electionTimeoutMs: E,
      random: new Prng(3),
      now: 0,
      awaitStorage: true,
      restore: { ...before, entries: before.entries.slice(0, -2) },
    });
    const ack = {
      ...staticEnvelope,
      type: 'append-response' as const,
      from: 2,
      to: 1,
      term: before.term,
      success: true,
      index: before.entries.length,
      hint: 0,
      sentAt: 0,
    };
    assert.equal(after.step(ack), null);
    assert.equal(after.role, 'follower');
    assert.equal(
      net.core(1).step({ ...ack, index: before.entries.length + 1 })?.code,
      'RAFT_BAD_MESSAGE',
      'a leader still refuses an ack past its log',
    );
  });
});
