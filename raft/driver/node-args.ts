// Flags of the raft node program (node-main.ts). Parsing is pure so tests run it without a process;
// every refusal names the flag it is about.
import { DriverError } from './errors.js';

export interface HostPort {
  host: string;
  port: number;
}

export interface NodeArgs {
  id: number;
  /** Every node, this one included; port 0: learned later through the `peer` command. */
  peers: Map<number, HostPort>;
  electionTimeoutMs: number;
  /** Where this node listens for peers; default its own entry of --peers. */
  listen: HostPort;
  /** The line-protocol port for proposals and status; port 0 by default. */
  client: HostPort;
  clusterId: string;
  secret: string | undefined;
  /** Without it the node runs the static configuration of --peers (every node a voter). */
  stateFile: string | undefined;
  forceStart: boolean;
  forceStartTimeoutMs: number | undefined;
}

const USAGE =
  'usage: node-main --id N --peers 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT [--election-timeout-ms 500] ' +
  '[--listen HOST:PORT] [--client-listen HOST:PORT] [--cluster-id ID] [--cluster-secret S] [--state-file PATH] ' +
  '[--cluster-force-start] [--force-start-timeout-ms MS]';

/** Flags that take no value. */
const SWITCHES = new Set(['--cluster-force-start']);

export function parseNodeArgs(argv: readonly string[]): NodeArgs {
  const values = new Map<string, string>();
  for (let k = 0; k < argv.length; k += 2) {
    const flag = argv[k]!;
    if (SWITCHES.has(flag)) {
      values.set(flag, 'true');
      k--;
      continue;
    }
    const value = argv[k + 1];
    if (!KNOWN_FLAGS.has(flag)) throw badArgs(`unknown flag ${flag}; ${USAGE}`);
    if (value === undefined) throw badArgs(`${flag} needs a value`);
    values.set(flag, value);
  }
  const id = positiveInt(values.get('--id'), '--id');
  const peersText = values.get('--peers');
  if (peersText === undefined) throw badArgs(`--peers is required; ${USAGE}`);
  const peers = parsePeers(peersText);
  const own = peers.get(id);
  if (own === undefined) throw badArgs(`--peers has no entry for --id ${id}`);
  const listenText = values.get('--listen');
  const clientText = values.get('--client-listen');
  return {
    id,
    peers,
    electionTimeoutMs: positiveInt(values.get('--election-timeout-ms') ?? '500', '--election-timeout-ms'),
    listen: listenText === undefined ? { ...own } : hostPort(listenText, '--listen'),
    client: clientText === undefined ? { host: '127.0.0.1', port: 0 } : hostPort(clientText, '--client-listen'),
    clusterId: values.get('--cluster-id') ?? 'raftmq',
    secret: values.get('--cluster-secret'),
    ...stateArgs(values),
  };
}

function stateArgs(values: Map<string, string>): Pick<NodeArgs, 'stateFile' | 'forceStart' | 'forceStartTimeoutMs'> {
  const stateFile = values.get('--state-file');
  const forceStart = values.has('--cluster-force-start');
  if (forceStart && stateFile === undefined) throw badArgs('--cluster-force-start needs --state-file');
  const timeout = values.get('--force-start-timeout-ms');
  if (timeout !== undefined && !forceStart) throw badArgs('--force-start-timeout-ms needs --cluster-force-start');
  return {
    stateFile,
    forceStart,
    forceStartTimeoutMs: timeout === undefined ? undefined : positiveInt(timeout, '--force-start-timeout-ms'),
  };
}

const KNOWN_FLAGS = new Set([
  '--id',
  '--peers',
  '--election-timeout-ms',
  '--listen',
  '--client-listen',
  '--cluster-id',
  '--cluster-secret',
  '--state-file',
  '--force-start-timeout-ms',
]);

export function parsePeers(text: string): Map<number, HostPort> {
  const peers = new Map<number, HostPort>();
  for (const item of text.split(',')) {
    const eq = item.indexOf('=');
    if (eq <= 0) throw badArgs(`--peers entry "${item}" is not ID=HOST:PORT`);
    const id = positiveInt(item.slice(0, eq), '--peers node id');
    if (peers.has(id)) throw badArgs(`--peers lists node ${id} twice`);
    peers.set(id, hostPort(item.slice(eq + 1), `--peers entry for node ${id}`));
  }
  return peers;
}

export function hostPort(text: string, flag: string): HostPort {
  const colon = text.lastIndexOf(':');
  if (colon <= 0) throw badArgs(`${flag} "${text}" is not HOST:PORT`);
  const port = Number(text.slice(colon + 1));
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw badArgs(`${flag} port "${text.slice(colon + 1)}" is not in [0, 65535]`);
  return { host: text.slice(0, colon), port };
}

function positiveInt(text: string | undefined, flag: string): number {
  if (text === undefined) throw badArgs(`${flag} is required; ${USAGE}`);
  const n = Number(text);
  if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(n) || n <= 0) throw badArgs(`${flag} "${text}" is not a positive integer`);
  return n;
}

function badArgs(detail: string): DriverError {
  return new DriverError('RAFT_DRIVER_BAD_ARGS', detail);
}
