// The scale-out settings of a configuration, checked together (docs/scale-out.md "Configuration"):
// --shard NAME --shards A,B,C, optionally --shard-address NAME=HOST:PORT,…, --shard-route PATTERN
// (repeatable) and --nats URL. Every
// refusal names the flag it is about. A node without --shard is not part of a scaled-out
// deployment and serves every client id.
import { readFileSync } from 'node:fs';
import { CONFIG_ERROR, ConfigError } from '../errors.js';
import { checkTls, type PemFile, readPem } from '../tls-files.js';
import { Placement, shardListProblem } from './placement.js';
import { RouteRules } from './routes.js';

/** The settings read here: src/config.ts hands over its whole Config. */
/** The flags of the NATS login and TLS, all node-local (never replicated, not in the hash). */
const NATS_CLIENT_FLAGS = [
  'nats-user',
  'nats-password',
  'nats-token',
  'nats-creds',
  'nats-tls-ca',
  'nats-tls-cert',
  'nats-tls-key',
] as const;

export type ShardConfig = Readonly<Record<'shard' | 'shards' | 'shard-address' | 'nats' | (typeof NATS_CLIENT_FLAGS)[number], string>> & {
  readonly 'shard-route': readonly string[];
};

/** How this node logs in to NATS, and the TLS files it uses (docs/scale-out.md "NATS login and
 * TLS"); the files' contents are read at load. */
export interface NatsClientSettings {
  user?: string;
  password?: string;
  token?: string;
  /** The credentials file's bytes (--nats-creds). */
  creds?: Uint8Array;
  /** PEM texts. */
  tls?: { ca?: string; cert?: string; key?: string };
}

export interface NatsAddress {
  /** As configured, for log lines. */
  url: string;
  tls: boolean;
  host: string;
  port: number;
}

export interface ShardSettings {
  /** This node's shard. */
  shard: string;
  placement: Placement;
  /** --shard-address: the address clients of each shard are sent to (MQTT 5 Server Reference);
   * null: not configured, refusals carry no reference. */
  addresses: ReadonlyMap<string, string> | null;
  /** --shard-route: the placement rules for topics that name a client id (none: every topic is
   * left to the route table). */
  rules: RouteRules;
  /** --nats: the NATS servers of the deployment, tried in turn; empty: not given. A single node
   * connects to them for its routes (src/scale/shard-link.ts); a three-node shard not yet. */
  nats: NatsAddress[];
  /** --nats-user and the rest: login and TLS; empty when none is given. */
  natsClient: NatsClientSettings;
}

const NATS_PORT_DEFAULT = 4222;

const bad = (message: string): ConfigError => new ConfigError(CONFIG_ERROR.BAD_VALUE, message);
const missing = (message: string): ConfigError => new ConfigError(CONFIG_ERROR.MISSING_VALUE, message);

/** Null without --shard; the checked settings otherwise. Throws ConfigError naming the flag. */
export function shardSettings(config: ShardConfig): ShardSettings | null {
  const shard = config.shard;
  const shardsText = config.shards;
  if (shard === '') {
    for (const flag of ['shards', 'shard-address', 'nats', ...NATS_CLIENT_FLAGS] as const) {
      if (config[flag] !== '') throw missing(`--${flag} needs --shard NAME (this node's shard)`);
    }
    if (config['shard-route'].length > 0) throw missing("--shard-route needs --shard NAME (this node's shard) and --shards");
    return null;
  }
  if (shardsText === '') throw missing(`--shard ${shard} needs --shards NAME,NAME,… (every shard of the deployment)`);
  const names = shardsText.split(',');
  const problem = shardListProblem(names);
  if (problem !== null) throw bad(`--shards: ${problem} (got ${JSON.stringify(shardsText)})`);
  if (!names.includes(shard)) throw bad(`--shard ${JSON.stringify(shard)} is not in --shards (${names.join(', ')})`);
  const placement = new Placement(names);
  return {
    shard,
    placement,
    addresses: config['shard-address'] === '' ? null : parseShardAddresses(config['shard-address'], placement),
    rules: parseRouteRules(config['shard-route'], placement),
    nats: config.nats === '' ? [] : parseNatsUrls(config.nats),
    natsClient: natsClientSettings(config),
  };
}

/** --nats-user/--nats-password, --nats-token or --nats-creds (one way to log in at most), and the
 * TLS files, checked as the NATS client will use them: a file that cannot be read or does not hold
 * what it should stops the start naming the flag and the file. */
