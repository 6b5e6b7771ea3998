// The mass-disconnect and mass-reconnect benchmark: N clients (clean and persistent sessions, a
// quarter with wills) connect to raftmq, then all drop at once; then every one reconnects while its
// persistent session holds queued QoS 1 messages. It reports the broker's longest event-loop stall
// (its monitorEventLoopDelay histogram, logged on SIGUSR2 around each phase) and the worst PINGREQ
// round trip of a probe client during each phase. Figures, not assertions.
// Usage: npm run build && node build/bench/disconnect-storm.js [--help]
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { encode } from '../src/protocol/encoder.js';
import type { Packet } from '../src/protocol/packets.js';
import { freePort } from '../test/support/net.js';
import { sleep, until } from '../test/support/wait.js';

const REPO = resolve(dirname(new URL(import.meta.url).pathname), '..', '..');
const DEFAULT_CLI = join(REPO, 'build', 'src', 'cli.js');
const HOST = '127.0.0.1';
/** Clients spread over this many loopback source addresses, so TIME_WAIT ports never run out. */
const SOURCE_ADDRESSES = 16;
const START_WAIT_MS = 20_000;
const PHASE_WAIT_MS = 20_000;
const POLL_MS = 50;
const PROBE_EVERY_MS = 5;
/** Quiet time after a phase's last expected packet, so deferred work lands in its window. */
const SETTLE_MS = 1_000;
/** QoS 1 publishes in flight from the filler that queues messages for offline sessions. */
const FILL_WINDOW = 200;

const HELP = `node build/bench/disconnect-storm.js [options]
  --clients N          clients (default 10000): kinds by i % 4: 3.1.1 clean, 3.1.1 persistent,
                       5.0 persistent (expiry 300 s) with a will, 5.0 clean with a will
  --queued K           QoS 1 messages queued per persistent session before the reconnect (default 5)
  --connect-window N   CONNECTs in setup at once, also in the reconnect storm (default 1000)
  --cluster            three raftmq processes on loopback; the storm goes to the serving leader
  --cpu-prof           run raftmq under node --cpu-prof (profiles in --out)
  --cli FILE           the raftmq build to run (default build/src/cli.js of this checkout), e.g.
                       another checkout's, to compare before and after
  --out DIR            folder for CPU profiles (default bench/results)`;

interface Options {
  clients: number;
  queued: number;
  window: number;
  cluster: boolean;
  cpuProf: boolean;
  cli: string;
  outDir: string;
}

interface LoopDelay {
  on: string;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  resolutionMs: number;
}

/** Every process this run started, stopped by PID when the run fails. */
const started: ChildProcess[] = [];

function fail(message: string): never {
  for (const p of started) if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
  process.stderr.write(`disconnect-storm: ${message}\n`);
  process.exit(1);
}

function parseOptions(argv: string[]): Options {
  const { values: v } = parseArgs({
    args: argv,
    options: {
      clients: { type: 'string' },
      queued: { type: 'string' },
      'connect-window': { type: 'string' },
      cluster: { type: 'boolean' },
      'cpu-prof': { type: 'boolean' },
      cli: { type: 'string' },
      out: { type: 'string' },
      help: { type: 'boolean' },
    },
  });
  if (v.help === true) {
    process.stdout.write(`${HELP}\n`);
    process.exit(0);
  }
  const int = (s: string | undefined, flag: string, dflt: number, min: number): number => {
    const n = s === undefined ? dflt : Number(s);
    if (!Number.isSafeInteger(n) || n < min) fail(`${flag} must be an integer ≥ ${min}, got ${JSON.stringify(s)}`);
    return n;
  };
  return {
    clients: int(v.clients, '--clients', 10_000, 4),
    queued: int(v.queued, '--queued', 5, 0),
    window: int(v['connect-window'], '--connect-window', 1000, 1),
    cluster: v.cluster === true,
    cpuProf: v['cpu-prof'] === true,
    cli: resolve(v.cli ?? DEFAULT_CLI),
    outDir: resolve(v.out ?? join(REPO, 'bench', 'results')),
  };
}

// ---- the broker processes ----

/** A raftmq process this run started; stopped only by its PID. */
class Node {
  stdout = '';
  readonly proc: ChildProcess;

