// Start-up time of a node from its data directory: how long from the spawn of the process to the
// first CONNACK it sends, with the CPU it used by then, its peak RSS and the bytes it read, for
//   empty     a new, empty data directory (the cost of starting at all, the baseline);
//   log       a log of --log-bytes of committed QoS 1 publishes after the last snapshot (none);
//   sessions  a snapshot holding --sessions persistent sessions, each with a subscription, and
//             little log after it;
// and with --cluster, a three-node cluster with --data-dir built the same way: kill -9 of one
// follower and its restart, timed until it is a follower whose applied index reached the leader's
// commit index; then kill -9 of all three and their restart, timed until a leader serves a CONNACK.
//
// The directories are built by the broker itself, as a user's would be: a node with --data-dir is
// sent the publishes (payload --payload-bytes, no subscriber, so the state stays small and the log
// holds only publishes; every PUBACK waited for), then killed with SIGKILL so that no stop snapshot
// is written; or it is sent the sessions (3.1.1 Clean Session 0, a SUBSCRIBE each, a DISCONNECT)
// and stopped with SIGTERM, which writes a snapshot at its last entry. The measured start reads
// files the build just wrote, so they are in the page cache: these are warm starts; a cold one
// adds the device's read time for the same bytes (the "from the device" figure says how many were
// fetched). Each directory is started --rounds times, each start ended with SIGKILL so that the
// directory stays as built (with --cpu-prof, once, ended with SIGTERM so the profile is written;
// that profile then also holds the stop snapshot). Phases come from the node's own log lines. A
// cluster node compacts its raft log at its own bounds, so its directory never holds a log as
// long as --log-bytes (see measureCluster). Every phase is bounded; the run exits 1 naming the
// phase that failed. Figures, not assertions.
// Usage: npm run build && node build/bench/startup.js [--log-bytes N] [--sessions N] [--cluster]
//   [--payload-bytes N] [--cases empty,log,sessions] [--rounds N] [--cpu-prof DIR] [--cold]
// --cold drops the kernel's page cache before each measured start (root only), so the files are
// read from the device as after a reboot; without it the starts read what the build just wrote,
// from memory.

import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { freePort, httpGet } from '../test/support/net.js';
import { sleep } from '../test/support/wait.js';
import { type Conn, connectMqtt, type Packet } from './fleet/client.js';
import { clockTicks } from './proc.js';
import {
  formatBytes,
  formatMs,
  logMarks,
  openMark,
  type PhaseSpec,
  procField,
  type StartReading,
  splitPhases,
  startLines,
  statTicks,
  summaryLine,
} from './startup-report.js';
import { BrokerProcess, CLI, HOST } from './targets.js';

const USAGE =
  'usage: node build/bench/startup.js [--log-bytes N] [--sessions N] [--cluster] [--payload-bytes N] [--cases empty,log,sessions] [--rounds N] [--cpu-prof DIR] [--cold]';

