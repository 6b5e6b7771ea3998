// One load worker process (forked by bench/fleet.ts): it owns a share of the devices, and on
// request consumers, the command backend or a publisher. It answers the parent's requests over IPC;
// everything it does is bounded by the parent's deadlines and its own timeouts.
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { hrtime } from 'node:process';
import { type Conn, type ConnectSpec, connectMqtt, type Endpoint, nowMs, type Packet } from './client.js';
import { Hist } from './histogram.js';
import type {
  ArmArgs,
  CmdCheck,
  ConnectArgs,
  ConnectReply,
  ConsumersArgs,
  FailoverStatus,
  FleetCollect,
  FleetProgress,
  FleetStartArgs,
  PublishArgs,
  Reply,
  Request,
} from './protocol.js';

/** Payload: [0] kind, [1] measured, [4..8) device, [8..12) seq, [16..24) hrtime ns at send. */
const KIND_TELEMETRY = 1;
const KIND_CMD = 2;
const PAYLOAD_MIN = 24;
const SWEEP_MS = 250;
const TICK_MS = 5;
/** A publisher in the fleet scenario keeps at most this many QoS 1 publishes unacknowledged
 * (below raftmq's default Receive Maximum of 64). */
const DEVICE_INFLIGHT_MAX = 32;
const CLOSE_WAIT_MS = 5_000;
const COMMAND_QUEUE_MAX = 100_000;

const hr = (): bigint => hrtime.bigint();
/** This worker's own event-loop delay: a worker that stalls delays its sends and receipts. */
const loopDelay = monitorEventLoopDelay({ resolution: 10 });
loopDelay.enable();

function payload(kind: number, measured: boolean, device: number, seq: number, size: number): Buffer {
  const b = Buffer.alloc(Math.max(PAYLOAD_MIN, size));
  b[0] = kind;
  b[1] = measured ? 1 : 0;
  b.writeUInt32BE(device, 4);
  b.writeUInt32BE(seq >>> 0, 8);
  b.writeBigUInt64BE(hr(), 16);
  return b;
}

function latencyUs(p: Buffer): number {
  return Number(hr() - p.readBigUInt64BE(16)) / 1000;
}

interface Device {
  id: number;
  conn: Conn | null;
  spec: ConnectSpec;
  up: boolean;
  nodeIndex: number;
  /** Telemetry publishes not yet acknowledged, by packet id: resent (DUP) after a reconnect
   * that finds the session, as MQTT asks of a client. */
  unacked: Map<number, Buffer>;
  nextPid: number;
  maxInflight: number;
  seq: number;
  cmdTopic: string;
  telemetryTopic: string;
  keepaliveMs: number;
  // failover
  reconnecting: boolean;
  backAtNs: bigint;
  lostAtNs: bigint;
  sessionPresent: number;
  resubscribe: 'none' | 'pending' | 'done' | 'failed';
  cmdGot: number;
  subWaiter: ((ok: boolean) => void) | null;
}

let endpoints: Endpoint[] = [];
let ca: string | null = null;
let devices: Device[] = [];
let plain: Conn[] = [];
let consumers: Conn[] = [];
interface PendingCommand {
  topic: string;
  payload: Buffer;
}
/** The command backend: one connection, at most the broker's Receive Maximum (or 1000) in flight,
 * the rest queued here in order, as a backend would. */
interface Commander {
  conn: Conn;
  inflight: number;
  max: number;
  queue: PendingCommand[];
  head: number;
}
let commander: Commander | null = null;

function sendCommand(cm: Commander, c: PendingCommand): void {
  cm.inflight++;
  cm.conn.send({ cmd: 'publish', topic: c.topic, qos: 1, messageId: cm.conn.packetId(), dup: false, retain: false, payload: c.payload });
}
let failover: ArmArgs | null = null;
let failoverDeadline = 0;
const counters = {
  attempts: 0,
  refused: 0,
  closedBeforeConnack: 0,
  timedOut: 0,
  rcRefused: 0,
  referred: 0,
  gaveUp: 0,
  lostAgain: 0,
  losses: 0,
};

// fleet state
let clients = 0;
let sent = new Uint32Array(0);
let received = new Uint32Array(0);
const latency = new Hist();
const cmdLatency = new Hist();
let telemetryReceived = 0;
let cmdSent = 0;
let cmdReceived = 0;
let skippedInflight = 0;
let skippedDown = 0;
let cmdSkipped = 0;
let maxBehindMs = 0;
let connLost = 0;
let consumerLost = 0;
let win = { start: 0n, end: 0n };
const timers: NodeJS.Timeout[] = [];
let schedulersRunning = 0;

