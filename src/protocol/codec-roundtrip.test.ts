// Property tests: random valid packets survive encode→decode unchanged; mqtt-packet (the oracle)
// reads our bytes as we do and we read its bytes as it does; and random or corrupted input never
// throws, never hangs, and decodes the same however it is cut.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { comparable, decoderFor, feedPieces, fromMp, MAX, mpGenerate, mpParse, toMp } from './codec.testkit.js';
import * as arb from './codec-arbitraries.testkit.js';
import { Decoder, type DecoderOptions, type FeedResult } from './decoder.js';
import { encode } from './encoder.js';
import type { Packet, ProtocolLevel, UserProperties } from './packets.js';

const RUNS = 300;

/** Sorted, distinct cut offsets inside a buffer of length n. */
const cutsOf = (n: number): fc.Arbitrary<number[]> =>
  fc
    .uniqueArray(fc.integer({ min: 1, max: Math.max(1, n - 1) }), { maxLength: 8 })
    .map((c) => c.filter((x) => x < n).sort((a, b) => a - b));

/** A session as a client sends it: CONNECT, then packets of the level it names. */
const session = arb.level.chain((level) =>
  fc.record({ level: fc.constant(level), connect: arb.connect(level), rest: fc.array(arb.toServer(level), { maxLength: 6 }) }),
);

/** A stream as a server sends it at a given level. */
const serverStream = arb.level.chain((level) =>
  fc.record({ level: fc.constant(level), packets: fc.array(arb.toClient(level), { minLength: 1, maxLength: 6 }) }),
);

/** Any single valid packet with the level and direction it travels in. */
const anyPacket: fc.Arbitrary<{ level: ProtocolLevel; packet: Packet; toClient: boolean }> = arb.level.chain((level) =>
  fc.oneof(
    fc.record({ level: fc.constant(level), packet: arb.connect(level), toClient: fc.constant(false) }),
    fc.record({ level: fc.constant(level), packet: arb.toServer(level), toClient: fc.constant(false) }),
    fc.record({ level: fc.constant(level), packet: arb.toClient(level), toClient: fc.constant(true) }),
  ),
);

/** Packets mqtt-packet 9.0.2 cannot read back although they are valid: an AUTH of remaining
 * length 0 (§3.15.2.1 allows it), and a User Property name repeated after an empty value (its
 * parser tests the earlier value for truthiness and overwrites it). */
function mqttPacketReads(p: Packet): boolean {
  if (p.type === 'auth' && p.code === 0 && Object.keys(p.props).length === 0) return false;
  const lists = [
    (p as { props?: { userProps?: UserProperties } }).props?.userProps,
    p.type === 'connect' ? p.will?.props.userProps : undefined,
  ];
  return lists.every(
    (pairs) => pairs === undefined || pairs.every(([k], i) => !pairs.slice(0, i).some(([k2, v2]) => k2 === k && v2 === '')),
  );
}

/** Valid packets mqtt-packet's generate refuses to write: an empty client id in 3.1 (which allowed
 * 1 to 23 characters) or with a non-clean session (§3.1.3.1), both left to the connection
 * (CONNACK 2); and a 5.0 password without a user name, which 5.0 allows (§3.1.2.9). */
const mqttPacketWrites = (level: ProtocolLevel, p: Packet): boolean =>
  p.type !== 'connect' || ((p.clientId !== '' || (level !== 3 && p.clean)) && (p.password === null || p.username !== null));

function assertWellFormed(r: FeedResult): void {
  assert.ok(Array.isArray(r.packets));
  if (r.error !== null) {
    assert.equal(typeof r.error.reason, 'number');
    assert.ok(r.error.reason >= 0x80, `reason 0x${r.error.reason.toString(16)} is an error code`);
    assert.match(r.error.key, /^[a-z0-9-]+$/);
  }
}

