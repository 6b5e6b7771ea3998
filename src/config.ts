// One typed schema of every setting. The CLI flags, the config file and docs/configuration.md all
// come from SCHEMA below; a test keeps the document in sync with it.
//
// A config key is the flag without its dashes. Durations end in -ms or -s; sizes are bytes (a
// suffix KiB, MiB or GiB is accepted). A flag beats the file; the file beats the default.
import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { parseArgs } from 'node:util';
import { parseDocument as parseYamlDocument } from 'yaml';
import { clusterSettings } from './cluster/cluster-config.js';
import { CONFIG_ERROR, ConfigError } from './errors.js';
import { shardSettings } from './scale/shard-config.js';
import { bridgeSpecs } from './server/bridge/bridge-config.js';
import { isTlsKind, type ListenerSpec, parseListenUrl } from './server/listeners/listen-url.js';

/** 'list': a repeatable flag (--listen A --listen B), a YAML or JSON list in the config file.
 * 'map': a map in the config file only (no flag), checked by its own reader. */
type Kind = 'int' | 'size' | 'bool' | 'string' | 'enum' | 'list' | 'map';

interface SettingSpec<K extends Kind = Kind> {
  kind: K;
  /** For 'string', '' means unset. */
  default: K extends 'bool'
    ? boolean
    : K extends 'int' | 'size'
      ? number
      : K extends 'list'
        ? readonly string[]
        : K extends 'map'
          ? Readonly<Record<string, unknown>>
          : string;
  help: string;
  min?: number;
  max?: number;
  values?: readonly string[];
}

const MiB = 1024 * 1024;