function usageError(message: string): never {
  process.stderr.write(`startup: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function parseFlags(): ReturnType<typeof parse> {
  try {
    return parse();
  } catch (err) {
    usageError((err as Error).message);
  }
}

function parse() {
  return parseArgs({
    options: {
      'log-bytes': { type: 'string', default: String(1024 * 1024 * 1024) },
      sessions: { type: 'string', default: '100000' },
      cluster: { type: 'boolean', default: false },
      'payload-bytes': { type: 'string', default: '1024' },
      cases: { type: 'string', default: 'empty,log,sessions' },
      'cpu-prof': { type: 'string', default: '' },
      rounds: { type: 'string', default: '3' },
      cold: { type: 'boolean', default: false },
    },
  }).values;
}

/** A positive integer flag, or the run stops naming it. */
function positiveInt(flag: string, v: string): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n) || n <= 0) usageError(`--${flag} must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
}

const args = parseFlags();
const LOG_BYTES = positiveInt('log-bytes', args['log-bytes']);
const SESSIONS = positiveInt('sessions', args.sessions);
const PAYLOAD_BYTES = positiveInt('payload-bytes', args['payload-bytes']);
const CASES = new Set(args.cases.split(',').filter((c) => c !== ''));
const PROF_DIR = args['cpu-prof'];
const ROUNDS = positiveInt('rounds', args.rounds);
const COLD = args.cold;

/** --cold: before each measured start, dirty pages are written out and the kernel's page cache,
 * dentries and inodes are dropped, so the directory (and the program itself) is read from the
 * device, as after a reboot. Needs root; a machine that refuses it stops the run naming the flag. */
function dropCaches(): void {
  if (!COLD) return;
  try {
    execFileSync('sync');
    writeFileSync('/proc/sys/vm/drop_caches', '3\n');
  } catch (err) {
    usageError(`--cold: cannot drop the page cache through /proc/sys/vm/drop_caches (${(err as Error).message}); it needs root`);
  }
}

/** Publishing connections, and QoS 1 publishes each keeps unacknowledged. */
const PUBLISHERS = 4;
const WINDOW = 512;
/** Publishes committed at most while a cluster's log is built: twice its compaction bound. */
const CLUSTER_PUBLISH_ENTRIES = 200_000;
/** Times a cluster's session is made again after a failure (a leader that lost its lease). */
const SESSION_RETRIES = 5;
/** Sessions created at once. */
const SESSION_WORKERS = 64;
/** Bounds of each phase. */
const BUILD_MS_MAX = 30 * 60_000;
const START_MS_MAX = 10 * 60_000;
const STOP_MS_MAX = 120_000;
const CONNECT_MS_MAX = 10_000;
const POLL_MS = 5;
const HEALTH_POLL_MS = 100;
/** How long the 'started' line may follow the first CONNACK. */
const STARTED_LINE_MS_MAX = 10_000;

/** Where a start spends its time, in the order of its log lines (src/server/durable-node.ts,
 * src/log/wal/recover.ts): reading and checking every file, restoring the snapshot and decoding the
 * log end at `data directory recovered`; the entries are applied before the serve-start entry. */
const OPEN_MARK = 'data directory open (derived)';
const SINGLE_PHASES: readonly PhaseSpec[] = [
  { name: 'boot', until: OPEN_MARK },
  { name: 'read + check files, restore snapshot, decode log', until: 'data directory recovered' },
  { name: 'apply replayed entries', until: 'serve-start' },
];
/** A cluster node (src/cluster/cluster-node.ts): its raft data directory is read and replayed
 * before `raft data directory loaded`; the driver's start, which hands the snapshot to the broker,
 * ends at `raft started`. */
const CLUSTER_PHASES: readonly PhaseSpec[] = [
  { name: 'boot, read raft data directory', until: 'raft data directory loaded' },
  { name: 'raft driver start (snapshot to the broker)', until: 'raft started' },
];

let phase = 'setup';
/** Every directory of the run, removed at its end. */
const ROOT = mkdtempSync(join(tmpdir(), 'raftmq-startup-'));
const started = new Set<BrokerProcess>();
const out = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

/** `p`, or a rejection naming the phase once `ms` passed. */
async function bounded<T>(what: string, ms: number, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${formatMs(ms)}`)), ms);
  });
  try {
    return await Promise.race([p, limit]);
  } finally {
    clearTimeout(timer);
  }
}

function startNode(label: string, argv: string[], prof: boolean): BrokerProcess {
  const profArgs = prof && PROF_DIR !== '' ? ['--cpu-prof', '--cpu-prof-dir', PROF_DIR] : [];
  const p = new BrokerProcess(label, spawn(process.execPath, [...profArgs, CLI, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] }));
  started.add(p);
  return p;
}

/** Waits until `p` exited; false when it did not within `ms`. */
async function exited(p: BrokerProcess, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (p.ended === null && Date.now() < end) await sleep(20);
  return p.ended !== null;
}

/** SIGKILL, as a crash: nothing is written at the end. */
async function kill9(p: BrokerProcess): Promise<void> {
  p.stopping = true;
  p.signal('SIGKILL');
  if (!(await exited(p, STOP_MS_MAX))) throw new Error(`${p.label} (PID ${p.pid}) did not exit after SIGKILL`);
  started.delete(p);
}

/** SIGTERM and a clean exit (a node with --data-dir writes its stop snapshot). */
async function stopClean(p: BrokerProcess): Promise<void> {
  p.stopping = true;
  p.signal('SIGTERM');
  if (!(await exited(p, STOP_MS_MAX))) {
    p.signal('SIGKILL');
    throw new Error(`${p.label} did not stop within ${formatMs(STOP_MS_MAX)} of SIGTERM`);
  }
  started.delete(p);
  if (p.ended !== 'exit 0') throw new Error(`${p.label} ended with ${p.ended} at its stop: ${p.tail()}`);
}

/** A CONNACK from `port` (retried while the port refuses, for up to `ms`). */
async function firstConnack(p: BrokerProcess, port: number, ms: number): Promise<Conn> {
  const end = Date.now() + ms;
  for (;;) {
    if (!p.alive) throw new Error(`${p.label} ended while starting (${p.ended ?? 'no PID'}): ${p.tail()}`);
    const r = await connectMqtt(
      { host: HOST, port, tls: false },
      { clientId: `probe-${randomBytes(4).toString('hex')}`, version: 4, clean: true, keepaliveS: 0, sessionExpiryS: 0 },
      CONNECT_MS_MAX,
      null,
    );
    if (r.ok) return r.conn;
    if (r.why !== 'refused' && r.why !== 'closed') throw new Error(`probe CONNECT to ${p.label}: ${r.why} ${r.detail}`);
    if (Date.now() > end) throw new Error(`${p.label} did not serve within ${formatMs(ms)}`);
    await sleep(POLL_MS);
  }
}

function readProc(pid: number): StartReading {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  let io = '';
  try {
    io = readFileSync(`/proc/${pid}/io`, 'utf8');
  } catch {
    // another user's process: bytes read unknown
  }
  return {
    ticks: statTicks(stat) ?? 0,
    peakRssKb: procField(status, 'VmHWM') ?? 0,
    readChars: procField(io, 'rchar'),
    readDeviceBytes: procField(io, 'read_bytes'),
  };
}

const loadavg = (): string => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ');

/** Bytes of the files of `dir` whose names match `re`. */
function filesBytes(dir: string, re: RegExp): { files: number; bytes: number } {
  let files = 0;
  let bytes = 0;
  for (const n of readdirSync(dir)) {
    if (!re.test(n)) continue;
    files++;
    bytes += statSync(join(dir, n)).size;
  }
  return { files, bytes };
}

interface HealthDataDir {
  walBytes: number;
  entriesWritten: number;
  lastSnapshot: { index: number; bytes: number };
}

async function health(port: number): Promise<{ code: number; body: Record<string, unknown> }> {
  const r = await httpGet(port, '/health', 2_000);
  return { code: r.code, body: JSON.parse(r.text) as Record<string, unknown> };
}

async function dataDirHealth(port: number): Promise<HealthDataDir> {
  const d = (await health(port)).body.dataDir as HealthDataDir | undefined;
  if (d === undefined) throw new Error('/health has no dataDir block');
  return d;
}

// ---- building: publishes ----

/** A QoS 1 PUBLISH of 3.1.1 on `topic` with packet id 0, to be patched at `pidAt`. */
function publishTemplate(topic: string, payload: Buffer): { bytes: Buffer; pidAt: number } {
  const t = Buffer.from(topic, 'utf8');
  const remaining = 2 + t.length + 2 + payload.length;
  const len: number[] = [];
  for (let n = remaining; ; ) {
    const b = n % 128;
    n = Math.floor(n / 128);
    len.push(n > 0 ? b | 0x80 : b);
    if (n === 0) break;
  }
  const head = Buffer.from([0x32, ...len, t.length >> 8, t.length & 0xff]);
  const pidAt = head.length + t.length;
  return { bytes: Buffer.concat([head, t, Buffer.alloc(2), payload]), pidAt };
}

/** Where the publishes go. */
interface PublishTarget {
  /** The MQTT port to connect to; `again` after a close (a cluster's serving leader is then
   * looked up again). */
  port(again: boolean): Promise<number>;
  /** A publisher the broker closed connects again (a cluster's leader may lose its lease on a
   * loaded host and close its clients); a single node closing one is a failure. */
  reconnect: boolean;
  /** The broker's last log lines, for a failure message. */
  tail(): string;
}

/** Publishers connecting again after a close, at most, over one build. */
const RECONNECTS_MAX = 20;

/** Streams QoS 1 publishes on PUBLISHERS connections, WINDOW unacknowledged each, until `enough()`
 * says so (polled); resolves once every publish still outstanding was acknowledged, with the count
 * acknowledged and the connections made again. Publishes outstanding on a connection the broker
 * closed are not waited for (no subscriber reads them, and the client would send them again). */
async function streamPublishes(
  target: PublishTarget,
  enough: () => Promise<boolean>,
  deadline: number,
): Promise<{ acked: number; reconnects: number }> {
  const payload = randomBytes(PAYLOAD_BYTES);
  let acked = 0;
  let outstanding = 0;
  let reconnects = 0;
  let stop = false;
  let failure: string | null = null;
  const conns = new Set<Conn>();
  const open = async (c: number, again: boolean): Promise<void> => {
    const r = await connectMqtt(
      { host: HOST, port: await target.port(again), tls: false },
      { clientId: `startup-pub-${c}`, version: 4, clean: true, keepaliveS: 0, sessionExpiryS: 0 },
      CONNECT_MS_MAX,
      null,
    );
    if (!r.ok) throw new Error(`publisher CONNECT: ${r.why} ${r.detail}`);
    const conn = r.conn;
    conns.add(conn);
    const tpl = publishTemplate(`startup/pub/${c}`, payload);
    let inflight = 0;
    let pid = 0;
    const pump = (): void => {
      const n = stop ? 0 : WINDOW - inflight;
      if (n <= 0) return;
      const batch = Buffer.allocUnsafe(n * tpl.bytes.length);
      for (let i = 0; i < n; i++) {
        const at = i * tpl.bytes.length;
        tpl.bytes.copy(batch, at);
        pid = pid === 65_535 ? 1 : pid + 1;
        batch.writeUInt16BE(pid, at + tpl.pidAt);
      }
      inflight += n;
      outstanding += n;
      conn.socket.write(batch);
    };
    conn.onPacket = (p: Packet) => {
      if (p.cmd !== 'puback') return;
      inflight--;
      outstanding--;
      acked++;
      // Refill in batches of a quarter window, not one publish per PUBACK.
      if (inflight <= (WINDOW * 3) / 4) pump();
    };
    conn.onClose = () => {
      conns.delete(conn);
      outstanding -= inflight;
      inflight = 0;
      if (stop) return;
      const why = `publisher ${c} closed by the broker (${acked} acknowledged; broker: ${target.tail()})`;
      if (!target.reconnect || reconnects >= RECONNECTS_MAX) {
        failure ??= reconnects >= RECONNECTS_MAX ? `${why}, after ${reconnects} reconnects` : why;
        return;
      }
      reconnects++;
      open(c, true).catch((err: unknown) => {
        failure ??= `${why}; connecting again: ${(err as Error).message}`;
      });
    };
    pump();
  };
  for (let c = 0; c < PUBLISHERS; c++) await open(c, false);
  while (!stop) {
    await sleep(HEALTH_POLL_MS);
    if (failure !== null) throw new Error(failure);
    if (Date.now() > deadline) throw new Error(`the log did not reach ${formatBytes(LOG_BYTES)} in time (${acked} acknowledged)`);
    stop = await enough();
  }
  while (outstanding > 0) {
    if (failure !== null) throw new Error(failure);
    if (Date.now() > deadline) throw new Error(`${outstanding} publishes never acknowledged`);
    await sleep(20);
  }
  for (const c of conns) c.disconnect();
  return { acked, reconnects };
}

// ---- building: sessions ----

/** One persistent session: CONNECT (3.1.1 Clean Session 0), SUBSCRIBE at QoS 1, DISCONNECT. */
async function makeSession(port: number, i: number): Promise<void> {
  const r = await connectMqtt(
    { host: HOST, port, tls: false },
    { clientId: `startup-s-${i}`, version: 4, clean: false, keepaliveS: 0, sessionExpiryS: 0 },
    CONNECT_MS_MAX,
    null,
  );
  if (!r.ok) throw new Error(`session ${i} CONNECT: ${r.why} ${r.detail}`);
  const conn = r.conn;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`session ${i}: no SUBACK within ${CONNECT_MS_MAX} ms`)), CONNECT_MS_MAX);
    conn.onPacket = (p: Packet) => {
      if (p.cmd !== 'suback') return;
      clearTimeout(timer);
      if (p.granted.some((g) => typeof g === 'number' && g >= 0x80)) reject(new Error(`session ${i}: SUBSCRIBE refused`));
      else resolve();
    };
    conn.onClose = () => {
      clearTimeout(timer);
      reject(new Error(`session ${i}: closed before its SUBACK`));
    };
    conn.send({ cmd: 'subscribe', messageId: 1, subscriptions: [{ topic: `startup/s/${i}/cmd`, qos: 1 }] });
  });
  await new Promise<void>((resolve) => {
    const timer = setTimeout(() => {
      conn.destroy();
      resolve();
    }, CONNECT_MS_MAX);
    conn.onClose = () => {
      clearTimeout(timer);
      resolve();
    };
    conn.disconnect();
  });
}

/** Makes sessions 0..n-1, SESSION_WORKERS at a time. A session that fails is made again up to
 * `retries` times, on the port `port(true)` gives then (a cluster's leader may move on a loaded
 * host; making it again is the same session, as its client id is). */
async function makeSessions(port: (again: boolean) => Promise<number>, n: number, deadline: number, retries: number): Promise<number> {
  let next = 0;
  let retried = 0;
  const worker = async (): Promise<void> => {
    while (next < n) {
      if (Date.now() > deadline) throw new Error(`sessions not made in time (${next} of ${n})`);
      const i = next++;
      for (let attempt = 0; ; attempt++) {
        try {
          await makeSession(await port(attempt > 0), i);
          break;
        } catch (err) {
          if (attempt >= retries) throw err;
          retried++;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: SESSION_WORKERS }, worker));
  return retried;
}

// ---- single node ----

interface Built {
  dir: string;
  /** Flags the measured start is given as well (the build's --snapshot-log-bytes). */
  flags: string[];
  notes: string[];
  /** Bytes of the log segments (log) or of the snapshot (sessions). */
  bytes: number;
  /** The directory is removed after each start, so that every round starts from an empty one. */
  fresh?: boolean;
}

const singleFlags = (port: number, healthPort: number, dir: string, level: string): string[] => [
  ...['--host', HOST, '--port', String(port), '--health-port', String(healthPort)],
  ...['--data-dir', dir, '--log-level', level],
];

async function buildLog(root: string): Promise<Built> {
  const dir = join(root, 'log');
  // No snapshot while the log grows: the trigger well above the log to build.
  const flags = ['--snapshot-log-bytes', String(Math.min(2 ** 40, Math.max(64 * 1024 * 1024, 2 * LOG_BYTES))), '--receive-maximum', '1024'];
  const port = await freePort();
  const hp = await freePort();
  const p = startNode('build-log', [...singleFlags(port, hp, dir, 'warn'), ...flags], false);
  const t0 = Date.now();
  await firstConnack(p, port, START_MS_MAX).then((c) => c.disconnect());
  const target: PublishTarget = { port: () => Promise.resolve(port), reconnect: false, tail: () => p.tail() };
  const { acked } = await streamPublishes(target, async () => (await dataDirHealth(hp)).walBytes >= LOG_BYTES, t0 + BUILD_MS_MAX);
  const d = await dataDirHealth(hp);
  if (d.lastSnapshot.index !== 0) throw new Error(`a snapshot was written while the log was built (index ${d.lastSnapshot.index})`);
  await kill9(p);
  const segs = filesBytes(dir, /^wal-\d{20}\.seg$/);
  const secs = (Date.now() - t0) / 1000;
  return {
    dir,
    flags,
    bytes: segs.bytes,
    notes: [
      `built in ${secs.toFixed(0)} s: ${acked} QoS 1 publishes of ${PAYLOAD_BYTES} B acknowledged, ${d.entriesWritten} entries, ${segs.files} segments of ${formatBytes(segs.bytes)}, no snapshot; then kill -9`,
    ],
  };
}

async function buildSessions(root: string): Promise<Built> {
  const dir = join(root, 'sessions');
  const port = await freePort();
  const hp = await freePort();
  const p = startNode('build-sessions', singleFlags(port, hp, dir, 'warn'), false);
  const t0 = Date.now();
  await firstConnack(p, port, START_MS_MAX).then((c) => c.disconnect());
  await makeSessions(() => Promise.resolve(port), SESSIONS, t0 + BUILD_MS_MAX, 0);
  await stopClean(p);
  const snaps = filesBytes(dir, /^snap-\d{20}\.snap$/);
  const segs = filesBytes(dir, /^wal-\d{20}\.seg$/);
  if (snaps.files !== 1) throw new Error(`${snaps.files} snapshots after the stop, expected 1`);
  const secs = (Date.now() - t0) / 1000;
  return {
    dir,
    flags: [],
    bytes: snaps.bytes,
    notes: [
      `built in ${secs.toFixed(0)} s: ${SESSIONS} persistent sessions (3.1.1, one QoS 1 subscription each, offline), stopped with SIGTERM; snapshot ${formatBytes(snaps.bytes)}, ${segs.files} segments of ${formatBytes(segs.bytes)} kept beside it`,
    ],
  };
}

/** The line 'started' of a single node: what recovery did (src/run-node.ts). */
function recoveredOf(p: BrokerProcess): { snapshotIndex: number; replayed: number; ms: number } | null {
  for (const line of p.stdout.split('\n')) {
    if (!line.includes('"msg":"started"')) continue;
    try {
      return (JSON.parse(line) as { recovered?: { snapshotIndex: number; replayed: number; ms: number } }).recovered ?? null;
    } catch {
      return null;
    }
  }
  return null;
}

interface Measured {
  wallMs: number;
  cpuS: number;
  peakRssKb: number;
}

/** One start of the node on `b.dir`, timed to its first CONNACK. It is then killed with SIGKILL,
 * so that no stop snapshot changes the directory for the next round (it only adds the few entries
 * of its own start); with --cpu-prof it is stopped with SIGTERM instead, which writes the profile. */
async function measureSingle(label: string, b: Built, last: boolean): Promise<Measured> {
  const port = await freePort();
  const hp = await freePort();
  const load0 = loadavg();
  const prof = PROF_DIR !== '';
  dropCaches();
  const spawnMs = Date.now();
  const p = startNode(`start-${label}`, [...singleFlags(port, hp, b.dir, 'info'), ...b.flags], prof);
  const conn = await firstConnack(p, port, START_MS_MAX);
  const servedMs = Date.now();
  const reading = readProc(p.pid);
  conn.disconnect();
  const end = Date.now() + STARTED_LINE_MS_MAX;
  while (recoveredOf(p) === null && Date.now() < end) await sleep(20);
  const rec = recoveredOf(p);
  const marks = logMarks(p.stdout.split('\n'));
  const open = rec === null ? null : openMark(marks, rec.ms, OPEN_MARK);
  if (open !== null) marks.unshift(open);
  const phases = splitPhases(spawnMs, servedMs, marks, SINGLE_PHASES, 'listen, first CONNACK');
  if (prof) await stopClean(p);
  else await kill9(p);
  const lines = startLines(label, servedMs - spawnMs, reading, clockTicks(), phases, [
    ...(last ? b.notes : []),
    rec === null
      ? 'no started line with recovered'
      : `node's own figure (open to serving): ${formatMs(rec.ms)}; snapshot index ${rec.snapshotIndex}, ${rec.replayed} entries replayed`,
    `load average before ${load0}, after ${loadavg()}`,
  ]);
  for (const l of lines) out(l);
  return { wallMs: servedMs - spawnMs, cpuS: reading.ticks / clockTicks(), peakRssKb: reading.peakRssKb };
}

