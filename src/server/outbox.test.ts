// The outbox's write after a committed batch: at once where the log commits at a turn's end (one
// node); where it commits amid a turn's reads (a cluster leader), at once only for the first commit
// of a turn, the rest in the turn's own write.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Outbox, type OutboxMember } from './outbox.js';

/** A connection that counts its writes; `dirty` is the caller's own flag, as in Connection. */
class Member implements OutboxMember {
  writes = 0;
  dirty = false;
  constructor(private readonly outbox: Outbox) {}

  /** Output buffered for this connection, as a delivery of a committed entry leaves it. */
  output(): void {
    if (this.dirty) return;
    this.dirty = true;
    this.outbox.queued(this);
  }

  flush(): number {
    this.dirty = false;
    this.writes++;
    return 10;
  }

  endAfterPeer(): void {}

  internalError(err: unknown): void {
    throw err;
  }
}

function outbox(): Outbox {
  return new Outbox({ mayWrite: () => true, watchedWritten: () => {}, event: () => {} });
}

const turnEnd = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

describe('Outbox.writeCommitted', () => {
  it('writes at once after every committed batch of a log that commits at the turn end', () => {
    const o = outbox();
    const a = new Member(o);
    for (let k = 1; k <= 3; k++) {
      a.output();
      o.writeCommitted(false);
      assert.equal(a.writes, k, `written after commit ${k}`);
    }
  });

  it('mid-turn, writes at once after the first commit of a turn and leaves the others to the turn end', async () => {
    const o = outbox();
    const a = new Member(o);
    const b = new Member(o);
    a.output();
    o.writeCommitted(true);
    assert.equal(a.writes, 1, 'the first commit of the turn is written at once');
    a.output();
    b.output();
    o.writeCommitted(true);
    a.output();
    o.writeCommitted(true);
    assert.deepEqual([a.writes, b.writes], [1, 0], 'later commits of the turn wait');
    await turnEnd();
    assert.deepEqual([a.writes, b.writes], [2, 1], 'the turn end writes each connection once');
    b.output();
    o.writeCommitted(true);
    assert.equal(b.writes, 2, 'the first commit of the next turn is written at once again');
  });
});
