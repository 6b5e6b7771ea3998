// --cluster-server-reference (docs/operations.md "Server Reference"): followers listen and answer
// each CONNECT with the leader's address, MQTT 5 CONNACK 0x9C with a Server Reference (3.1.1: return
// code 3), and close; the leader serves as usual. After a kill -9 of the leader the new one serves on
// its own port and the remaining follower names it. Real processes and MQTT.js clients.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { connect } from 'node:net';
import { describe, it } from 'node:test';
import mqtt, { type IClientOptions } from 'mqtt';
import { CLI } from './broker-process.js';
import { Cluster, type ClusterNode } from './support/cluster.js';
import { freePort, LOOPBACK } from './support/net.js';

const WAIT_MS = 15_000;

interface Answer {
  connected: boolean;
  code?: number;
  reference?: string;
}

/** One CONNECT to `port`: connected, or the CONNACK's code and Server Reference, or a close. */
function connectOnce(port: number, protocolVersion: 4 | 5): Promise<Answer> {
  const opts: IClientOptions = { host: LOOPBACK, port, protocolVersion, reconnectPeriod: 0, connectTimeout: 5_000, clean: true };
  const client = mqtt.connect(opts);
  return new Promise<Answer>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no answer from ${port}`)), 6_000);
    client.once('connect', () => {
      clearTimeout(timer);
      resolve({ connected: true });
    });
    client.once('packetreceive', (p) => {
      if (p.cmd !== 'connack' || (p.reasonCode ?? p.returnCode) === 0) return;
      clearTimeout(timer);
      resolve({ connected: false, code: p.reasonCode ?? p.returnCode ?? -1, reference: p.properties?.serverReference });
    });
    client.once('close', () => {
      clearTimeout(timer);
      resolve({ connected: false });
    });
    client.on('error', () => {});
  }).finally(() => client.end(true));
}

/** Writes `bytes` on a raw socket: how many bytes came back before the broker closed it. */
function rawAnswer(port: number, bytes: Buffer): Promise<{ bytes: number; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const s = connect(port, LOOPBACK);
    let n = 0;
    const timer = setTimeout(() => {
      s.destroy();
      reject(new Error(`${port} did not close the socket`));
    }, 10_000);
    s.on('connect', () => s.write(bytes));
    s.on('data', (d) => {
      n += d.length;
    });
    s.on('error', () => {});
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ bytes: n, closed: true });
    });
  });
}

/** Until `port` answers as `want` says (a follower's port opens a moment after its start). */
async function answerOf(port: number, v: 4 | 5, want: (a: Answer) => boolean): Promise<Answer> {
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const a = await connectOnce(port, v).catch(() => ({ connected: false }) as Answer);
    if (want(a) || Date.now() > deadline) return a;
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('followers refer clients to the leader', { timeout: 90_000 }, () => {
  it('answers MQTT 5 with 0x9C and the leader address, 3.1.1 with code 3, and follows a failover', async () => {
    const mqttPorts = [await freePort(), await freePort(), await freePort()];
    const address = (id: number): string => `${LOOPBACK}:${mqttPorts[id - 1]}`;
    const refs = [1, 2, 3].map((id) => `${id}=${address(id)}`).join(',');
    const cluster = await Cluster.start({
      extra: (id) => ['--port', String(mqttPorts[id - 1]), '--cluster-server-reference', refs],
    });
    try {
      const leader = await cluster.serving(WAIT_MS);
      assert.equal(leader.mqttPort, mqttPorts[leader.id - 1]);
      const followers = cluster.nodes.filter((n) => n !== leader);
      for (const f of followers) {
        const port = mqttPorts[f.id - 1] as number;
        const v5 = await answerOf(port, 5, (a) => a.code === 0x9c);
        assert.deepEqual(v5, { connected: false, code: 0x9c, reference: address(leader.id) }, `node ${f.id} refers to node ${leader.id}`);
        const v4 = await connectOnce(port, 4);
        assert.equal(v4.connected, false);
        assert.equal(v4.code, 3, '3.1.1: Server unavailable');
        assert.equal((await f.health()).code, 503, 'a referring follower still fails the health check');
        // Anything but a CONNECT first, or bytes that are no MQTT packet, is closed unanswered.
        assert.deepEqual(await rawAnswer(port, Buffer.from([0xc0, 0x00])), { bytes: 0, closed: true }, 'PINGREQ first');
        assert.deepEqual(await rawAnswer(port, Buffer.from([0x00, 0xff, 0xff, 0xff, 0xff, 0x7f])), { bytes: 0, closed: true }, 'garbage');
      }
      assert.equal((await connectOnce(leader.mqttPort, 5)).connected, true, 'the leader serves');

      leader.signal('SIGKILL');
      await leader.exited(5_000);
      const next = await cluster.serving(WAIT_MS, followers);
      assert.equal(next.mqttPort, mqttPorts[next.id - 1], 'the new leader serves on its own port, released by its referrer');
      assert.equal((await answerOf(next.mqttPort, 5, (a) => a.connected)).connected, true);
      const rest = followers.find((n) => n !== next) as ClusterNode;
      const after = await answerOf(mqttPorts[rest.id - 1] as number, 5, (a) => a.reference === address(next.id));
      assert.deepEqual(after, { connected: false, code: 0x9c, reference: address(next.id) });
      assert.ok(
        rest.logs.some((l) => l.msg === 'referring clients to the leader'),
        `the follower logged its referral listener: ${rest.logs.map((l) => l.msg).join(' | ')}`,
      );
    } finally {
      await cluster.dispose();
    }
  });

  it('refuses a list without every node, an unknown id, or an address without a port', async () => {
    const base = [
      '--cluster-node',
      '1',
      '--cluster-peers',
      `1=${LOOPBACK}:1,2=${LOOPBACK}:2,3=${LOOPBACK}:3`,
      '--state-file',
      '/nonexistent/x',
    ];
    for (const [value, expect] of [
      [`1=${LOOPBACK}:1883,2=${LOOPBACK}:1884`, /no address for node 3/],
      [`1=a:1,2=b:2,3=c:3,4=d:4`, /"4" is not a node id of --cluster-peers/],
      [`1=a:1,2=b:2,3=c`, /--cluster-server-reference entry for node 3: "c" is not HOST:PORT/],
      [`1=a:1,2=b:2,3=c:0`, /node 3 needs a host and a port/],
    ] as const) {
      const r = spawnSync(process.execPath, [CLI, ...base, '--cluster-server-reference', value], { encoding: 'utf8', timeout: 10_000 });
      assert.notEqual(r.status, 0, value);
      assert.match(r.stderr, expect, value);
    }
    const single = spawnSync(process.execPath, [CLI, '--cluster-server-reference', `1=a:1`], { encoding: 'utf8', timeout: 10_000 });
    assert.notEqual(single.status, 0);
    assert.match(single.stderr, /--cluster-server-reference needs --cluster-node and --cluster-peers/);
  });
});
