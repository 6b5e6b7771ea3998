import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import type { Append, AppendResponse, Heartbeat, HeartbeatResponse, LogEntry, Message } from '../core/messages.js';
import { type ValidationContext, validateMessage } from '../core/validate.js';
import { BodyRefusal, packBody } from '../transport/codec.js';
import {
  ENCODED_RUNS_CACHED,
  ENTRY_FIXED_BYTES,
  RaftWireDecoder,
  RaftWireEncoder,
  raftWireCodec,
  STRING_BYTES_MAX,
  TAG_APPEND,
  WIRE_VERSION_MSGPACK,
  WIRE_VERSION_RAFT,
} from './wire-codec.js';

const NODES = [1, 2, 3, 4, 5];
const ctxFor = (self: number): ValidationContext => ({ self, nodes: NODES, entriesPerAppendMax: 64 });

/** Data as plain Uint8Arrays (a decoded entry's data may be a Buffer view), for deep equality. */
function plain(m: unknown): unknown {
  if (typeof m !== 'object' || m === null || (m as Message).type !== 'append') return m;
  const a = m as Append;
  return { ...a, entries: a.entries.map((e) => ({ ...e, data: e.data === null ? null : Uint8Array.from(e.data) })) };
}

/** Encodes, copies the body out of the encoder's scratch (as the transport's frame does), decodes. */
function roundTrip(
  m: Message,
  encoder = new RaftWireEncoder(),
  decoder = new RaftWireDecoder(),
): { version: number; body: Uint8Array; back: unknown } {
  const { version, body } = encoder.encode(m);
  const copy = Uint8Array.from(body);
  return { version, body: copy, back: decoder.decode(version, copy) };
}

const id = fc.string({ unit: 'binary', maxLength: 128 });
const clock = fc.double({ min: 0, max: 1e15, noNaN: true });
const index = fc.maxSafeNat();

/** Valid envelopes: distinct peers of NODES, ids of any well-formed text. */
const envelope = fc
  .record({
    from: fc.constantFrom(...NODES),
    toOffset: fc.integer({ min: 1, max: NODES.length - 1 }),
    term: fc.nat({ max: 2 ** 40 }),
    cluster: id,
    epoch: index,
    epochId: id,
    fromInc: id,
    toInc: id,
  })
  .map(({ toOffset, ...e }) => ({ ...e, to: NODES[(NODES.indexOf(e.from) + toOffset) % NODES.length] as number }));

const entryData = fc.oneof(fc.constant(null), fc.uint8Array({ maxLength: 300 }));

const append: fc.Arbitrary<Append> = fc
  .record({
    env: envelope,
    prevIndex: fc.nat({ max: 2 ** 50 }),
    prevTermBack: fc.nat({ max: 5 }),
    steps: fc.array(fc.record({ dt: fc.nat({ max: 2 }), dtime: fc.nat({ max: 1000 }), data: entryData }), { maxLength: 64 }),
    commit: index,
    sentAt: clock,
    time0: fc.nat({ max: 2 ** 45 }),
  })
  .map(({ env, prevIndex, prevTermBack, steps, commit, sentAt, time0 }) => {
    const prevTerm = prevIndex === 0 ? 0 : Math.max(0, env.term - prevTermBack);
    let term = prevTerm;
    let time = time0;
    const entries: LogEntry[] = steps.map((s, k) => {
      term = Math.min(env.term, term + s.dt);
      time += s.dtime;
      return { index: prevIndex + 1 + k, term, time, data: s.data };
    });
    return { type: 'append' as const, ...env, prevIndex, prevTerm, entries, commit, sentAt };
  });

const appendResponse: fc.Arbitrary<AppendResponse> = fc
  .record({ env: envelope, success: fc.boolean(), index, hint: index, sentAt: clock })
  .map(({ env, ...r }) => ({ type: 'append-response' as const, ...env, ...r }));

const heartbeat: fc.Arbitrary<Heartbeat> = fc
  .record({ env: envelope, commit: index, sentAt: clock })
  .map(({ env, ...r }) => ({ type: 'heartbeat' as const, ...env, ...r }));

const heartbeatResponse: fc.Arbitrary<HeartbeatResponse> = fc
  .record({ env: envelope, sentAt: clock, wall: clock })
  .map(({ env, ...r }) => ({ type: 'heartbeat-response' as const, ...env, ...r }));

const hot: fc.Arbitrary<Message> = fc.oneof(append, appendResponse, heartbeat, heartbeatResponse);

