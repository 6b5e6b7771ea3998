// Debian's haproxy running cluster-scripts/haproxy.cfg as shipped (addresses through its environment
// variables) in front of three raftmq processes: the HTTP health check marks exactly the serving
// leader UP, an MQTT.js client reaches the leader through HAProxy, and after kill -9 of the leader
// the same client reconnects through HAProxy to the new leader with its session and the QoS 1
// messages it had not acknowledged. The time from the kill to the first CONNACK through HAProxy is
// printed, not asserted.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { requireCommand } from './broker-process.js';
import { Cluster, type ClusterNode } from './support/cluster.js';
import { freePort, httpGet, LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';

const SHIPPED_CFG = join(process.cwd(), 'cluster-scripts', 'haproxy.cfg');
const ELECTION_TIMEOUT_MS = 500;
const SERVE_WAIT_MS = 15_000;
const HAPROXY_START_MS = 10_000;
const CHECK_VIEW_WAIT_MS = 10_000;
const FAILOVER_WAIT_MS = 20_000;
const DELIVERY_WAIT_MS = 15_000;
const RECONNECT_PERIOD_MS = 100;

const cleanups: Array<() => Promise<void> | void> = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

interface ServerState {
  name: string;
  status: string;
}

/** `haproxy -db` with the shipped config plus a small file that opens the runtime API socket. */
class Haproxy {
  output = '';
  private constructor(
    readonly proc: ChildProcess,
    readonly socketPath: string,
  ) {}

  static async start(dir: string, env: Record<string, string>): Promise<Haproxy> {
    const socketPath = join(dir, 'haproxy.sock');
    const statsCfg = join(dir, 'stats.cfg');
    // A second global section, in its own file, so the shipped file runs unchanged.
    writeFileSync(statsCfg, `global\n    stats socket "${socketPath}" mode 600 level admin\n`);
    const proc = spawn('haproxy', ['-db', '-f', SHIPPED_CFG, '-f', statsCfg], {
      env: { ...process.env, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const h = new Haproxy(proc, socketPath);
    const append = (chunk: string): void => {
      h.output += chunk;
    };
    proc.stdout?.setEncoding('utf8').on('data', append);
    proc.stderr?.setEncoding('utf8').on('data', append);
    const deadline = Date.now() + HAPROXY_START_MS;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`haproxy exited with ${proc.exitCode}: ${h.output}`);
      try {
        await h.servers();
        return h;
      } catch (err) {
        if (Date.now() > deadline) {
          await h.stop();
          throw new Error(`haproxy's stats socket did not answer within ${HAPROXY_START_MS} ms (${String(err)}): ${h.output}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  }

  /** One runtime API command; haproxy answers and closes the connection. */
  command(cmd: string, timeoutMs = 2_000): Promise<string> {
    return new Promise((resolve, reject) => {
      const s = netConnect(this.socketPath);
      let text = '';
      s.setEncoding('utf8');
      s.setTimeout(timeoutMs, () => s.destroy(new Error(`${cmd}: no answer within ${timeoutMs} ms`)));
      s.on('connect', () => s.end(`${cmd}\n`));
      s.on('data', (c: string) => {
        text += c;
      });
      s.on('end', () => resolve(text));
      s.on('error', reject);
    });
  }

  /** The raftmq backend's servers and their check status, from `show stat` (CSV). */
  async servers(): Promise<ServerState[]> {
    const lines = (await this.command('show stat')).split('\n').filter((l) => l !== '');
    const header = lines[0]?.replace(/^# /, '').split(',') ?? [];
    const px = header.indexOf('pxname');
    const sv = header.indexOf('svname');
    const st = header.indexOf('status');
    if (px < 0 || sv < 0 || st < 0) throw new Error(`show stat: unexpected header ${lines[0]}`);
    return lines
      .slice(1)
      .map((l) => l.split(','))
      .filter((f) => f[px] === 'raftmq' && f[sv] !== 'FRONTEND' && f[sv] !== 'BACKEND')
      .map((f) => ({ name: f[sv]!, status: f[st]! }));
  }

  /** Waits until the checks have settled (each server plainly UP or DOWN, not in a transition such
   * as the initial "UP 0/1") with exactly `name` UP; returns that view. */
  async waitForOnlyUp(name: string, timeoutMs: number): Promise<ServerState[]> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const view = await this.servers();
      const settled = view.length === 3 && view.every((s) => s.status === 'UP' || s.status === 'DOWN');
      const up = view.filter((s) => s.status === 'UP').map((s) => s.name);
      if (settled && up.length === 1 && up[0] === name) return view;
      if (Date.now() > deadline) throw new Error(`haproxy does not show only ${name} UP: ${JSON.stringify(view)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  async stop(): Promise<void> {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    const exited = once(this.proc, 'exit');
    this.proc.kill('SIGTERM');
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), 5_000);
    await exited;
    clearTimeout(timer);
  }
}

/** Connects once (no automatic reconnect) and resolves on CONNACK. */
function connectOnce(port: number, opts: IClientOptions, timeoutMs = 5_000): Promise<MqttClient> {
  const client = mqtt.connect({ host: LOOPBACK, port, reconnectPeriod: 0, connectTimeout: timeoutMs, ...opts });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.end(true);
      reject(new Error(`no CONNACK through port ${port} within ${timeoutMs} ms`));
    }, timeoutMs);
    client.once('connect', () => {
      clearTimeout(timer);
      resolve(client);
    });
    client.once('error', (err) => {
      clearTimeout(timer);
      client.end(true);
      reject(err);
    });
  });
}

async function connectionsOn(node: ClusterNode): Promise<number> {
  const r = await httpGet(node.healthPort, '/metrics');
  const m = /^raftmq_connections (\d+)$/m.exec(r.text);
  if (m === null) throw new Error(`node ${node.id}: no raftmq_connections in /metrics`);
  return Number(m[1]);
}

interface Received {
  text: string;
  dup: boolean;
  connection: number;
}

describe('HAProxy with cluster-scripts/haproxy.cfg in front of three nodes', { timeout: 120_000 }, () => {
  it('routes clients to the serving leader, and after kill -9 of it reconnects them to the new leader with their session and unacknowledged QoS 1 messages', async () => {
    requireCommand('haproxy', 'haproxy');
    const mqttPorts = [await freePort(), await freePort(), await freePort()];
    const healthPorts = [await freePort(), await freePort(), await freePort()];
    const frontPort = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'raftmq-haproxy-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));

    const cluster = await Cluster.start({
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      extra: (id) => ['--port', String(mqttPorts[id - 1]), '--health-port', String(healthPorts[id - 1])],
    });
    cleanups.push(() => cluster.stop());
    const leader = await cluster.serving(SERVE_WAIT_MS);

    const env: Record<string, string> = { RAFTMQ_LB_BIND: `${LOOPBACK}:${frontPort}` };
    for (let id = 1; id <= 3; id++) {
      env[`RAFTMQ_NODE${id}_ADDR`] = LOOPBACK;
      env[`RAFTMQ_NODE${id}_MQTT`] = String(mqttPorts[id - 1]);
      env[`RAFTMQ_NODE${id}_HEALTH`] = String(healthPorts[id - 1]);
    }
    const lb = await Haproxy.start(dir, env);
    cleanups.push(() => lb.stop());
    // HAProxy starts with every server UP until its first check: wait for the checks' verdict.
    await lb.waitForOnlyUp(`node${leader.id}`, CHECK_VIEW_WAIT_MS);

    // One persistent MQTT 5 session that reconnects on its own. On its first connection it never
    // acknowledges 'held' (MQTT.js then also stops reading), so 'held' and what follows it are
    // still unacknowledged when the leader dies.
    const received: Received[] = [];
    const connacks: Array<{ at: number; sessionPresent: boolean }> = [];
    let heldWithoutAck = false;
    const sub = mqtt.connect({
      host: LOOPBACK,
      port: frontPort,
      clientId: 'lb-sub',
      clean: false,
      protocolVersion: 5,
      properties: { sessionExpiryInterval: 3600 },
      reconnectPeriod: RECONNECT_PERIOD_MS,
      connectTimeout: 2_000,
      customHandleAcks: (_topic, message, _packet, done) => {
        if (message.toString() === 'held' && connacks.length === 1) {
          heldWithoutAck = true;
          return;
        }
        done(0);
      },
    });
    cleanups.push(() => {
      sub.end(true);
    });
    sub.on('connect', (ack) => connacks.push({ at: performance.now(), sessionPresent: ack.sessionPresent }));
    sub.on('message', (_topic, payload, packet) =>
      received.push({ text: payload.toString(), dup: packet.dup === true, connection: connacks.length }),
    );
    await until('the subscriber CONNACK through HAProxy', () => connacks.length === 1, SERVE_WAIT_MS);
    await sub.subscribeAsync('lb/#', { qos: 1 });

    const pub = await connectOnce(frontPort, { clientId: 'lb-pub', clean: true });
    await pub.publishAsync('lb/x', 'first', { qos: 1 });
    await until('a QoS 1 round trip through HAProxy', () => received.some((m) => m.text === 'first'), DELIVERY_WAIT_MS);
    assert.equal(await connectionsOn(leader), 2, 'both clients are connected to the serving leader');

    const unconsumed = ['held', 'queued-1', 'queued-2', 'queued-3'];
    for (const text of unconsumed) await pub.publishAsync('lb/x', text, { qos: 1 });
    await until("the subscriber holding 'held' unacknowledged", () => heldWithoutAck, DELIVERY_WAIT_MS);
    pub.end(true);

    const t0 = performance.now();
    leader.signal('SIGKILL');
    await leader.exited(5_000);
    await until('a CONNACK through HAProxy after the kill', () => connacks.length >= 2, FAILOVER_WAIT_MS);
    const ms = Math.round(connacks[1]!.at - t0);
    console.log(
      `# haproxy failover: kill -9 of node ${leader.id} to the first CONNACK through HAProxy: ${ms} ms ` +
        `(E = ${ELECTION_TIMEOUT_MS} ms, check inter 250 ms, client reconnect period ${RECONNECT_PERIOD_MS} ms)`,
    );
    assert.equal(connacks[1]!.sessionPresent, true, 'the session is on the new leader');

    const onNew = (text: string): Received | undefined => received.find((m) => m.text === text && m.connection >= 2);
    await until('every unacknowledged message on the new leader', () => unconsumed.every((t) => onNew(t) !== undefined), DELIVERY_WAIT_MS);
    assert.equal(onNew('held')!.dup, true, "'held' was sent before, so it comes again with DUP [MQTT-3.3.1-1]");

    const survivors = cluster.nodes.filter((n) => n !== leader);
    const next = await cluster.serving(SERVE_WAIT_MS, survivors);
    await lb.waitForOnlyUp(`node${next.id}`, CHECK_VIEW_WAIT_MS);
    const pub2 = await connectOnce(frontPort, { clientId: 'lb-pub-2', clean: true });
    await pub2.publishAsync('lb/x', 'after', { qos: 1 });
    await until('a message published after the failover', () => received.some((m) => m.text === 'after'), DELIVERY_WAIT_MS);
    pub2.end(true);
  });
});