  constructor(cli: string, args: string[], profDir: string | null) {
    const prof = profDir === null ? [] : ['--cpu-prof', '--cpu-prof-dir', profDir];
    this.proc = spawn(process.execPath, [...prof, cli, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    started.push(this.proc);
    this.proc.stdout?.setEncoding('utf8').on('data', (c: string) => {
      this.stdout += c;
    });
  }

  loopDelays(): LoopDelay[] {
    const out: LoopDelay[] = [];
    for (const line of this.stdout.split('\n')) {
      if (!line.includes('"event-loop-delay"')) continue;
      try {
        out.push(JSON.parse(line) as LoopDelay);
      } catch {
        // a torn line says nothing
      }
    }
    return out;
  }

  /** Logs the histogram since the last report and resets it; resolves once the line is read. */
  async report(): Promise<LoopDelay> {
    const before = this.loopDelays().length;
    this.proc.kill('SIGUSR2');
    const deadline = Date.now() + START_WAIT_MS;
    while (this.loopDelays().length === before) {
      if (Date.now() > deadline) fail('no event-loop-delay report after SIGUSR2');
      await sleep(POLL_MS);
    }
    return this.loopDelays()[before] as LoopDelay;
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = once(this.proc, 'exit');
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), START_WAIT_MS);
    await exited;
    clearTimeout(timer);
  }
}

/** Broker flags common to one node and the cluster: the whole storm may be in setup at once. */
function brokerFlags(o: Options, port: number): string[] {
  return ['--host', HOST, '--port', String(port), '--log-level', 'warn', '--max-pending-connections', String(o.clients + 100)];
}

async function portOpen(port: number): Promise<boolean> {
  return new Promise((res) => {
    const s = connect(port, HOST);
    s.once('connect', () => {
      s.destroy();
      res(true);
    });
    s.once('error', () => res(false));
  });
}

