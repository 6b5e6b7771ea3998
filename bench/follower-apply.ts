// Apply cost per entry on a node that does not serve, in the pure state machine (no sockets, no
// log): a recorded stream of publishes and the subscribers' acks applied to a state restored from
// the same snapshot, with effects built (as the serving node applies, into an array cleared per
// entry) and without (out null, as a node that does not serve applies). Rounds alternate between
// the two and each figure is the median of its rounds, since other work may share the machine.
// CPU is process.cpuUsage() over a round, so a round that waits for the core counts only what it
// ran; a collection is forced before each round. Figures, not assertions.
// Usage: npm run build && node build/bench/follower-apply.js [--rounds N] [--entries N] [--sessions N]
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Broker } from '../src/broker/broker.js';
import type { Command, ConnectCommand, Effect, Entry, Message, SubscriptionRequest } from '../src/broker/commands.js';
import { DEFAULT_SETTINGS } from '../src/broker/settings.js';

const { values: args } = parseArgs({
  options: {
    rounds: { type: 'string', default: '9' },
    entries: { type: 'string', default: '100000' },
    sessions: { type: 'string', default: '10000' },
  },
});
const ROUNDS = Number(args.rounds);
const ENTRIES = Number(args.entries);
const SESSIONS = Number(args.sessions);
const T0 = 1_700_000_000_000;
/** Consumers of the fleet's shared telemetry subscription. */
const CONSUMERS = 4;
const PUBLISHERS = 8;
const PAYLOAD = new Uint8Array(64).fill(7);

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Builds a state entry by entry with effects, then records a stream: each command's effects tell
 * the recorder which packet ids its subscribers must acknowledge. */
class Recorder {
  readonly broker = new Broker();
  index = 0;
  time = T0;
  readonly stream: Entry[] = [];
  private recording = false;

  apply(cmd: Command): Effect[] {
    const e: Entry = { index: ++this.index, time: this.time, cmd };
    const out: Effect[] = [];
    this.broker.apply(e, out);
    if (this.broker.failed !== null) throw new Error(`setup broke an invariant: ${this.broker.failed}`);
    if (this.recording) this.stream.push(e);
    return out;
  }

  /** The state so far is the start of every round; what is applied from here on is the stream. */
  startRecording(): Uint8Array[] {
    this.recording = true;
    return [...this.broker.snapshot()];
  }

  connect(conn: string, clientId: string): void {
    const cmd: ConnectCommand = {
      t: 'connect',
      conn,
      clientId,
      protocol: 5,
      clean: false,
      expiryS: 0xffff_ffff,
      will: null,
      username: null,
      receiveMax: 65_535,
      maxPacketSize: 0,
      problemInfo: true,
    };
    this.apply(cmd);
  }

  subscribe(conn: string, filter: string): void {
    const sub: SubscriptionRequest = { filter, qos: 1, nl: false, rap: false, rh: 0 };
    this.apply({ t: 'subscribe', conn, pid: 1, subs: [sub] });
  }

  /** A QoS 1 publish, then a PUBACK from every session it was delivered to. */
  publishAndAck(conn: string, pid: number, topic: string): void {
    const msg: Message = { topic, payload: PAYLOAD, qos: 1, retain: false };
    const out = this.apply({ t: 'publish', conn, pid, msg });
    for (const e of out) {
      if (e.t === 'send' && e.packet.type === 'publish' && e.packet.pid !== undefined && e.conn !== conn) {
        this.apply({ t: 'ack', conn: e.conn, pid: e.packet.pid, kind: 'puback' });
      }
    }
  }
}

interface Scenario {
  name: string;
  start: Uint8Array[];
  stream: Entry[];
}

/** 8 publishers on bench/<i>, one subscriber on bench/# at QoS 1 that acknowledges each message. */
function fanin(): Scenario {
  const r = new Recorder();
  r.apply({ t: 'serve-start', node: 1, settings: DEFAULT_SETTINGS });
  const sub = `${r.index}.1`;
  const period = r.index;
  r.connect(sub, 'sub');
  r.subscribe(sub, 'bench/#');
  for (let i = 0; i < PUBLISHERS; i++) r.connect(`${period}.${2 + i}`, `pub${i}`);
  const start = r.startRecording();
  for (let j = 0; r.stream.length < ENTRIES; j++) {
    const p = j % PUBLISHERS;
    r.publishAndAck(`${period}.${2 + p}`, (Math.floor(j / PUBLISHERS) % 65_535) + 1, `bench/${p}`);
  }
  return { name: `fanin: ${PUBLISHERS} publishers, 1 subscriber on bench/# at QoS 1`, start, stream: r.stream };
}

