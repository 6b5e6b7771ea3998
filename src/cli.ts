#!/usr/bin/env node
// The raftmq command: parses flags and the config file, starts one broker node (alone, or as one of
// a three-node cluster with --cluster-node and --cluster-peers), and stops it on SIGINT/SIGTERM
// within --shutdown-timeout-ms.
import { readFileSync } from 'node:fs';
import { monitorEventLoopDelay, PerformanceObserver, constants as perfConstants } from 'node:perf_hooks';
import type { pino } from 'pino';
import { DriverError } from '../raft/driver/errors.js';
import type { AclRule } from './broker/commands.js';
import { clusterSettings } from './cluster/cluster-config.js';
import {
  EXIT_STATE_FILE_REFUSED,
  healthSource,
  type RunningCluster,
  singleNodeStatus,
  startClusterNode,
  statusAccess,
} from './cluster/cluster-node.js';
import { HealthServer } from './cluster/health.js';
import { type Config, helpText, listenerSpecs, parseCli } from './config.js';
import { CONFIG_ERROR, ConfigError, RaftmqError } from './errors.js';
import { DataDirError } from './log/wal/wal.js';
import { BoundedLogWriter, stdoutSink } from './logging/log-writer.js';
import { createLogger, type LogFormat } from './logging/logger.js';
import { readAclFile } from './server/auth/acl-file.js';
import { runPasswd } from './server/auth/passwd-command.js';
import { PasswordFileAuthenticator } from './server/auth/password-authenticator.js';
import { BrokerNode, type NodeOptions } from './server/broker-node.js';
import { startDurableNode } from './server/durable-node.js';
import { isTlsKind } from './server/listeners/listen-url.js';
import { type ClientAuth, type IdentityField, TlsMaterial } from './server/listeners/tls-material.js';
import { ScramSha256 } from './server/scram.js';

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
  return pkg.version;
}

/** The log destination of a running node; null before one runs (help, version, bad flags). */
let logWriter: BoundedLogWriter | null = null;

/** How long an exit waits for queued log lines to leave (ms), at most; a stop waits no longer
 * than its deadline either (a paused terminal must not hold a long --shutdown-timeout-ms). */
const EXIT_LOG_DRAIN_MS = 1_000;

/** performance.now() at which a stop on SIGTERM/SIGINT must be over; null before a signal. */
let stopDeadline: number | null = null;

/** Exit status of a stop that ran into --shutdown-timeout-ms (the state file is written all the same). */
const EXIT_STOP_TIMED_OUT = 1;

/** Exits once the queued log lines have left or `drainMs` has passed, whichever comes first: a
 * log destination that takes nothing never keeps the process alive. Without a running node
 * (help, version, passwd, bad flags) nothing is left to close and the process ends by itself,
 * after stdout has taken what was written to it. */
function exitAfterLogs(
  code: number,
  drainMs = stopDeadline === null ? EXIT_LOG_DRAIN_MS : Math.min(EXIT_LOG_DRAIN_MS, stopDeadline - performance.now()),
): void {
  if (logWriter === null) {
    process.exitCode = code;
    return;
  }
  void logWriter.drain(Math.max(0, drainMs)).then(() => process.exit(code));
}

/** Sampling interval of the event-loop delay histogram; its values include this interval. */
const LOOP_DELAY_RESOLUTION_MS = 10;

/** Logs the event-loop delay histogram (docs/design.md "Performance principles") and the garbage
 * collector's pauses since the previous report, on SIGUSR2 and at stop, then resets both. Loop
 * delay values are ms and include the sampling interval.
 * The signal is an explicit request, so the line is written at info even under --log-level warn. */
function watchLoopDelay(logger: pino.Logger): () => void {
  const h = monitorEventLoopDelay({ resolution: LOOP_DELAY_RESOLUTION_MS });
  h.enable();
  const gc = new GcPauses();
  const out = logger.isLevelEnabled('info') ? logger : logger.child({}, { level: 'info' });
  const ms = (ns: number): number => Math.round(ns / 1e3) / 1e3;
  const report = (on: string): void => {
    out.info(
      {
        on,
        resolutionMs: LOOP_DELAY_RESOLUTION_MS,
        samples: h.count,
        p50Ms: ms(h.percentile(50)),
        p99Ms: ms(h.percentile(99)),
        p999Ms: ms(h.percentile(99.9)),
        maxMs: ms(h.max),
        gc: gc.take(),
      },
      'event-loop-delay',
    );
    h.reset();
  };
  const onUsr2 = (): void => report('SIGUSR2');
  process.on('SIGUSR2', onUsr2);
  return () => {
    process.off('SIGUSR2', onUsr2);
    report('stop');
    h.disable();
    gc.stop();
  };
}