export function natsClientSettings(config: ShardConfig): NatsClientSettings {
  const given = NATS_CLIENT_FLAGS.filter((f) => config[f] !== '');
  if (given.length === 0) return {};
  if (config.nats === '') throw missing(`--${given[0]} needs --nats (the NATS servers it logs in to)`);
  if ((config['nats-user'] === '') !== (config['nats-password'] === '')) {
    throw missing('--nats-user and --nats-password go together');
  }
  const logins = (['nats-user', 'nats-token', 'nats-creds'] as const).filter((f) => config[f] !== '');
  if (logins.length > 1) throw bad(`--${logins.join(' and --')}: give one way to log in to NATS`);
  if ((config['nats-tls-cert'] === '') !== (config['nats-tls-key'] === '')) {
    throw missing('--nats-tls-cert and --nats-tls-key go together (a client certificate and its key)');
  }
  const out: NatsClientSettings = {};
  if (config['nats-user'] !== '') {
    out.user = config['nats-user'];
    out.password = config['nats-password'];
  }
  if (config['nats-token'] !== '') out.token = config['nats-token'];
  if (config['nats-creds'] !== '') out.creds = readCreds(config['nats-creds']);
  const pem = (flag: 'nats-tls-ca' | 'nats-tls-cert' | 'nats-tls-key'): PemFile | null =>
    config[flag] === '' ? null : { key: `--${flag}`, file: config[flag], pem: readPem(config[flag], `--${flag}`) };
  const ca = pem('nats-tls-ca');
  const cert = pem('nats-tls-cert');
  const key = pem('nats-tls-key');
  checkTls(ca, cert, key);
  if (ca !== null || cert !== null) {
    out.tls = {
      ...(ca === null ? {} : { ca: ca.pem.toString('utf8') }),
      ...(cert === null || key === null ? {} : { cert: cert.pem.toString('utf8'), key: key.pem.toString('utf8') }),
    };
  }
  return out;
}

/** A credentials file holds a user JWT and an NKey seed, each between its BEGIN and END lines. */
function readCreds(file: string): Uint8Array {
  let bytes: Buffer;
  try {
    bytes = readFileSync(file);
  } catch (err) {
    throw new ConfigError(CONFIG_ERROR.UNREADABLE_FILE, `--nats-creds ${file}: cannot read: ${(err as Error).message}`);
  }
  const text = bytes.toString('utf8');
  for (const what of ['NATS USER JWT', 'USER NKEY SEED']) {
    if (!new RegExp(`-----BEGIN ${what}-----[\\s\\S]+?------END ${what}------`).test(text)) {
      throw bad(`--nats-creds ${file}: no ${what} block (expected a credentials file as nsc writes it)`);
    }
  }
  return new Uint8Array(bytes);
}

/** `NAME=HOST:PORT,…`, one entry for every shard of the list (this one included, so every node
 * can be given the same value). */
export function parseShardAddresses(text: string, placement: Placement): Map<string, string> {
  const flag = '--shard-address';
  const out = new Map<string, string>();
  for (const item of text.split(',')) {
    const eq = item.indexOf('=');
    if (eq <= 0) throw bad(`${flag}: entry "${item}" is not NAME=HOST:PORT`);
    const name = item.slice(0, eq);
    if (!placement.shards.includes(name)) throw bad(`${flag}: "${name}" is not a shard of --shards (${placement.shards.join(', ')})`);
    if (out.has(name)) throw bad(`${flag}: shard ${name} is listed twice`);
    const value = item.slice(eq + 1);
    // HOST:PORT as --cluster-server-reference takes it (an IPv6 host in brackets); parsed here, since
    // src/scale comes below src/cluster.
    const colon = value.lastIndexOf(':');
    const host = colon < 0 ? '' : value.slice(0, colon).replace(/^\[(.*)\]$/, '$1');
    const portText = colon < 0 ? '' : value.slice(colon + 1);
    const port = /^[0-9]{1,5}$/.test(portText) ? Number(portText) : 0;
    if (host === '' || port < 1 || port > 65_535) {
      throw bad(`${flag}: shard ${name} needs a host and a port clients can connect to, not "${value}"`);
    }
    out.set(name, value);
  }
  const absent = placement.shards.filter((s) => !out.has(s));
  if (absent.length > 0) throw bad(`${flag}: no address for shard ${absent.join(', ')}; give every shard of --shards one`);
  return out;
}

/** The --shard-route rules, each checked (the message names the rule), then checked together. */
export function parseRouteRules(patterns: readonly string[], placement: Placement): RouteRules {
  try {
    return new RouteRules(patterns, placement);
  } catch (err) {
    if (err instanceof RangeError) throw bad(`--shard-route: ${err.message}`);
    throw err;
  }
}

/** `nats://HOST[:PORT]` or `tls://HOST[:PORT]`, several separated by commas (a client tries them
 * in turn); no credentials, path or query. */
export function parseNatsUrls(text: string): NatsAddress[] {
  const flag = '--nats';
  return text.split(',').map((item) => {
    let u: URL;
    try {
      u = new URL(item);
    } catch {
      throw bad(`${flag}: ${JSON.stringify(item)} is not a URL (expected nats://HOST:PORT or tls://HOST:PORT)`);
    }
    if (u.protocol !== 'nats:' && u.protocol !== 'tls:') {
      throw bad(`${flag}: ${JSON.stringify(item)}: scheme ${u.protocol.slice(0, -1)} is not supported (expected nats or tls)`);
    }
    if (u.username !== '' || u.password !== '') throw bad(`${flag}: ${JSON.stringify(item)}: credentials do not go into the URL`);
    if ((u.pathname !== '' && u.pathname !== '/') || u.search !== '' || u.hash !== '') {
      throw bad(`${flag}: ${JSON.stringify(item)}: expected no path, query or fragment`);
    }
    const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
    if (host === '') throw bad(`${flag}: ${JSON.stringify(item)}: no host`);
    const port = u.port === '' ? NATS_PORT_DEFAULT : Number(u.port);
    if (!Number.isInteger(port) || port < 1 || port > 65_535) throw bad(`${flag}: ${JSON.stringify(item)}: bad port`);
    return { url: item, tls: u.protocol === 'tls:', host, port };
  });
}