/** ROUNDS starts of the same directory (one with --cpu-prof), and their medians. */
async function measureRounds(label: string, b: Built): Promise<void> {
  const rounds = PROF_DIR !== '' ? 1 : ROUNDS;
  const ms: Measured[] = [];
  for (let i = 0; i < rounds; i++) {
    phase = `${label}: start ${i + 1} of ${rounds}`;
    ms.push(await bounded(phase, START_MS_MAX + STOP_MS_MAX, measureSingle(`${label}, round ${i + 1}`, b, i === rounds - 1)));
    if (b.fresh === true) rmSync(b.dir, { recursive: true, force: true });
  }
  if (rounds > 1) out(summaryLine(label, ms));
}

// ---- cluster ----

interface ClusterNodes {
  ids: number[];
  peers: string;
  secret: string;
  mqtt: number[];
  health: number[];
  dir: string;
  procs: (BrokerProcess | null)[];
}

function startClusterNode(c: ClusterNodes, i: number, level: string, prof: boolean): BrokerProcess {
  const id = c.ids[i] as number;
  const p = startNode(
    `node${id}`,
    [
      ...['--host', HOST, '--port', String(c.mqtt[i]), '--health-port', String(c.health[i]), '--log-level', level],
      ...['--cluster-node', String(id), '--cluster-peers', c.peers, '--cluster-secret', c.secret],
      ...['--state-file', join(c.dir, `node${id}.state`), '--data-dir', join(c.dir, `node${id}.data`), '--receive-maximum', '1024'],
    ],
    prof,
  );
  c.procs[i] = p;
  return p;
}