function healthCode(port: number): Promise<number> {
  return new Promise((res) => {
    const req = request({ host: HOST, port, path: '/health', timeout: 1000 }, (r) => {
      r.resume();
      res(r.statusCode ?? 0);
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => res(0));
    req.end();
  });
}

interface Brokers {
  nodes: Node[];
  serving: Node;
  port: number;
}

async function startBrokers(o: Options): Promise<Brokers> {
  const profDir = o.cpuProf ? join(o.outDir, `cpu-disconnect-storm-${new Date().toISOString().replace(/[:.]/g, '-')}`) : null;
  if (profDir !== null) mkdirSync(profDir, { recursive: true });
  const deadline = Date.now() + START_WAIT_MS;
  if (!o.cluster) {
    const port = await freePort();
    const node = new Node(o.cli, brokerFlags(o, port), profDir);
    while (!(await portOpen(port))) {
      if (Date.now() > deadline || node.proc.exitCode !== null) fail('raftmq did not listen');
      await sleep(POLL_MS);
    }
    return { nodes: [node], serving: node, port };
  }
  const dir = mkdtempSync(join(tmpdir(), 'raftmq-storm-'));
  const peerPorts = [await freePort(), await freePort(), await freePort()];
  const mqtt = [await freePort(), await freePort(), await freePort()];
  const health = [await freePort(), await freePort(), await freePort()];
  const peers = peerPorts.map((p, i) => `${i + 1}=${HOST}:${p}`).join(',');
  const nodes = [0, 1, 2].map(
    (i) =>
      new Node(
        o.cli,
        [
          ...brokerFlags(o, mqtt[i] as number),
          '--health-port',
          String(health[i]),
          '--cluster-node',
          String(i + 1),
          '--cluster-peers',
          peers,
          '--state-file',
          join(dir, `node${i + 1}.state`),
        ],
        profDir,
      ),
  );
  for (;;) {
    for (let i = 0; i < 3; i++) {
      if ((await healthCode(health[i] as number)) === 200 && (await portOpen(mqtt[i] as number))) {
        return { nodes, serving: nodes[i] as Node, port: mqtt[i] as number };
      }
    }
    if (Date.now() > deadline) fail('no raftmq node served within the start wait');
    await sleep(POLL_MS * 4);
  }
}

// ---- a minimal MQTT client on raw sockets ----

/** Splits a byte stream into MQTT packets (fixed header, remaining length, body). */
class Frames {
  private buf: Buffer = Buffer.alloc(0);

  push(chunk: Buffer, onPacket: (type: number, flags: number, body: Buffer) => void): void {
    this.buf = this.buf.length === 0 ? chunk : Buffer.concat([this.buf, chunk]);
    for (;;) {
      let len = 0;
      let mult = 1;
      let i = 1;
      for (; i < 5 && i < this.buf.length; i++) {
        const b = this.buf[i] as number;
        len += (b & 0x7f) * mult;
        mult *= 128;
        if ((b & 0x80) === 0) break;
      }
      if (i >= this.buf.length || i === 5) return;
      const end = i + 1 + len;
      if (this.buf.length < end) return;
      const h = this.buf[0] as number;
      onPacket(h >> 4, h & 0x0f, this.buf.subarray(i + 1, end));
      this.buf = this.buf.subarray(end);
    }
  }
}

const PT_CONNACK = 2;
const PT_PUBLISH = 3;
const PT_PUBACK = 4;
const PT_SUBACK = 9;
const PT_PINGRESP = 13;

interface ClientSpec {
  id: string;
  level: 4 | 5;
  clean: boolean;
  expiryS: number;
  will: boolean;
  /** Subscribes to its own queue topic: a persistent session that collects messages offline. */
  queueTopic: string | null;
}

function clientSpec(i: number): ClientSpec {
  const id = `storm-${i}`;
  switch (i % 4) {
    case 0:
      return { id, level: 4, clean: true, expiryS: 0, will: false, queueTopic: null };
    case 1:
      return { id, level: 4, clean: false, expiryS: 0, will: false, queueTopic: `storm/q/${i}` };
    case 2:
      return { id, level: 5, clean: false, expiryS: 300, will: true, queueTopic: `storm/q/${i}` };
    default:
      return { id, level: 5, clean: true, expiryS: 0, will: true, queueTopic: null };
  }
}

function connectBytes(s: ClientSpec, clean: boolean): Buffer {
  const p: Packet = {
    type: 'connect',
    protocolName: 'MQTT',
    level: s.level,
    clean,
    keepAlive: 0,
    clientId: s.id,
    will: s.will ? { topic: `storm/will/${s.id}`, payload: Buffer.from('gone'), qos: 0, retain: false, props: {} } : null,
    username: null,
    password: null,
    props: s.level === 5 && s.expiryS > 0 ? { sessionExpiry: s.expiryS } : {},
  };
  return encode(p, s.level);
}

function subscribeBytes(level: 4 | 5, filter: string, qos: 0 | 1): Buffer {
  return encode({ type: 'subscribe', pid: 1, subs: [{ filter, qos, nl: false, rap: false, rh: 0 }], props: {} }, level);
}

/** Session present, or -1 when the broker refused or closed. */
type Connected = { socket: Socket; sessionPresent: boolean; received: number };

/** One client: CONNECT, the CONNACK, then optionally SUBSCRIBE and its SUBACK; QoS 1 PUBLISHes
 * it receives are acknowledged and counted in `received`. */
function openClient(port: number, s: ClientSpec, clean: boolean, subscribe: boolean, i: number, onPublish: () => void): Promise<Connected> {
  return new Promise((res, rej) => {
    const socket = connect({ host: HOST, port, localAddress: `127.0.0.${2 + (i % SOURCE_ADDRESSES)}` });
    const frames = new Frames();
    const c: Connected = { socket, sessionPresent: false, received: 0 };
    let settled = false;
    const done = (err: Error | null): void => {
      if (settled) return;
      settled = true;
      if (err === null) res(c);
      else rej(err);
    };
    socket.setNoDelay(true);
    socket.on('connect', () => socket.write(connectBytes(s, clean)));
    socket.on('data', (chunk: Buffer) =>
      frames.push(chunk, (type, flags, body) => {
        if (type === PT_CONNACK) {
          if (body[1] !== 0) return done(new Error(`${s.id}: CONNACK code ${String(body[1])}`));
          c.sessionPresent = ((body[0] as number) & 1) === 1;
          if (subscribe && s.queueTopic !== null) socket.write(subscribeBytes(s.level, s.queueTopic, 1));
          else done(null);
        } else if (type === PT_SUBACK) {
          done(null);
        } else if (type === PT_PUBLISH && ((flags >> 1) & 3) === 1) {
          const topicLen = body.readUInt16BE(0);
          const pid = body.readUInt16BE(2 + topicLen);
          socket.write(encode({ type: 'puback', pid, code: 0, props: {} }, s.level));
          c.received++;
          onPublish();
        }
      }),
    );
    socket.on('error', (err) => done(err));
    socket.on('close', () => done(new Error(`${s.id}: closed before CONNACK`)));
  });
}

/** Runs `run(i)` for i < total with at most `window` running at once. */
async function windowed(total: number, window: number, run: (i: number) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < total) await run(next++);
  };
  await Promise.all(Array.from({ length: Math.min(window, total) }, worker));
}