const inWindow = (t: bigint): boolean => t >= win.start && t < win.end;

async function windowed<T>(items: T[], window: number, fn: (t: T) => Promise<void>): Promise<void> {
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) await fn(items[next++] as T);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(window, items.length)) }, lane));
}

// ---- devices ----

function onDevicePacket(d: Device, conn: Conn, p: Packet): void {
  switch (p.cmd) {
    case 'puback':
      if (p.messageId !== undefined) d.unacked.delete(p.messageId);
      return;
    case 'publish': {
      if (p.qos > 0 && p.messageId !== undefined) conn.ack(p.messageId);
      const b = p.payload as Buffer;
      if (b.length >= PAYLOAD_MIN && b[0] === KIND_CMD) {
        d.cmdGot++;
        if (b[1] === 1) {
          cmdReceived++;
          cmdLatency.add(latencyUs(b));
        }
      }
      return;
    }
    case 'suback': {
      const w = d.subWaiter;
      d.subWaiter = null;
      w?.(p.granted.every((g) => (typeof g === 'number' ? g : (g as { qos: number }).qos) < 0x80));
      return;
    }
    default:
      return;
  }
}

function attach(d: Device, conn: Conn, receiveMaximum: number): void {
  d.conn = conn;
  d.up = true;
  d.maxInflight = Math.min(DEVICE_INFLIGHT_MAX, receiveMaximum);
  conn.onPacket = (p) => onDevicePacket(d, conn, p);
  conn.onClose = () => {
    if (d.conn !== conn) return;
    if (failover === null) {
      if (d.up) connLost++;
      d.up = false;
      return;
    }
    // --detect keepalive: the device does not see the reset; only its keep-alive timer tells.
    if (failover.mode === 'keepalive') return;
    lost(d);
  };
}

function subscribe(d: Device, timeoutMs: number): Promise<boolean> {
  const conn = d.conn;
  if (conn === null) return Promise.resolve(false);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      d.subWaiter = null;
      resolve(false);
    }, timeoutMs);
    d.subWaiter = (ok) => {
      clearTimeout(timer);
      resolve(ok);
    };
    conn.send({ cmd: 'subscribe', messageId: conn.packetId(), subscriptions: [{ topic: d.cmdTopic, qos: 1 }] });
  });
}

async function connectDevices(a: ConnectArgs): Promise<ConnectReply> {
  endpoints = a.endpoints;
  ca = a.ca;
  const failures: Record<string, number> = {};
  let firstFailure = '';
  let connected = 0;
  let sessionPresent = 0;
  let firstStartNs = 0n;
  let lastConnackNs = 0n;
  const failedIds: number[] = [];
  const fail = (why: string, detail: string): void => {
    failures[why] = (failures[why] ?? 0) + 1;
    if (firstFailure === '') firstFailure = `${why}: ${detail}`;
  };
  await windowed(a.ids, a.window, async (id) => {
    const spec: ConnectSpec = {
      clientId: `${a.prefix}${id}`,
      version: a.version,
      clean: a.clean,
      keepaliveS: a.keepaliveS,
      sessionExpiryS: a.sessionExpiryS,
    };
    const t = hr();
    if (firstStartNs === 0n) firstStartNs = t;
    const r = await connectMqtt(a.endpoint, spec, a.timeoutMs, a.ca);
    if (!r.ok) {
      fail(r.why, r.detail);
      failedIds.push(id);
      return;
    }
    lastConnackNs = hr();
    if (r.sessionPresent) sessionPresent++;
    if (!a.device) {
      plain.push(r.conn);
      r.conn.onClose = () => {
        connLost++;
      };
      connected++;
      return;
    }
    const d: Device = {
      id,
      conn: null,
      spec: { ...spec, clean: false },
      up: false,
      nodeIndex: a.nodeIndex,
      unacked: new Map(),
      nextPid: 1,
      maxInflight: DEVICE_INFLIGHT_MAX,
      seq: 0,
      cmdTopic: `devices/${id}/cmd`,
      telemetryTopic: `devices/${id}/telemetry`,
      keepaliveMs: a.keepaliveS * 1000,
      reconnecting: false,
      backAtNs: 0n,
      lostAtNs: 0n,
      sessionPresent: -1,
      resubscribe: 'none',
      cmdGot: 0,
      subWaiter: null,
    };
    attach(d, r.conn, r.receiveMaximum);
    if (!(await subscribe(d, a.timeoutMs))) {
      fail('suback', `SUBSCRIBE ${d.cmdTopic} refused or unanswered`);
      failedIds.push(id);
      d.conn = null;
      r.conn.destroy();
      return;
    }
    // Devices of a fleet ping at phases of their own, not all at once.
    r.conn.lastTxMs = nowMs() - Math.random() * d.keepaliveMs;
    devices.push(d);
    connected++;
  });
  return { connected, failures, firstFailure, failedIds, sessionPresent, firstStartNs, lastConnackNs };
}