/** Every setting, by key. Order here is the order of --help and the docs. */
export const SCHEMA = {
  port: { kind: 'int', default: 1883, min: 0, max: 65535, help: 'MQTT TCP port (0 picks a free port)' },
  host: {
    kind: 'string',
    default: '127.0.0.1',
    help: 'address the MQTT listener (and the health port) binds; the loopback default serves this host only: give 0.0.0.0 or --listen for clients of other hosts',
  },
  listen: {
    kind: 'list',
    default: [],
    help: 'a listener, repeatable: mqtt://HOST:PORT, mqtts://HOST:PORT, ws://HOST:PORT/PATH or wss://HOST:PORT/PATH (path default /mqtt), each optionally ?proxy=v1 or ?proxy=v2; when none is given, --host and --port make one mqtt:// listener',
  },
  'tls-cert': {
    kind: 'string',
    default: '',
    help: 'PEM certificate of mqtts:// and wss:// listeners, followed by its intermediate CAs; re-read on change and on SIGHUP',
  },
  'tls-key': { kind: 'string', default: '', help: 'PEM private key of --tls-cert' },
  'tls-ca': { kind: 'string', default: '', help: 'PEM CA certificates that client certificates must chain to' },
  'tls-crl': {
    kind: 'string',
    default: '',
    help: 'PEM certificate revocation list of --tls-ca; a revoked client certificate fails the handshake',
  },
  'tls-client-auth': {
    kind: 'enum',
    default: 'none',
    values: ['none', 'optional', 'required'],
    help: 'client certificates: not asked for, verified when presented, or required',
  },
  'tls-identity': {
    kind: 'enum',
    default: 'cn',
    values: ['cn', 'san'],
    help: 'the client certificate field that becomes the username: subject CN, or the first DNS, email or URI subject alternative name',
  },
  'tls-require-client-id-match': {
    kind: 'bool',
    default: false,
    help: 'a client with a certificate must use its identity as client id (else CONNACK 0x85, 3.1.1: 2)',
  },
  'log-level': {
    kind: 'enum',
    default: 'info',
    values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    help: 'pino log level: nothing below it is written (but the event-loop-delay report SIGUSR2 asks for, also written at stop)',
  },
  'log-format': {
    kind: 'enum',
    default: 'json',
    values: ['json', 'pretty'],
    help: 'log lines on stdout: one JSON object per line, or pretty (pino-pretty) for a terminal',
  },
  'log-queue-bytes': {
    kind: 'size',
    default: 1 * MiB,
    min: 4 * 1024,
    max: 2 ** 30,
    help: 'log lines waiting for a slow stdout, in bytes, above which new lines are dropped and counted (never blocking the broker)',
  },
  'max-packet-size': {
    kind: 'size',
    default: 1 * MiB,
    min: 64,
    max: 268_435_455,
    help: 'largest MQTT packet accepted or sent, in bytes (both directions)',
  },
  'max-queued-messages': {
    kind: 'int',
    default: 10_000,
    min: 0,
    max: 100_000_000,
    help: 'queued QoS 1/2 messages per session; a full queue does not admit new messages',
  },
  'max-queued-bytes': {
    kind: 'size',
    default: 64 * MiB,
    min: 0,
    max: 2 ** 40,
    help: 'queued topic and payload bytes per session',
  },
  'max-write-buffer-bytes': {
    kind: 'size',
    default: 1 * MiB,
    min: 16 * 1024,
    max: 2 ** 30,
    help: "output waiting for one connection's socket above which QoS 0 deliveries to it are dropped (counted as qos0-dropped-slow-consumer) and reading from it pauses until its output drains",
  },
  'max-inflight': {
    kind: 'int',
    default: 1_024,
    min: 1,
    max: 65_535,
    help: "unacknowledged QoS 1/2 messages sent per session (MQTT 5: the smaller of this and the client's Receive Maximum)",
  },
  'receive-maximum': {
    kind: 'int',
    default: 64,
    min: 1,
    max: 65_535,
    help: 'unacknowledged QoS 1/2 publishes a client may send (MQTT 5 Receive Maximum)',
  },
  'max-keepalive': {
    kind: 'int',
    default: 65_535,
    min: 1,
    max: 65_535,
    help: 'largest keep-alive in seconds; MQTT 5 clients asking more get Server Keep Alive',
  },
  'topic-alias-maximum': {
    kind: 'int',
    default: 10,
    min: 0,
    max: 65_535,
    help: 'inbound topic aliases per MQTT 5 connection',
  },
  'max-qos': { kind: 'int', default: 2, min: 0, max: 2, help: 'highest QoS granted and accepted' },
  'retain-available': { kind: 'bool', default: true, help: 'whether retained messages are supported' },
  'will-grace-s': {
    kind: 'int',
    default: 30,
    min: 0,
    max: 4_294_967,
    help: 'wills of connections ended by a failover wait at least this long, in seconds',
  },
  'password-file': {
    kind: 'string',
    default: '',
    help: 'password file of USER:$scrypt$... lines (raftmq passwd FILE USER); empty: no authentication; re-read on SIGHUP',
  },
  'allow-anonymous': {
    kind: 'enum',
    default: 'auto',
    values: ['auto', 'true', 'false'],
    help: 'whether clients without a username may connect; auto: true without --password-file, false with one',
  },
  'acl-file': {
    kind: 'string',
    default: '',
    help: "ACL file in Mosquitto's acl_file syntax; empty: every client may publish and subscribe anywhere; re-read on SIGHUP",
  },
  'auth-http-url': {
    kind: 'string',
    default: '',
    help: 'http:// or https:// URL every CONNECT is POSTed to as JSON; a 2xx reply {"result":"allow"} lets it in, "deny" refuses it with 0x87, anything else with 0x88 (docs/security.md "HTTP authentication"); empty: off',
  },
  'auth-http-timeout-ms': {
    kind: 'int',
    default: 2000,
    min: 1,
    max: 60_000,
    help: 'a reply of --auth-http-url not complete within this time refuses the CONNECT with 0x88 Server unavailable',
  },
  'auth-http-cache-ms': {
    kind: 'int',
    default: 60_000,
    min: 0,
    max: 86_400_000,
    help: 'allow and deny replies of --auth-http-url are reused this long for the same client id, username and password; 0: no cache',
  },
  'auth-http-concurrency': {
    kind: 'int',
    default: 64,
    min: 1,
    max: 10_000,
    help: 'requests to --auth-http-url at once; CONNECTs beyond them wait in --auth-http-queue',
  },
  'auth-http-queue': {
    kind: 'int',
    default: 20_000,
    min: 0,
    max: 1_000_000,
    help: 'CONNECTs that wait, in order, for one of the --auth-http-concurrency requests, each at most --auth-http-timeout-ms; one beyond them, or that waited that long, is refused with 0x89 Server busy',
  },
  'max-connections': {
    kind: 'int',
    default: 100_000,
    min: 0,
    max: 10_000_000,
    help: 'connections past CONNECT; the CONNECT beyond it is refused (MQTT 5 CONNACK 0x97, 3.1.1 code 3); 0: no bound',
  },
  'max-pending-connections': {
    kind: 'int',
    default: 20_000,
    min: 1,
    max: 1_000_000,
    help: 'sockets that have not yet sent CONNECT; a socket beyond it is closed at accept (the default lets a fleet of that size reconnect at once after a failover)',
  },
  'listen-backlog': {
    kind: 'int',
    default: 4_096,
    min: 1,
    max: 65_535,
    help: "each MQTT listener's accept queue; the kernel caps it at net.core.somaxconn. A fleet reconnecting at once after a failover overflows a short queue, and its dropped SYNs retry a second later",
  },
  'connect-timeout-ms': {
    kind: 'int',
    default: 10_000,
    min: 100,
    max: 600_000,
    help: 'a socket that sends no CONNECT within this time is closed',
  },
  'max-topic-levels': {
    kind: 'int',
    default: 128,
    min: 0,
    max: 65_535,
    help: 'levels in a topic name or filter (PUBLISH: DISCONNECT 0x90; SUBSCRIBE: 0x8F per filter); 0: no bound',
  },
  'max-topic-length': {
    kind: 'int',
    default: 65_535,
    min: 1,
    max: 65_535,
    help: 'bytes in a topic name or filter (PUBLISH: DISCONNECT 0x90; SUBSCRIBE: 0x8F per filter)',
  },
  'max-subscriptions': {
    kind: 'int',
    default: 1_000,
    min: 0,
    max: 4_294_967_295,
    help: 'subscriptions per session; a new one beyond it is refused with 0x97 (3.1.1: 0x80); 0: no bound',
  },
  'max-publish-rate': {
    kind: 'int',
    default: 0,
    min: 0,
    max: 10_000_000,
    help: 'PUBLISH packets per second per connection, bursts up to the same number; over it the PUBLISH is not routed: MQTT 5 PUBACK/PUBREC 0x97 (QoS 0 dropped), 3.1.1 QoS 1/2 close; sending at more than twice the rate: MQTT 5 DISCONNECT 0x96, 3.1.1 close; 0: no bound',
  },
  'max-connect-rate': {
    kind: 'int',
    default: 0,
    min: 0,
    max: 1_000_000,
    help: 'CONNECTs per second per source address, bursts up to the same number; over it: MQTT 5 CONNACK 0x9F, 3.1.1 close; 0: no bound',
  },
  'stats-interval-ms': {
    kind: 'int',
    default: 0,
    min: 0,
    max: 86_400_000,
    help: "log a 'stats' line (counters, connections, bounded tables) at this interval; 0: off",
  },
  'sys-interval': {
    kind: 'int',
    default: 10,
    min: 0,
    max: 86_400,
    help: 'seconds between updates of the $SYS topics the serving node publishes (Mosquitto names, QoS 0, retained locally, never replicated); 0: off',
  },
  'shutdown-timeout-ms': {
    kind: 'int',
    default: 3000,
    min: 0,
    max: 600_000,
    help: 'the whole stop on SIGTERM/SIGINT finishes within this time',
  },
  'cluster-node': {
    kind: 'int',
    default: 0,
    min: 0,
    max: 65_535,
    help: "this node's id in --cluster-peers; 0: a single node, no cluster",
  },
  'cluster-peers': {
    kind: 'string',
    default: '',
    help: 'the three nodes of the cluster, 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT (raft peer addresses)',
  },
  'cluster-listen': {
    kind: 'string',
    default: '',
    help: 'HOST:PORT this node listens on for peers; default its own entry of --cluster-peers',
  },
  'cluster-id': { kind: 'string', default: 'raftmq', help: 'a peer link to a node of another cluster id is refused' },
  'cluster-secret': {
    kind: 'string',
    default: '',
    help: 'shared secret: every peer link starts with an HMAC-SHA256 challenge; without one a warning is logged',
  },
  'cluster-election-timeout-ms': {
    kind: 'int',
    default: 500,
    min: 10,
    max: 60_000,
    help: 'raft election timeout E; heartbeats and lease renewal every E/5',
  },
  'state-file': {
    kind: 'string',
    default: '',
    help: 'required in a cluster: the raft state written on a clean stop and resumed at start; the membership record (FILE.member), the consumed file (FILE.prev) and the PID lock (FILE.lock) live beside it; refused on a single node (use --data-dir)',
  },
  'data-dir': {
    kind: 'string',
    default: '',
    help: "single node: keep the state on disk in DIR, a write-ahead log of committed entries (one fdatasync per group commit; no ack, CONNACK or delivery leaves before its entry is on disk) and snapshots; cluster node: raft's log, term, vote and snapshot in DIR, on disk before the node acknowledges or votes, so a node restarts with its log and a cluster survives losing power on all nodes (--state-file stays required, for its membership record); created if absent, one process per directory; empty: in memory only (see docs/operations.md)",
  },
  'snapshot-log-bytes': {
    kind: 'size',
    default: 64 * MiB,
    min: 64 * 1024,
    max: 2 ** 40,
    help: "with --data-dir: a snapshot is written once the log grew by this many bytes, or by the last snapshot's size if that is larger, since the last one; the log before it is then removed. Bounds start-up replay and disk use",
  },
  'data-dir-min-free-bytes': {
    kind: 'size',
    default: 0,
    min: 0,
    max: 2 ** 50,
    help: "with --data-dir: below this much free space on its file system (read every second) new QoS 1/2 messages and new persistent sessions are refused (MQTT 5 0x97 Quota exceeded; 3.1.1: the connection closed, CONNACK 3) until space returns; 0: twice the last snapshot's size, at least 64 MiB",
  },
  'cluster-server-reference': {
    kind: 'string',
    default: '',
    help: "ID=HOST:PORT for every node, the address clients use to reach it: followers then listen too and answer each CONNECT with the leader's address (MQTT 5: CONNACK 0x9C with a Server Reference; 3.1.1: return code 3), so load balancers must check GET /health; empty: followers do not listen",
  },
  'cluster-force-start': {
    kind: 'bool',
    default: false,
    help: "make a new epoch from this node's state file (FILE, else FILE.prev) after two nodes lost their memory; refused while a peer shows a leader or a newer log (see docs/operations.md)",
  },
  'cluster-force-start-timeout-s': {
    kind: 'int',
    default: 120,
    min: 1,
    max: 86_400,
    help: 'a force-started node whose new epoch has no second voter within this exits (code 75)',
  },
  'cluster-max-clock-offset-ms': {
    kind: 'int',
    default: 1000,
    min: 1,
    max: 3_600_000,
    help: "a voter's wall clock farther than this from the median of the voters' clocks is left out of cluster time, and reported",
  },
  'audit-log': {
    kind: 'string',
    default: '',
    help: 'append a JSON line for every ack, delivery write and lease renewal to FILE (host-monotonic ms), for fault-injection checkers; off when empty',
  },
  bridge: {
    kind: 'list',
    default: [],
    help: "a bridge to another MQTT broker, repeatable: NAME=mqtt://HOST:PORT, NAME=mqtts://HOST:PORT, NAME=ws://HOST:PORT/PATH or NAME=wss://HOST:PORT/PATH (path default /mqtt; a NAME given twice has two addresses, tried in turn); its topic rules and other settings are the config file's bridges.NAME (docs/bridges.md)",
  },
  bridges: {
    kind: 'map',
    default: {},
    help: 'config file only: bridge NAME to its settings (address, client-id, username, password, protocol-version, keepalive-s, clean-start, try-private, tls-ca, tls-cert, tls-key, topic), see docs/bridges.md',
  },
  'bridge-outbox-messages': {
    kind: 'int',
    default: 10_000,
    min: 1,
    max: 100_000_000,
    help: 'messages waiting in one bridge outbox (in the replicated state) for the remote; beyond it a QoS 1/2 publish the rules would forward is refused (MQTT 5 0x97, 3.1.1 close) and a QoS 0 one or a will is not forwarded, counted; also the bound of each shard outbox (docs/scale-out.md "Forwarding")',
  },
  'bridge-outbox-bytes': {
    kind: 'size',
    default: 64 * MiB,
    min: 1,
    max: 2 ** 40,
    help: 'topic and payload bytes waiting in one bridge outbox, or in one shard outbox',
  },
  shard: {
    kind: 'string',
    default: '',
    help: "this node's shard of a scaled-out deployment (docs/scale-out.md), one of --shards; a CONNECT whose client id belongs to another shard is refused (MQTT 5: CONNACK 0x9C Use another server, with --shard-address as Server Reference; 3.1.1: return code 3); empty: not sharded, every client id is served",
  },
  shards: {
    kind: 'string',
    default: '',
    help: 'every shard of the deployment, NAME,NAME,... (1 to 32 of a-z, 0-9 and inner dashes each; the same set on every node, in any order): a client id belongs to one by rendezvous hashing',
  },
  'shard-address': {
    kind: 'string',
    default: '',
    help: "NAME=HOST:PORT for every shard of --shards, the address its clients use: a refused CONNECT is told its shard's (MQTT 5 Server Reference); empty: refusals name no address",
  },
  'shard-route': {
    kind: 'list',
    default: [],
    help: 'a placement rule, repeatable: a topic pattern with one level {client} (devices/{client}/cmd), whose messages go to the shard that owns that client id without a route entry; no two rules may match a common topic (docs/scale-out.md "Routes")',
  },
  nats: {
    kind: 'string',
    default: '',
    help: 'the NATS servers joining the shards, nats://HOST:PORT or tls://HOST:PORT, several separated by commas; a single node joins them for routes (docs/scale-out.md)',
  },
  'nats-user': {
    kind: 'string',
    default: '',
    help: 'with --nats: the user name this node logs in to NATS with, with --nats-password (one of --nats-user, --nats-token, --nats-creds)',
  },
  'nats-password': {
    kind: 'string',
    default: '',
    help: "with --nats-user: that user's password",
  },
  'nats-token': {
    kind: 'string',
    default: '',
    help: 'with --nats: the token this node logs in to NATS with',
  },
  'nats-creds': {
    kind: 'string',
    default: '',
    help: 'with --nats: a NATS credentials file (a user JWT and its NKey seed, as nsc writes it) this node logs in with',
  },
  'nats-tls-ca': {
    kind: 'string',
    default: '',
    help: "with --nats: PEM file of the CA certificates the NATS server's certificate must chain to (default: the system's)",
  },
  'nats-tls-cert': {
    kind: 'string',
    default: '',
    help: 'with --nats: PEM client certificate for a NATS server that verifies clients, with --nats-tls-key',
  },
  'nats-tls-key': {
    kind: 'string',
    default: '',
    help: 'with --nats-tls-cert: its PEM private key',
  },
  'health-port': {
    kind: 'int',
    default: -1,
    min: -1,
    max: 65_535,
    help: 'HTTP port of GET /health, /live, /metrics and the status page / on --health-host; -1: off, 0 picks a free port',
  },
  'health-host': {
    kind: 'string',
    default: '',
    help: 'address the health port binds; none: the address of --host',
  },
  'status-token': {
    kind: 'string',
    default: '',
    help: 'TOKEN the status page and live trace of the health port ask for (Authorization: Bearer TOKEN or ?token=TOKEN); empty: open on a loopback --health-host, refused (403) on any other',
  },
} as const satisfies Record<string, SettingSpec>;

