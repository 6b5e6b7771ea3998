#!/usr/bin/env node
// The raftmq command: parses flags and the config file, starts one broker node (alone, or as one of
// a three-node cluster with --cluster-node and --cluster-peers), and stops it on SIGINT/SIGTERM
// within --shutdown-timeout-ms.
import { monitorEventLoopDelay, PerformanceObserver, constants as perfConstants } from 'node:perf_hooks';
import type { pino } from 'pino';
import { DriverError } from '../raft/driver/errors.js';
import type { AclRule } from './broker/commands.js';
import { type Config, helpText, parseCli } from './config.js';
import { EXIT, RaftmqError } from './errors.js';
import type { EventSink } from './events.js';
import { DataDirError } from './log/wal/wal.js';
import { BoundedLogWriter, stdoutSink } from './logging/log-writer.js';
import { createLogger, type LogFormat } from './logging/logger.js';
import { buildNodeOptions, loadSecurity, type Running, type Security, startNode, tlsMaterial, version } from './run-node.js';
import { readAclFile } from './server/auth/acl-file.js';
import { runPasswd } from './server/auth/passwd-command.js';
import type { BrokerNode } from './server/broker-node.js';
import type { TlsMaterial } from './server/listeners/tls-material.js';

/** The log destination of a running node; null before one runs (help, version, bad flags). */
let logWriter: BoundedLogWriter | null = null;

/** How long an exit waits for queued log lines to leave (ms), at most; a stop waits no longer
 * than its deadline either (a paused terminal must not hold a long --shutdown-timeout-ms). */
const EXIT_LOG_DRAIN_MS = 1_000;

/** performance.now() at which a stop on SIGTERM/SIGINT must be over; null before a signal. */
let stopDeadline: number | null = null;

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

async function main(argv: readonly string[]): Promise<number> {
  if (argv[0] === 'passwd') return runPasswd(argv.slice(1), process);
  let request: ReturnType<typeof parseCli>;
  let tls: TlsMaterial | null = null;
  let security: Security;
  let node: BrokerNode | null = null;
  const events: EventSink = { event: (kind, f) => node?.event(kind, f) };
  try {
    request = parseCli(argv);
    if (request.action === 'run') tls = tlsMaterial(request.config);
    security = request.action === 'run' ? loadSecurity(request.config, events) : { authenticator: null, http: null, acl: null };
  } catch (err) {
    if (err instanceof RaftmqError) {
      process.stderr.write(`raftmq: ${err.message}\nTry raftmq --help.\n`);
      return EXIT.USAGE;
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
  const options = buildNodeOptions(config, logger, tls, security, () => ({ logLinesDropped: writer.dropped }));
  let running: Running;
  try {
    running = await startNode(
      config,
      options,
      logger,
      (n) => {
        node = n;
      },
      (code, err) => {
        process.stderr.write(`raftmq: ${err.message}\n`);
        exitAfterLogs(code);
      },
    );
  } catch (err) {
    logger.fatal({ err }, 'start failed');
    process.stderr.write(`raftmq: cannot start: ${(err as Error).message}\n`);
    // A refused state file, membership record, data directory or PID lock: the message names the file.
    const refused = (err instanceof DriverError && err.code.startsWith('RAFT_STATE_FILE')) || err instanceof DataDirError;
    return refused ? EXIT.STATE_FILE_REFUSED : EXIT.FAILED;
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
  const hardExit = (): never => process.exit(EXIT.FAILED);
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
      finish(EXIT.FAILED, 'warn', { timeoutMs });
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
