// The live trace's tracer alone: it follows a publish through append, commit and apply by its
// proposal and index, counts deliveries and the publisher's ack from the effects, keeps a bounded
// ring, bounds its watchers, and forgets everything once the last watcher closes.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Command, Effect, Message } from '../broker/commands.js';
import { isLoopbackHost } from '../cluster/status-page.js';
import { PublishTracer, TRACE_RECORDS_MAX, TRACE_WATCHERS_MAX } from './publish-trace.js';

function message(topic: string, qos: 0 | 1 = 1): Message {
  return { topic, payload: new Uint8Array(3), qos, retain: false };
}

describe('PublishTracer', () => {
  it('is off, and evaluates nothing, until a watcher opens', () => {
    const t = new PublishTracer();
    assert.equal(t.on, false);
    const id = t.open('a/#') as number;
    assert.equal(t.on, true);
    t.read('c1', 'c', message('b/x'), 1);
    assert.equal(t.evaluations, 1);
    assert.equal(t.records.length, 0, 'a topic outside the filter is not kept');
    t.close(id);
    assert.equal(t.on, false);
  });

  it('follows a QoS 1 publish through append, commit and apply', () => {
    const t = new PublishTracer();
    const id = t.open('a/+') as number;
    const msg = message('a/b');
    t.read('c7', 'pub', msg, 42);
    const cmd: Command = { t: 'publish', conn: 'c7', pid: 42, msg };
    t.appended(cmd, { index: 10, term: 3 });
    t.committed(9, 11, (i) => (i === 10 ? [1, 3] : []));
    // Applied from the decoded entry: a different object with the same index.
    const out: Effect[] = [
      { t: 'send', conn: 'c8', packet: { type: 'publish', qos: 1, retain: false, dup: false, msg, pid: 1 } },
      { t: 'send', conn: 'c9', packet: { type: 'publish', qos: 0, retain: false, dup: false, msg } },
      { t: 'send', conn: 'c7', packet: { type: 'puback', pid: 42, code: 0 } },
    ];
    t.applied({ index: 10, time: 0, cmd: { t: 'publish', conn: 'c7', pid: 42, msg: message('a/b') } }, out);
    const [r] = t.changedFor(id, 0);
    assert.ok(r !== undefined);
    assert.equal(r.index, 10);
    assert.equal(r.term, 3);
    assert.deepEqual(r.storedOn, [1, 3]);
    assert.equal(r.delivered, 2);
    assert.equal(r.ack, 'puback');
    assert.ok(r.appliedAt >= r.readAt && r.committedAt >= r.appendedAt);
    assert.equal('msg' in r, false, 'internal fields are not shown');
    assert.equal('ticket' in r, false, 'internal fields are not shown');
    assert.deepEqual(t.changedFor(id, t.version), [], 'nothing changed since the last version');
  });

  it('follows the ticket when the driver moves its index before the append', () => {
    const t = new PublishTracer();
    const id = t.open('a/#') as number;
    const msg = message('a/b');
    t.read('c7', 'pub', msg, 42);
    const ticket = { index: 10, term: 3 };
    t.appended({ t: 'publish', conn: 'c7', pid: 42, msg }, ticket);
    // The core appended a configuration change first: the batch, and this entry, moved one on.
    ticket.index = 11;
    t.committed(11, 11, (i) => (i === 11 ? [1, 2] : []));
    t.applied({ index: 11, time: 0, cmd: { t: 'publish', conn: 'c7', pid: 42, msg: message('a/b') } }, [
      { t: 'send', conn: 'c7', packet: { type: 'puback', pid: 42, code: 0 } },
    ]);
    const [r] = t.changedFor(id, 0);
    assert.equal(r?.index, 11);
    assert.deepEqual(r?.storedOn, [1, 2]);
    assert.ok((r?.appliedAt ?? 0) > 0, 'the applied entry was found at its moved index');
  });

  it('follows a QoS 0 message routed without the log', () => {
    const t = new PublishTracer();
    const id = t.open('#') as number;
    const msg = message('x', 0);
    t.read('c1', null, msg, 0);
    t.routed(msg, [{ t: 'send', conn: 'c2', packet: { type: 'publish', qos: 0, retain: false, dup: false, msg } }]);
    const [r] = t.changedFor(id, 0);
    assert.equal(r?.path, 'direct');
    assert.equal(r?.delivered, 1);
    assert.equal(r?.ack, null);
  });

  it('keeps at most TRACE_RECORDS_MAX records and TRACE_WATCHERS_MAX watchers', () => {
    const t = new PublishTracer();
    const ids: number[] = [];
    for (let i = 0; i < TRACE_WATCHERS_MAX; i++) ids.push(t.open('#') as number);
    assert.equal(t.open('#'), null);
    for (let i = 0; i < TRACE_RECORDS_MAX + 10; i++) t.read('c1', null, message(`t/${i}`), i);
    assert.equal(t.records.length, TRACE_RECORDS_MAX);
    assert.equal(t.records[0]?.topic, 't/10', 'the oldest were forgotten first');
    for (const id of ids) t.close(id);
    assert.equal(t.records.length, 0, 'nothing kept once nobody watches');
  });
});

describe('isLoopbackHost', () => {
  it('opens the status page without a token on loopback binds only', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', '::1', 'localhost']) assert.equal(isLoopbackHost(h), true, h);
    for (const h of ['0.0.0.0', '::', '10.0.0.1', '192.168.1.5', '', 'example.com']) assert.equal(isLoopbackHost(h), false, h);
  });
});