export type SettingKey = keyof typeof SCHEMA;
type ValueOf<S> = S extends { kind: 'bool' }
  ? boolean
  : S extends { kind: 'int' | 'size' }
    ? number
    : S extends { kind: 'list' }
      ? string[]
      : S extends { kind: 'map' }
        ? Record<string, unknown>
        : string;
/** The resolved configuration: every key of SCHEMA with its typed value. */
export type Config = { -readonly [K in SettingKey]: ValueOf<(typeof SCHEMA)[K]> };

export function defaults(): Config {
  const out: Record<string, unknown> = {};
  for (const [key, spec] of Object.entries(SCHEMA))
    out[key] = Array.isArray(spec.default) ? [...spec.default] : spec.kind === 'map' ? { ...spec.default } : spec.default;
  return out as Config;
}

/** A value as the error shows it. A YAML alias may make a value that contains itself
 * (`listen: &a [*a]`), which JSON cannot write. */
function shown(raw: unknown): string {
  try {
    return String(JSON.stringify(raw));
  } catch {
    return `a ${Array.isArray(raw) ? 'list' : typeof raw} that contains itself`;
  }
}

const SIZE_SUFFIX: Record<string, number> = { '': 1, KiB: 1024, MiB: MiB, GiB: 1024 * MiB };

