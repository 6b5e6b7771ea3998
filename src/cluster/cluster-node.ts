// A broker node of a three-node cluster, as the raftmq command runs it: RaftLog under a BrokerNode,
// and the health port. The peer port is bound first (a second process of this node id fails at
// once); the MQTT listeners open only while this node serves.

import type { Logger } from 'pino';
import { EXIT } from '../errors.js';
import { bridgesHashInput } from '../server/bridge/bridge-config.js';
import { BrokerNode, type NodeOptions, settingsFrom } from '../server/broker-node.js';
import type { DiskWatch, FreeSpaceProbe } from '../server/disk-space.js';
import { AuditLog } from './audit-log.js';
import type { ClusterSettings } from './cluster-config.js';
import { configHash } from './config-hash.js';
import { HealthServer, type HealthSource } from './health.js';
import { raftDataDirStatus, raftDiskWatch } from './raft-disk.js';
import { type ClusterStatus, RaftLog } from './raft-log.js';
import { driverStorage, openRaftDataDir, type RaftDataDir } from './raft-storage.js';
import { isLoopbackHost, type StatusAccess } from './status-page.js';

export interface RunningCluster {
  node: BrokerNode;
  log: RaftLog;
  raftPort: number;
  /** -1: no health port. */
  healthPort: number;
  stop(): Promise<void>;
  /** The stop's deadline: the handover is skipped and the state file written now (RaftLog.stopNow). */
  stopNow(): void;
}

/** Starts raft, the broker node and the health port. Rejects if the peer or health port cannot be
 * bound (the error names the address) or the state file, its record or its lock is refused (a
 * DriverError naming the file). Does not wait for this node to serve. `onExit` is called when the
 * process must end: a force-start that was refused or timed out, or a failed write to --data-dir.
 * `diskProbe` replaces statfs in the free-space watch of --data-dir (tests only). */
export async function startClusterNode(
  cs: ClusterSettings,
  nodeOpts: NodeOptions,
  health: { host: string; port: number; statusToken?: string },
  logger: Logger,
  created: (node: BrokerNode) => void,
  onServeFailure: (err: Error) => void,
  onExit: (code: number, err: Error) => void,
  diskProbe?: FreeSpaceProbe,
): Promise<RunningCluster> {
  if (cs.secret === undefined) logger.warn({}, 'no --cluster-secret: peer links are not authenticated');
  // docs/raft.md "Persistence": the data directory is opened, checked and loaded before raft is
  // made; a refused one throws DataDirError naming it.
  const dataDir = cs.dataDir === undefined ? null : await openRaftDataDir(cs.dataDir, { clusterId: cs.clusterId, nodeId: cs.node }, logger);
  if (dataDir !== null) {
    const r = dataDir.report;
    logger.info(
      {
        dir: dataDir.dir,
        lastIndex: r.lastIndex,
        snapshotIndex: r.snapshotIndex,
        term: dataDir.loaded?.term ?? 0,
        records: r.records,
        segments: r.segments,
      },
      dataDir.loaded === null ? 'raft data directory empty' : 'raft data directory loaded',
    );
  }
  // docs/operations.md "Disk trouble": read once before raft starts, so a node that starts on a
  // full disk refuses from its first client on.
  const watch =
    dataDir === null
      ? null
      : raftDiskWatch({ dir: dataDir.dir, storage: dataDir.storage, minFreeBytes: cs.dataDirMinFreeBytes, probe: diskProbe, logger });
  try {
    await watch?.start();
    const disk = dataDir === null || watch === null ? null : { dataDir, watch };
    return await startWith(cs, nodeOpts, health, logger, created, onServeFailure, onExit, disk);
  } catch (err) {
    watch?.stop();
    dataDir?.release();
    throw err;
  }
}