// ---- failover: the device's reconnect loop ----

function backoffMs(): number {
  const f = failover as ArmArgs;
  return f.backoffMinMs + Math.random() * (f.backoffMaxMs - f.backoffMinMs);
}

function lost(d: Device): void {
  if (d.reconnecting) return;
  counters.losses++;
  if (d.backAtNs !== 0n) counters.lostAgain++;
  d.reconnecting = true;
  d.up = false;
  d.lostAtNs = hr();
  d.conn?.destroy();
  d.conn = null;
  d.nodeIndex = (d.nodeIndex + 1) % endpoints.length;
  later(d);
}

function later(d: Device): void {
  setTimeout(() => void attempt(d), backoffMs());
}

async function attempt(d: Device): Promise<void> {
  const f = failover as ArmArgs;
  if (nowMs() > failoverDeadline) {
    counters.gaveUp++;
    return;
  }
  counters.attempts++;
  const r = await connectMqtt(endpoints[d.nodeIndex] as Endpoint, d.spec, f.attemptTimeoutMs, ca);
  if (!r.ok) {
    // A Server Reference (--cluster-server-reference): the device goes there at once, as a client
    // that honours MQTT 5's reference does; a node that began to serve names itself.
    const to = r.reference === undefined ? -1 : endpoints.findIndex((e) => `${e.host}:${e.port}` === r.reference);
    if (to >= 0) {
      counters.referred++;
      d.nodeIndex = to;
      setImmediate(() => void attempt(d));
      return;
    }
    if (r.why === 'refused') counters.refused++;
    else if (r.why === 'timeout') counters.timedOut++;
    else if (r.why === 'rc') counters.rcRefused++;
    else counters.closedBeforeConnack++;
    d.nodeIndex = (d.nodeIndex + 1) % endpoints.length;
    later(d);
    return;
  }
  d.backAtNs = hr();
  d.sessionPresent = r.sessionPresent ? 1 : 0;
  d.reconnecting = false;
  attach(d, r.conn, r.receiveMaximum);
  if (r.sessionPresent) {
    for (const [messageId, pl] of d.unacked) {
      r.conn.send({ cmd: 'publish', topic: d.telemetryTopic, qos: 1, messageId, dup: true, retain: false, payload: pl });
    }
  } else {
    d.unacked.clear();
  }
  if (!r.sessionPresent && f.resubscribe) {
    // As a device does when its session is gone: subscribe again.
    d.resubscribe = 'pending';
    d.resubscribe = (await subscribe(d, f.attemptTimeoutMs)) ? 'done' : 'failed';
  }
}

/** Starts (or restarts, with counters and per-device times cleared) the reconnect loop. */
function arm(a: ArmArgs): void {
  failover = a;
  failoverDeadline = nowMs() + a.deadlineMs;
  for (const k of Object.keys(counters) as (keyof typeof counters)[]) counters[k] = 0;
  for (const d of devices) {
    d.backAtNs = 0n;
    d.lostAtNs = 0n;
    d.sessionPresent = -1;
    d.resubscribe = 'none';
  }
}

function failoverStatus(): FailoverStatus {
  const n = devices.length;
  const s: FailoverStatus = {
    ids: new Int32Array(n),
    backAtNs: new BigInt64Array(n),
    lostAtNs: new BigInt64Array(n),
    sessionPresent: new Int8Array(n),
    ...counters,
    resubscribed: 0,
    resubscribeFailed: 0,
    pendingResubscribe: 0,
    up: 0,
  };
  devices.forEach((d, i) => {
    s.ids[i] = d.id;
    if (d.up) s.up++;
    s.backAtNs[i] = d.up ? d.backAtNs : 0n;
    s.lostAtNs[i] = d.lostAtNs;
    s.sessionPresent[i] = d.up && d.backAtNs !== 0n ? d.sessionPresent : -1;
    if (d.resubscribe === 'done') s.resubscribed++;
    if (d.resubscribe === 'failed') s.resubscribeFailed++;
    if (d.resubscribe === 'pending') s.pendingResubscribe++;
  });
  return s;
}

