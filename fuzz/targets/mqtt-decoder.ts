// The MQTT decoder (src/protocol/decoder.ts) for 3.1, 3.1.1 and 5.0, as a server and as a client.
// The first byte of an input picks the decoder (see decoderOf), the rest is the stream, fed in the
// chunks the cuts make. Rules: feed never throws; a refusal is a DecodeError with a reason code
// and a key; bytes held for a partial frame stay below the maximum packet size; however the
// stream is cut, the same packets and the same error come out; after an error nothing more is
// decoded; every packet decoded re-encodes, and its bytes decode to the same packet again.
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import * as arb from '../../src/protocol/codec-arbitraries.testkit.js';
import { Decoder } from '../../src/protocol/decoder.js';
import { encode } from '../../src/protocol/encoder.js';
import type { DecodeError, Packet, ProtocolLevel } from '../../src/protocol/packets.js';
import { RC } from '../../src/protocol/reason-codes.js';
import { check, FuzzFailure, type FuzzInput, type FuzzTarget, onlyTyped, split } from '../harness.js';

const LEVELS: readonly ProtocolLevel[] = [3, 4, 5];
const REASONS: ReadonlySet<number> = new Set(Object.values(RC));
/** The decoder's options byte: bit 7 client role, bit 6 start connected (server), bits 0-1 level. */
const CLIENT = 0x80;
const CONNECTED = 0x40;

export interface DecoderSetup {
  role: 'server' | 'client';
  level: ProtocolLevel;
  /** A server that starts as if a CONNECT of `level` had been decoded. */
  connected: boolean;
  maxPacketSize: number;
}

/** The options byte at the start of an input, and the knob's maximum packet size: mostly small,
 * so that the oversize refusal is reached, now and then the default's 1 MiB. */
export function decoderOf(optionsByte: number, knob: number): DecoderSetup {
  const role = (optionsByte & CLIENT) !== 0 ? 'client' : 'server';
  return {
    role,
    level: LEVELS[(optionsByte & 3) % 3] as ProtocolLevel,
    connected: role === 'server' && (optionsByte & CONNECTED) !== 0,
    maxPacketSize: knob % 4 === 0 ? 1 << 20 : 2 + (knob % 512),
  };
}

export function newDecoder(s: DecoderSetup): Decoder {
  if (s.role === 'client') return new Decoder({ maxPacketSize: s.maxPacketSize, role: 'client', level: s.level });
  return s.connected ? new Decoder({ maxPacketSize: s.maxPacketSize, level: s.level }) : new Decoder({ maxPacketSize: s.maxPacketSize });
}

function optionsByte(role: 'server' | 'client', level: ProtocolLevel, connected: boolean): number {
  return (role === 'client' ? CLIENT : 0) | (connected ? CONNECTED : 0) | LEVELS.indexOf(level);
}

/** A stream a decoder of these options reads whole: a CONNECT first for a fresh server. */
const validStream: fc.Arbitrary<Uint8Array> = fc
  .tuple(arb.level, fc.constantFrom<'server' | 'client'>('server', 'client'), fc.boolean())
  .chain(([level, role, connected]) => {
    const body = fc.array(role === 'client' ? arb.toClient(level) : arb.toServer(level), { minLength: 1, maxLength: 4 });
    const first = role === 'server' && !connected ? arb.connect(level).map((c) => [c]) : fc.constant<Packet[]>([]);
    return fc.tuple(first, body).map(([a, b]) => {
      const bytes = [...a, ...b].map((p) => encode(p, level));
      return new Uint8Array(Buffer.concat([Buffer.of(optionsByte(role, level, connected)), ...bytes]));
    });
  });

interface Outcome {
  packets: Packet[];
  error: DecodeError | null;
}

function feedAll(d: Decoder, chunks: readonly Uint8Array[], max: number): Outcome {
  const packets: Packet[] = [];
  let error: DecodeError | null = null;
  for (const chunk of chunks) {
    const r = onlyTyped(
      () => d.feed(Buffer.from(chunk)),
      () => false,
      'Decoder.feed',
    ) as ReturnType<Decoder['feed']>;
    if (error !== null) check(r.packets.length === 0 && r.error === error, 'packets or a new error after a decode error');
    packets.push(...r.packets);
    error = r.error;
    check(d.bufferedBytes <= max, `${d.bufferedBytes} bytes buffered, above the maximum packet size ${max}`);
  }
  return { packets, error };
}

function checkError(e: DecodeError): void {
  check(REASONS.has(e.reason) && e.reason >= 0x80, `decode error with reason ${e.reason}, not an MQTT 5 error code`);
  check(typeof e.key === 'string' && e.key.length > 0 && typeof e.message === 'string', 'decode error without a key or message');
}

export function runDecoder(input: FuzzInput): void {
  if (input.data.length === 0) return;
  const setup = decoderOf(input.data[0] as number, input.knob);
  const stream = input.data.subarray(1);
  const cut = feedAll(newDecoder(setup), split(stream, input.cuts), setup.maxPacketSize);
  const whole = feedAll(newDecoder(setup), [stream], setup.maxPacketSize);
  if (cut.error !== null) checkError(cut.error);
  check(cut.packets.length <= stream.length / 2, `${cut.packets.length} packets out of ${stream.length} bytes`);
  check(isDeepStrictEqual(cut.error, whole.error), 'the error depends on where the stream was cut');
  check(isDeepStrictEqual(cut.packets, whole.packets), 'the packets depend on where the stream was cut');
  reencode(cut.packets, setup);
}

/** What the decoder accepts, the encoder writes, and the decoder reads back the same: a broker
 * forwards and stores what it decoded. */
function reencode(packets: readonly Packet[], setup: DecoderSetup): void {
  let level = setup.level;
  const again = newDecoder({ ...setup, maxPacketSize: 1 << 28 });
  for (const p of packets) {
    if (p.type === 'connect') level = p.level;
    let bytes: Buffer;
    try {
      bytes = encode(p, level);
    } catch (e) {
      throw new FuzzFailure(`a decoded ${p.type} does not encode: ${(e as Error).message}`, { cause: e });
    }
    const r = again.feed(bytes);
    check(r.error === null && r.packets.length === 1, `a decoded ${p.type} re-encoded does not decode: ${r.error?.message ?? 'no packet'}`);
    check(isDeepStrictEqual(r.packets[0], p), `a decoded ${p.type} re-encoded decodes to another packet`);
  }
}

export const mqttDecoder: FuzzTarget = {
  name: 'mqtt-decoder',
  modules: [
    'src/protocol/decoder.ts',
    'src/protocol/codec-body.ts',
    'src/protocol/codec-reader.ts',
    'src/protocol/properties.ts',
    'src/protocol/utf8.ts',
  ],
  valid: validStream,
  run: runDecoder,
};
