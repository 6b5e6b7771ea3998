// Builds and starts one broker node from a resolved configuration: alone in memory, alone on a
// data directory, or as one node of a three-node cluster. The raftmq command (src/cli.ts) and the
// embedding API (src/index.ts) both start nodes here, so a node started either way is the same.
import { readFileSync } from 'node:fs';
import type { pino } from 'pino';
import type { AclRule } from './broker/commands.js';
import { clusterSettings } from './cluster/cluster-config.js';
import { healthSource, type RunningCluster, singleNodeStatus, startClusterNode, statusAccess } from './cluster/cluster-node.js';
import { HealthServer } from './cluster/health.js';
import { type Config, listenerSpecs } from './config.js';
import { CONFIG_ERROR, ConfigError, EXIT } from './errors.js';
import type { EventSink } from './events.js';
import { shardSettings } from './scale/shard-config.js';
import { readAclFile } from './server/auth/acl-file.js';
import { allOf } from './server/auth/all-of.js';
import { HttpAuthenticator } from './server/auth/http-authenticator.js';
import { PasswordFileAuthenticator } from './server/auth/password-authenticator.js';
import type { Authenticator } from './server/authenticator.js';
import { bridgeSpecs } from './server/bridge/bridge-config.js';
import { BrokerNode, type NodeOptions } from './server/broker-node.js';
import { fileProbe, TEST_FREE_BYTES_ENV } from './server/disk-space.js';
import { type RunningDurable, startDurableNode } from './server/durable-node.js';
import { isTlsKind } from './server/listeners/listen-url.js';
import { type ClientAuth, type IdentityField, TlsMaterial } from './server/listeners/tls-material.js';
import { ScramSha256 } from './server/scram.js';

export function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** The TLS files of the configuration, read and checked, when a listener needs them. Throws
 * ConfigError naming the flag and file. */
export function tlsMaterial(config: Config): TlsMaterial | null {
  if (!listenerSpecs(config).some((s) => isTlsKind(s.kind))) return null;
  return TlsMaterial.load({
    cert: config['tls-cert'],
    key: config['tls-key'],
    ca: config['tls-ca'] || null,
    crl: config['tls-crl'] || null,
    clientAuth: config['tls-client-auth'] as ClientAuth,
    identity: config['tls-identity'] as IdentityField,
    requireClientIdMatch: config['tls-require-client-id-match'],
  });
}

export function nodeOptions(config: Config, logger: pino.Logger, tls: TlsMaterial | null = null): NodeOptions {
  const bridges = bridgeSpecs(config);
  const shard = shardSettings(config);
  return {
    host: config.host,
    port: config.port,
    listeners: listenerSpecs(config),
    tls,
    maxPacketSize: config['max-packet-size'],
    maxQueuedMessages: config['max-queued-messages'],
    maxQueuedBytes: config['max-queued-bytes'],
    maxWriteBufferBytes: config['max-write-buffer-bytes'],
    maxInflight: config['max-inflight'],
    receiveMaximum: config['receive-maximum'],
    maxKeepalive: config['max-keepalive'],
    topicAliasMaximum: config['topic-alias-maximum'],
    maxQos: config['max-qos'] as 0 | 1 | 2,
    retainAvailable: config['retain-available'],
    willGraceS: config['will-grace-s'],
    maxSubscriptions: config['max-subscriptions'],
    nodeLimits: {
      maxConnections: config['max-connections'],
      maxPendingConnections: config['max-pending-connections'],
      listenBacklog: config['listen-backlog'],
      connectTimeoutMs: config['connect-timeout-ms'],
      maxTopicLevels: config['max-topic-levels'],
      maxTopicLength: config['max-topic-length'],
      publishRate: config['max-publish-rate'],
      connectRatePerAddress: config['max-connect-rate'],
    },
    bridges,
    bridgeRules: bridges.flatMap((b) => b.rules),
    bridgeOutboxMessages: config['bridge-outbox-messages'],
    bridgeOutboxBytes: config['bridge-outbox-bytes'],
    statsIntervalMs: config['stats-interval-ms'],
    sysIntervalS: config['sys-interval'],
    shard: shard === null ? null : { shard: shard.shard, placement: shard.placement, addresses: shard.addresses },
    nats:
      shard === null || shard.nats.length === 0
        ? null
        : { servers: shard.nats.map((n) => n.url), rules: shard.rules, client: shard.natsClient },
    version: version(),
    logger,
  };
}