function sweep(): void {
  const t = nowMs();
  for (const d of devices) {
    const c = d.conn;
    if (c === null || d.reconnecting) continue;
    if (failover?.mode === 'keepalive' && t - c.lastRxMs > 1.5 * d.keepaliveMs) {
      lost(d);
      continue;
    }
    if (t - c.lastTxMs >= d.keepaliveMs) c.send({ cmd: 'pingreq' });
  }
  for (const c of consumers) if (t - c.lastTxMs >= 30_000) c.send({ cmd: 'pingreq' });
  if (commander !== null && t - commander.conn.lastTxMs >= 30_000) commander.conn.send({ cmd: 'pingreq' });
  for (const c of plain) if (t - c.lastTxMs >= 30_000) c.send({ cmd: 'pingreq' });
}

function cmdCheck(): CmdCheck {
  let got = 0;
  let dup = 0;
  const missing: number[] = [];
  for (const d of devices) {
    if (d.cmdGot > 0) got++;
    else missing.push(d.id);
    if (d.cmdGot > 1) dup += d.cmdGot - 1;
  }
  return { received: got, duplicates: dup, missing: missing.length, missingSample: missing.slice(0, 20), latency: cmdLatency.data() };
}

/** One QoS 1 command to devices/<i>/cmd for every id, from a connection of its own. */
async function publishCommands(a: PublishArgs): Promise<{ acked: number; error: string }> {
  for (const d of devices) d.cmdGot = 0;
  cmdLatency.reset();
  cmdReceived = 0;
  const r = await connectMqtt(
    a.endpoint,
    { clientId: `cmd-pub-${process.pid}`, version: 5, clean: true, keepaliveS: 60, sessionExpiryS: 0 },
    a.timeoutMs,
    a.ca,
  );
  if (!r.ok) return { acked: 0, error: `publisher: ${r.why} ${r.detail}` };
  const conn = r.conn;
  const waiting = new Map<number, () => void>();
  conn.onPacket = (p) => {
    if (p.cmd === 'puback' && p.messageId !== undefined) waiting.get(p.messageId)?.();
  };
  let acked = 0;
  const deadline = nowMs() + a.timeoutMs * 4;
  const window = Math.min(a.window, r.receiveMaximum);
  await windowed(a.ids, window, async (id) => {
    if (conn.closed || nowMs() > deadline) return;
    const messageId = conn.packetId();
    const ok = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => {
        waiting.delete(messageId);
        resolve(false);
      }, a.timeoutMs);
      waiting.set(messageId, () => {
        clearTimeout(timer);
        waiting.delete(messageId);
        resolve(true);
      });
      conn.send({
        cmd: 'publish',
        topic: `devices/${id}/cmd`,
        qos: 1,
        messageId,
        dup: false,
        retain: false,
        payload: payload(KIND_CMD, true, id, 0, a.payloadBytes),
      });
    });
    if (ok) acked++;
  });
  conn.disconnect();
  return { acked, error: acked === a.ids.length ? '' : `${a.ids.length - acked} publishes not acknowledged` };
}

// ---- fleet: telemetry, consumers, commands ----