/** SESSIONS devices, each subscribed to its own command topic; CONSUMERS members of a shared
 * subscription to every device's telemetry; a backend that sends commands. The stream alternates a
 * device's telemetry (to one consumer) and a command to a device, each acknowledged. */
function fleet(): Scenario {
  const r = new Recorder();
  r.apply({ t: 'serve-start', node: 1, settings: DEFAULT_SETTINGS });
  const period = r.index;
  const device = (i: number): string => `${period}.${10 + i}`;
  for (let c = 0; c < CONSUMERS; c++) {
    r.connect(`${period}.${1 + c}`, `consumer${c}`);
    r.subscribe(`${period}.${1 + c}`, '$share/ingest/fleet/+/telemetry');
  }
  const backend = `${period}.9`;
  r.connect(backend, 'backend');
  for (let i = 0; i < SESSIONS; i++) {
    r.connect(device(i), `d${i}`);
    r.subscribe(device(i), `fleet/d${i}/cmd`);
  }
  const start = r.startRecording();
  const pids = new Uint16Array(SESSIONS);
  let seed = 0x2545_f491;
  const next = (): number => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) % SESSIONS;
  };
  for (let j = 0; r.stream.length < ENTRIES; j++) {
    const i = next();
    pids[i] = (pids[i] as number) === 65_535 ? 1 : (pids[i] as number) + 1;
    r.publishAndAck(device(i), pids[i] as number, `fleet/d${i}/telemetry`);
    const k = next();
    r.publishAndAck(backend, (j % 65_535) + 1, `fleet/d${k}/cmd`);
  }
  return { name: `fleet: ${SESSIONS} sessions on their own topics, ${CONSUMERS} shared consumers`, start, stream: r.stream };
}

interface Round {
  cpuNs: number;
  wallNs: number;
  effects: number;
  digest: string | null;
}

function round(s: Scenario, build: boolean, withDigest: boolean): Round {
  const b = new Broker();
  b.restore(s.start);
  const stream = s.stream;
  const out: Effect[] = [];
  let effects = 0;
  gc();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  if (build) {
    for (let i = 0; i < stream.length; i++) {
      out.length = 0;
      b.apply(stream[i] as Entry, out);
      effects += out.length;
    }
  } else {
    for (let i = 0; i < stream.length; i++) b.apply(stream[i] as Entry, null);
  }
  const wall = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  if (b.failed !== null) throw new Error(`apply broke an invariant: ${b.failed}`);
  return {
    cpuNs: ((cpu.user + cpu.system) * 1000) / stream.length,
    wallNs: (wall * 1e6) / stream.length,
    effects: effects / stream.length,
    digest: withDigest ? b.digest() : null,
  };
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

function measure(s: Scenario): void {
  // Warm-up, and the check that both modes end in the same state.
  const on = round(s, true, true);
  const off = round(s, false, true);
  if (on.digest !== off.digest) throw new Error(`${s.name}: digests differ with and without effects`);
  const runs: Record<'on' | 'off', Round[]> = { on: [], off: [] };
  for (let i = 0; i < ROUNDS; i++) {
    // Alternate which mode goes first, so that neither always follows the other's garbage.
    const order: boolean[] = i % 2 === 0 ? [true, false] : [false, true];
    for (const build of order) runs[build ? 'on' : 'off'].push(round(s, build, false));
  }
  const cpuOn = median(runs.on.map((r) => r.cpuNs));
  const cpuOff = median(runs.off.map((r) => r.cpuNs));
  const wallOn = median(runs.on.map((r) => r.wallNs));
  const wallOff = median(runs.off.map((r) => r.wallNs));
  const range = (rs: Round[]): string => {
    const c = rs.map((r) => r.cpuNs);
    return `${Math.round(Math.min(...c))}–${Math.round(Math.max(...c))}`;
  };
  const lines = [
    `${s.name}: ${s.stream.length} entries (publish + ack), median of ${ROUNDS} alternating rounds`,
    `  effects built: cpu ${Math.round(cpuOn)} ns/entry (rounds ${range(runs.on)}), wall ${Math.round(wallOn)} ns/entry, ${on.effects.toFixed(2)} effects/entry`,
    `  no effects:    cpu ${Math.round(cpuOff)} ns/entry (rounds ${range(runs.off)}), wall ${Math.round(wallOff)} ns/entry`,
    `  saved:         cpu ${Math.round(cpuOn - cpuOff)} ns/entry (${(((cpuOn - cpuOff) / cpuOn) * 100).toFixed(1)}%), wall ${Math.round(wallOn - wallOff)} ns/entry; equal digests`,
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}

for (const make of [fanin, fleet]) measure(make());
