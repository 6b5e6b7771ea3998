// What the scenarios share: options, the run context, and small helpers.
import { hrtime } from 'node:process';
import type { Version } from './client.js';
import type { Workers } from './pool.js';
import { CpuMeter } from './procstat.js';
import type { Target, TargetKind } from './targets.js';

export type Scenario = 'fleet' | 'fleet-failover' | 'connect-tls';
export const SCENARIOS: readonly Scenario[] = ['fleet', 'fleet-failover', 'connect-tls'];

export interface Options {
  scenario: Scenario;
  target: TargetKind;
  clients: number;
  workers: number;
  mqtt: Version;
  connectWindow: number;
  sessionExpiryS: number;
  keepaliveS: number;
  detect: 'rst' | 'keepalive';
  reconnectDeadlineS: number;
  ratePerDevice: number;
  cmdRate: number | null;
  warmupS: number;
  windowS: number;
  findMax: boolean;
  maxSteps: number;
  stepFactor: number;
  p99LimitMs: number;
  payloadBytes: number;
  raftmqArgs: string[];
  serverReference: boolean;
  /** Every raftmq node asks a local HTTP service about each CONNECT (auth-http.ts). */
  authHttp: boolean;
  outDir: string;
}

export type Row = Record<string, string | number | boolean | null>;

export interface Outcome {
  rows: Row[];
  /** Each names what went wrong, with the numbers; any makes the run exit non-zero. */
  failures: string[];
  notes: string[];
  details: Record<string, unknown>;
}

export interface Ctx {
  o: Options;
  workers: Workers;
  dir: string;
}

export const hr = (): bigint => hrtime.bigint();
export const msSince = (t0: bigint, t: bigint): number => Number(t - t0) / 1e6;
export const round = (v: number, digits = 1): number => Math.round(v * 10 ** digits) / 10 ** digits;

/** CPU of the load generator: this process and every worker. */
export function loadMeter(workers: Workers): CpuMeter {
  return new CpuMeter(() => [{ pid: process.pid, role: 'bench parent' }, ...workers.pids()]);
}

export function brokerMeter(target: Target): CpuMeter {
  return new CpuMeter(() => target.procs());
}

/** Per-worker share of a connect window shared by all workers. */
export function perWorker(window: number, workers: number): number {
  return Math.max(1, Math.floor(window / workers));
}

export function failureSummary(failures: Record<string, number>[]): string {
  const sum: Record<string, number> = {};
  for (const f of failures) for (const [k, v] of Object.entries(f)) sum[k] = (sum[k] ?? 0) + v;
  return Object.entries(sum)
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
}
