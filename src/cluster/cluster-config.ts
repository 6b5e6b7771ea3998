// The cluster settings of a configuration, checked together (docs/operations.md "Deployment",
// docs/design.md "Links").
// Every refusal names the flag it is about. This stage runs the fixed three-voter configuration:
// a peer list of any other size is refused.
import { CONFIG_ERROR, ConfigError } from '../errors.js';

/** The settings read here, by kind: src/config.ts hands over its whole Config (which must hold each
 * with this kind, or it does not compile), and this module needs no import of it. */
export type ClusterConfig = Readonly<
  Record<
    | 'acl-file'
    | 'audit-log'
    | 'cluster-id'
    | 'cluster-listen'
    | 'cluster-peers'
    | 'cluster-secret'
    | 'cluster-server-reference'
    | 'data-dir'
    | 'password-file'
    | 'state-file',
    string
  > &
    Record<
      | 'cluster-election-timeout-ms'
      | 'cluster-force-start-timeout-s'
      | 'cluster-max-clock-offset-ms'
      | 'cluster-node'
      | 'data-dir-min-free-bytes'
      | 'snapshot-log-bytes'
      | 'shutdown-timeout-ms',
      number
    > &
    Record<'cluster-force-start', boolean>
>;

export interface PeerAddress {
  host: string;
  port: number;
}

export interface ClusterSettings {
  node: number;
  /** Every node, this one included, by id. */
  peers: Map<number, PeerAddress>;
  /** Where this node listens for peers. */
  listen: PeerAddress;
  clusterId: string;
  /** undefined: links are not authenticated (a warning is logged at start). */
  secret: string | undefined;
  electionTimeoutMs: number;
  /** docs/design.md "State file": written on a clean stop, resumed at start. */
  stateFile: string;
  /** --data-dir (docs/raft.md "Persistence"): raft's log, term, vote and snapshot on disk;
   * undefined: in memory, in the state file at a clean stop. */
  dataDir: string | undefined;
  /** --data-dir-min-free-bytes; 0: the default bound (src/server/disk-space.ts minFreeBytes). */
  dataDirMinFreeBytes: number;
  forceStart: boolean;
  forceStartTimeoutMs: number;
  maxClockOffsetMs: number;
  /** How long a stopping leader waits for its handover: 2E, but at most half of
   * --shutdown-timeout-ms, so the state file is written before the stop times out. */
  handoverTimeoutMs: number;
  /** --audit-log; undefined: off. */
  auditLog: string | undefined;
  /** The password and ACL files, whose bytes go into this node's configuration hash. */
  configFiles: string[];
  /** --cluster-server-reference: each node's address as clients reach it; undefined: off. */
  serverReferences: Map<number, string> | undefined;
}

/** src/config.ts's default of --snapshot-log-bytes. */
const SNAPSHOT_LOG_BYTES_DEFAULT = 64 * 1024 * 1024;

/** Exactly this many voters (raft part 2: a fixed configuration). */
export const CLUSTER_SIZE = 3;

/** Null on a single node; the checked cluster settings otherwise. Throws ConfigError. */
export function clusterSettings(config: ClusterConfig): ClusterSettings | null {
  const node = config['cluster-node'];
  const peersText = config['cluster-peers'];
  if (node === 0 && peersText === '') {
    for (const flag of ['cluster-listen', 'cluster-secret', 'audit-log', 'cluster-server-reference'] as const) {
      if (config[flag] !== '') throw missing(`--${flag} needs --cluster-node and --cluster-peers`);
    }
    if (config['cluster-force-start']) throw missing('--cluster-force-start needs --cluster-node, --cluster-peers and --state-file');
    // A single node never wrote or read the raft state file; accepting it would suggest it keeps
    // something across a restart.
    if (config['state-file'] !== '') {
      throw bad(
        '--state-file is for a cluster node (--cluster-node and --cluster-peers); a single node keeps its state with --data-dir DIR',
      );
    }
    return null;
  }
  // The free-space watch reads the data directory's file system; without one there is nothing to
  // watch, and accepting the flag would suggest it acts.
  if (config['data-dir-min-free-bytes'] !== 0 && config['data-dir'] === '') {
    throw bad('--data-dir-min-free-bytes needs --data-dir: without one a cluster node keeps raft in memory and watches no disk');
  }
  // The single node's WAL setting: a cluster node compacts at raft's log bounds.
  if (config['snapshot-log-bytes'] !== SNAPSHOT_LOG_BYTES_DEFAULT) {
    throw bad("--snapshot-log-bytes is for a single node: a cluster node snapshots at raft's log bounds");
  }
  if (node === 0) throw missing("--cluster-peers needs --cluster-node ID (this node's id in the list)");
  if (peersText === '') throw missing(`--cluster-node ${node} needs --cluster-peers 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`);
  const peers = parsePeers(peersText);
  if (peers.size !== CLUSTER_SIZE) {
    throw bad(`--cluster-peers: a cluster is exactly ${CLUSTER_SIZE} nodes (got ${peers.size})`);
  }
  const own = peers.get(node);
  if (own === undefined) throw bad(`--cluster-node ${node} is not in --cluster-peers (ids ${[...peers.keys()].join(', ')})`);
  if (config['state-file'] === '') throw missing('--state-file FILE is required in a cluster');
  const listenText = config['cluster-listen'];
  return {
    node,
    peers,
    listen: listenText === '' ? { ...own } : hostPort(listenText, '--cluster-listen'),
    clusterId: config['cluster-id'],
    secret: config['cluster-secret'] === '' ? undefined : config['cluster-secret'],
    electionTimeoutMs: config['cluster-election-timeout-ms'],
    stateFile: config['state-file'],
    dataDir: config['data-dir'] === '' ? undefined : config['data-dir'],
    dataDirMinFreeBytes: config['data-dir-min-free-bytes'],
    forceStart: config['cluster-force-start'],
    forceStartTimeoutMs: config['cluster-force-start-timeout-s'] * 1000,
    maxClockOffsetMs: config['cluster-max-clock-offset-ms'],
    handoverTimeoutMs: Math.min(2 * config['cluster-election-timeout-ms'], Math.floor(config['shutdown-timeout-ms'] / 2)),
    auditLog: config['audit-log'] === '' ? undefined : config['audit-log'],
    configFiles: [config['password-file'], config['acl-file']].filter((f) => f !== ''),
    serverReferences:
      config['cluster-server-reference'] === '' ? undefined : parseServerReferences(config['cluster-server-reference'], peers),
  };
}

