// Each fixture is checked four ways, as mqtt-packet's own suite does: the hand-written bytes decode
// to the packet, the packet encodes to exactly those bytes, mqtt-packet reads the same packet from
// them, and the bytes decode alike however the stream is cut.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { comparable, decoderFor, feedPieces, fromMp, mpParse } from './codec.testkit.js';
import { type Fixture, fixtures } from './codec-fixtures.testkit.js';
import { encode } from './encoder.js';
import type { Packet } from './packets.js';

/** Fixtures that mqtt-packet 9.0.2 refuses although the specification allows them; the test
 * asserts that it still refuses, so an upgrade that fixes it shows up here. */
const ORACLE_GAPS = new Map<string, string>([
  ['5.0 AUTH success with no properties is empty', 'it requires a reason code; §3.15.2.1 allows remaining length 0'],
]);

function decodeOne(f: Fixture, cuts: number[] = []): { packets: Packet[]; error: unknown } {
  return feedPieces(decoderFor(f.packet, f.level, f.toClient === true), f.bytes, cuts);
}

describe('codec fixtures', { timeout: 30_000 }, () => {
  for (const f of fixtures) {
    describe(f.name, () => {
      it('decodes the bytes to the packet', () => {
        assert.deepStrictEqual(decodeOne(f), { packets: [f.packet], error: null });
      });

      it('encodes the packet to exactly the bytes', () => {
        assert.deepStrictEqual(encode(f.packet, f.level), f.bytes);
      });

      it('decodes what it encodes', () => {
        const d = decoderFor(f.packet, f.level, f.toClient === true);
        assert.deepStrictEqual(d.feed(encode(f.packet, f.level)), { packets: [f.packet], error: null });
      });

      it('reads the same packet from the bytes as mqtt-packet does', (t) => {
        const mp = mpParse(f.bytes, f.packet.type === 'connect' ? 0 : f.level);
        const gap = ORACLE_GAPS.get(f.name);
        if (gap !== undefined) {
          t.diagnostic(`mqtt-packet refuses: ${gap}`);
          assert.notEqual(mp.error, null);
          return;
        }
        assert.equal(mp.error, null);
        assert.equal(mp.packets.length, 1);
        assert.deepStrictEqual(fromMp(mp.packets[0] as object, f.level), comparable(f.packet));
      });

      it('decodes the same however the stream is cut', () => {
        for (let i = 1; i < f.bytes.length; i++) {
          assert.deepStrictEqual(decodeOne(f, [i]), { packets: [f.packet], error: null }, `cut at ${i}`);
        }
        const everyByte = Array.from({ length: f.bytes.length - 1 }, (_, i) => i + 1);
        assert.deepStrictEqual(decodeOne(f, everyByte), { packets: [f.packet], error: null }, 'one byte at a time');
      });
    });
  }

  it('decodes a whole 5.0 session stream in order, in one chunk and one byte at a time', () => {
    const connect = fixtures.find((f) => f.packet.type === 'connect' && f.level === 5) as Fixture;
    const rest = fixtures.filter(
      (f) =>
        f.level === 5 &&
        f.toClient !== true &&
        ['publish', 'puback', 'pubrel', 'subscribe', 'unsubscribe', 'disconnect', 'auth', 'pingreq'].includes(f.packet.type),
    );
    const stream = Buffer.concat([connect.bytes, ...rest.map((f) => f.bytes)]);
    const expected = [connect.packet, ...rest.map((f) => f.packet)];
    const whole = decoderFor(connect.packet, 5).feed(stream);
    assert.deepStrictEqual(whole, { packets: expected, error: null });
    const cuts = Array.from({ length: stream.length - 1 }, (_, i) => i + 1);
    assert.deepStrictEqual(feedPieces(decoderFor(connect.packet, 5), stream, cuts), { packets: expected, error: null });
  });
});