/** Anonymous access: as configured, or (auto) only when no password file is given. */
export function allowAnonymous(config: Config): boolean {
  const v = config['allow-anonymous'];
  return v === 'auto' ? config['password-file'] === '' : v === 'true';
}

export interface Security {
  authenticator: PasswordFileAuthenticator | null;
  /** --auth-http-url; null: none. */
  http: HttpAuthenticator | null;
  acl: AclRule[] | null;
}

/** Reads the password and ACL files; a problem throws a ConfigError naming the file and line. */
export function loadSecurity(config: Config, events: EventSink): Security {
  const pw = config['password-file'];
  if (pw === '' && config['allow-anonymous'] === 'false') {
    // Without a password file nobody could authenticate: refused rather than letting any username in.
    throw new ConfigError(CONFIG_ERROR.BAD_VALUE, '--allow-anonymous false needs --password-file');
  }
  const authenticator = pw === '' ? null : new PasswordFileAuthenticator(pw, allowAnonymous(config), events);
  const acl = config['acl-file'] === '' ? null : readAclFile(config['acl-file']);
  const http =
    config['auth-http-url'] === ''
      ? null
      : new HttpAuthenticator({
          url: config['auth-http-url'],
          timeoutMs: config['auth-http-timeout-ms'],
          cacheMs: config['auth-http-cache-ms'],
          concurrency: config['auth-http-concurrency'],
          queue: config['auth-http-queue'],
          events,
        });
  return { authenticator, http, acl };
}

export interface Running {
  node: BrokerNode;
  stop(): Promise<void>;
  /** At the stop's deadline, synchronous: what must outlive the process (a cluster node's state
   * file) is written now; the rest of the stop is given up. */
  stopNow(): void;
}

/** The node cannot go on (its MQTT listeners cannot open, a data directory write failed, a
 * force-start was refused): the process must end with `code`. The line is already logged. */
export type NodeFatal = (code: number, err: Error) => void;

/** The start line's word on where clients may come from. */
function bindNote(config: Config): string {
  if (config.listen.length > 0) return 'the --listen listeners';
  if (config.host === '127.0.0.1' || config.host === '::1' || config.host === 'localhost') {
    return `${config.host}: this host only; clients of other hosts need --host 0.0.0.0 or --listen`;
  }
  return config.host;
}

/** A single node serves once it listens; a cluster node is started once raft runs, and serves only
 * while it is the leader with a lease, so its start does not wait for serving. */