interface NodeHealth {
  code: number;
  role: string;
  appliedIndex: number;
  commitIndex: number;
}

async function nodeHealth(port: number): Promise<NodeHealth | null> {
  try {
    const h = await health(port);
    const b = h.body as { role?: unknown; appliedIndex?: unknown; commitIndex?: unknown };
    if (typeof b.role !== 'string' || typeof b.appliedIndex !== 'number' || typeof b.commitIndex !== 'number') return null;
    return { code: h.code, role: b.role, appliedIndex: b.appliedIndex, commitIndex: b.commitIndex };
  } catch {
    return null;
  }
}

/** The index of the node that serves (/health 200), once exactly one does. */
async function servingLeader(c: ClusterNodes, ms: number): Promise<number> {
  const end = Date.now() + ms;
  for (;;) {
    for (const p of c.procs) if (p !== null && !p.alive) throw new Error(`${p.label} ended (${p.ended}): ${p.tail()}`);
    const hs = await Promise.all(c.health.map(nodeHealth));
    const up = hs.map((h, i) => (h?.code === 200 ? i : -1)).filter((i) => i >= 0);
    if (up.length === 1) return up[0] as number;
    if (Date.now() > end) throw new Error(`no single serving leader within ${formatMs(ms)}`);
    await sleep(POLL_MS * 4);
  }
}

