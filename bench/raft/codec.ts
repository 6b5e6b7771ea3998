// Raft wire codec micro-benchmark: ns per message to encode a raft message into a frame and decode
// the frame's body, msgpackr (frame version 1) against the hand layout (version 2, docs/raft.md
// "Wire layout"), for an append of 64 entries of 100 bytes and for the small hot messages.
//
//   node build/bench/raft/codec.js [--rounds 15] [--ms 200]
//
// Each round runs every case for --ms of wall time in turn, so a busy machine disturbs all cases
// alike; a case's time is the process's CPU time (user + system) over its operations, so time spent
// descheduled does not count, and the figures are the medians over the rounds. "encode" includes the copy into the frame the transport
// sends (encodeFrame); "decode" reads the frame's body as a link does. The entry-cache case sends
// the same entries to two followers in turn, as a leader does in one turn: half the encodes reuse
// the other's entry bytes.
import { performance } from 'node:perf_hooks';
import type { Append, LogEntry, Message } from '../../raft/core/messages.js';
import { RaftWireDecoder, RaftWireEncoder } from '../../raft/driver/wire-codec.js';
import { type BodyDecoder, msgpackCodec } from '../../raft/transport/codec.js';
import { encodeFrame, FRAME_HEADER_BYTES } from '../../raft/transport/frame.js';

interface Options {
  rounds: number;
  ms: number;
}

interface Case {
  name: string;
  /** Messages sent in turn (two followers' copies of the same append, or one message). */
  msgs: Message[];
  encode: (m: Message) => { version: number; body: Uint8Array };
  decoder: () => BodyDecoder;
}

const envelope = {
  from: 1,
  term: 7,
  cluster: 'raftmq-bench',
  epoch: 1,
  epochId: 'a3f1c2d4e5b6a7c8',
  fromInc: '9b2e4c6a8d0f1e3c',
};

function appendTo(to: number, entries: readonly LogEntry[]): Append {
  return {
    type: 'append',
    ...envelope,
    to,
    toInc: `inc-of-node-${to}-0123`,
    prevIndex: 1_000_000,
    prevTerm: 7,
    entries,
    commit: 999_990,
    sentAt: 123_456.789,
  };
}

function cases(): Case[] {
  const entries: LogEntry[] = Array.from({ length: 64 }, (_, k) => ({
    index: 1_000_001 + k,
    term: 7,
    time: 1_760_000_000_000 + k,
    data: new Uint8Array(100).fill(k),
  }));
  const append2 = appendTo(2, entries);
  const append3 = appendTo(3, entries.slice());
  const response: Message = {
    type: 'append-response',
    ...envelope,
    to: 2,
    toInc: 'inc-of-node-2-0123',
    success: true,
    index: 1_000_064,
    hint: 0,
    sentAt: 123_456.789,
  };
  const heartbeat: Message = { type: 'heartbeat', ...envelope, to: 2, toInc: 'inc-of-node-2-0123', commit: 1_000_064, sentAt: 123_456.789 };
  const msgpack = (name: string, msgs: Message[]): Case => ({
    name: `${name}, msgpackr`,
    msgs,
    encode: (m) => msgpackCodec.encode(m),
    decoder: () => msgpackCodec.newDecoder(),
  });
  const layout = (name: string, msgs: Message[], cacheEntries: boolean): Case => {
    const encoder = new RaftWireEncoder({ cacheEntries });
    return { name: `${name}, layout`, msgs, encode: (m) => encoder.encode(m), decoder: () => new RaftWireDecoder().decode };
  };
  return [
    msgpack('append 64 x 100 B', [append2, append3]),
    layout('append 64 x 100 B', [append2, append3], false),
    { ...layout('append 64 x 100 B', [append2, append3], true), name: 'append 64 x 100 B, layout + entry cache' },
    msgpack('append-response', [response]),
    layout('append-response', [response], true),
    msgpack('heartbeat', [heartbeat]),
    layout('heartbeat', [heartbeat], true),
  ];
}

