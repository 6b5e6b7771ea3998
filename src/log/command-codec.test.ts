import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { Packr } from 'msgpackr';
import type { Command } from '../broker/commands.js';
import { CommandDecodeError, decodeCommand, encodeCommand, StringMemo } from './command-codec.js';

/** Commands encoded by an earlier version (test/fixtures/commands-format-1/README.md). */
const FORMAT_1 = new URL('../../../test/fixtures/commands-format-1/commands.json', import.meta.url);
const format1 = (): Record<string, { hex: string; cmd: Command }> => JSON.parse(readFileSync(FORMAT_1, 'utf8'));

// The hand-written layout of publish and ack must decode to exactly what msgpackr alone gave
// before it, so a log of either encoding applies the same values.
const msgpack = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });
const viaMsgpack = (cmd: Command): Command => msgpack.unpack(msgpack.pack(cmd)) as Command;

const arbConn = fc.tuple(fc.nat(1e9), fc.nat(1e9)).map(([p, s]) => `${p}.${s}`);
const arbPayload = fc.uint8Array({ maxLength: 300 });
const arbPublish: fc.Arbitrary<Command> = fc
  .record({
    conn: arbConn,
    pid: fc.option(fc.integer({ min: 0, max: 0xffff }), { nil: undefined }),
    topic: fc.string({ unit: 'grapheme', maxLength: 40 }),
    payload: arbPayload,
    qos: fc.constantFrom(0 as const, 1 as const, 2 as const),
    retain: fc.boolean(),
    expiryS: fc.option(fc.nat(), { nil: undefined }),
  })
  .map(({ conn, pid, topic, payload, qos, retain, expiryS }) => {
    const msg: Extract<Command, { t: 'publish' }>['msg'] = { topic, payload, qos, retain };
    if (expiryS !== undefined) msg.props = { expiryS, userProps: [['k', 'v']] };
    return pid === undefined ? { t: 'publish', conn, msg } : { t: 'publish', conn, pid, msg };
  });
const arbAck: fc.Arbitrary<Command> = fc.record({
  t: fc.constant('ack' as const),
  conn: arbConn,
  pid: fc.integer({ min: 0, max: 0xffff }),
  kind: fc.constantFrom('puback' as const, 'pubrec' as const, 'pubcomp' as const),
});

const arbAcks: fc.Arbitrary<Command> = fc.record({
  t: fc.constant('acks' as const),
  conn: arbConn,
  acks: fc.array(
    fc.record({
      pid: fc.integer({ min: 0, max: 0xffff }),
      kind: fc.constantFrom('puback' as const, 'pubrec' as const, 'pubcomp' as const),
    }),
    { minLength: 1, maxLength: 60 },
  ),
});

/** Several publishes and PUBRELs of one connection; some publishes with properties, which send the
 * whole command to msgpackr. */
const arbPublishes: fc.Arbitrary<Command> = fc
  .tuple(arbConn, fc.array(fc.oneof(arbPublish, fc.integer({ min: 0, max: 0xffff })), { minLength: 2, maxLength: 20 }), fc.boolean())
  .map(([conn, items, plain]) => ({
    t: 'publishes' as const,
    conn,
    pubs: items.map((c) => {
      if (typeof c === 'number') return { t: 'pubrel' as const, conn, pid: c };
      const p = c as Extract<Command, { t: 'publish' }>;
      const msg = { ...p.msg };
      if (plain) delete msg.props;
      return { ...p, conn, msg };
    }),
  }));

