// Bridge forwarding rate (docs/benchmarks.md "Bridge forwarding"): how fast raftmq forwards committed
// messages through an outbound rule to Debian's Mosquitto, at QoS 1 and at QoS 2 (whose PUBREC is
// recorded by a committed entry before PUBREL, docs/bridges.md "QoS 2 to the remote"), on one node
// and on three (load on the serving leader). A publisher streams the messages (64 bytes) into raftmq
// at the rule's QoS with a window of unacknowledged publishes; a subscriber at Mosquitto counts
// them. Reported per row: messages per second from the first publish to the last arrival at the
// remote, the publisher's own rate into raftmq, and the CPU of this process (the publisher and the
// subscriber, MQTT.js) over the row, so a row the load generator paced shows it.
//
//   node build/bench/bridge-rate.js [--messages 20000] [--window 64] [--targets one,three] [--qos 1,2]
//
// Starts and stops its own Mosquitto and raftmq processes on free loopback ports. A row whose
// messages do not all arrive within the timeout says how many are missing, and the run exits 1.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import mqtt, { type MqttClient } from 'mqtt';
import { BrokerProcess } from '../test/broker-process.js';
import { Cluster } from '../test/support/cluster.js';
import { Mosquitto } from '../test/support/mosquitto.js';
import { LOOPBACK } from '../test/support/net.js';

const MESSAGES_MAX = 1_000_000;
const WINDOW_MAX = 1_000;
/** A row gives up when the last message has not arrived this long after the last publish (ms). */
const ARRIVAL_TIMEOUT_MS = 60_000;
const PAYLOAD = Buffer.alloc(64, 0x61);

const { values } = parseArgs({
  options: {
    messages: { type: 'string', default: '20000' },
    window: { type: 'string', default: '64' },
    targets: { type: 'string', default: 'one,three' },
    qos: { type: 'string', default: '1,2' },
  },
});
const messages = Number(values.messages);
const window = Number(values.window);
const targets = String(values.targets).split(',');
const qosList = String(values.qos).split(',').map(Number);
if (!Number.isInteger(messages) || messages < 1 || messages > MESSAGES_MAX) fail(`--messages must be 1 to ${MESSAGES_MAX}`);
if (!Number.isInteger(window) || window < 1 || window > WINDOW_MAX) fail(`--window must be 1 to ${WINDOW_MAX}`);
if (targets.some((t) => t !== 'one' && t !== 'three')) fail('--targets is a list of one and three');
if (qosList.some((q) => q !== 1 && q !== 2)) fail('--qos is a list of 1 and 2');

function fail(why: string): never {
  console.error(`bridge-rate: ${why}`);
  process.exit(2);
}

function connectTo(port: number, clientId: string): Promise<MqttClient> {
  return new Promise((resolve, reject) => {
    const c = mqtt.connect({ host: LOOPBACK, port, clientId, clean: true, reconnectPeriod: 0, connectTimeout: 5_000 });
    c.once('connect', () => resolve(c));
    c.once('error', reject);
  });
}

interface Row {
  target: string;
  qos: number;
  forwardedPerS: number;
  publishedPerS: number;
  /** CPU of this process over the row, % of one core. */
  loadCpu: number;
  missing: number;
}

/** One row: raftmq started with a rule `b/# out QOS`, the stream, the count, everything stopped. */
async function row(target: string, qos: 1 | 2, remote: Mosquitto, dir: string): Promise<Row> {
  const conf = join(dir, `bridge-${target}-${qos}.yaml`);
  writeFileSync(conf, `bridge: ["up=mqtt://${LOOPBACK}:${remote.port}"]\nbridges:\n  up:\n    topic: ["b/# out ${qos}"]\n`);
  let port: number;
  let stop: () => Promise<unknown>;
  if (target === 'one') {
    const p = await BrokerProcess.start(['--config', conf]);
    port = p.port;
    stop = () => p.stop();
  } else {
    const cluster = await Cluster.start({ extra: () => ['--config', conf] });
    port = (await cluster.serving(15_000)).mqttPort;
    stop = () => cluster.dispose();
  }
  const sub = await connectTo(remote.port, `rate-sub-${target}-${qos}`);
  const pub = await connectTo(port, `rate-pub-${target}-${qos}`);
  try {
    let arrived = 0;
    let lastArrival = 0;
    sub.on('message', () => {
      arrived++;
      lastArrival = performance.now();
    });
    await sub.subscribeAsync('b/#', { qos });
    // The bridge is up once a message gets through.
    while (arrived === 0) {
      await pub.publishAsync('b/probe', 'probe', { qos });
      await new Promise((r) => setTimeout(r, 100));
    }
    arrived = 0;
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    let next = 0;
    const lane = async (): Promise<void> => {
      while (next < messages) {
        next++;
        await pub.publishAsync('b/x', PAYLOAD, { qos });
      }
    };
    await Promise.all(Array.from({ length: window }, lane));
    const published = performance.now();
    const deadline = published + ARRIVAL_TIMEOUT_MS;
    while (arrived < messages && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const cpu = process.cpuUsage(cpu0);
    return {
      loadCpu: Math.round(((cpu.user + cpu.system) / 1000 / (lastArrival - t0)) * 100),
      target,
      qos,
      forwardedPerS: Math.round(arrived / ((lastArrival - t0) / 1000)),
      publishedPerS: Math.round(messages / ((published - t0) / 1000)),
      missing: Math.max(0, messages - arrived),
    };
  } finally {
    sub.end(true);
    pub.end(true);
    await stop();
  }
}

const remote = await Mosquitto.start(['max_inflight_messages 0', 'max_queued_messages 1000000']);
const rows: Row[] = [];
try {
  for (const target of targets) for (const qos of qosList) rows.push(await row(target, qos as 1 | 2, remote, remote.dir));
} finally {
  await remote.dispose();
}
console.log(`\nbridge forwarding to Mosquitto: ${messages} messages of 64 bytes, a publisher window of ${window}\n`);
console.log('| raftmq | QoS | forwarded to the remote, msg/s | published into raftmq, msg/s | load generator CPU % | missing |');
console.log('|---|--:|--:|--:|--:|--:|');
for (const r of rows)
  console.log(
    `| ${r.target === 'one' ? 'one node' : 'three nodes'} | ${r.qos} | ${r.forwardedPerS.toLocaleString('en-US')} | ${r.publishedPerS.toLocaleString('en-US')} | ${r.loadCpu} | ${r.missing} |`,
  );
if (rows.some((r) => r.missing > 0)) {
  console.error('bridge-rate: messages missing at the remote (above)');
  process.exit(1);
}