interface GcTally {
  count: number;
  ms: number;
  maxMs: number;
}

/** The garbage collector's pauses of the main thread since the last take(), apart from the loop
 * delay they cause: minor (scavenges of the young generation) and major (mark-compact), ms. */
class GcPauses {
  private minor: GcTally = { count: 0, ms: 0, maxMs: 0 };
  private major: GcTally = { count: 0, ms: 0, maxMs: 0 };
  private readonly observer = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      const kind = (e as PerformanceEntry & { detail?: { kind?: number } }).detail?.kind;
      const t = kind === perfConstants.NODE_PERFORMANCE_GC_MINOR ? this.minor : this.major;
      t.count++;
      t.ms += e.duration;
      if (e.duration > t.maxMs) t.maxMs = e.duration;
    }
  });

  constructor() {
    this.observer.observe({ entryTypes: ['gc'] });
  }

  take(): { minor: GcTally; major: GcTally } {
    const round = (t: GcTally): GcTally => ({ count: t.count, ms: Math.round(t.ms * 100) / 100, maxMs: Math.round(t.maxMs * 100) / 100 });
    const out = { minor: round(this.minor), major: round(this.major) };
    this.minor = { count: 0, ms: 0, maxMs: 0 };
    this.major = { count: 0, ms: 0, maxMs: 0 };
    return out;
  }

  stop(): void {
    this.observer.disconnect();
  }
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
    statsIntervalMs: config['stats-interval-ms'],
    sysIntervalS: config['sys-interval'],
    version: version(),
    logger,
  };
}

/** Anonymous access: as configured, or (auto) only when no password file is given. */
export function allowAnonymous(config: Config): boolean {
  const v = config['allow-anonymous'];
  return v === 'auto' ? config['password-file'] === '' : v === 'true';
}

interface Security {
  authenticator: PasswordFileAuthenticator | null;
  acl: AclRule[] | null;
}

/** Reads the password and ACL files; a problem throws a ConfigError naming the file and line. */
function loadSecurity(config: Config, events: { event(kind: string, f?: Record<string, unknown>): void }): Security {
  const pw = config['password-file'];
  if (pw === '' && config['allow-anonymous'] === 'false') {
    // Without a password file nobody could authenticate: refused rather than letting any username in.
    throw new ConfigError(CONFIG_ERROR.BAD_VALUE, '--allow-anonymous false needs --password-file');
  }
  const authenticator = pw === '' ? null : new PasswordFileAuthenticator(pw, allowAnonymous(config), events);
  const acl = config['acl-file'] === '' ? null : readAclFile(config['acl-file']);
  return { authenticator, acl };
}

/** SIGHUP: the password file and the ACL file again; a bad file keeps the old one and says why. */
function reloadSecurity(config: Config, security: Security, node: BrokerNode, logger: pino.Logger): void {
  try {
    security.authenticator?.reload();
    if (security.authenticator !== null) logger.info({ users: security.authenticator.userCount }, 'password file reloaded');
  } catch (err) {
    logger.error({ err: (err as Error).message }, 'password file not reloaded; the previous one stays');
  }
  let acl: AclRule[] | undefined;
  if (config['acl-file'] !== '') {
    try {
      acl = readAclFile(config['acl-file']);
      logger.info({ rules: acl.length }, 'acl file reloaded');
    } catch (err) {
      logger.error({ err: (err as Error).message }, 'acl file not reloaded; the previous one stays');
    }
  }
  // Either way the settings are offered again: the password file alone may have changed, and the
  // configuration hash a cluster compares covers it.
  if (acl !== undefined) node.reloadAcl(acl);
  else node.settingsReloaded();
}