async function measureCluster(root: string): Promise<void> {
  const c: ClusterNodes = {
    ids: [1, 2, 3],
    peers: '',
    secret: randomBytes(16).toString('hex'),
    mqtt: [],
    health: [],
    dir: join(root, 'cluster'),
    procs: [null, null, null],
  };
  mkdirSync(c.dir);
  const peerPorts: number[] = [];
  for (const _ of c.ids) {
    peerPorts.push(await freePort());
    c.mqtt.push(await freePort());
    c.health.push(await freePort());
  }
  c.peers = c.ids.map((id, i) => `${id}=${HOST}:${peerPorts[i]}`).join(',');
  phase = 'cluster: build';
  const t0 = Date.now();
  for (let i = 0; i < 3; i++) startClusterNode(c, i, 'warn', false);
  let leader = await servingLeader(c, START_MS_MAX);
  // The serving leader's port, looked up again only after a failure.
  const leaderPort = async (again: boolean): Promise<number> => {
    if (again) leader = await servingLeader(c, START_MS_MAX);
    return c.mqtt[leader] as number;
  };
  const sessionRetries = await makeSessions(leaderPort, SESSIONS, t0 + BUILD_MS_MAX, SESSION_RETRIES);
  // A cluster node compacts its raft log at its own bounds (100,000 applied entries or 64 MiB,
  // raft/driver/driver.ts, raft/core/snapshot.ts): the log after its snapshot never reaches a
  // --log-bytes of 1 GiB. The publishes go on until the leader's raft segments hold --log-bytes or
  // CLUSTER_PUBLISH_ENTRIES were committed, past the compaction bounds, whichever comes first.
  const buildEnd = Date.now() + BUILD_MS_MAX;
  const segBytes = (i: number): number => filesBytes(join(c.dir, `node${c.ids[i]}.data`), /^raft-\d{20}\.seg$/).bytes;
  let pubStart = 0;
  const { acked, reconnects } = await streamPublishes(
    {
      port: leaderPort,
      reconnect: true,
      tail: () => (c.procs[leader] as BrokerProcess).tail(),
    },
    async () => {
      const h = await nodeHealth(c.health[leader] as number);
      if (h === null) return false;
      if (pubStart === 0) pubStart = h.commitIndex;
      return segBytes(leader) >= LOG_BYTES || h.commitIndex - pubStart >= CLUSTER_PUBLISH_ENTRIES;
    },
    buildEnd,
  );
  leader = await servingLeader(c, START_MS_MAX);
  const lh = await nodeHealth(c.health[leader] as number);
  if (lh === null) throw new Error('the leader did not answer /health after the build');
  const follower = leader === 0 ? 1 : 0;
  const fdir = join(c.dir, `node${c.ids[follower]}.data`);
  const fsegs = filesBytes(fdir, /^raft-\d{20}\.seg$/);
  const fsnap = filesBytes(fdir, /^raft-snap-\d{20}\.snap$/);
  out(
    `cluster: built in ${((Date.now() - t0) / 1000).toFixed(0)} s: ${SESSIONS} persistent sessions (${sessionRetries} made again after a lost lease), then ${acked} QoS 1 publishes of ${PAYLOAD_BYTES} B acknowledged (${reconnects} publisher reconnects after a lost lease); commit index ${lh.commitIndex}; node${c.ids[follower]}'s directory: raft snapshot ${formatBytes(fsnap.bytes)}, ${fsegs.files} segments of ${formatBytes(fsegs.bytes)}`,
  );

  phase = 'cluster: one follower killed and restarted';
  await kill9(c.procs[follower] as BrokerProcess);
  const target = lh.commitIndex;
  const load0 = loadavg();
  dropCaches();
  const spawnMs = Date.now();
  const fp = startClusterNode(c, follower, 'info', false);
  const end = Date.now() + START_MS_MAX;
  let caught: NodeHealth | null = null;
  for (;;) {
    if (!fp.alive) throw new Error(`${fp.label} ended while starting (${fp.ended}): ${fp.tail()}`);
    const h = await nodeHealth(c.health[follower] as number);
    if (h !== null && h.role === 'follower' && h.appliedIndex >= target) {
      caught = h;
      break;
    }
    if (Date.now() > end) throw new Error(`${fp.label} did not catch up to ${target} within ${formatMs(START_MS_MAX)}`);
    await sleep(POLL_MS * 2);
  }
  const caughtMs = Date.now();
  const reading = readProc(fp.pid);
  const phases = splitPhases(spawnMs, caughtMs, logMarks(fp.stdout.split('\n')), CLUSTER_PHASES, 'until caught up');
  for (const l of startLines(
    `cluster, one follower after kill -9 (to follower, applied ${caught.appliedIndex} ≥ ${target})`,
    caughtMs - spawnMs,
    reading,
    clockTicks(),
    phases,
    [`load average before ${load0}, after ${loadavg()}`],
    'caught up',
  ))
    out(l);

  phase = 'cluster: all three killed and restarted';
  for (let i = 0; i < 3; i++) await kill9(c.procs[i] as BrokerProcess);
  const load1 = loadavg();
  const allSpawn = Date.now();
  for (let i = 0; i < 3; i++) startClusterNode(c, i, 'info', false);
  leader = await servingLeader(c, START_MS_MAX);
  const lp = c.procs[leader] as BrokerProcess;
  const conn = await firstConnack(lp, c.mqtt[leader] as number, START_MS_MAX);
  const servedMs = Date.now();
  const r2 = readProc(lp.pid);
  conn.disconnect();
  const p2 = splitPhases(allSpawn, servedMs, logMarks(lp.stdout.split('\n')), CLUSTER_PHASES, 'election, apply, first CONNACK');
  for (const l of startLines(
    `cluster, all three after kill -9 (the leader, node${c.ids[leader]})`,
    servedMs - allSpawn,
    r2,
    clockTicks(),
    p2,
    [`load average before ${load1}, after ${loadavg()}`],
  ))
    out(l);
  for (let i = 0; i < 3; i++) await stopClean(c.procs[i] as BrokerProcess);
}