async function startConsumers(a: ConsumersArgs): Promise<{ connected: number; error: string }> {
  clients = a.clients;
  received = new Uint32Array(clients);
  for (const name of a.names) {
    const r = await connectMqtt(
      a.endpoint,
      { clientId: name, version: 5, clean: true, keepaliveS: a.keepaliveS, sessionExpiryS: 0 },
      10_000,
      a.ca,
    );
    if (!r.ok) return { connected: consumers.length, error: `consumer ${name}: ${r.why} ${r.detail}` };
    const conn = r.conn;
    let subOk: ((ok: boolean) => void) | null = null;
    conn.onPacket = (p) => {
      if (p.cmd === 'publish') {
        if (p.qos > 0 && p.messageId !== undefined) conn.ack(p.messageId);
        const b = p.payload as Buffer;
        if (b.length >= PAYLOAD_MIN && b[0] === KIND_TELEMETRY) {
          telemetryReceived++;
          if (b[1] === 1) {
            const dev = b.readUInt32BE(4);
            if (dev < clients) received[dev] = (received[dev] as number) + 1;
            latency.add(latencyUs(b));
          }
        }
      } else if (p.cmd === 'suback') {
        subOk?.(p.granted.every((g) => (typeof g === 'number' ? g : (g as { qos: number }).qos) < 0x80));
      }
    };
    conn.onClose = () => {
      consumerLost++;
    };
    const ok = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), 10_000);
      subOk = (v) => {
        clearTimeout(timer);
        resolve(v);
      };
      conn.send({ cmd: 'subscribe', messageId: conn.packetId(), subscriptions: [{ topic: a.filter, qos: 1 }] });
    });
    if (!ok) return { connected: consumers.length, error: `consumer ${name}: SUBSCRIBE ${a.filter} refused or unanswered` };
    consumers.push(conn);
  }
  return { connected: consumers.length, error: '' };
}

/** Calls fire(k) for k = 0, 1, ... at `rate` per second from now until endNs, evenly spaced; a
 * tick that finds itself behind sends at most 50 ms' worth and records how far behind it is. */
function schedule(rate: number, endNs: bigint, fire: (k: number) => void): void {
  if (rate <= 0) return;
  const t0 = hr();
  let done = 0;
  const cap = Math.max(1, Math.ceil(rate * 0.05));
  schedulersRunning++;
  const timer = setInterval(() => {
    const now = hr();
    if (now >= endNs) {
      clearInterval(timer);
      schedulersRunning--;
      return;
    }
    const due = Math.floor((Number(now - t0) * rate) / 1e9);
    const n = Math.min(cap, due - done);
    for (let i = 0; i < n; i++) fire(done++);
    const behind = ((due - done) / rate) * 1000;
    if (behind > maxBehindMs) maxBehindMs = behind;
  }, TICK_MS);
  timers.push(timer);
}

async function fleetStart(a: FleetStartArgs): Promise<{ error: string }> {
  win = { start: a.winStartNs, end: a.winEndNs };
  loopDelay.reset();
  clients = a.clients;
  if (sent.length !== clients) sent = new Uint32Array(clients);
  if (received.length !== clients) received = new Uint32Array(clients);
  const devs = devices;
  if (devs.length > 0) {
    schedule(a.ratePerDevice * devs.length, a.winEndNs, (k) => {
      const d = devs[k % devs.length] as Device;
      const c = d.conn;
      if (!d.up || c === null || c.closed) {
        skippedDown++;
        return;
      }
      if (d.unacked.size >= d.maxInflight) {
        skippedInflight++;
        return;
      }
      const measured = inWindow(hr());
      d.seq++;
      let messageId = d.nextPid;
      while (d.unacked.has(messageId)) messageId = messageId === 65_535 ? 1 : messageId + 1;
      d.nextPid = messageId === 65_535 ? 1 : messageId + 1;
      const pl = payload(KIND_TELEMETRY, measured, d.id, d.seq, a.payloadBytes);
      d.unacked.set(messageId, pl);
      c.send({ cmd: 'publish', topic: d.telemetryTopic, qos: 1, messageId, dup: false, retain: false, payload: pl });
      if (measured && d.id < sent.length) sent[d.id] = (sent[d.id] as number) + 1;
    });
  }
  const cmds = a.commands;
  if (cmds !== null && cmds.ids.length > 0 && cmds.rate > 0) {
    if (commander === null || commander.conn.closed) {
      const r = await connectMqtt(
        cmds.endpoint,
        { clientId: `backend-cmd-${process.pid}`, version: 5, clean: true, keepaliveS: 60, sessionExpiryS: 0 },
        10_000,
        cmds.ca,
      );
      if (!r.ok) return { error: `command backend: ${r.why} ${r.detail}` };
      const cm: Commander = { conn: r.conn, inflight: 0, max: Math.min(1000, r.receiveMaximum), queue: [], head: 0 };
      r.conn.onPacket = (p) => {
        if (p.cmd !== 'puback') return;
        if (cm.inflight > 0) cm.inflight--;
        while (cm.inflight < cm.max && cm.head < cm.queue.length) sendCommand(cm, cm.queue[cm.head++] as PendingCommand);
        if (cm.head === cm.queue.length) {
          cm.queue = [];
          cm.head = 0;
        }
      };
      r.conn.onClose = () => {
        consumerLost++;
      };
      commander = cm;
    }
    const cm = commander;
    schedule(cmds.rate, a.winEndNs, (k) => {
      if (cm.conn.closed || cm.queue.length - cm.head >= COMMAND_QUEUE_MAX) {
        cmdSkipped++;
        return;
      }
      const id = cmds.ids[k % cmds.ids.length] as number;
      const measured = inWindow(hr());
      // Stamped now: time spent queued behind the broker's Receive Maximum counts as latency.
      const c: PendingCommand = { topic: `devices/${id}/cmd`, payload: payload(KIND_CMD, measured, id, k, a.payloadBytes) };
      if (measured) cmdSent++;
      if (cm.inflight < cm.max) sendCommand(cm, c);
      else cm.queue.push(c);
    });
  }
  return { error: '' };
}