/** Parses one value for `key`; `where` names the flag or the file key in errors. */
function parseValue(key: SettingKey, raw: unknown, where: string): unknown {
  const spec: SettingSpec = SCHEMA[key];
  const bad = (why: string) => new ConfigError(CONFIG_ERROR.BAD_VALUE, `${where}: ${why} (got ${shown(raw)})`);
  switch (spec.kind) {
    case 'bool': {
      if (raw === true || raw === 'true') return true;
      if (raw === false || raw === 'false') return false;
      throw bad('expected true or false');
    }
    case 'int':
    case 'size': {
      let n: number;
      if (typeof raw === 'number') n = raw;
      else if (typeof raw === 'string') {
        const m = spec.kind === 'size' ? /^(\d+)(KiB|MiB|GiB)?$/.exec(raw) : /^(\d+)$/.exec(raw);
        if (m === null) throw bad(spec.kind === 'size' ? 'expected bytes, e.g. 1048576 or 1MiB' : 'expected a whole number');
        n = Number(m[1]) * (SIZE_SUFFIX[m[2] ?? ''] ?? 1);
      } else throw bad('expected a whole number');
      if (!Number.isSafeInteger(n)) throw bad('expected a whole number');
      if (spec.min !== undefined && n < spec.min) throw bad(`must be at least ${spec.min}`);
      if (spec.max !== undefined && n > spec.max) throw bad(`must be at most ${spec.max}`);
      return n;
    }
    case 'enum': {
      // A YAML or JSON boolean for an enum of true/false/... reads as its word.
      if (typeof raw === 'boolean') raw = String(raw);
      if (typeof raw !== 'string' || !spec.values?.includes(raw)) throw bad(`expected one of ${spec.values?.join(', ')}`);
      return raw;
    }
    case 'string': {
      if (typeof raw !== 'string' || raw.length === 0) throw bad('expected a non-empty string');
      return raw;
    }
    case 'map': {
      if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw bad('expected a map');
      return raw;
    }
    case 'list': {
      const items = typeof raw === 'string' ? [raw] : raw;
      if (!Array.isArray(items) || items.some((v) => typeof v !== 'string' || v.length === 0))
        throw bad('expected a list of non-empty strings');
      return [...(items as string[])];
    }
    default: {
      const never: never = spec.kind;
      return never;
    }
  }
}

