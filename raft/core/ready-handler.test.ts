import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LogEntry, Message } from './messages.js';
import type { Ready } from './raft.js';
import { drainReady, handleReady, type ReadySink, type ReadySource } from './ready-handler.js';
import type { Snapshot } from './snapshot.js';
import { staticEnvelope } from './test-cluster.js';

const entry = (index: number): LogEntry => ({ index, term: 1, time: 0, data: null });
const message = (to: number): Message => ({ ...staticEnvelope, type: 'heartbeat', from: 1, to, term: 1, commit: 0, sentAt: 0 });
const snapshot: Snapshot = { index: 4, term: 1, time: 0, config: null, chunks: [new Uint8Array(0)], bytes: 0 };

function ready(parts: Partial<Ready> = {}): Ready {
  return { messages: [], snapshot: null, appended: [], truncatedFrom: null, committed: [], softState: null, hardState: null, ...parts };
}

const full = (): Ready =>
  ready({
    messages: [message(2), message(3)],
    appended: [entry(5)],
    truncatedFrom: 5,
    snapshot,
    committed: [entry(5)],
    softState: { role: 'follower', term: 1, leader: 2, commit: 5 },
  });

/** Records every call; stops the node when the step named `stopAt` is called. */
function recorder(stopAt?: string): { sink: ReadySink; calls: string[] } {
  const calls: string[] = [];
  let live = true;
  const note = (call: string): void => {
    calls.push(call);
    if (call.split(' ')[0] === stopAt) live = false;
  };
  const sink: ReadySink = {
    live: () => live,
    begin: () => note('begin'),
    send: (m) => note(`send ${m.to}`),
    appended: (entries, from) => note(`appended ${entries.map((e) => e.index).join(',')} from ${from}`),
    restore: (s) => note(`restore ${s.index}`),
    committed: (entries) => note(`committed ${entries.map((e) => e.index).join(',')}`),
    softState: (s) => note(`softState ${s.role}`),
  };
  return { sink, calls };
}

function source(readies: Ready[]): ReadySource & { left: () => number } {
  return { hasReady: () => readies.length > 0, takeReady: () => readies.shift()!, left: () => readies.length };
}

describe('raft ready handler: one order for the driver and the simulator', () => {
  it('begins, sends every message, reports the append, restores, then applies and reports soft state', () => {
    const { sink, calls } = recorder();
    handleReady(full(), sink);
    assert.deepEqual(calls, ['begin', 'send 2', 'send 3', 'appended 5 from 5', 'restore 4', 'committed 5', 'softState follower']);
  });

  it('skips the parts a Ready does not have; a truncation alone is reported', () => {
    const { sink, calls } = recorder();
    handleReady(ready(), sink);
    handleReady(ready({ truncatedFrom: 3 }), sink);
    assert.deepEqual(calls, ['begin', 'begin', 'appended  from 3']);
  });

  it('a node that stops while restoring applies nothing more, and the drain takes no further Ready', () => {
    const { sink, calls } = recorder('restore');
    const core = source([full(), full()]);
    assert.equal(drainReady(core, sink), 1);
    assert.deepEqual(calls, ['begin', 'send 2', 'send 3', 'appended 5 from 5', 'restore 4']);
    assert.equal(core.left(), 1, 'the second Ready stays with the core');
  });

  it('drains until the core has no Ready, and takes none from a node that is not live', () => {
    const live = recorder();
    const core = source([ready({ messages: [message(2)] }), ready({ committed: [entry(1)] })]);
    assert.equal(drainReady(core, live.sink), 2);
    assert.deepEqual(live.calls, ['begin', 'send 2', 'begin', 'committed 1']);
    assert.equal(drainReady(core, live.sink), 0);

    const stopped = recorder('begin');
    stopped.sink.begin(ready());
    const waiting = source([full()]);
    assert.equal(drainReady(waiting, stopped.sink), 0);
    assert.equal(waiting.left(), 1);
  });
});