interface Running {
  node: BrokerNode;
  stop(): Promise<void>;
  /** At the stop's deadline, synchronous: what must outlive the process (a cluster node's state
   * file) is written now; the rest of the stop is given up. */
  stopNow(): void;
}

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
async function startNode(config: Config, opts: NodeOptions, logger: pino.Logger, created: (node: BrokerNode) => void): Promise<Running> {
  const health = {
    host: config['health-host'] === '' ? config.host : config['health-host'],
    port: config['health-port'],
    statusToken: config['status-token'],
  };
  const cs = clusterSettings(config);
  if (cs !== null) {
    const c: RunningCluster = await startClusterNode(
      cs,
      opts,
      health,
      logger,
      created,
      (err) => {
        logger.fatal({ err: err.message }, 'cannot listen for MQTT clients');
        process.stderr.write(`raftmq: cannot listen for MQTT clients: ${err.message}\n`);
        exitAfterLogs(1);
      },
      (code, err) => {
        logger.fatal({ err: err.message, code }, 'stopping');
        process.stderr.write(`raftmq: ${err.message}\n`);
        exitAfterLogs(code);
      },
    );
    logger.info({ version: version(), node: cs.node, raftPort: c.raftPort, healthPort: c.healthPort, bind: bindNote(config) }, 'started');
    return c;
  }
  let node: BrokerNode;
  let stopNode: () => Promise<void>;
  if (config['data-dir'] !== '') {
    const d = await startDurableNode(
      { dataDir: config['data-dir'], snapshotLogBytes: config['snapshot-log-bytes'] },
      opts,
      logger,
      created,
      (err) => {
        // Never retried: the node stops, and the next start recovers from what is on disk.
        logger.fatal({ err: err.message }, 'data directory write failed; stopping');
        process.stderr.write(`raftmq: ${err.message}\n`);
        exitAfterLogs(1);
      },
    );
    node = d.node;
    stopNode = () => d.stop();
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
    server = new HealthServer(
      healthSource(node, () => singleNodeStatus(node)),
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
  logger.info({ version: version(), port: node.port, ports: node.ports, healthPort, bind: bindNote(config) }, 'started');
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

async function main(argv: readonly string[]): Promise<number> {
  if (argv[0] === 'passwd') return runPasswd(argv.slice(1), process);
  let request: ReturnType<typeof parseCli>;
  let tls: TlsMaterial | null = null;
  let security: Security;
  let node: BrokerNode | null = null;
  const events = { event: (kind: string, f?: Record<string, unknown>) => node?.event(kind, f) };
  try {
    request = parseCli(argv);
    if (request.action === 'run') tls = tlsMaterial(request.config);
    security = request.action === 'run' ? loadSecurity(request.config, events) : { authenticator: null, acl: null };
  } catch (err) {
    if (err instanceof RaftmqError) {
      process.stderr.write(`raftmq: ${err.message}\nTry raftmq --help.\n`);
      return 2;
    }
    throw err;
  }
  if (request.action === 'help') {
    process.stdout.write(`${helpText()}\n`);
    return 0;
  }
  if (request.action === 'version') {
    process.stdout.write(`${version()}\n`);
    return 0;
  }
  const config = request.config;
  // Asynchronous and bounded (src/logging/log-writer.ts): a log destination that does not keep up
  // drops lines, counted, and never stalls the loop or the stop.
  const writer: BoundedLogWriter = new BoundedLogWriter({
    sink: stdoutSink(),
    maxQueuedBytes: config['log-queue-bytes'],
    onCaughtUp: (dropped) => logger.warn({ dropped, droppedTotal: writer.dropped }, 'log lines dropped: the log destination was full'),
  });
  logWriter = writer;
  const logger = createLogger({ level: config['log-level'], format: config['log-format'] as LogFormat, writer });
  const options = nodeOptions(config, logger, tls);
  const auth = security.authenticator;
  options.gauges = () => ({
    logLinesDropped: writer.dropped,
    ...(auth === null
      ? {}
      : {
          authThrottleAddresses: auth.throttle.byAddress.size,
          authThrottleUsers: auth.throttle.byUser.size,
          authThrottleTableMax: auth.throttle.byAddress.max,
        }),
  });
  if (auth !== null) {
    options.authenticator = auth;
    // The file's SCRAM lines are the method's users, so a SIGHUP reload of the file reaches it too.
    options.enhancedAuth = [new ScramSha256({ store: auth })];
  }
  options.acl = security.acl;
  let running: Running;
  try {
    running = await startNode(config, options, logger, (n) => {
      node = n;
    });
  } catch (err) {
    logger.fatal({ err }, 'start failed');
    process.stderr.write(`raftmq: cannot start: ${(err as Error).message}\n`);
    // A refused state file, membership record, data directory or PID lock: the message names the file.
    const refused = (err instanceof DriverError && err.code.startsWith('RAFT_STATE_FILE')) || err instanceof DataDirError;
    return refused ? EXIT_STATE_FILE_REFUSED : 1;
  }
  const broker = running.node;
  const stopLoopDelay = watchLoopDelay(logger);
  const onHup = (): void => {
    logger.info('SIGHUP: re-reading TLS, password and ACL files');
    broker.reloadTls();
    reloadSecurity(config, security, broker, logger);
  };
  process.on('SIGHUP', onHup);
  return await new Promise<number>((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      process.off('SIGHUP', onHup);
      logger.info({ signal }, 'stopping');
      resolve(stopWithin(running, config['shutdown-timeout-ms'], logger, writer, stopLoopDelay));
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}

/** Part of --shutdown-timeout-ms kept for the forced end: the state file and the last log lines. */
const FORCED_STOP_RESERVE_MS = 250;

/** After its own deadline, the last resort exits whatever still runs (ms). */
const LAST_RESORT_MARGIN_MS = 100;

/** The stop on SIGTERM/SIGINT, over within `timeoutMs` whatever the stop or the log destination
 * does. A stop that finishes in time resolves 0. Otherwise, `timeoutMs` less a reserve after the
 * signal, the rest is given up (a cluster leader's handover skipped), the state file is written
 * and the stop resolves 1. Either way the process then exits once the log lines have left, or at
 * the deadline. The last resort is a timer that exits even if something still waits. A loop that
 * was stalled past the deadline (a frozen or starved process) still ends its stop, writes the
 * state file and gets a reserve for its last lines: the deadline then moves to the reserve's end. */
function stopWithin(
  running: Running,
  timeoutMs: number,
  logger: pino.Logger,
  writer: BoundedLogWriter,
  stopLoopDelay: () => void,
): Promise<number> {
  const reserve = Math.min(FORCED_STOP_RESERVE_MS, Math.floor(timeoutMs / 4));
  stopDeadline = performance.now() + timeoutMs;
  const hardExit = (): never => process.exit(EXIT_STOP_TIMED_OUT);
  // Unref'd: it must never be why the process lives on; when it fires, the process ends.
  let lastResort = setTimeout(hardExit, timeoutMs + LAST_RESORT_MARGIN_MS).unref();
  const lateByReserve = (): void => {
    const now = performance.now();
    if (stopDeadline !== null && stopDeadline >= now + reserve) return;
    stopDeadline = now + reserve;
    clearTimeout(lastResort);
    lastResort = setTimeout(hardExit, reserve + LAST_RESORT_MARGIN_MS).unref();
  };
  return new Promise<number>((resolve) => {
    let over = false;
    const finish = (code: number, level: 'info' | 'warn', fields: Record<string, unknown> = {}): void => {
      if (over) return;
      over = true;
      lateByReserve();
      stopLoopDelay();
      logger[level]({ ...fields, logLinesDropped: writer.dropped }, 'stopped');
      resolve(code);
    };
    const forced = setTimeout(() => {
      lateByReserve();
      logger.warn({ timeoutMs, reason: 'stop timed out' }, 'stop timed out');
      try {
        running.stopNow();
      } catch (err) {
        logger.error({ err: (err as Error).message }, 'forced stop failed');
      }
      finish(EXIT_STOP_TIMED_OUT, 'warn', { timeoutMs });
    }, timeoutMs - reserve);
    running.stop().then(
      () => {
        clearTimeout(forced);
        finish(0, 'info');
      },
      (err: unknown) => {
        clearTimeout(forced);
        logger.error({ err }, 'stop failed');
        finish(0, 'info');
      },
    );
  });
}

main(process.argv.slice(2)).then(
  // Connections and timers are closed by stop(); exit promptly even if a socket lingers.
  (code) => exitAfterLogs(code),
  (err: unknown) => {
    process.stderr.write(`raftmq: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  },
);