async function startWith(
  cs: ClusterSettings,
  nodeOpts: NodeOptions,
  health: { host: string; port: number; statusToken?: string },
  logger: Logger,
  created: (node: BrokerNode) => void,
  onServeFailure: (err: Error) => void,
  onExit: (code: number, err: Error) => void,
  disk: { dataDir: RaftDataDir; watch: DiskWatch } | null,
): Promise<RunningCluster> {
  const dataDir = disk?.dataDir ?? null;
  const settings = settingsFrom(nodeOpts);
  const bridges = nodeOpts.bridges ?? [];
  // The driver reads the state file and its record here (never writing): a refused one throws.
  const { log, transport } = RaftLog.overTcp({
    node: cs.node,
    peers: cs.peers,
    listen: cs.listen,
    clusterId: cs.clusterId,
    secret: cs.secret,
    electionTimeoutMs: cs.electionTimeoutMs,
    settings,
    configHashOf: (s) =>
      configHash(s, [...cs.configFiles, ...bridges.flatMap((b) => b.files)], bridges.length === 0 ? null : bridgesHashInput(bridges)),
    logger,
    stateFile: cs.stateFile,
    forceStart: cs.forceStart,
    forceStartTimeoutMs: cs.forceStartTimeoutMs,
    maxClockOffsetMs: cs.maxClockOffsetMs,
    handoverTimeoutMs: cs.handoverTimeoutMs,
    onForceStartFailed: (err) => onExit(EXIT.FORCE_START_FAILED, err),
    ...(dataDir === null ? {} : { storage: driverStorage(dataDir), onStorageFailed: (err: Error) => onExit(EXIT.DATA_DIR_IO, err) }),
  });
  let audit: AuditLog | null = null;
  if (cs.auditLog !== undefined) {
    let failures = 0;
    // Opened before raft starts, so the first lease renewal is recorded; an open error names the flag.
    audit = new AuditLog({
      file: cs.auditLog,
      node: cs.node,
      lease: log,
      onError: (err) => {
        if (failures++ === 0)
          logger.error({ err: err.message, file: cs.auditLog }, 'audit log write failed; records are dropped and counted');
      },
    });
    log.attachAudit(audit);
    logger.info({ file: cs.auditLog }, 'audit log on');
  }
  // The broker is attached before raft starts: a resumed state file hands its snapshot to the
  // broker in raft's first turn. Nothing listens for MQTT until this node serves.
  const refs = cs.serverReferences;
  // A follower names the leader it hears; itself while not yet serving is no reference.
  const serverReference =
    refs === undefined
      ? {}
      : {
          serverReference: {
            own: refs.get(cs.node) as string,
            // A leader heard from within half an election timeout (heartbeats come every E/5).
            leader: (): string | null => refs.get(log.liveLeader(cs.electionTimeoutMs / 2)) ?? null,
          },
        };
  const gate = disk === null ? {} : { storageGate: disk.watch };
  const node = new BrokerNode({ ...nodeOpts, ...serverReference, ...gate, audit, sysCluster: () => log.status() }, log);
  created(node);
  log.attachTracer(node.tracer);
  log.attach({
    lastCheck: () => node.lastCheck,
    failure: () => node.failure,
    snapshot: () => node.snapshot(),
    restore: (chunks) => node.restore(chunks),
    reset: () => node.reset(),
  });
  try {
    await log.open();
  } catch (err) {
    await audit?.close();
    throw err;
  }
  const raftPort = transport()?.address().port ?? cs.listen.port;
  const m = log.status();
  logger.info({ stateFile: cs.stateFile, membership: m.membership, epoch: m.epoch, forceStart: cs.forceStart }, 'raft started');
  let server: HealthServer | null = null;
  let healthPort = -1;
  try {
    if (health.port >= 0) {
      const dataDirStatus = disk === null ? {} : { dataDir: () => raftDataDirStatus(disk.dataDir.dir, disk.dataDir.storage, disk.watch) };
      server = new HealthServer({ ...healthSource(node, () => log.status(), log), ...dataDirStatus }, statusAccess(health));
      healthPort = await server.listen(health.host, health.port);
      logger.info({ port: healthPort }, 'health listening');
    }
  } catch (err) {
    await log.stop();
    throw new Error(`--health-port ${health.host}:${health.port}: ${(err as Error).message}`);
  }
  // Resolves when this node first serves, which a follower may never do: not awaited.
  node.start().catch(onServeFailure);
  return {
    node,
    log,
    raftPort,
    healthPort,
    /** docs/design.md "State file" order: node.stop() ends serving, then the log hands over leadership,
     * stops raft traffic and writes the state file. */
    async stop() {
      await node.stop();
      disk?.watch.stop();
      await Promise.all([server?.close(), audit?.close()]);
      dataDir?.release();
    },
    stopNow() {
      log.stopNow();
    },
  };
}

/** The status page's access from --status-token and the health port's bind address. */
export function statusAccess(health: { host: string; statusToken?: string }): StatusAccess {
  return { token: health.statusToken ?? '', openWithoutToken: isLoopbackHost(health.host) };
}

export function healthSource(node: BrokerNode, status: () => ClusterStatus, raft: RaftLog | null = null): HealthSource {
  return { status, node, raft };
}

/** /health of a single node: it always leads and serves while its state machine is sound. */
export function singleNodeStatus(node: BrokerNode): ClusterStatus {
  const failure = node.failure;
  return {
    node: 1,
    serving: failure === null,
    role: 'leader',
    term: 0,
    leader: 1,
    servePeriod: 0,
    leaseRemainingMs: 0,
    commitIndex: 0,
    appliedIndex: 0,
    redundant: false,
    needsForceStart: false,
    membership: 'member',
    voter: true,
    epoch: null,
    forceStart: null,
    excludedClocks: [],
    clusterUid: null,
    outOfMembership: null,
    failure,
    configMatchesServing: true,
  };
}
