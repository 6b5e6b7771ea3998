// The shard outboxes in the replicated state (docs/scale-out.md "Forwarding"): a QoS 1 publish whose
// entry names other shards is copied into each one's outbox with the next contiguous sequence; a
// full outbox refuses the publish whole (MQTT 5 PUBACK 0x97, 3.1.1 a close), as the bridges' rule
// does; `shard-position` removes only a forwarded prefix; and the outboxes survive a snapshot,
// whose decoder refuses a gap in the sequence.
import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { describe, it } from 'node:test';
import { Packr } from 'msgpackr';
import { decodeCommand, encodeCommand } from '../log/command-codec.js';
import { RC } from '../protocol/reason-codes.js';
import { parseSharedFilter } from '../protocol/topic.js';
import { Broker } from './broker.js';
import { Harness, msg, published, sent, testSettings } from './broker-harness.testkit.js';
import type { Command, Effect } from './commands.js';
import { decodeImage } from './snapshot.js';
import { commandProblem } from './validate.js';

const parseShare = parseSharedFilter;

function publisher(h: Harness, protocol: 4 | 5 = 5): string {
  const conn = h.conn(1);
  h.connect(conn, 'pub', { protocol, clean: true });
  return conn;
}

const fwd = (h: Harness, conn: string, pid: number, topic: string, dests: string[], retain = false): Effect[] =>
  h.apply({ t: 'publish', conn, pid, msg: msg(topic, `m${pid}`, 1, retain), fwd: dests });

const seqs = (h: Harness, dest: string): number[] => (h.broker.shardOutbox(dest)?.items.toArray() ?? []).map((it) => it.seq);