describe('command codec', { timeout: 30_000 }, () => {
  it('encodes a bridge-position command as a msgpack map and decodes it to the same value', () => {
    const cmd: Command = { t: 'bridge-position', bridge: 'cloud', below: 123_456_789_012 };
    const bytes = encodeCommand(cmd);
    assert.notEqual(bytes[0], 0xc1);
    assert.deepEqual(decodeCommand(bytes), cmd);
  });

  it('decodes publish, publishes, ack and acks commands to the same values as a msgpackr round trip', () => {
    fc.assert(
      fc.property(fc.oneof(arbPublish, arbPublishes, arbAck, arbAcks), (cmd) => {
        const got = decodeCommand(encodeCommand(cmd));
        assert.deepStrictEqual(got, viaMsgpack(cmd));
        if (got.t === 'publish') assert.ok(Buffer.isBuffer(got.msg.payload), 'payload is a Buffer, as msgpackr gives');
        if (got.t === 'publishes')
          for (const p of got.pubs) if (p.t === 'publish') assert.ok(Buffer.isBuffer(p.msg.payload), 'payload is a Buffer');
      }),
      { numRuns: 1000 },
    );
  });

  it('uses the hand-written layout for a publish without properties and for an ack, msgpack otherwise', () => {
    const plain: Command = { t: 'publish', conn: '3.9', pid: 7, msg: { topic: 't', payload: new Uint8Array([1]), qos: 1, retain: false } };
    const withProps: Command = {
      t: 'publish',
      conn: '3.9',
      msg: { topic: 't', payload: new Uint8Array(), qos: 0, retain: true, props: { expiryS: 5 } },
    };
    assert.equal(encodeCommand(plain)[0], 0xc1);
    assert.equal(encodeCommand({ t: 'ack', conn: '3.9', pid: 1, kind: 'pubcomp' })[0], 0xc1);
    const acks = encodeCommand({
      t: 'acks',
      conn: '3.9',
      acks: [
        { pid: 1, kind: 'puback' },
        { pid: 2, kind: 'pubrec' },
      ],
    });
    assert.deepStrictEqual([...acks.subarray(0, 10)], [0xc1, 3, 0, 2, 0, 0, 1, 1, 0, 2]);
    assert.notEqual(encodeCommand(withProps)[0], 0xc1);
    assert.deepStrictEqual(decodeCommand(encodeCommand(withProps)), viaMsgpack(withProps));
  });

  it('uses the hand-written layout for publishes without properties, msgpack when one item has them', () => {
    const item = (pid: number | undefined, payload: number[], retain = false): Extract<Command, { t: 'publish' }> => {
      const msg = { topic: 'a/b', payload: new Uint8Array(payload), qos: pid === undefined ? (0 as const) : (1 as const), retain };
      return pid === undefined ? { t: 'publish', conn: '3.9', msg } : { t: 'publish', conn: '3.9', pid, msg };
    };
    const cmd: Command = {
      t: 'publishes',
      conn: '3.9',
      pubs: [item(7, [1, 2]), item(undefined, [], true), { t: 'pubrel', conn: '3.9', pid: 258 }],
    };
    const bytes = encodeCommand(cmd);
    // c1 04 count conn(3.9) | pid flag, qos 1, pid 7, topic a/b, payload 2: 01 02 | retain, qos 0, no pid, a/b, payload 0 | pubrel 258
    assert.deepStrictEqual(
      [...bytes],
      [
        0xc1, 4, 0, 3, 0, 3, 0x33, 0x2e, 0x39, 1, 1, 0, 7, 0, 3, 0x61, 0x2f, 0x62, 0, 0, 0, 2, 1, 2, 2, 0, 0, 0, 0, 3, 0x61, 0x2f, 0x62, 0,
        0, 0, 0, 4, 1, 2,
      ],
    );
    assert.deepStrictEqual(decodeCommand(bytes), viaMsgpack(cmd));
    const withProps: Command = {
      t: 'publishes',
      conn: '3.9',
      pubs: [item(7, [1]), { ...item(8, [2]), msg: { ...item(8, [2]).msg, props: { expiryS: 5 } } }],
    };
    assert.notEqual(encodeCommand(withProps)[0], 0xc1);
    assert.deepStrictEqual(decodeCommand(encodeCommand(withProps)), viaMsgpack(withProps));
    const otherConn: Command = { t: 'publishes', conn: '3.9', pubs: [item(7, [1]), { ...item(8, [2]), conn: '3.10' }] };
    assert.notEqual(encodeCommand(otherConn)[0], 0xc1, 'an item of another conn is not expressible by the layout');
    assert.deepStrictEqual(decodeCommand(encodeCommand(otherConn)), viaMsgpack(otherConn));
  });

  it('keeps the quotaExceeded mark of a publish, which the hand-written layout has no room for', () => {
    const refused: Command = {
      t: 'publish',
      conn: '3.9',
      pid: 7,
      msg: { topic: 't', payload: new Uint8Array(), qos: 2, retain: false },
      quotaExceeded: true,
    };
    assert.deepStrictEqual(decodeCommand(encodeCommand(refused)), viaMsgpack(refused));
    assert.equal((decodeCommand(encodeCommand(refused)) as { quotaExceeded?: boolean }).quotaExceeded, true);
  });

  it('still decodes publish, publishes, ack and acks commands that msgpackr encoded', () => {
    fc.assert(
      fc.property(fc.oneof(arbPublish, arbPublishes, arbAck, arbAcks), (cmd) => {
        assert.deepStrictEqual(decodeCommand(msgpack.pack(cmd)), viaMsgpack(cmd));
      }),
      { numRuns: 200 },
    );
  });

  it('refuses a type that is not a string, a 64-bit integer too, with a decode error (found by fuzz/targets/command-codec.ts)', () => {
    // {t: uint64, conn: 'c1', reason: 0, publishWill: false}: msgpackr reads the uint64 as a BigInt,
    // which the message's JSON.stringify threw on as a TypeError.
    const bytes = Buffer.from('84a174cf000000006f6e6ea26331a6726561736f6e00ab7075626c69736857696c6cc2', 'hex');
    assert.throws(
      () => decodeCommand(bytes),
      (e: unknown) => e instanceof CommandDecodeError && e.message === 'unknown command type of type bigint',
    );
    for (const t of [7, null, [1], { a: 1 }, true]) {
      assert.throws(
        () => decodeCommand(msgpack.pack({ t, conn: 'c1' })),
        (e: unknown) => e instanceof CommandDecodeError && /^unknown command type of type /.test(e.message),
      );
    }
    assert.throws(() => decodeCommand(msgpack.pack({ t: 'nope' })), /unknown command type "nope"/);
  });

  it('refuses truncated or out-of-range hand-written bytes with a decode error, never another throw', () => {
    const publish = encodeCommand({
      t: 'publish',
      conn: '1.2',
      pid: 9,
      msg: { topic: 'a/b', payload: new Uint8Array([5, 6]), qos: 2, retain: true },
    });
    const ack = encodeCommand({ t: 'ack', conn: '1.2', pid: 9, kind: 'puback' });
    const acks = encodeCommand({
      t: 'acks',
      conn: '1.2',
      acks: [
        { pid: 9, kind: 'puback' },
        { pid: 10, kind: 'pubcomp' },
      ],
    });
    const publishes = encodeCommand({
      t: 'publishes',
      conn: '1.2',
      pubs: [
        { t: 'publish', conn: '1.2', pid: 9, msg: { topic: 'a/b', payload: new Uint8Array([5, 6]), qos: 1, retain: false } },
        { t: 'publish', conn: '1.2', pid: 10, msg: { topic: 'c', payload: new Uint8Array([7]), qos: 2, retain: true } },
        { t: 'pubrel', conn: '1.2', pid: 3 },
      ],
    });
    for (let cut = 1; cut < publishes.length; cut++) {
      assert.throws(
        () => decodeCommand(publishes.subarray(0, cut)),
        (e: unknown) => e instanceof CommandDecodeError,
        `publishes cut at ${cut} is refused: every item's length is in the bytes`,
      );
    }
    const extra = Buffer.concat([publishes, Buffer.from([0])]);
    assert.throws(() => decodeCommand(extra), /bytes after its last item/);
    const one = Buffer.from(publishes);
    one.writeUInt16BE(1, 2);
    assert.throws(() => decodeCommand(one), /publishes command count 1 out of range/);
    for (const whole of [publish, ack, acks, publishes]) {
      for (let cut = 1; cut < whole.length; cut++) {
        try {
          decodeCommand(whole.subarray(0, cut));
        } catch (err) {
          assert.ok(err instanceof CommandDecodeError, `cut at ${cut}: ${String(err)}`);
        }
      }
    }
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), (tail) => {
        const bytes = Uint8Array.from([0xc1, ...tail]);
        try {
          decodeCommand(bytes);
        } catch (err) {
          assert.ok(err instanceof CommandDecodeError, String(err));
        }
      }),
      { numRuns: 1000 },
    );
    assert.throws(() => decodeCommand(Uint8Array.from([0xc1, 9])), CommandDecodeError);
    // acks: a count of 0, a count beyond the bytes, a count over the bound, a kind out of range
    assert.throws(() => decodeCommand(Uint8Array.from([0xc1, 3, 0, 0, 0x31])), /count 0/);
    assert.throws(() => decodeCommand(Uint8Array.from([0xc1, 3, 0, 2, 0, 0, 1])), /truncated/);
    assert.throws(() => decodeCommand(Uint8Array.from([0xc1, 3, 0xff, 0xff, 0, 0, 1])), /out of range/);
    assert.throws(() => decodeCommand(Uint8Array.from([0xc1, 3, 0, 1, 7, 0, 1, 0x31])), /kind out of range/);
    assert.throws(() => decodeCommand(Uint8Array.from([0xc1, 2, 3, 0, 1])), CommandDecodeError);
    assert.throws(() => decodeCommand(Uint8Array.from([0xc1, 1, 4, 0, 0, 0, 0, 0, 0, 0])), CommandDecodeError);
  });

  it('decodes the log entries an earlier version wrote, to the commands they were made from', () => {
    const fixtures = format1();
    assert.ok(Object.keys(fixtures).length >= 9);
    for (const [name, { hex, cmd }] of Object.entries(fixtures)) {
      assert.deepEqual(decodeCommand(Buffer.from(hex, 'hex')), cmd, name);
    }
  });

  it('decodes through its string memo exactly what toString gives, whatever the bytes and collisions', () => {
    // Two slots: most strings collide, so a stale slot answering for other bytes would show.
    const memo = new StringMemo(2);
    const arbBytes = fc.oneof(
      fc.string({ unit: 'grapheme', maxLength: 20 }).map((t) => Buffer.from(t, 'utf8')),
      fc.uint8Array({ maxLength: 20 }).map((u) => Buffer.from(u)),
      fc.constantFrom(Buffer.from('bench/1'), Buffer.from('bench/2'), Buffer.from([0xc3]), Buffer.alloc(300, 0x61)),
    );
    fc.assert(
      fc.property(fc.array(fc.tuple(arbBytes, fc.nat(4)), { minLength: 1, maxLength: 30 }), (items) => {
        for (const [bytes, pad] of items) {
          // The bytes at an offset inside a larger buffer, as in an entry; the buffer is then
          // overwritten, which must not change what the memo answers later.
          const buf = Buffer.alloc(pad + bytes.length + pad, 0x7a);
          bytes.copy(buf, pad);
          assert.equal(memo.decode(buf, pad, pad + bytes.length), bytes.toString('utf8'));
          buf.fill(0x41);
        }
      }),
      { numRuns: 300 },
    );
  });

  it('keeps its own copy of the bytes it memoized', () => {
    // An entry's buffer is reused or overwritten later; the memo must not read it again. One
    // slot, so the second lookup meets what the first one left.
    const memo = new StringMemo(1);
    const buf = Buffer.from('xxbench/1');
    assert.equal(memo.decode(buf, 2, 9), 'bench/1');
    buf.write('bench/2', 2);
    assert.equal(memo.decode(buf, 2, 9), 'bench/2');
    assert.throws(() => new StringMemo(3), RangeError);
  });
});
