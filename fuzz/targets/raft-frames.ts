// Raft peer links: the frame reader (raft/transport/frame.ts), the handshake frames
// (raft/transport/handshake.ts), and the message bodies of both versions (raft/driver/wire-codec.ts
// for the layout, raft/transport/codec.ts for msgpackr) with the validator a message passes next
// (raft/core/validate.ts). The input is the byte stream of one link, fed in the chunks the cuts
// make: the first frame is read as the handshake's, the rest as messages. Rules: nothing throws;
// a refused frame or body has one of the transport's codes; the reader holds at most one frame of
// its bound; a message the validator accepts re-encodes and decodes to the same message.
import { isDeepStrictEqual } from 'node:util';
import fc from 'fast-check';
import type { Append, LogEntry, Message } from '../../raft/core/messages.js';
import { type ValidationContext, validateMessage } from '../../raft/core/validate.js';
import { raftWireCodec, WIRE_VERSION_RAFT } from '../../raft/driver/wire-codec.js';
import { RaftError } from '../../raft/errors.js';
import { BodyRefusal, packBody } from '../../raft/transport/codec.js';
import { encodeFrame, FRAME_PREFIX_BYTES, FRAME_VERSION, FrameReader } from '../../raft/transport/frame.js';
import { judgeHello, makeHello, parseHandshakeFrame } from '../../raft/transport/handshake.js';
import { check, type FuzzInput, type FuzzTarget, MSGPACK_TOKENS, onlyTyped, split, valueMutated } from '../harness.js';

const NODES = [1, 2, 3];
const CTX: ValidationContext = { self: 1, nodes: NODES, entriesPerAppendMax: 64 };
const LOCAL = { clusterId: 'c', epoch: { generation: 1, id: 'e' }, nodeId: 1, incarnation: 'i1' };
const FRAME_CODES = new Set(['frame-oversize', 'frame-empty', 'frame-version']);

const base = { from: 2, to: 1, term: 3, cluster: 'c', epoch: 1, epochId: 'e', fromInc: 'i2', toInc: 'i1' };

/** A handshake hello, then messages of every type: the frames of a link as a peer sends them. */
export function linkFrames(messages: readonly Message[]): Uint8Array {
  const codec = raftWireCodec();
  const hello = encodeFrame(packBody(makeHello({ ...LOCAL, nodeId: 2, incarnation: 'i2' }, undefined)), FRAME_VERSION);
  const frames = messages.map((m) => {
    const { version, body } = codec.encode(m);
    return encodeFrame(body, version);
  });
  return new Uint8Array(Buffer.concat([hello, ...frames]));
}

const members = [
  { node: 1, inc: 'i1' },
  { node: 2, inc: 'i2' },
];
const snapshotMessage = (data: Uint8Array): Message =>
  ({ type: 'snapshot', ...base, index: 4, lastTerm: 2, time: 900, config: members, seq: 0, chunks: 1, data, sentAt: 1 }) as Message;
const announce = {
  type: 'announce',
  ...base,
  membership: 'member',
  peers: 'p',
  lastIndex: 6,
  lastTerm: 3,
  voter: true,
  stuck: false,
  leader: 2,
  committedVoters: 2,
} as Message;

/** A link whose hello is the given value, edge values and all. */
function linkHello(hello: unknown): Uint8Array {
  return new Uint8Array(encodeFrame(packBody(hello), FRAME_VERSION));
}

const entries = (n: number, data: readonly (Uint8Array | null)[]): LogEntry[] =>
  Array.from({ length: n }, (_, k) => ({ index: 5 + k, term: 3, time: 1000 + k, data: data[k % data.length] ?? null }));

const message: fc.Arbitrary<Message> = fc.oneof(
  fc
    .tuple(fc.nat(4), fc.array(fc.option(fc.uint8Array({ maxLength: 40 })), { minLength: 1, maxLength: 4 }))
    .map(
      ([n, data]): Append => ({ type: 'append', ...base, prevIndex: 4, prevTerm: 2, entries: entries(n, data), commit: 4, sentAt: 12.5 }),
    ),
  fc
    .record({ success: fc.boolean(), index: fc.nat(), hint: fc.nat() })
    .map((r) => ({ type: 'append-response', ...base, ...r, sentAt: 1 }) as Message),
  fc.nat().map((commit) => ({ type: 'heartbeat', ...base, commit, sentAt: 2 }) as Message),
  fc.constant({ type: 'heartbeat-response', ...base, sentAt: 2, wall: 3 } as Message),
  fc.constant({ type: 'vote-request', ...base, lastIndex: 6, lastTerm: 3, transfer: false, sentAt: 1 } as Message),
  fc.constant({ type: 'pre-vote-request', ...base, lastIndex: 6, lastTerm: 3 } as Message),
  fc.boolean().map((granted) => ({ type: 'vote-response', ...base, granted, sentAt: 1, wall: 2 }) as Message),
  fc.uint8Array({ maxLength: 40 }).map((data) => snapshotMessage(data)),
  fc.constant({ type: 'snapshot-response', ...base, index: 4, received: 1, match: 4, sentAt: 1 } as Message),
  fc.constant({ type: 'timeout-now', ...base } as Message),
  fc.constant(announce),
);

function plain(m: unknown): unknown {
  if (typeof m !== 'object' || m === null || (m as Message).type !== 'append') return m;
  const a = m as Append;
  return { ...a, entries: a.entries.map((e) => ({ ...e, data: e.data === null ? null : Uint8Array.from(e.data) })) };
}