/** A client that sends PINGREQ every few ms and keeps the worst round trip: what a connected
 * client sees while the storm runs. It runs in its own process (this script with --probe PORT),
 * so the storm's client-side work does not stall it; each line on its stdin asks for the worst
 * round trip since the last line. */
function runProbe(port: number): void {
  const socket = connect(port, HOST);
  const frames = new Frames();
  let worst = 0;
  let sentAt = -1;
  socket.setNoDelay(true);
  socket.on('connect', () => {
    socket.write(
      encode(
        {
          type: 'connect',
          protocolName: 'MQTT',
          level: 4,
          clean: true,
          keepAlive: 0,
          clientId: 'storm-probe',
          will: null,
          username: null,
          password: null,
          props: {},
        },
        4,
      ),
    );
    setInterval(() => {
      if (sentAt >= 0) {
        worst = Math.max(worst, performance.now() - sentAt);
        return;
      }
      sentAt = performance.now();
      socket.write(encode({ type: 'pingreq' }, 4));
    }, PROBE_EVERY_MS);
  });
  socket.on('data', (chunk: Buffer) =>
    frames.push(chunk, (type) => {
      if (type !== PT_PINGRESP || sentAt < 0) return;
      worst = Math.max(worst, performance.now() - sentAt);
      sentAt = -1;
    }),
  );
  socket.on('close', () => process.exit(0));
  process.stdin.setEncoding('utf8').on('data', (c: string) => {
    for (let i = 0; i < c.split('\n').length - 1; i++) {
      process.stdout.write(`${worst.toFixed(3)}\n`);
      worst = 0;
    }
  });
  process.stdin.on('end', () => process.exit(0));
}

class Probe {
  private readonly proc: ChildProcess;
  private out = '';

