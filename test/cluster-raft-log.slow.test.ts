// The BrokerLog contract (src/log/broker-log.contract.ts) against RaftLog: three in-process nodes
// over the TCP transport on loopback; the suite drives the node that wins the election, which serves
// once it holds a lease (docs/design.md "One server at a time").
import type { Entry } from '../src/broker/commands.js';
import { RaftLog } from '../src/cluster/raft-log.js';
import { brokerLogContract, contractSettings } from '../src/log/broker-log.contract.js';
import type { LogListener } from '../src/log/broker-log.js';
import { freePort, LOOPBACK } from './support/net.js';

const ELECTION_TIMEOUT_MS = 150;
const ELECTION_WAIT_MS = 10_000;
const silent = { info() {}, warn() {}, error() {} };

const ignore: LogListener = {
  committed(_: readonly Entry[]) {},
  serving() {},
  drain() {},
};

brokerLogContract('RaftLog, three nodes over loopback TCP', async () => {
  const ports = [await freePort(), await freePort(), await freePort()];
  const peers = new Map(ports.map((port, i) => [i + 1, { host: LOOPBACK, port }]));
  const logs = [1, 2, 3].map(
    (node) =>
      RaftLog.overTcp({
        node,
        peers,
        listen: peers.get(node)!,
        clusterId: 'contract',
        secret: 'contract-secret',
        electionTimeoutMs: ELECTION_TIMEOUT_MS,
        settings: contractSettings,
        logger: silent,
      }).log,
  );
  const dispose = async () => {
    await Promise.all(logs.map((l) => l.stop()));
  };
  await Promise.all(logs.map((l) => l.open()));
  const deadline = Date.now() + ELECTION_WAIT_MS;
  let leader: RaftLog | undefined;
  while (leader === undefined) {
    leader = logs.find((l) => l.status().role === 'leader');
    if (Date.now() > deadline) {
      await dispose();
      throw new Error('no leader elected');
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  for (const l of logs) if (l !== leader) l.start(ignore);
  return { log: leader, dispose };
});
