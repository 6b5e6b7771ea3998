// One wrong wall clock (docs/design.md "Cluster time", docs/design.md "What a client may see": never an early expiry or
// will caused by one wrong clock). Node 1 of three real raftmq processes runs with its wall clock
// ten minutes ahead (libfaketime; its monotonic clock is left alone). Whether node 1 follows or
// leads, a will with a 120 s delay does not go and a retained message with a 120 s expiry stays,
// while short wills (the controls) do go; the leader reports node 1's clock as left out.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { collect } from './cluster-mqtt.js';
import { Cluster, type ClusterNode } from './support/cluster.js';
import { freePort, LOOPBACK } from './support/net.js';
import { until } from './support/wait.js';

const LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1';
const SKEW_S = 600;
const ELECTION_TIMEOUT_MS = 300;
const SERVE_WAIT_MS = 20_000;
const WAIT_MS = 15_000;
const EXIT_WAIT_MS = 10_000;
/** SIGTERM of a leader hands over to the most caught-up peer; bounded tries until node 1 leads. */
const HANDOVER_TRIES_MAX = 6;

const clusters: Cluster[] = [];
after(async () => {
  await Promise.all(clusters.map((c) => c.dispose()));
});

function requireFaketime(): void {
  if (!existsSync(LIBFAKETIME)) throw new Error(`${LIBFAKETIME} is missing: install the Debian package faketime (bash .ci/run does this)`);
}

const connected = (c: MqttClient): Promise<void> =>
  new Promise((resolve, reject) => {
    c.once('connect', () => resolve());
    c.once('error', reject);
  });

describe('one wall clock ten minutes ahead', { timeout: 180_000 }, () => {
  it('moves no will and no expiry early, whether that node follows or leads, and the leader reports its clock', async () => {
    requireFaketime();
    const mqttPorts = [await freePort(), await freePort(), await freePort()];
    const cluster = await Cluster.start({
      electionTimeoutMs: ELECTION_TIMEOUT_MS,
      extra: (id) => ['--port', String(mqttPorts[id - 1])],
      env: (id) => (id === 1 ? { LD_PRELOAD: LIBFAKETIME, FAKETIME: `+${SKEW_S}s`, FAKETIME_DONT_FAKE_MONOTONIC: '1' } : undefined),
    });
    clusters.push(cluster);
    const servers = mqttPorts.map((port) => ({ host: LOOPBACK, port }));
    /** Without `port`: any serving node (the client follows leadership); with it: that node only. */
    const v5 = (clientId: string, o: IClientOptions = {}, port?: number): MqttClient =>
      mqtt.connect({
        ...(port === undefined ? { servers } : { host: LOOPBACK, port }),
        clientId,
        protocolVersion: 5,
        reconnectPeriod: 100,
        connectTimeout: 2_000,
        ...o,
      });
    /** Connects a client with a will of `delayS`, then drops its socket without DISCONNECT. */
    const dies = async (name: string, delayS: number, port: number): Promise<void> => {
      const c = v5(
        name,
        {
          clean: true,
          reconnectPeriod: 0,
          properties: { sessionExpiryInterval: 300 },
          will: { topic: `will/${name}`, payload: Buffer.from(name), qos: 1, retain: false, properties: { willDelayInterval: delayS } },
        },
        port,
      );
      await connected(c);
      c.stream.destroy();
      c.end(true);
    };

    let leader = await cluster.serving(SERVE_WAIT_MS);
    const watcher = v5('watcher', { clean: false, properties: { sessionExpiryInterval: 3600 } });
    const wills = collect(watcher);
    await connected(watcher);
    await watcher.subscribeAsync('will/#', { qos: 1 });
    const pub = v5('retainer', { clean: true }, leader.mqttPort);
    await connected(pub);
    await pub.publishAsync('exp/r', 'still-here', { qos: 1, retain: true, properties: { messageExpiryInterval: 120 } });
    pub.end(true);
    await dies('slow', 120, leader.mqttPort);

    const checkNothingEarly = async (control: string, on: ClusterNode): Promise<void> => {
      await dies(control, 1, on.mqttPort);
      await until(`the control will ${control}`, () => wills.includes(control), WAIT_MS);
      assert.equal(wills.includes('slow'), false, `the 120 s will did not go (node ${on.id} serving)`);
      const reader = v5(`reader-${control}`, { clean: true }, on.mqttPort);
      const retained = collect(reader);
      await connected(reader);
      await reader.subscribeAsync('exp/#', { qos: 1 });
      await until('the retained message', () => retained.length > 0, WAIT_MS);
      assert.deepEqual(retained, ['still-here'], 'the 120 s expiry did not pass');
      reader.end(true);
    };

    // Each round checks the serving leader; a SIGTERM hands leadership on, until node 1 has both
    // led (its own clock the odd one) and followed.
    const seen = new Set<'leads' | 'follows'>();
    for (let round = 0; ; round++) {
      assert.ok(round <= HANDOVER_TRIES_MAX, 'node 1 both led and followed within the bounded handovers');
      const deadline = Date.now() + WAIT_MS;
      let excluded = (await leader.health()).body.excludedClocks;
      while (!excluded.includes(1) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 50));
        excluded = (await leader.health()).body.excludedClocks;
      }
      assert.deepEqual(excluded, [1], `leader ${leader.id} leaves node 1's clock out of cluster time`);
      await leader.waitForLog(
        (l) => String(l.msg).startsWith('voter wall clock too far') && (l.excluded as number[])?.includes(1),
        WAIT_MS,
      );
      await checkNothingEarly(`control-${round}`, leader);
      seen.add(leader.id === 1 ? 'leads' : 'follows');
      if (seen.size === 2) break;
      const stopping = leader;
      stopping.signal('SIGTERM');
      assert.equal(await stopping.exited(EXIT_WAIT_MS), 0);
      leader = await cluster.serving(
        SERVE_WAIT_MS,
        cluster.nodes.filter((n) => n !== stopping),
      );
      await cluster.restart(stopping.id);
    }
    console.log(`# wall clock +${SKEW_S} s on node 1: no early will or expiry with node 1 leading and following`);
    watcher.end(true);
  });
});
