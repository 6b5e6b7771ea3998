// Helpers of the scale-out tests: client ids of a chosen shard, one CONNECT and its answer, and the
// shard a connected client is served by ($SYS/broker/shard).
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import { Placement } from '../../src/scale/placement.js';
import { LOOPBACK } from './net.js';

/** Candidates tried per wanted id; a shard of K owns about 1/K of them. */
const ID_TRIES_MAX = 10_000;

/** `n` distinct client ids (prefix-0, prefix-1, …, skipping others) that belong to `shard`. */
export function idsOf(shards: readonly string[], shard: string, n: number, prefix = 'dev'): string[] {
  const p = new Placement(shards);
  const out: string[] = [];
  for (let i = 0; i < ID_TRIES_MAX && out.length < n; i++) if (p.owner(`${prefix}-${i}`) === shard) out.push(`${prefix}-${i}`);
  if (out.length < n) throw new Error(`only ${out.length} ids of shard ${shard} among ${ID_TRIES_MAX}`);
  return out;
}

export interface Answer {
  /** The connected client, when the CONNACK was a success (the caller ends it). */
  client: MqttClient | null;
  code: number;
  reference: string | undefined;
  reason: string | undefined;
  assigned: string | undefined;
}

const ANSWER_MS = 8_000;

/** One CONNECT (no reconnect), resolved with its CONNACK; a close before one rejects. */
export function connectOnce(port: number, opts: IClientOptions): Promise<Answer> {
  const client = mqtt.connect({ host: LOOPBACK, port, reconnectPeriod: 0, connectTimeout: ANSWER_MS, ...opts });
  client.on('error', () => {});
  return new Promise<Answer>((resolve, reject) => {
    const timer = setTimeout(() => {
      client.end(true);
      reject(new Error(`no CONNACK from port ${port} within ${ANSWER_MS} ms`));
    }, ANSWER_MS);
    client.once('packetreceive', (p) => {
      if (p.cmd !== 'connack') return;
      clearTimeout(timer);
      const code = p.reasonCode ?? p.returnCode ?? -1;
      if (code !== 0) client.end(true);
      resolve({
        client: code === 0 ? client : null,
        code,
        reference: p.properties?.serverReference,
        reason: p.properties?.reasonString,
        assigned: p.properties?.assignedClientIdentifier,
      });
    });
    client.once('close', () => {
      clearTimeout(timer);
      reject(new Error(`port ${port} closed before a CONNACK`));
    });
  });
}

/** The shard that serves `client`, as its $SYS/broker/shard says (needs --sys-interval > 0). */
export function servedBy(client: MqttClient, timeoutMs = ANSWER_MS): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no $SYS/broker/shard within ${timeoutMs} ms`)), timeoutMs);
    client.on('message', (topic, payload) => {
      if (topic !== '$SYS/broker/shard') return;
      clearTimeout(timer);
      resolve(payload.toString());
    });
    client.subscribe('$SYS/broker/shard', { qos: 0 });
  });
}
