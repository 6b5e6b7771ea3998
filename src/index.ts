// The embedding API: `import { MqttBroker } from 'raftmq'` runs one broker node inside an
// application, alone or as one node of a three-node cluster, started exactly as the raftmq command
// starts it (src/run-node.ts). docs/operations.md "Embedding raftmq" is its guide.
import { EventEmitter } from 'node:events';
import type { pino } from 'pino';
import type { Command, ConnId, Effect, Message, PublishCommand, PubrelCommand } from './broker/commands.js';
import { clusterSettings } from './cluster/cluster-config.js';
import { type Config, configFromOptions, listenerSpecs, type SettingOptions } from './config.js';
import type { EventSink } from './events.js';
import { BoundedLogWriter, stdoutSink } from './logging/log-writer.js';
import { createLogger, type LogFormat } from './logging/logger.js';
import { buildNodeOptions, loadSecurity, type Running, startNode, tlsMaterial } from './run-node.js';
import { type AuthenticateHook, HookAuthenticator } from './server/auth/hook-authenticator.js';
import { type AuthorizePublishHook, type AuthorizeSubscribeHook, HookAuthorizer } from './server/auth/hook-authorizer.js';
import type { BrokerNode } from './server/broker-node.js';
import { listenerUrl } from './server/listeners/listen-url.js';
import type { NodeObserver } from './server/node-observer.js';

export type { Config, SettingOptions } from './config.js';
export type { AuthenticateAnswer, AuthenticateHook, AuthenticateRequest } from './server/auth/hook-authenticator.js';
export type {
  AuthorizePublishAnswer,
  AuthorizePublishHook,
  AuthorizePublishRequest,
  AuthorizeSubscribeAnswer,
  AuthorizeSubscribeHook,
  AuthorizeSubscribeRequest,
} from './server/auth/hook-authorizer.js';

/** Every setting of docs/configuration.md in camel case (`maxPacketSize` for --max-packet-size),
 * checked as the flag is, and the hooks of an embedding application. */
export interface MqttBrokerOptions extends SettingOptions {
  /** Decides each CONNECT (after --password-file and --auth-http-url, when given, allowed it). */
  authenticate?: AuthenticateHook;
  /** An `authenticate` answer not given within this refuses the CONNECT with 0x88 (ms; default 5000). */
  authenticateTimeoutMs?: number;
  /** Decides each client PUBLISH, and each will before its CONNECT is proposed; the ACL file, when
   * given, still applies after it: both must allow. */
  authorizePublish?: AuthorizePublishHook;
  /** Decides each filter of a SUBSCRIBE; may grant a lower QoS. */
  authorizeSubscribe?: AuthorizeSubscribeHook;
  /** An authorize answer not given within this counts as a failed hook (ms; default 5000). */
  authorizeTimeoutMs?: number;
  /** Where log lines go; absent: JSON lines on stdout at `logLevel`, as the raftmq command writes. */
  logger?: pino.Logger;
}

export interface ListenerAddress {
  url: string;
  kind: string;
  host: string;
  port: number;
}

export interface BrokerAddresses {
  /** The MQTT listeners with their bound ports; a cluster node binds them only while it serves,
   * so before that every port is 0 (`servingStarted` gives them). */
  listeners: ListenerAddress[];
  /** -1: no health port. */
  healthPort: number;
  /** The raft peer port of a cluster node; -1 for a single node. */
  raftPort: number;
}

export interface ClientConnectedEvent {
  clientId: string;
  username: string | null;
  protocolVersion: number;
  sessionPresent: boolean;
}
export interface ClientDisconnectedEvent {
  clientId: string;
  /** The client's DISCONNECT reason code, or the reason the broker closed it. */
  reasonCode: number;
}
export interface SubscribedEvent {
  clientId: string;
  /** As the SUBACK answered: `reasonCode` is the granted QoS, or a refusal code (>= 0x80). */
  subscriptions: { filter: string; qos: number; reasonCode: number }[];
}
export interface PublishedEvent {
  clientId: string;
  topic: string;
  payload: Buffer;
  qos: number;
  retain: boolean;
}
export interface ServingEvent {
  period: number;
  listeners: ListenerAddress[];
}

export interface MqttBrokerEvents {
  clientConnected: [ClientConnectedEvent];
  clientDisconnected: [ClientDisconnectedEvent];
  subscribed: [SubscribedEvent];
  published: [PublishedEvent];
  servingStarted: [ServingEvent];
  servingEnded: [{ period: number }];
  /** The node cannot go on and has stopped (its listeners cannot open, a data directory write
   * failed, a force-start was refused); `exitCode` is what the raftmq command would exit with. */
  error: [Error & { exitCode?: number }];
}