const base = { from: 2, to: 1, term: 3, cluster: 'c', epoch: 1, epochId: 'e', fromInc: 'i2', toInc: 'i1' };
const sampleAppend: Append = {
  type: 'append',
  ...base,
  prevIndex: 4,
  prevTerm: 2,
  entries: [
    { index: 5, term: 3, time: 1000, data: null },
    { index: 6, term: 3, time: 1001, data: Uint8Array.from([0xaa, 0xbb]) },
  ],
  commit: 4,
  sentAt: 12.5,
};

/** Golden bodies: the layout is a wire format, so a change to it must show here. */
const fixtures: Array<{ m: Message; hex: string }> = [
  {
    m: sampleAppend,
    hex:
      '01' +
      '0000000000000040' + // from 2
      '000000000000f03f' + // to 1
      '0000000000000840' + // term 3
      '000000000000f03f' + // epoch 1
      '010063' + // cluster 'c'
      '010065' + // epochId 'e'
      '02006932' + // fromInc 'i2'
      '02006931' + // toInc 'i1'
      '0000000000001040' + // prevIndex 4
      '0000000000000040' + // prevTerm 2
      '0000000000001040' + // commit 4
      '0000000000002940' + // sentAt 12.5
      '02000000' + // 2 entries
      '000000000000144000000000000008400000000000408f40ffffffff' + // 5, term 3, time 1000, null
      '000000000000184000000000000008400000000000488f4002000000aabb', // 6, term 3, time 1001, 2 bytes
  },
  {
    m: { type: 'append-response', ...base, success: true, index: 6, hint: 0, sentAt: 12.5 },
    hex: '020000000000000040000000000000f03f0000000000000840000000000000f03f010063010065020069320200693101000000000000184000000000000000000000000000002940',
  },
  {
    m: { type: 'heartbeat', ...base, commit: 6, sentAt: 12.5 },
    hex: '030000000000000040000000000000f03f0000000000000840000000000000f03f010063010065020069320200693100000000000018400000000000002940',
  },
  {
    m: { type: 'heartbeat-response', ...base, sentAt: 12.5, wall: 1.5 },
    hex: '040000000000000040000000000000f03f0000000000000840000000000000f03f01006301006502006932020069310000000000002940000000000000f83f',
  },
];

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const fromHex = (s: string): Uint8Array => Uint8Array.from(Buffer.from(s, 'hex'));

/** Decodes without ever throwing, and whatever comes out the validator can judge without throwing. */
function judged(decoder: RaftWireDecoder, version: number, body: Uint8Array): 'refused' | 'valid' | 'invalid' {
  const value = decoder.decode(version, body);
  if (value instanceof BodyRefusal) {
    assert.ok(value.code === 'body-malformed' || value.code === 'body-not-msgpack');
    return 'refused';
  }
  return validateMessage(value, ctxFor(1)) === null ? 'valid' : 'invalid';
}