function isKey(k: string): k is SettingKey {
  return Object.hasOwn(SCHEMA, k);
}

/** Reads a JSON or YAML config file whose keys are the flag names without dashes. */
export function readConfigFile(path: string): Partial<Config> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new ConfigError(CONFIG_ERROR.UNREADABLE_FILE, `--config ${path}: cannot read: ${(err as Error).message}`);
  }
  return parseConfigText(text, path);
}

/** YAML's warnings (an unresolved tag, an ambiguous anchor) are errors here: the yaml library
 * would print them to stderr without the file's name and go on with a guess. It prints none
 * itself: a map key that is a collection, which it would warn about when it makes the key a
 * string, then fails as an unknown key. */
function readYaml(text: string): unknown {
  const doc = parseYamlDocument(text, { logLevel: 'error' });
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem !== undefined) throw problem;
  return doc.toJS();
}

/** The settings of a config file's text; `path` names the file in errors, and its extension
 * picks JSON (.json) or YAML (any other). */
export function parseConfigText(text: string, path: string): Partial<Config> {
  let doc: unknown;
  try {
    doc = extname(path) === '.json' ? JSON.parse(text) : readYaml(text);
  } catch (err) {
    throw new ConfigError(
      CONFIG_ERROR.BAD_FILE,
      `--config ${path}: not valid ${extname(path) === '.json' ? 'JSON' : 'YAML'}: ${(err as Error).message}`,
    );
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) {
    throw new ConfigError(CONFIG_ERROR.BAD_FILE, `--config ${path}: expected a map of settings`);
  }
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(doc)) {
    if (!isKey(k) || k === ('config' as string)) {
      throw new ConfigError(CONFIG_ERROR.UNKNOWN_KEY, `--config ${path}: unknown key "${k}"`);
    }
    out[k] = parseValue(k, v, `${path}: key "${k}"`);
  }
  return out as Partial<Config>;
}