const CLIENT_EVENTS: ReadonlySet<string | symbol> = new Set(['clientConnected', 'clientDisconnected', 'subscribed', 'published']);
const AUTHENTICATE_TIMEOUT_MS_DEFAULT = 5_000;
/** Part of --shutdown-timeout-ms kept for the forced end, as the raftmq command keeps it. */
const FORCED_STOP_RESERVE_MS = 250;

/** One raftmq node inside this process. An application that blocks the event loop blocks the
 * node with it: a cluster leader that cannot renew its lease in time stops serving and another
 * node takes over (docs/operations.md "Embedding raftmq"). */
export class MqttBroker extends EventEmitter<MqttBrokerEvents> {
  readonly config: Config;
  private readonly options: MqttBrokerOptions;
  private running: Running | null = null;
  private node: BrokerNode | null = null;
  private starting: Promise<BrokerAddresses> | null = null;
  private closing: Promise<void> | null = null;
  private readonly observer: EventsObserver;

  /** Throws a ConfigError naming the option when one is unknown or out of its range. */
  constructor(options: MqttBrokerOptions = {}) {
    super();
    this.options = options;
    const {
      authenticate: _a,
      authenticateTimeoutMs: _t,
      authorizePublish: _p,
      authorizeSubscribe: _s,
      authorizeTimeoutMs: _z,
      logger: _l,
      ...settings
    } = options;
    this.config = configFromOptions(settings);
    this.observer = new EventsObserver(this);
    const plain = this as EventEmitter;
    plain.on('newListener', (name: string | symbol) => {
      if (CLIENT_EVENTS.has(name)) this.observer.active = true;
    });
    plain.on('removeListener', () => {
      let n = 0;
      for (const name of CLIENT_EVENTS) n += this.listenerCount(name);
      this.observer.active = n > 0;
    });
  }

  /** Starts the node. A single node resolves once its listeners are bound; a cluster node once
   * raft runs (it serves MQTT only while it leads: `servingStarted`). Port 0 picks free ports. */
  listen(): Promise<BrokerAddresses> {
    if (this.starting === null) this.starting = this.start();
    return this.starting;
  }

  private async start(): Promise<BrokerAddresses> {
    const config = this.config;
    let logger = this.options.logger;
    if (logger === undefined) {
      const writer = new BoundedLogWriter({ sink: stdoutSink(), maxQueuedBytes: config['log-queue-bytes'] });
      logger = createLogger({ level: config['log-level'], format: config['log-format'] as LogFormat, writer });
    }
    const events: EventSink = { event: (kind, f) => this.node?.event(kind, f) };
    const security = loadSecurity(config, events);
    const hook = this.options.authenticate;
    const { authorizePublish, authorizeSubscribe } = this.options;
    const authorizer =
      authorizePublish === undefined && authorizeSubscribe === undefined
        ? undefined
        : new HookAuthorizer(
            authorizePublish ?? null,
            authorizeSubscribe ?? null,
            this.options.authorizeTimeoutMs ?? AUTHENTICATE_TIMEOUT_MS_DEFAULT,
            events,
          );
    const options = buildNodeOptions(config, logger, tlsMaterial(config), security, () => ({}), {
      observer: this.observer,
      ...(authorizer === undefined ? {} : { authorizer }),
      ...(hook === undefined
        ? {}
        : { authenticator: new HookAuthenticator(hook, this.options.authenticateTimeoutMs ?? AUTHENTICATE_TIMEOUT_MS_DEFAULT, events) }),
    });
    const running = await startNode(
      config,
      options,
      logger,
      (n) => {
        this.node = n;
      },
      (code, err) => {
        void this.close().finally(() => this.emit('error', Object.assign(err, { exitCode: code })));
      },
    );
    this.running = running;
    const cluster = running as Partial<{ raftPort: number; healthPort: number }>;
    return {
      listeners: this.addresses(),
      healthPort: cluster.healthPort ?? -1,
      raftPort: clusterSettings(config) === null ? -1 : (cluster.raftPort ?? -1),
    };
  }

  /** The MQTT listeners and their bound ports (0 before the first listen). */
  addresses(): ListenerAddress[] {
    const ports = this.node?.ports ?? [];
    return listenerSpecs(this.config).map((spec, i) => {
      const port = ports[i] ?? 0;
      return { url: listenerUrl(spec, port), kind: spec.kind, host: spec.host, port };
    });
  }

  /** The stop SIGTERM makes the raftmq command do: clients get DISCONNECT 0x8B (3.1.1: the socket
   * closes), a cluster leader hands over its leadership, and a cluster node writes its state file;
   * over within shutdownTimeoutMs (past it the handover is skipped, the state file still written). */
  close(): Promise<void> {
    if (this.closing === null) this.closing = this.stop();
    return this.closing;
  }