export function runRaftFrames(input: FuzzInput): void {
  const max = input.knob % 2 === 0 ? 1 << 16 : 5 + (input.knob % 300);
  const reader = onlyTyped(
    () => new FrameReader(max),
    () => false,
    'new FrameReader',
  ) as FrameReader;
  const codec = raftWireCodec({ entriesPerAppendMax: CTX.entriesPerAppendMax });
  const decode = codec.newDecoder();
  let frames = 0;
  let handshakeDone = false;
  for (const chunk of split(input.data, input.cuts)) {
    reader.push(chunk);
    // Each frame takes at least its prefix and version byte, so this ends.
    for (let guard = 0; guard <= input.data.length; guard++) {
      const r = onlyTyped(
        () => reader.next(),
        () => false,
        'FrameReader.next',
      ) as ReturnType<FrameReader['next']>;
      if (r.t === 'more') break;
      if (r.t === 'error') {
        check(FRAME_CODES.has(r.code), `frame error code ${r.code}`);
        return;
      }
      frames++;
      check(frames <= input.data.length / (FRAME_PREFIX_BYTES + 1), `${frames} frames out of ${input.data.length} bytes`);
      if (!handshakeDone) {
        handshake(r.body);
        handshakeDone = true;
        reader.setVersions(codec.versions);
      } else {
        body(decode, r.version, r.body);
      }
    }
    check(
      reader.bufferedBytes < Math.max(FRAME_PREFIX_BYTES, max),
      `${reader.bufferedBytes} bytes buffered after the frames were read, bound ${max}`,
    );
  }
}

function handshake(bytes: Uint8Array): void {
  const value = decodeBody(raftWireCodec().newDecoder(), FRAME_VERSION, bytes);
  if (value instanceof BodyRefusal) return;
  const frame = onlyTyped(
    () => parseHandshakeFrame(value),
    () => false,
    'parseHandshakeFrame',
  );
  if (frame?.t !== 'hello') return;
  onlyTyped(
    () =>
      judgeHello(frame, {
        local: LOCAL,
        expectNode: (n) => NODES.includes(n),
        epochAccepts: (l, r) => isDeepStrictEqual(l, r),
        hasSecret: false,
      }),
    () => false,
    'judgeHello',
  );
}

function decodeBody(decode: ReturnType<ReturnType<typeof raftWireCodec>['newDecoder']>, version: number, bytes: Uint8Array): unknown {
  const value = onlyTyped(
    () => decode(version, bytes),
    () => false,
    'the body decoder',
  );
  if (value instanceof BodyRefusal)
    check(value.code === 'body-malformed' || value.code === 'body-not-msgpack', `body refusal ${value.code}`);
  return value;
}

function body(decode: ReturnType<ReturnType<typeof raftWireCodec>['newDecoder']>, version: number, bytes: Uint8Array): void {
  const value = decodeBody(decode, version, bytes);
  if (value instanceof BodyRefusal) return;
  const verdict = onlyTyped(
    () => validateMessage(value, CTX),
    () => false,
    'validateMessage',
  );
  check(verdict === null || verdict instanceof RaftError, 'validateMessage answered neither null nor a RaftError');
  if (verdict !== null) return;
  // Accepted: it must survive the trip a leader's own messages make.
  const m = value as Message;
  const codec = raftWireCodec();
  const again = onlyTyped(
    () => codec.encode(m),
    () => false,
    `encoding an accepted ${m.type}`,
  ) as { version: number; body: Uint8Array };
  const back = codec.newDecoder()(again.version, Uint8Array.from(again.body));
  check(isDeepStrictEqual(plain(back), plain(m)), `an accepted ${m.type} re-encoded (version ${again.version}) decodes to another message`);
  if (m.type === 'append') check(again.version === WIRE_VERSION_RAFT, 'an append is not encoded in the layout');
}

export const raftFrames: FuzzTarget = {
  name: 'raft-frames',
  modules: [
    'raft/transport/frame.ts',
    'raft/transport/codec.ts',
    'raft/transport/handshake.ts',
    'raft/driver/wire-codec.ts',
    'raft/core/validate.ts',
  ],
  valid: fc.oneof(
    fc.array(message, { minLength: 1, maxLength: 4 }).map(linkFrames),
    // A msgpackr body with one field replaced by an edge value, after a good hello; or the hello.
    fc
      .tuple(valueMutated(message), fc.boolean())
      .map(([m, asMessage]) =>
        asMessage ? new Uint8Array(Buffer.concat([linkFrames([]), encodeFrame(packBody(m), FRAME_VERSION)])) : linkHello(m),
      ),
  ),
  dictionary: MSGPACK_TOKENS,
  maxBytes: 1024,
  run: runRaftFrames,
};

/** Seed corpus: a link with one message of each type, and each alone. */
export function raftCorpus(): Uint8Array[] {
  const all: Message[] = [
    { type: 'append', ...base, prevIndex: 4, prevTerm: 2, entries: entries(2, [null, Uint8Array.of(0xaa, 0xbb)]), commit: 4, sentAt: 12.5 },
    { type: 'append-response', ...base, success: true, index: 6, hint: 0, sentAt: 12.5 },
    { type: 'heartbeat', ...base, commit: 6, sentAt: 12.5 },
    { type: 'heartbeat-response', ...base, sentAt: 12.5, wall: 1.5 },
    { type: 'vote-request', ...base, lastIndex: 6, lastTerm: 3, transfer: false, sentAt: 1 },
    { type: 'pre-vote-request', ...base, lastIndex: 6, lastTerm: 3 },
    { type: 'vote-response', ...base, granted: true, sentAt: 1, wall: 2 },
    { type: 'pre-vote-response', ...base, granted: false },
    snapshotMessage(Uint8Array.of(1, 2, 3)),
    { type: 'snapshot-response', ...base, index: 4, received: 1, match: 4, sentAt: 1 },
    { type: 'timeout-now', ...base },
    announce,
  ];
  return [linkFrames(all), ...all.map((m) => linkFrames([m]))];
}