describe('codec properties', { timeout: 60_000 }, () => {
  it('decodes a client session to the packets that were encoded, however the stream is cut', () => {
    fc.assert(
      fc.property(
        session.chain((s) => {
          const bytes = Buffer.concat([encode(s.connect, s.level), ...s.rest.map((p) => encode(p, s.level))]);
          return fc.record({ s: fc.constant(s), bytes: fc.constant(bytes), cuts: cutsOf(bytes.length) });
        }),
        ({ s, bytes, cuts }) => {
          const r = feedPieces(new Decoder({ maxPacketSize: MAX }), bytes, cuts);
          assert.deepStrictEqual(r, { packets: [s.connect, ...s.rest], error: null });
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('decodes a server stream to the packets that were encoded, however the stream is cut', () => {
    fc.assert(
      fc.property(
        serverStream.chain((s) => {
          const bytes = Buffer.concat(s.packets.map((p) => encode(p, s.level)));
          return fc.record({ s: fc.constant(s), bytes: fc.constant(bytes), cuts: cutsOf(bytes.length) });
        }),
        ({ s, bytes, cuts }) => {
          const r = feedPieces(new Decoder({ maxPacketSize: MAX, role: 'client', level: s.level }), bytes, cuts);
          assert.deepStrictEqual(r, { packets: s.packets, error: null });
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('mqtt-packet reads our bytes as the packet we encoded', () => {
    fc.assert(
      fc.property(
        anyPacket.filter(({ packet }) => mqttPacketReads(packet)),
        ({ level, packet }) => {
          const mp = mpParse(encode(packet, level), packet.type === 'connect' ? 0 : level);
          assert.equal(mp.error, null);
          assert.equal(mp.packets.length, 1);
          assert.deepStrictEqual(fromMp(mp.packets[0] as object, level), comparable(packet));
        },
      ),
      { numRuns: RUNS },
    );
  });

  it("reads mqtt-packet's bytes as mqtt-packet reads them", () => {
    fc.assert(
      fc.property(
        anyPacket.filter(({ level, packet }) => mqttPacketReads(packet) && mqttPacketWrites(level, packet)),
        ({ level, packet, toClient }) => {
          const bytes = mpGenerate(toMp(packet, level), level);
          const ours = decoderFor(packet, level, toClient).feed(bytes);
          const theirs = mpParse(bytes, packet.type === 'connect' ? 0 : level);
          assert.equal(ours.error, null);
          assert.equal(ours.packets.length, 1);
          const decoded = comparable(ours.packets[0] as Packet);
          assert.deepStrictEqual(decoded, fromMp(theirs.packets[0] as object, level));
          assert.deepStrictEqual(decoded, comparable(packet));
        },
      ),
      { numRuns: RUNS },
    );
  });

  const decoders: [string, DecoderOptions][] = [
    ['a fresh server decoder', { maxPacketSize: 4096 }],
    ['a 3.1 server decoder', { maxPacketSize: 4096, level: 3 }],
    ['a 3.1.1 server decoder', { maxPacketSize: 4096, level: 4 }],
    ['a 5.0 server decoder', { maxPacketSize: 4096, level: 5 }],
    ['a 3.1.1 client decoder', { maxPacketSize: 4096, role: 'client', level: 4 }],
    ['a 5.0 client decoder', { maxPacketSize: 4096, role: 'client', level: 5 }],
  ];

  for (const [name, opts] of decoders) {
    it(`never throws on random bytes fed to ${name}, and stays refused after an error`, () => {
      fc.assert(
        fc.property(
          fc.uint8Array({ maxLength: 300 }).chain((a) => fc.record({ bytes: fc.constant(Buffer.from(a)), cuts: cutsOf(a.length) })),
          ({ bytes, cuts }) => {
            const d = new Decoder(opts);
            const r = feedPieces(d, bytes, cuts);
            assertWellFormed(r);
            if (r.error !== null) assert.deepStrictEqual(d.feed(Buffer.from([0xc0, 0])), { packets: [], error: r.error });
          },
        ),
        { numRuns: RUNS },
      );
    });
  }

  it('decodes corrupted sessions to the same packets and error whether fed whole or byte by byte', () => {
    const corrupted = session.chain((s) => {
      const bytes = Buffer.concat([encode(s.connect, s.level), ...s.rest.map((p) => encode(p, s.level))]);
      const edit = fc.tuple(fc.integer({ min: 0, max: bytes.length - 1 }), fc.integer({ min: 0, max: 255 }));
      return fc.array(edit, { minLength: 1, maxLength: 4 }).map((edits) => {
        const b = Buffer.from(bytes);
        for (const [i, v] of edits) b[i] = v;
        return b;
      });
    });
    fc.assert(
      fc.property(corrupted, (bytes) => {
        const whole = new Decoder({ maxPacketSize: MAX }).feed(bytes);
        assertWellFormed(whole);
        const everyByte = Array.from({ length: bytes.length - 1 }, (_, i) => i + 1);
        assert.deepStrictEqual(feedPieces(new Decoder({ maxPacketSize: MAX }), bytes, everyByte), whole);
      }),
      { numRuns: RUNS },
    );
  });
});