function fleetProgress(): FleetProgress {
  let inflight = commander === null ? 0 : commander.inflight + commander.queue.length - commander.head;
  for (const d of devices) inflight += d.unacked.size;
  return { inflight, telemetryReceived, publishersDone: schedulersRunning === 0 };
}

function fleetCollect(): FleetCollect {
  const r: FleetCollect = {
    sent: sent.slice(),
    received: received.slice(),
    latency: { ...latency.data(), counts: latency.counts.slice() },
    cmdSent,
    cmdReceived,
    cmdLatency: { ...cmdLatency.data(), counts: cmdLatency.counts.slice() },
    skippedInflight,
    skippedDown,
    cmdSkipped,
    maxBehindMs: Math.round(maxBehindMs * 10) / 10,
    loopDelayMaxMs: Math.round(loopDelay.max / 1e5) / 10,
    loopDelayP99Ms: Math.round(loopDelay.percentile(99) / 1e5) / 10,
    unacked: devices.reduce((n, d) => n + d.unacked.size, 0),
    cmdUnacked: commander === null ? 0 : commander.inflight + commander.queue.length - commander.head,
    connLost,
    consumerLost,
  };
  loopDelay.reset();
  sent.fill(0);
  received.fill(0);
  latency.reset();
  cmdLatency.reset();
  cmdSent = 0;
  cmdReceived = 0;
  skippedInflight = 0;
  skippedDown = 0;
  cmdSkipped = 0;
  maxBehindMs = 0;
  return r;
}

async function closeAll(): Promise<{ closed: number }> {
  failover = null;
  for (const t of timers) clearInterval(t);
  timers.length = 0;
  const conns: Conn[] = [...plain, ...consumers, ...devices.flatMap((d) => (d.conn === null ? [] : [d.conn]))];
  if (commander !== null) conns.push(commander.conn);
  for (const d of devices) d.up = false;
  devices = [];
  plain = [];
  consumers = [];
  commander = null;
  for (const c of conns) {
    c.onClose = () => {};
    c.disconnect();
  }
  const deadline = nowMs() + CLOSE_WAIT_MS;
  while (conns.some((c) => !c.closed) && nowMs() < deadline) await new Promise((r) => setTimeout(r, 50));
  for (const c of conns) if (!c.closed) c.destroy();
  connLost = 0;
  consumerLost = 0;
  return { closed: conns.length };
}

const handlers: Record<string, (args: never) => unknown> = {
  connect: connectDevices,
  arm,
  'failover-status': failoverStatus,
  'publish-commands': publishCommands,
  'cmd-check': cmdCheck,
  consumers: startConsumers,
  'fleet-start': fleetStart,
  'fleet-progress': fleetProgress,
  'fleet-collect': fleetCollect,
  'close-all': closeAll,
  'conn-lost': () => ({ connLost, consumerLost }),
};

setInterval(sweep, SWEEP_MS).unref();

process.on('message', (m: Request) => {
  const h = handlers[m.cmd];
  const reply = (r: Reply): void => {
    process.send?.(r);
  };
  if (h === undefined) {
    reply({ seq: m.seq, ok: false, error: `unknown command ${m.cmd}` });
    return;
  }
  Promise.resolve()
    .then(() => h(m.args as never))
    .then(
      (result) => reply({ seq: m.seq, ok: true, result }),
      (err: Error) => reply({ seq: m.seq, ok: false, error: err.stack ?? String(err) }),
    );
});
process.on('disconnect', () => process.exit(0));