// ---- main ----

function machine(): string {
  const cpu = cpus();
  return `${cpu.length} × ${cpu[0]?.model ?? 'unknown CPU'}, ${formatBytes(totalmem())} RAM, Node ${process.version}, temporary folder ${tmpdir()}`;
}

async function main(): Promise<void> {
  const root = ROOT;
  try {
    for (const c of CASES) if (!['empty', 'log', 'sessions'].includes(c)) throw new Error(`--cases: unknown case ${c}`);
    out(`startup bench: ${machine()}; load average ${loadavg()}`);
    if (CASES.has('empty')) {
      phase = 'empty: start';
      await measureRounds('empty data directory', { dir: join(root, 'empty'), flags: [], notes: [], bytes: 0, fresh: true });
    }
    if (CASES.has('log')) {
      phase = 'log: build';
      const b = await bounded(phase, BUILD_MS_MAX, buildLog(root));
      await measureRounds(`log of ${formatBytes(b.bytes)} after the last snapshot`, b);
      rmSync(b.dir, { recursive: true, force: true });
    }
    if (CASES.has('sessions')) {
      phase = 'sessions: build';
      const b = await bounded(phase, BUILD_MS_MAX, buildSessions(root));
      await measureRounds(`snapshot of ${SESSIONS} sessions`, b);
      rmSync(b.dir, { recursive: true, force: true });
    }
    if (args.cluster) await bounded('cluster', 2 * BUILD_MS_MAX, measureCluster(root));
  } finally {
    for (const p of started) {
      p.signal('SIGKILL');
      await exited(p, STOP_MS_MAX);
    }
    rmSync(root, { recursive: true, force: true });
  }
}

// Interrupted: the nodes this run started are killed by PID and its folder removed.
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    for (const p of started) p.signal('SIGKILL');
    rmSync(ROOT, { recursive: true, force: true });
    process.stderr.write(`startup bench interrupted by ${sig} in phase "${phase}"\n`);
    process.exit(1);
  });
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    process.stderr.write(`startup bench failed in phase "${phase}": ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  },
);