describe('shard outboxes', () => {
  it('gives each forwarded message the next sequence per destination, and acknowledges it', () => {
    const h = new Harness();
    h.serveStart();
    const p = publisher(h);
    const first = fwd(h, p, 1, 't/x', ['b']);
    fwd(h, p, 2, 't/y', ['b', 'c']);
    fwd(h, p, 3, 't/z', ['c'], true);
    assert.deepEqual(sent(first, p), [{ type: 'puback', pid: 1, code: RC.SUCCESS }], 'forwarded counts as matched');
    assert.deepEqual(seqs(h, 'b'), [1, 2]);
    assert.deepEqual(seqs(h, 'c'), [1, 2]);
    const c = h.broker.shardOutbox('c');
    assert.equal(c?.items.at(1)?.msg.retain, false, 'not retained at the destination');
    assert.equal(c?.items.at(1)?.msg.topic, 't/z');
    assert.deepEqual(h.broker.shardDests, ['b', 'c']);
    assert.notEqual(h.broker.shardOutbox('b')?.log, undefined);
  });

  it('refuses a publish whole when a destination outbox is full: 0x97 for MQTT 5, a close for 3.1.1', () => {
    for (const protocol of [5, 4] as const) {
      const h = new Harness({ ...testSettings, bridgeOutboxMessages: 2 });
      h.serveStart();
      const p = publisher(h, protocol);
      const sub = h.conn(2);
      h.connect(sub, 'sub', { clean: true });
      h.subscribe(sub, 1, [{ filter: 't/#', qos: 1 }]);
      fwd(h, p, 1, 't/1', ['b']);
      fwd(h, p, 2, 't/2', ['b']);
      const out = fwd(h, p, 3, 't/3', ['a', 'b']);
      assert.deepEqual(seqs(h, 'b'), [1, 2]);
      assert.equal(h.broker.shardOutbox('a'), undefined, 'nothing copied anywhere');
      assert.deepEqual(
        published(out, sub).map((x) => x.msg.topic),
        [],
        'not delivered locally either',
      );
      if (protocol === 5) assert.deepEqual(sent(out, p), [{ type: 'puback', pid: 3, code: RC.QUOTA_EXCEEDED }]);
      else
        assert.deepEqual(
          out.filter((e) => e.t === 'close'),
          [{ t: 'close', conn: p, reason: RC.QUOTA_EXCEEDED }],
        );
      assert.ok(out.some((e) => e.t === 'event' && e.kind === 'shard-outbox-refused'));
      // Once JetStream took the first, there is room again.
      h.apply({ t: 'shard-position', dest: 'b', below: 2 });
      if (protocol === 5) {
        assert.deepEqual(sent(fwd(h, p, 4, 't/4', ['b']), p), [{ type: 'puback', pid: 4, code: RC.SUCCESS }]);
        assert.deepEqual(seqs(h, 'b'), [2, 3]);
      }
    }
  });

  it('moves the position only forward and never past what was assigned', () => {
    const h = new Harness();
    h.serveStart();
    const p = publisher(h);
    for (let i = 1; i <= 4; i++) fwd(h, p, i, `t/${i}`, ['b']);
    h.apply({ t: 'shard-position', dest: 'b', below: 3 });
    assert.deepEqual(seqs(h, 'b'), [3, 4]);
    for (const below of [2, 3, 6]) {
      const out = h.apply({ t: 'shard-position', dest: 'b', below });
      assert.ok(
        out.some((e) => e.t === 'event' && e.kind === 'no-op'),
        `below ${below}`,
      );
    }
    assert.ok(h.apply({ t: 'shard-position', dest: 'zz', below: 2 }).some((e) => e.t === 'event' && e.kind === 'no-op'));
    h.apply({ t: 'shard-position', dest: 'b', below: 5 });
    assert.deepEqual(seqs(h, 'b'), []);
    assert.equal(h.broker.shardOutbox('b')?.position, 5);
    fwd(h, p, 5, 't/5', ['b']);
    assert.deepEqual(seqs(h, 'b'), [5], 'the sequence goes on after an empty outbox');
  });

  it('keeps the outboxes, sequences and identity across a snapshot, and refuses one with a gap', () => {
    const h = new Harness();
    h.serveStart();
    const p = publisher(h);
    for (let i = 1; i <= 3; i++) fwd(h, p, i, `t/${i}`, ['b', 'c']);
    h.apply({ t: 'shard-position', dest: 'c', below: 3 });
    const bytes = Buffer.concat([...h.broker.snapshot()]);
    const b = new Broker();
    b.restore([bytes]);
    assert.equal(b.digest(), h.broker.digest());
    assert.deepEqual(b.shardOutbox('b')?.items.toArray(), h.broker.shardOutbox('b')?.items.toArray());
    assert.equal(b.shardOutbox('c')?.position, 3);
    assert.equal(b.shardOutbox('c')?.next, 4);
    assert.equal(b.shardOutbox('b')?.log, h.broker.shardOutbox('b')?.log);

    const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });
    const root = packr.unpack(bytes) as unknown[];
    const shards = root[12] as unknown[][];
    const items = shards[0]?.[4] as unknown[][] | undefined;
    assert.ok(items !== undefined);
    items.splice(1, 1);
    assert.throws(() => decodeImage(packr.pack(root), parseShare), /holds 2 items for sequences 1 to 3/);
  });

  it('checks what the log carries: fwd only on QoS 1, sorted shard names; shard-position', () => {
    const base = { t: 'publish', conn: '1.1', pid: 1, msg: msg('t', 'x', 1) };
    assert.equal(commandProblem({ ...base, fwd: ['a', 'b'] }), null);
    assert.equal(commandProblem({ ...base, fwd: ['b', 'a'] }), 'bad publish fwd');
    assert.equal(commandProblem({ ...base, fwd: ['a', 'a'] }), 'bad publish fwd');
    assert.equal(commandProblem({ ...base, fwd: [] }), 'bad publish fwd');
    assert.equal(commandProblem({ ...base, fwd: ['A'] }), 'bad publish fwd');
    assert.equal(commandProblem({ ...base, pid: undefined, msg: msg('t', 'x', 0), fwd: ['a'] }), 'bad publish fwd');
    assert.equal(commandProblem({ ...base, msg: msg('t', 'x', 2), fwd: ['a'] }), 'bad publish fwd');
    assert.equal(commandProblem({ t: 'shard-position', dest: 'b', below: 1 }), null);
    assert.equal(commandProblem({ t: 'shard-position', dest: 'b', below: 0 }), 'bad shard-position');
    assert.equal(commandProblem({ t: 'shard-position', dest: 'B', below: 2 }), 'bad shard-position');
    const cmd: Command = { t: 'publish', conn: '1.1', pid: 7, msg: msg('t/x', 'hi', 1), fwd: ['b', 'c'] };
    assert.deepEqual((decodeCommand(encodeCommand(cmd)) as typeof cmd).fwd, ['b', 'c'], 'the codec keeps fwd');
  });
});