export type CliRequest = { action: 'run'; config: Config } | { action: 'help' } | { action: 'version' };

/** Command-line habits parseArgs lacks: a boolean flag given bare (`--allow-anonymous`) means true,
 * and still takes `--flag=false` or `--flag false`; a flag's value may start with a dash
 * (`--port -5` is the value -5 of --port, refused as a bad value naming the flag, not an unknown
 * option `-5`). */
function normalizeArgv(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    const key = arg.startsWith('--') && !arg.includes('=') ? arg.slice(2) : null;
    const spec = key !== null && Object.hasOwn(SCHEMA, key) ? (SCHEMA as Record<string, SettingSpec>)[key] : undefined;
    const next = argv[i + 1];
    if (spec?.kind === 'bool') {
      // The command line has no positional arguments: a word after a boolean flag is its value.
      if (next !== undefined && !next.startsWith('-')) {
        out.push(`${arg}=${next}`);
        i++;
      } else out.push(`${arg}=true`);
    } else if (spec !== undefined && next !== undefined && /^-\d/.test(next)) {
      out.push(`${arg}=${next}`);
      i++;
    } else out.push(arg);
  }
  return out;
}

/** Parses command-line arguments (without node and script) into a resolved configuration. */
export function parseCli(argv: readonly string[]): CliRequest {
  const options: Record<string, { type: 'string' | 'boolean'; multiple?: boolean; short?: string }> = {
    config: { type: 'string' },
    help: { type: 'boolean', short: 'h' },
    version: { type: 'boolean' },
  };
  for (const [key, spec] of Object.entries(SCHEMA) as [string, SettingSpec][]) {
    if (spec.kind === 'map') continue;
    options[key] = spec.kind === 'list' ? { type: 'string', multiple: true } : { type: 'string' };
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: normalizeArgv(argv), options, strict: true, allowPositionals: false });
  } catch (err) {
    const e = err as Error & { code?: string };
    const code = e.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? CONFIG_ERROR.UNKNOWN_FLAG : CONFIG_ERROR.BAD_ARGUMENTS;
    throw new ConfigError(code, e.message);
  }
  const values = parsed.values as Record<string, string | string[] | boolean | undefined>;
  if (values.help === true) return { action: 'help' };
  if (values.version === true) return { action: 'version' };
  const config = defaults();
  if (typeof values.config === 'string') Object.assign(config, readConfigFile(values.config));
  for (const key of Object.keys(SCHEMA) as SettingKey[]) {
    const raw = values[key];
    if (raw === undefined || SCHEMA[key].kind === 'map') continue;
    (config as Record<string, unknown>)[key] = parseValue(key, raw, `--${key}`);
  }
  listenerSpecs(config);
  clusterSettings(config);
  bridgeSpecs(config);
  shardSettings(config);
  return { action: 'run', config };
}