  private async stop(): Promise<void> {
    if (this.starting !== null) await this.starting.catch(() => undefined);
    const running = this.running;
    if (running === null) return;
    const timeoutMs = this.config['shutdown-timeout-ms'];
    const reserve = Math.min(FORCED_STOP_RESERVE_MS, Math.floor(timeoutMs / 4));
    let timer: NodeJS.Timeout | undefined;
    const forced = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        running.stopNow();
        resolve();
      }, timeoutMs - reserve);
    });
    try {
      await Promise.race([running.stop(), forced]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** @internal */
  servingChanged(on: boolean, period: number): void {
    if (on) this.emit('servingStarted', { period, listeners: this.addresses() });
    else this.emit('servingEnded', { period });
  }
}

/** Builds events only while the application listens to one (`active`, kept by MqttBroker). */
class EventsObserver implements NodeObserver {
  active = false;

  constructor(private readonly broker: MqttBroker) {}

  applied(cmd: Command, out: readonly Effect[], leaving: string | null, clientIdOf: (conn: ConnId) => string | null): void {
    try {
      this.emitFor(cmd, out, leaving, clientIdOf);
    } catch (err) {
      // A listener's throw must not stop apply; it is the application's bug, reported as Node reports one.
      process.nextTick(() => {
        throw err;
      });
    }
  }

  private emitPublished(cmd: PublishCommand, out: readonly Effect[], clientIdOf: (conn: ConnId) => string | null): void {
    if (cmd.quotaExceeded === true) return;
    if (cmd.pid !== undefined) {
      const type = cmd.msg.qos === 1 ? 'puback' : 'pubrec';
      const pid = cmd.pid;
      const ack = packetFor(out, cmd.conn, type, (p) => p.pid === pid);
      if (ack !== null && ack.code >= 0x80) return;
    }
    this.published(cmd.conn, cmd.msg, clientIdOf);
  }

  private emitFor(cmd: Command, out: readonly Effect[], leaving: string | null, clientIdOf: (conn: ConnId) => string | null): void {
    switch (cmd.t) {
      case 'connect': {
        const ack = packetFor(out, cmd.conn, 'connack');
        const clientId = clientIdOf(cmd.conn);
        if (ack === null || ack.code !== 0 || clientId === null) return;
        this.broker.emit('clientConnected', {
          clientId,
          username: cmd.username,
          protocolVersion: cmd.protocol,
          sessionPresent: ack.sessionPresent,
        });
        return;
      }
      case 'disconnect':
        if (leaving !== null) this.broker.emit('clientDisconnected', { clientId: leaving, reasonCode: cmd.reason });
        return;
      case 'subscribe': {
        const ack = packetFor(out, cmd.conn, 'suback');
        const clientId = clientIdOf(cmd.conn);
        if (ack === null || clientId === null) return;
        this.broker.emit('subscribed', {
          clientId,
          subscriptions: cmd.subs.map((s, i) => ({ filter: s.filter, qos: s.qos, reasonCode: ack.codes[i] ?? 0x80 })),
        });
        return;
      }
      case 'publish':
        this.emitPublished(cmd, out, clientIdOf);
        return;
      case 'publishes':
        for (let i = 0; i < cmd.pubs.length; i++) {
          const p = cmd.pubs[i] as PublishCommand | PubrelCommand;
          if (p.t === 'publish') this.emitPublished(p, out, clientIdOf);
        }
        return;
      default:
        return;
    }
  }

  routed(from: ConnId, msg: Message, clientIdOf: (conn: ConnId) => string | null): void {
    try {
      this.published(from, msg, clientIdOf);
    } catch (err) {
      process.nextTick(() => {
        throw err;
      });
    }
  }

  private published(conn: ConnId, msg: Message, clientIdOf: (conn: ConnId) => string | null): void {
    const clientId = clientIdOf(conn);
    if (clientId === null) return;
    const p = msg.payload;
    this.broker.emit('published', {
      clientId,
      topic: msg.topic,
      payload: Buffer.from(p.buffer, p.byteOffset, p.byteLength),
      qos: msg.qos,
      retain: msg.retain,
    });
  }

  serving(on: boolean, period: number): void {
    this.broker.servingChanged(on, period);
  }
}

type Sent = Extract<Effect, { t: 'send' }>['packet'];

function packetFor<T extends Sent['type']>(
  out: readonly Effect[],
  conn: ConnId,
  type: T,
  which: (p: Sent & { type: T }) => boolean = () => true,
): (Sent & { type: T }) | null {
  for (let i = 0; i < out.length; i++) {
    const e = out[i] as Effect;
    if (e.t === 'send' && e.conn === conn && e.packet.type === type && which(e.packet as Sent & { type: T }))
      return e.packet as Sent & { type: T };
  }
  return null;
}