export async function startNode(
  config: Config,
  opts: NodeOptions,
  logger: pino.Logger,
  created: (node: BrokerNode) => void,
  fatal: NodeFatal,
): Promise<Running> {
  const health = {
    host: config['health-host'] === '' ? config.host : config['health-host'],
    port: config['health-port'],
    statusToken: config['status-token'],
  };
  const sharded = shardSettings(config);
  const shard = sharded === null ? {} : { shard: sharded.shard };
  const cs = clusterSettings(config);
  const clusterOpts: NodeOptions = opts.nats == null ? opts : { ...opts, nats: null };
  if (cs !== null && opts.nats != null) {
    // A three-node shard's route stamps need the Raft epoch and term, which are not wired yet.
    logger.info({ nats: opts.nats.servers }, '--nats is not used by a three-node shard yet: it is not joined (docs/scale-out.md)');
  }
  const testFree = process.env[TEST_FREE_BYTES_ENV];
  const diskProbe = testFree === undefined || testFree === '' ? undefined : fileProbe(testFree);
  if (cs !== null) {
    const c: RunningCluster = await startClusterNode(
      cs,
      clusterOpts,
      health,
      logger,
      created,
      (err) => {
        logger.fatal({ err: err.message }, 'cannot listen for MQTT clients');
        fatal(1, new Error(`cannot listen for MQTT clients: ${err.message}`));
      },
      (code, err) => {
        logger.fatal({ err: err.message, code }, 'stopping');
        fatal(code, err);
      },
      diskProbe,
    );
    logger.info(
      { version: version(), ...shard, node: cs.node, raftPort: c.raftPort, healthPort: c.healthPort, bind: bindNote(config) },
      'started',
    );
    return c;
  }
  let node: BrokerNode;
  let stopNode: () => Promise<void>;
  let dataDir: RunningDurable | null = null;
  if (config['data-dir'] !== '') {
    const d = await startDurableNode(
      {
        dataDir: config['data-dir'],
        snapshotLogBytes: config['snapshot-log-bytes'],
        minFreeBytes: config['data-dir-min-free-bytes'],
        probe: diskProbe,
      },
      opts,
      logger,
      created,
      (err) => {
        // Never retried: the node stops, and the next start recovers from what is on disk.
        logger.fatal({ err: err.message, exitCode: EXIT.DATA_DIR_IO }, 'data directory write failed; stopping');
        fatal(EXIT.DATA_DIR_IO, err);
      },
    );
    node = d.node;
    stopNode = () => d.stop();
    dataDir = d;
  } else {
    const n = new BrokerNode(opts);
    created(n);
    await n.start();
    node = n;
    stopNode = () => n.stop();
  }
  let server: HealthServer | null = null;
  let healthPort = -1;
  if (health.port >= 0) {
    const dd = dataDir;
    server = new HealthServer(
      {
        ...healthSource(node, () => singleNodeStatus(node)),
        ...(dd === null ? {} : { dataDir: () => dd.status() }),
      },
      statusAccess(health),
    );
    try {
      healthPort = await server.listen(health.host, health.port);
    } catch (err) {
      await stopNode();
      throw new Error(`--health-port ${health.host}:${health.port}: ${(err as Error).message}`);
    }
    logger.info({ port: healthPort }, 'health listening');
  }
  const recovered = dataDir === null ? {} : { recovered: dataDir.recovered };
  logger.info(
    { version: version(), ...shard, port: node.port, ports: node.ports, healthPort, bind: bindNote(config), ...recovered },
    'started',
  );
  return {
    node,
    async stop() {
      await Promise.all([stopNode(), server?.close()]);
    },
    // Nothing to write at the deadline: without --data-dir a single node keeps nothing, and its
    // data directory is whole at every moment (a batch is synced before any effect of it leaves;
    // the next start takes over the lock of a process that is gone).
    stopNow() {},
  };
}

/** What an embedding application adds to a configuration (src/index.ts). */
export interface NodeExtras {
  /** Asked after the password file and --auth-http-url, when they allow. */
  authenticator?: Authenticator;
  authorizer?: NodeOptions['authorizer'];
  observer?: NodeOptions['observer'];
}

/** The node's options from the configuration and its security files: every authenticator that is
 * configured must allow a CONNECT (the password file, then --auth-http-url, then an embedding
 * application's hook), and the password file's SCRAM users are the enhanced-authentication method. */
export function buildNodeOptions(
  config: Config,
  logger: pino.Logger,
  tls: TlsMaterial | null,
  security: Security,
  gauges: () => Record<string, number>,
  extras: NodeExtras = {},
): NodeOptions {
  const options = nodeOptions(config, logger, tls);
  const auth = security.authenticator;
  const http = security.http;
  options.gauges = () => ({
    ...gauges(),
    ...(auth === null
      ? {}
      : {
          authThrottleAddresses: auth.throttle.byAddress.size,
          authThrottleUsers: auth.throttle.byUser.size,
          authThrottleTableMax: auth.throttle.byAddress.max,
        }),
    ...(http === null ? {} : http.gauges()),
  });
  const chain: Authenticator[] = [];
  if (auth !== null) {
    chain.push(auth);
    // The file's SCRAM lines are the method's users, so a SIGHUP reload of the file reaches it too.
    options.enhancedAuth = [new ScramSha256({ store: auth })];
  }
  if (http !== null) chain.push(http);
  if (extras.authenticator !== undefined) chain.push(extras.authenticator);
  if (chain.length > 0) options.authenticator = allOf(chain);
  if (extras.observer !== undefined) options.observer = extras.observer;
  if (extras.authorizer !== undefined) options.authorizer = extras.authorizer;
  options.acl = security.acl;
  return options;
}