/** A setting's key as a JavaScript property: `max-packet-size` is `maxPacketSize`. */
type Camel<S extends string> = S extends `${infer H}-${infer T}` ? `${H}${Capitalize<Camel<T>>}` : S;
/** The settings of the embedding API (src/index.ts): every key of SCHEMA in camel case, optional. */
export type SettingOptions = { -readonly [K in SettingKey as Camel<K>]?: Config[K] };

/** The flag key of a camel-case option: `maxPacketSize` is `max-packet-size`. */
export function keyOfOption(name: string): string {
  return name.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);
}

/** A resolved configuration from the embedding API's options, each checked as its flag is; an
 * unknown option or a bad value throws a ConfigError naming the option. */
export function configFromOptions(options: Readonly<Record<string, unknown>>): Config {
  const config = defaults();
  for (const [name, raw] of Object.entries(options)) {
    if (raw === undefined) continue;
    const key = keyOfOption(name);
    if (!isKey(key)) throw new ConfigError(CONFIG_ERROR.UNKNOWN_KEY, `option ${name}: unknown setting`);
    (config as Record<string, unknown>)[key] = parseValue(key, raw, `option ${name}`);
  }
  listenerSpecs(config);
  clusterSettings(config);
  bridgeSpecs(config);
  shardSettings(config);
  return config;
}

