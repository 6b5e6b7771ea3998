// What the parent and the load workers say to each other over the fork IPC channel (advanced
// serialization: bigints and typed arrays cross as they are).
import type { Endpoint, Version } from './client.js';
import type { HistData } from './histogram.js';

export interface Request {
  seq: number;
  cmd: string;
  args: unknown;
}

export interface Reply {
  seq: number;
  ok: boolean;
  result?: unknown;
  error?: string;
}

export interface ConnectArgs {
  ids: number[];
  /** Client ids are prefix + index (`dev-` for devices). */
  prefix: string;
  endpoint: Endpoint;
  /** Index of `endpoint` in `endpoints`: where a device starts its round of the nodes. */
  nodeIndex: number;
  endpoints: Endpoint[];
  ca: string | null;
  version: Version;
  clean: boolean;
  sessionExpiryS: number;
  keepaliveS: number;
  window: number;
  /** Devices subscribe to devices/<i>/cmd (QoS 1); plain connections don't. */
  device: boolean;
  timeoutMs: number;
}

export interface ConnectReply {
  connected: number;
  failures: Record<string, number>;
  firstFailure: string;
  failedIds: number[];
  sessionPresent: number;
  firstStartNs: bigint;
  lastConnackNs: bigint;
}

export interface ArmArgs {
  mode: 'rst' | 'keepalive';
  backoffMinMs: number;
  backoffMaxMs: number;
  deadlineMs: number;
  attemptTimeoutMs: number;
  resubscribe: boolean;
}

export interface FailoverStatus {
  ids: Int32Array;
  /** hrtime ns of the latest CONNACK after the loss (0n: not back). */
  backAtNs: BigInt64Array;
  /** hrtime ns at which the client decided its link was dead (0n: never). */
  lostAtNs: BigInt64Array;
  /** -1: not back, else the session-present flag of that CONNACK. */
  sessionPresent: Int8Array;
  attempts: number;
  refused: number;
  closedBeforeConnack: number;
  timedOut: number;
  rcRefused: number;
  /** CONNACKs that named another node (MQTT 5 Server Reference), which the device tried next at once. */
  referred: number;
  gaveUp: number;
  lostAgain: number;
  /** Connection losses the devices noticed (each starts a reconnect). */
  losses: number;
  /** Devices connected now. */
  up: number;
  resubscribed: number;
  resubscribeFailed: number;
  pendingResubscribe: number;
}

export interface CmdCheck {
  received: number;
  duplicates: number;
  missingSample: number[];
  missing: number;
  latency: HistData;
}

export interface PublishArgs {
  endpoint: Endpoint;
  ca: string | null;
  ids: number[];
  window: number;
  payloadBytes: number;
  timeoutMs: number;
}

export interface ConsumersArgs {
  endpoint: Endpoint;
  ca: string | null;
  names: string[];
  filter: string;
  clients: number;
  keepaliveS: number;
}

export interface FleetStartArgs {
  /** Device ids are 0..clients-1. */
  clients: number;
  ratePerDevice: number;
  winStartNs: bigint;
  winEndNs: bigint;
  payloadBytes: number;
  /** Only on one worker: the command backend. */
  commands: { endpoint: Endpoint; ca: string | null; ids: number[]; rate: number } | null;
}

export interface FleetProgress {
  inflight: number;
  telemetryReceived: number;
  publishersDone: boolean;
}

export interface FleetCollect {
  sent: Uint32Array;
  received: Uint32Array;
  latency: HistData;
  cmdSent: number;
  cmdReceived: number;
  cmdLatency: HistData;
  skippedInflight: number;
  skippedDown: number;
  cmdSkipped: number;
  maxBehindMs: number;
  /** The worker's event-loop delay over the step (monitorEventLoopDelay, 10 ms resolution). */
  loopDelayMaxMs: number;
  loopDelayP99Ms: number;
  /** Telemetry publishes the broker never acknowledged (still unacked at collection). */
  unacked: number;
  /** Commands not acknowledged: in flight or still queued in the command backend. */
  cmdUnacked: number;
  connLost: number;
  consumerLost: number;
}