interface Timing {
  encodeNs: number;
  decodeNs: number;
  bytes: number;
}

let sink = 0;

/** Encodes into frames for `ms`, then decodes those frames' bodies for as long. */
function timeCase(c: Case, ms: number): Timing {
  const frames: Uint8Array[] = [];
  const batch = 64;
  let encodes = 0;
  const t0 = performance.now();
  let t = t0;
  const e0 = process.cpuUsage();
  while (t - t0 < ms) {
    for (let k = 0; k < batch; k++) {
      const m = c.msgs[encodes % c.msgs.length] as Message;
      const { version, body } = c.encode(m);
      const frame = encodeFrame(body, version);
      if (frames.length < batch) frames.push(frame);
      encodes++;
    }
    t = performance.now();
  }
  const encodeNs = (cpuUs(e0) * 1e3) / encodes;
  const decode = c.decoder();
  let decodes = 0;
  const d0 = performance.now();
  let d = d0;
  const c0 = process.cpuUsage();
  while (d - d0 < ms) {
    for (const frame of frames) {
      const v = decode(frame[FRAME_HEADER_BYTES - 1] as number, frame.subarray(FRAME_HEADER_BYTES)) as { term: number };
      sink += v.term;
      decodes++;
    }
    d = performance.now();
  }
  return { encodeNs, decodeNs: (cpuUs(c0) * 1e3) / decodes, bytes: (frames[0] as Uint8Array).length };
}

function cpuUs(since: NodeJS.CpuUsage): number {
  const u = process.cpuUsage(since);
  return u.user + u.system;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 === 1 ? (s[(s.length - 1) / 2] as number) : ((s[s.length / 2 - 1] as number) + (s[s.length / 2] as number)) / 2;
};

function parseArgs(argv: readonly string[]): Options {
  const o: Options = { rounds: 15, ms: 200 };
  for (let k = 0; k < argv.length; k += 2) {
    const n = Number(argv[k + 1]);
    if (!Number.isInteger(n) || n <= 0) usage(`${argv[k]} needs a positive integer`);
    if (argv[k] === '--rounds') o.rounds = n;
    else if (argv[k] === '--ms') o.ms = n;
    else usage(`unknown flag ${argv[k]}`);
  }
  return o;
}

function usage(why: string): never {
  console.error(`codec bench: ${why}\nusage: node build/bench/raft/codec.js [--rounds 15] [--ms 200]`);
  process.exit(2);
}

function main(): void {
  const opts = parseArgs(process.argv.slice(2));
  const all = cases();
  for (const c of all) timeCase(c, opts.ms); // warm-up: every case optimised before any is timed
  const samples = all.map(() => ({ encode: [] as number[], decode: [] as number[], bytes: 0 }));
  for (let r = 0; r < opts.rounds; r++) {
    all.forEach((c, k) => {
      const t = timeCase(c, opts.ms);
      const s = samples[k]!;
      s.encode.push(t.encodeNs);
      s.decode.push(t.decodeNs);
      s.bytes = t.bytes;
    });
  }
  const rows = all.map((c, k) => {
    const s = samples[k]!;
    const encodeNs = Math.round(median(s.encode));
    const decodeNs = Math.round(median(s.decode));
    return { case: c.name, frameBytes: s.bytes, encodeNs, decodeNs, totalNs: encodeNs + decodeNs };
  });
  console.log('case                                       frame B  encode ns  decode ns  total ns');
  for (const r of rows) {
    console.log(
      [
        r.case.padEnd(41),
        String(r.frameBytes).padStart(8),
        String(r.encodeNs).padStart(10),
        String(r.decodeNs).padStart(10),
        String(r.totalNs).padStart(9),
      ].join('  '),
    );
  }
  console.log(JSON.stringify({ bench: 'raft-codec', node: process.version, rounds: opts.rounds, ms: opts.ms, rows }));
  if (sink === 0.5) console.log(''); // keeps the decoded values observable
}

main();