  constructor(port: number) {
    this.proc = spawn(process.execPath, [new URL(import.meta.url).pathname, '--probe', String(port)], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    started.push(this.proc);
    this.proc.stdout?.setEncoding('utf8').on('data', (c: string) => {
      this.out += c;
    });
  }

  /** The worst round trip since the previous call, in ms. */
  async worst(): Promise<number> {
    const before = this.out.split('\n').length;
    this.proc.stdin?.write('\n');
    await waitFor('the probe', () => this.out.split('\n').length > before);
    return Number(this.out.split('\n')[before - 1]);
  }

  stop(): void {
    this.proc.stdin?.end();
  }
}

/** Waits for a phase's condition; a phase that does not end in PHASE_WAIT_MS fails the run. */
function waitFor(what: string, cond: () => boolean): Promise<void> {
  return until(what, cond, PHASE_WAIT_MS, { intervalMs: POLL_MS }).then(
    () => undefined,
    () => fail(`timed out waiting for ${what}`),
  );
}

/** Publishes `count` QoS 1 messages to each topic from one connection, `FILL_WINDOW` in flight. */
async function fill(port: number, topics: string[], count: number): Promise<void> {
  const total = topics.length * count;
  if (total === 0) return;
  const pub = await openClient(
    port,
    { id: 'storm-filler', level: 4, clean: true, expiryS: 0, will: false, queueTopic: null },
    true,
    false,
    0,
    () => {},
  );
  const frames = new Frames();
  let sent = 0;
  let acked = 0;
  const payload = Buffer.alloc(32, 'x');
  const sendMore = (): void => {
    while (sent < total && sent - acked < FILL_WINDOW) {
      const topic = topics[sent % topics.length] as string;
      sent++;
      pub.socket.write(
        encode({ type: 'publish', dup: false, qos: 1, retain: false, topic, pid: (sent % 65535) + 1, payload, props: {} }, 4),
      );
    }
  };
  pub.socket.on('data', (chunk: Buffer) =>
    frames.push(chunk, (type) => {
      if (type !== PT_PUBACK) return;
      acked++;
      sendMore();
    }),
  );
  sendMore();
  await waitFor('the filler PUBACKs', () => acked === total);
  pub.socket.destroy();
}

// ---- the run ----

function row(phase: string, d: LoopDelay, probeMs: number, wallMs: number): string {
  const ms = (v: number): string => v.toFixed(1);
  return `| ${phase} | ${ms(d.p99Ms)} | ${ms(d.maxMs)} | ${ms(probeMs)} | ${wallMs.toFixed(0)} |`;
}

async function main(): Promise<void> {
  const probeAt = process.argv.indexOf('--probe');
  if (probeAt >= 0) return runProbe(Number(process.argv[probeAt + 1]));
  const o = parseOptions(process.argv.slice(2));
  const b = await startBrokers(o);
  const specs = Array.from({ length: o.clients }, (_, i) => clientSpec(i));
  const wills = specs.filter((s) => s.will).length;
  const queueTopics = specs.flatMap((s) => (s.queueTopic === null ? [] : [s.queueTopic]));
  const rows: string[] = [];
  try {
    // The watcher receives every will (QoS 0): all arrived means every will-carrying disconnect
    // was applied. The probe measures what a live client sees.
    const watcher = await openClient(
      b.port,
      { id: 'storm-watcher', level: 4, clean: true, expiryS: 0, will: false, queueTopic: null },
      true,
      false,
      0,
      () => {},
    );
    let willsSeen = 0;
    const wf = new Frames();
    watcher.socket.on('data', (chunk: Buffer) =>
      wf.push(chunk, (type) => {
        if (type === PT_PUBLISH) willsSeen++;
      }),
    );
    watcher.socket.write(subscribeBytes(4, 'storm/will/#', 0));
    let finished = false;
    // A serving node that stalls past its lease stops serving and closes every connection.
    watcher.socket.on('close', () => {
      if (!finished) fail('the broker closed the watcher connection (did the node stop serving?)');
    });
    const probe = new Probe(b.port);

    const t0 = performance.now();
    const conns: Connected[] = new Array(o.clients);
    await windowed(o.clients, o.window, async (i) => {
      conns[i] = await openClient(b.port, specs[i] as ClientSpec, (specs[i] as ClientSpec).clean, true, i, () => {});
    });
    process.stderr.write(`connected ${o.clients} in ${(performance.now() - t0).toFixed(0)} ms\n`);
    await sleep(SETTLE_MS);
    await b.serving.report();

    // Mass disconnect: every socket ends in one turn of this process (FIN, no DISCONNECT).
    await probe.worst();
    const t1 = performance.now();
    for (const c of conns) c.socket.destroy();
    await waitFor(`every will (${wills})`, () => willsSeen >= wills);
    const drop = performance.now() - t1;
    await sleep(SETTLE_MS);
    rows.push(row(`disconnect ${o.clients}`, await b.serving.report(), await probe.worst(), drop));

    // Messages for the offline persistent sessions, then the reconnect storm.
    await fill(b.port, queueTopics, o.queued);
    await sleep(SETTLE_MS);
    await b.serving.report();
    await probe.worst();
    let received = 0;
    const expected = queueTopics.length * o.queued;
    const t2 = performance.now();
    await windowed(o.clients, o.window, async (i) => {
      const s = specs[i] as ClientSpec;
      conns[i] = await openClient(b.port, s, s.clean, false, i, () => received++);
    });
    await waitFor('every queued message', () => received >= expected);
    const reconnect = performance.now() - t2;
    await sleep(SETTLE_MS);
    rows.push(row(`reconnect ${o.clients} (${expected} queued)`, await b.serving.report(), await probe.worst(), reconnect));
    const present = conns.filter((c, i) => c.sessionPresent !== (specs[i] as ClientSpec).clean).length;
    process.stderr.write(`session present where expected: ${present} of ${o.clients}\n`);

    // Mass disconnect again, now with sessions that have delivered their queues.
    await probe.worst();
    willsSeen = 0;
    const t3 = performance.now();
    for (const c of conns) c.socket.destroy();
    await waitFor(`every will (${wills})`, () => willsSeen >= wills);
    const drop2 = performance.now() - t3;
    await sleep(SETTLE_MS);
    rows.push(row(`disconnect ${o.clients} again`, await b.serving.report(), await probe.worst(), drop2));
    finished = true;
    watcher.socket.destroy();
    probe.stop();
  } finally {
    for (const n of b.nodes) await n.stop();
  }
  const mode = `${o.cluster ? 'three nodes on loopback (the serving leader)' : 'one node, in memory'}, ${o.cli}`;
  process.stdout.write(
    [
      `raftmq ${mode}, ${o.clients} clients (¼ 3.1.1 clean, ¼ 3.1.1 persistent, ¼ 5.0 persistent with will, ¼ 5.0 clean with will), Node ${process.version}`,
      '',
      '| phase | ELD p99 ms | ELD max ms | probe PINGREQ worst ms | phase ms |',
      '|---|--:|--:|--:|--:|',
      ...rows,
      '',
    ].join('\n'),
  );
}

main().catch((err: unknown) => fail((err as Error).stack ?? String(err)));