describe('raft wire layout', { timeout: 60_000 }, () => {
  it('decodes every hot message to a deep-equal one that the validator accepts as it did', () => {
    fc.assert(
      fc.property(hot, (m) => {
        assert.equal(validateMessage(m, ctxFor(m.to)), null, 'the generator makes valid messages');
        const { version, back } = roundTrip(m);
        assert.equal(version, WIRE_VERSION_RAFT);
        assert.deepStrictEqual(plain(back), plain(m));
        assert.equal(validateMessage(back, ctxFor(m.to)), null);
      }),
      { numRuns: 500 },
    );
  });

  it('carries any numbers and flags exactly, valid or not, for the validator to judge', () => {
    const anyNumber = fc.oneof(fc.double(), fc.integer(), fc.constant(-0));
    const loose = fc
      .record({ from: anyNumber, to: anyNumber, term: anyNumber, epoch: anyNumber, a: anyNumber, b: anyNumber, c: anyNumber, d: anyNumber })
      .map((r) => [
        { type: 'heartbeat', ...base, from: r.from, to: r.to, term: r.term, epoch: r.epoch, commit: r.a, sentAt: r.b },
        { type: 'append-response', ...base, term: r.term, success: false, index: r.a, hint: r.b, sentAt: r.c },
        {
          type: 'append',
          ...base,
          prevIndex: r.a,
          prevTerm: r.b,
          commit: r.c,
          sentAt: r.d,
          entries: [{ index: r.a, term: r.b, time: r.c, data: null }],
        },
      ]);
    fc.assert(
      fc.property(loose, (ms) => {
        for (const m of ms) {
          const { version, back } = roundTrip(m as Message);
          assert.equal(version, WIRE_VERSION_RAFT);
          assert.deepStrictEqual(back, m);
        }
      }),
    );
  });

  it('matches the fixtures byte for byte, and reads them back', () => {
    const encoder = new RaftWireEncoder();
    for (const f of fixtures) {
      const { version, body } = encoder.encode(f.m);
      assert.equal(version, WIRE_VERSION_RAFT);
      assert.equal(hex(body), f.hex, f.m.type);
      assert.deepStrictEqual(plain(new RaftWireDecoder().decode(WIRE_VERSION_RAFT, fromHex(f.hex))), plain(f.m));
    }
  });

  it('still reads msgpackr bodies of every message under version 1', () => {
    const decoder = new RaftWireDecoder();
    const vote: Message = { type: 'vote-request', ...base, lastIndex: 6, lastTerm: 3, transfer: false, sentAt: 1 };
    for (const m of [...fixtures.map((f) => f.m), vote]) {
      assert.deepStrictEqual(plain(decoder.decode(WIRE_VERSION_MSGPACK, packBody(m))), plain(m));
    }
    // The bytes msgpackr gave this append before the layout existed.
    const old =
      'de000ea474797065a6617070656e64a466726f6d02a2746f01a47465726d03a7636c7573746572a163a565706f636801a765706f63684964a165a766726f6d' +
      '496e63a26932a5746f496e63a26931a970726576496e64657804a8707265765465726d02a7656e747269657392de0004a5696e64657805a47465726d03a474' +
      '696d65cd03e8a464617461c0de0004a5696e64657806a47465726d03a474696d65cd03e9a464617461c402aabba6636f6d6d697404a673656e744174cb4029' +
      '000000000000';
    assert.equal(hex(packBody(sampleAppend)), old);
    assert.deepStrictEqual(plain(decoder.decode(WIRE_VERSION_MSGPACK, fromHex(old))), plain(sampleAppend));
    const refused = decoder.decode(WIRE_VERSION_MSGPACK, Uint8Array.from([0x92, 0x01]));
    assert.ok(refused instanceof BodyRefusal && refused.code === 'body-not-msgpack');
  });

  it('sends what the layout cannot carry exactly as msgpackr under version 1', () => {
    const config = [{ node: 1, inc: 'i1' }];
    const lone = '\ud800x';
    const cases: Message[] = [
      { ...sampleAppend, entries: [{ index: 5, term: 3, time: 1000, data: null, config }] },
      { ...sampleAppend, fromInc: lone },
      { ...sampleAppend, cluster: 'x'.repeat(STRING_BYTES_MAX + 1) },
      { type: 'heartbeat', ...base, commit: 6, sentAt: 'soon' as unknown as number },
      { type: 'append-response', ...base, success: 1 as unknown as boolean, index: 6, hint: 0, sentAt: 1 },
      { type: 'timeout-now', ...base },
    ];
    for (const m of cases) {
      const { version, back } = roundTrip(m);
      assert.equal(version, WIRE_VERSION_MSGPACK, JSON.stringify(m).slice(0, 80));
      // What msgpackr alone makes of it (it does not keep a lone surrogate either).
      assert.deepStrictEqual(plain(back), plain(new RaftWireDecoder().decode(WIRE_VERSION_MSGPACK, packBody(m))));
      if (m.fromInc !== lone) assert.deepStrictEqual(plain(back), plain(m));
    }
  });

  it('refuses every truncation and every extension of an encoding', () => {
    fc.assert(
      fc.property(hot, fc.uint8Array({ minLength: 1, maxLength: 9 }), (m, extra) => {
        const { body } = roundTrip(m);
        const decoder = new RaftWireDecoder();
        for (let n = 0; n < body.length; n++)
          assert.equal(judged(decoder, WIRE_VERSION_RAFT, body.subarray(0, n)), 'refused', `prefix ${n}`);
        const longer = new Uint8Array(body.length + extra.length);
        longer.set(body);
        longer.set(extra, body.length);
        assert.equal(judged(decoder, WIRE_VERSION_RAFT, longer), 'refused');
      }),
      { numRuns: 100 },
    );
  });

  it('never throws on flipped bytes: each body is refused or judged by the validator', () => {
    const seen = { refused: 0, valid: 0, invalid: 0 };
    fc.assert(
      fc.property(
        hot,
        fc.array(fc.record({ at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }), { minLength: 1, maxLength: 4 }),
        (m, flips) => {
          const { body } = roundTrip(m);
          for (const f of flips) body[f.at % body.length] = f.value;
          seen[judged(new RaftWireDecoder(), WIRE_VERSION_RAFT, body)]++;
        },
      ),
      { numRuns: 2000 },
    );
    assert.ok(seen.refused > 0 && seen.valid + seen.invalid > 0, JSON.stringify(seen));
  });

  it('never throws on arbitrary bodies of either version', () => {
    fc.assert(
      fc.property(fc.constantFrom(WIRE_VERSION_MSGPACK, WIRE_VERSION_RAFT), fc.uint8Array({ maxLength: 400 }), (version, body) => {
        judged(new RaftWireDecoder(), version, body);
      }),
      { numRuns: 2000 },
    );
  });

  it('checks a claimed entry count against the bound and the bytes before allocating', () => {
    const { body } = roundTrip({ ...sampleAppend, entries: [] });
    const countAt = body.length - 4;
    const view = new DataView(body.buffer, body.byteOffset);
    const refusal = (count: number, decoder = new RaftWireDecoder()): string => {
      view.setUint32(countAt, count, true);
      const r = decoder.decode(WIRE_VERSION_RAFT, body);
      assert.ok(r instanceof BodyRefusal && r.code === 'body-malformed', `count ${count}`);
      return r.detail;
    };
    assert.match(refusal(0xffff_ffff), /above the bound of 64/);
    assert.match(refusal(65), /above the bound of 64/);
    assert.match(refusal(64), /past the end/);
    assert.match(refusal(1_000_000, new RaftWireDecoder({ entriesPerAppendMax: 2_000_000 })), /past the end/);
    // One entry whose data length claims more than is left.
    const one = roundTrip({ ...sampleAppend, entries: [{ index: 5, term: 3, time: 0, data: new Uint8Array(10) }] }).body;
    new DataView(one.buffer, one.byteOffset).setUint32(one.length - 10 - 4, 11, true);
    const r = new RaftWireDecoder().decode(WIRE_VERSION_RAFT, one);
    assert.ok(r instanceof BodyRefusal && /data of 11 bytes past the end/.test(r.detail));
    assert.equal(ENTRY_FIXED_BYTES, 28);
  });

  it('refuses unknown tags, booleans other than 0 and 1, overlong and non-UTF-8 strings', () => {
    const decoder = new RaftWireDecoder();
    const detail = (body: Uint8Array): string => {
      const r = decoder.decode(WIRE_VERSION_RAFT, body);
      assert.ok(r instanceof BodyRefusal && r.code === 'body-malformed');
      return r.detail;
    };
    const hb = fromHex(fixtures[2]!.hex);
    hb[0] = 9;
    assert.match(detail(hb), /unknown message tag 9/);
    const ar = fromHex(fixtures[1]!.hex);
    ar[ar.length - 25] = 2;
    assert.match(detail(ar), /boolean byte 2/);
    const long = fromHex(fixtures[2]!.hex);
    new DataView(long.buffer).setUint16(33, STRING_BYTES_MAX + 1, true);
    assert.match(detail(long), /string of 513 bytes/);
    const bad = fromHex(fixtures[2]!.hex);
    bad[35] = 0xff; // cluster 'c' becomes a lone 0xff
    assert.match(detail(bad), /not UTF-8/);
    assert.match(detail(new Uint8Array([TAG_APPEND])), /shorter than an envelope/);
  });

  it('reads ids right when they change on a link, whatever it saw before', () => {
    const decoder = new RaftWireDecoder();
    const encoder = new RaftWireEncoder();
    fc.assert(
      fc.property(fc.array(fc.tuple(id, id), { minLength: 1, maxLength: 10 }), (pairs) => {
        for (const [fromInc, toInc] of pairs) {
          const m: Message = { type: 'heartbeat', ...base, fromInc, toInc, commit: 1, sentAt: 1 };
          assert.deepStrictEqual(roundTrip(m, encoder, decoder).back, m);
        }
      }),
    );
  });

  it('encodes the entries once when the same entries go to another follower', () => {
    const encoder = new RaftWireEncoder();
    const uncached = new RaftWireEncoder({ cacheEntries: false });
    const entries: LogEntry[] = Array.from({ length: 64 }, (_, k) => ({
      index: 11 + k,
      term: 3,
      time: 5000 + k,
      data: new Uint8Array(100).fill(k),
    }));
    const to2: Append = { ...sampleAppend, prevIndex: 10, entries, toInc: 'i-two' };
    const to3: Append = { ...sampleAppend, prevIndex: 10, entries: entries.slice(), to: 3, toInc: 'i-three' };
    const run: Append = { ...sampleAppend, prevIndex: 20, entries: entries.slice(10, 30) };
    const same = (m: Append): void => {
      const a = Uint8Array.from(encoder.encode(m).body);
      assert.equal(hex(a), hex(uncached.encode(m).body));
      assert.deepStrictEqual(plain(new RaftWireDecoder().decode(WIRE_VERSION_RAFT, a)), plain(m));
    };
    same(to2);
    assert.deepEqual(encoder.entryCache, { hits: 0, misses: 1 });
    same(to3);
    same(run);
    assert.deepEqual(encoder.entryCache, { hits: 2, misses: 1 });
    // The log hands out new objects for the same entries (same numbers, the very data): still a hit.
    same({ ...to3, entries: entries.map((e) => ({ ...e })) });
    assert.deepEqual(encoder.entryCache, { hits: 3, misses: 1 });
    // Equal values in other objects (a log rewritten by a new leader) are encoded afresh.
    const copies = entries.map((e) => ({ ...e, term: 4 }));
    same({ ...to2, term: 4, entries: copies });
    assert.deepEqual(encoder.entryCache, { hits: 3, misses: 2 });
    same({ ...to2, prevIndex: 9, entries: [{ index: 10, term: 3, time: 4999, data: null }, ...copies.slice(0, 5)] });
    assert.deepEqual(encoder.entryCache, { hits: 3, misses: 3 });
    // Equal bytes in another data object are encoded afresh too: identity is what proves sameness.
    same({ ...to2, term: 4, entries: copies.map((e) => ({ ...e, data: Uint8Array.from(e.data as Uint8Array) })) });
    assert.deepEqual(encoder.entryCache, { hits: 3, misses: 4 });
  });

  it('remembers a whole window of appends to one follower for the next follower, and not large ones', () => {
    const encoder = new RaftWireEncoder();
    const log: LogEntry[] = Array.from({ length: 256 }, (_, k) => ({ index: 1 + k, term: 3, time: k, data: new Uint8Array(100).fill(k) }));
    const window = (to: number): Append[] =>
      [0, 64, 128, 192].map((lo) => ({ ...sampleAppend, to, prevIndex: lo, prevTerm: lo === 0 ? 0 : 3, entries: log.slice(lo, lo + 64) }));
    const first = window(2).map((m) => hex(encoder.encode(m).body));
    const second = window(3).map((m) => hex(encoder.encode(m).body));
    assert.deepEqual(encoder.entryCache, { hits: 4, misses: 4 });
    const uncached = new RaftWireEncoder({ cacheEntries: false });
    assert.deepEqual(
      first,
      window(2).map((m) => hex(uncached.encode(m).body)),
    );
    assert.deepEqual(
      second,
      window(3).map((m) => hex(uncached.encode(m).body)),
    );
    // Past ENCODED_RUNS_CACHED appends the oldest is forgotten.
    for (let k = 0; k < ENCODED_RUNS_CACHED; k++)
      encoder.encode({ ...sampleAppend, prevIndex: 1000 + k, entries: [{ index: 1001 + k, term: 3, time: 0, data: null }] });
    encoder.encode(window(2)[0]!);
    assert.deepEqual(encoder.entryCache, { hits: 4, misses: 4 + ENCODED_RUNS_CACHED + 1 });
    // An entry section above 64 KiB is encoded each time, never remembered.
    const big: Append = { ...sampleAppend, entries: [{ index: 5, term: 3, time: 0, data: new Uint8Array(70_000) }] };
    encoder.encode(big);
    encoder.encode(big);
    assert.deepEqual(encoder.entryCache, { hits: 4, misses: 4 + ENCODED_RUNS_CACHED + 1 });
  });

  it('the codec reads both versions, and can be told to write msgpackr only', () => {
    const codec = raftWireCodec();
    assert.deepEqual(codec.versions, [1, 2]);
    const decode = codec.newDecoder();
    for (const f of fixtures) {
      const { version, body } = codec.encode(f.m);
      assert.equal(version, WIRE_VERSION_RAFT);
      assert.deepStrictEqual(plain(decode(version, Uint8Array.from(body))), plain(f.m));
    }
    const msgpackOnly = raftWireCodec({ layout: false });
    const { version, body } = msgpackOnly.encode(sampleAppend);
    assert.equal(version, WIRE_VERSION_MSGPACK);
    assert.deepStrictEqual(plain(decode(version, body)), plain(sampleAppend));
    const bounded = raftWireCodec({ entriesPerAppendMax: 1 }).newDecoder();
    assert.ok(bounded(WIRE_VERSION_RAFT, fromHex(fixtures[0]!.hex)) instanceof BodyRefusal);
  });
});