/** `ID=HOST:PORT,…`, one entry for every node of --cluster-peers: the address a client is given
 * (MQTT 5 Server Reference) when it connects to a follower. */
export function parseServerReferences(text: string, peers: ReadonlyMap<number, PeerAddress>): Map<number, string> {
  const flag = '--cluster-server-reference';
  const refs = new Map<number, string>();
  for (const item of text.split(',')) {
    const eq = item.indexOf('=');
    if (eq <= 0) throw bad(`${flag}: entry "${item}" is not ID=HOST:PORT`);
    const idText = item.slice(0, eq);
    const id = Number(idText);
    if (!/^[0-9]+$/.test(idText) || !peers.has(id)) {
      throw bad(`${flag}: "${idText}" is not a node id of --cluster-peers (${[...peers.keys()].join(', ')})`);
    }
    if (refs.has(id)) throw bad(`${flag}: node ${id} is listed twice`);
    const value = item.slice(eq + 1);
    const a = hostPort(value, `${flag} entry for node ${id}`);
    if (a.port === 0 || a.host === '') throw bad(`${flag}: node ${id} needs a host and a port clients can connect to, not "${value}"`);
    refs.set(id, value);
  }
  const absent = [...peers.keys()].filter((id) => !refs.has(id));
  if (absent.length > 0) throw bad(`${flag}: no address for node ${absent.join(', ')}; every node may lead`);
  return refs;
}

export function parsePeers(text: string): Map<number, PeerAddress> {
  const peers = new Map<number, PeerAddress>();
  for (const item of text.split(',')) {
    const eq = item.indexOf('=');
    if (eq <= 0) throw bad(`--cluster-peers: entry "${item}" is not ID=HOST:PORT`);
    const idText = item.slice(0, eq);
    const id = Number(idText);
    if (!/^[0-9]+$/.test(idText) || !Number.isSafeInteger(id) || id < 1 || id > 65_535) {
      throw bad(`--cluster-peers: node id "${idText}" is not a whole number in [1, 65535]`);
    }
    if (peers.has(id)) throw bad(`--cluster-peers: node ${id} is listed twice`);
    const address = hostPort(item.slice(eq + 1), `--cluster-peers entry for node ${id}`);
    // Peers dial each other at these addresses, so each must be a real port.
    if (address.port === 0) throw bad(`--cluster-peers: node ${id} has port 0; every node needs a fixed peer port`);
    peers.set(id, address);
  }
  const seen = new Map<string, number>();
  for (const [id, a] of peers) {
    const key = `${a.host}:${a.port}`;
    const other = seen.get(key);
    if (other !== undefined) throw bad(`--cluster-peers: nodes ${other} and ${id} share the address ${key}`);
    seen.set(key, id);
  }
  return peers;
}

export function hostPort(text: string, flag: string): PeerAddress {
  const colon = text.lastIndexOf(':');
  if (colon <= 0) throw bad(`${flag}: "${text}" is not HOST:PORT`);
  const portText = text.slice(colon + 1);
  const port = Number(portText);
  if (!/^[0-9]+$/.test(portText) || port > 65_535) throw bad(`${flag}: port "${portText}" is not in [0, 65535]`);
  const host = text.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
  return { host, port };
}

function bad(message: string): ConfigError {
  return new ConfigError(CONFIG_ERROR.BAD_VALUE, message);
}

function missing(message: string): ConfigError {
  return new ConfigError(CONFIG_ERROR.MISSING_VALUE, message);
}