export function helpText(): string {
  const lines = [
    'Usage: raftmq [flags]',
    '       raftmq passwd [-b] FILE USER [PASSWORD]   add or change a user of a password file',
    '',
    'Flags (a config file takes the same keys without dashes):',
  ];
  lines.push('  --config FILE                  JSON or YAML file of settings; flags beat the file');
  for (const [key, spec] of Object.entries(SCHEMA) as [string, SettingSpec][]) {
    if (spec.kind === 'map') {
      lines.push(`  ${key.padEnd(30)} ${spec.help}`);
      continue;
    }
    const allowed = spec.kind === 'enum' && spec.values !== undefined ? `; one of ${spec.values.join(', ')}` : '';
    const bool = spec.kind === 'bool' ? '; true or false, bare means true' : '';
    lines.push(`  --${key.padEnd(28)} ${spec.help} (default ${shownDefault(spec)}${allowed}${bool})`);
  }
  lines.push('  -h, --help                     print this help', '  --version                      print the version');
  return lines.join('\n');
}

/** The table of docs/configuration.md, generated from SCHEMA. */
export function configurationTable(): string {
  const rows = ['| flag | default | meaning |', '|---|---|---|'];
  for (const [key, spec] of Object.entries(SCHEMA) as [string, SettingSpec][]) {
    rows.push(spec.kind === 'map' ? `| \`${key}\` | none | ${spec.help} |` : `| \`--${key}\` | ${shownDefault(spec)} | ${spec.help} |`);
  }
  return rows.join('\n');
}

function shownDefault(spec: SettingSpec): string {
  if (spec.kind === 'map') return 'none';
  if (Array.isArray(spec.default)) return spec.default.length === 0 ? 'none' : spec.default.join(' ');
  return spec.default === '' ? 'none' : String(spec.default);
}

/** The listeners a configuration asks for, checked against the TLS settings they need; errors
 * name the flag. --host and --port make the one mqtt:// listener when --listen is absent. */
export function listenerSpecs(config: Config): ListenerSpec[] {
  const specs: ListenerSpec[] =
    config.listen.length === 0
      ? [{ kind: 'mqtt', host: config.host, port: config.port, path: '', proxy: null }]
      : config.listen.map((url) => parseListenUrl(url, '--listen'));
  const tlsListener = specs.find((s) => isTlsKind(s.kind));
  if (tlsListener !== undefined) {
    for (const flag of ['tls-cert', 'tls-key'] as const) {
      if (config[flag] === '') throw new ConfigError(CONFIG_ERROR.MISSING_VALUE, `--listen ${tlsListener.kind}://...: needs --${flag}`);
    }
  }
  if (config['tls-client-auth'] !== 'none' && config['tls-ca'] === '') {
    throw new ConfigError(CONFIG_ERROR.MISSING_VALUE, `--tls-client-auth ${config['tls-client-auth']} needs --tls-ca`);
  }
  return specs;
}
