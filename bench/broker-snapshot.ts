// The cost of the broker's snapshot, digest and restore for a state of N persistent sessions with Q
// queued QoS 1 messages each (100-byte payloads). They run synchronously (DESIGN.md "Snapshots":
// a first version may, if it measures and logs the time): this is that measurement.
//   node build/bench/broker-snapshot.js [sessions=10000] [queuedPerSession=10]
import { performance } from 'node:perf_hooks';
import { Broker } from '../src/broker/broker.js';
import type { Command, Effect, Settings } from '../src/broker/commands.js';

const sessions = Number(process.argv[2] ?? 10_000);
const queued = Number(process.argv[3] ?? 10);
const settings: Settings = {
  maxQueuedMessages: 10_000,
  maxQueuedBytes: 1 << 26,
  maxInflight: 32,
  maxQos: 2,
  retainAvailable: true,
  maxPacketSize: 1 << 20,
  willGraceS: 30,
  acl: null,
  maxSubscriptions: 0,
};

const broker = new Broker();
const out: Effect[] = [];
const t0 = 1_700_000_000_000;
let index = 0;
const apply = (cmd: Command): void => {
  out.length = 0;
  broker.apply({ index: ++index, time: t0, cmd }, out);
};

apply({ t: 'serve-start', node: 1, settings });
for (let i = 0; i < sessions; i++) {
  const conn = `1.${i + 1}`;
  apply({ t: 'connect', conn, clientId: `c${i}`, protocol: 4, clean: false, expiryS: 0xffffffff, will: null, username: null, receiveMax: 65_535, maxPacketSize: 0, problemInfo: true });
  apply({ t: 'subscribe', conn, pid: 1, subs: [{ filter: `dev/${i}/#`, qos: 1, nl: false, rap: false, rh: 0 }] });
  apply({ t: 'disconnect', conn, reason: 0, publishWill: false });
}
const payload = new Uint8Array(100);
for (let q = 0; q < queued; q++) {
  for (let i = 0; i < sessions; i++) apply({ t: 'publish', conn: '1.0', pid: 1, msg: { topic: `dev/${i}/x`, payload, qos: 1, retain: false } });
}

let start = performance.now();
const chunks = [...broker.snapshot()];
const snapshotMs = performance.now() - start;
start = performance.now();
const digest = broker.digest();
const digestMs = performance.now() - start;
const copy = new Broker();
start = performance.now();
copy.restore(chunks);
const restoreMs = performance.now() - start;
console.log(
  JSON.stringify({
    sessions,
    queuedPerSession: queued,
    snapshotBytes: chunks.reduce((n, c) => n + c.length, 0),
    chunks: chunks.length,
    snapshotMs: Math.round(snapshotMs),
    digestMs: Math.round(digestMs),
    restoreMs: Math.round(restoreMs),
    restoredDigestEqual: copy.digest() === digest,
  }),
);
