// MQTT.js clients against a Cluster: connect without automatic reconnects, collect what
// arrives, and kill the serving leader while timing the failover.
import mqtt, { type IClientOptions, type MqttClient } from 'mqtt';
import type { Cluster, ClusterNode } from './support/cluster.js';
import { LOOPBACK } from './support/net.js';

/** Connects without automatic reconnects; resolves on CONNACK with the session-present flag. */
export function connect(port: number, opts: IClientOptions, timeoutMs = 5_000): Promise<{ client: MqttClient; sessionPresent: boolean }> {
  const client = mqtt.connect({ host: LOOPBACK, port, reconnectPeriod: 0, connectTimeout: timeoutMs, ...opts });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      client.end(true);
      reject(new Error(`no CONNACK from port ${port} within ${timeoutMs} ms`));
    }, timeoutMs);
    client.once('connect', (ack) => {
      clearTimeout(timer);
      resolve({ client, sessionPresent: ack.sessionPresent });
    });
    client.once('error', (err) => {
      clearTimeout(timer);
      client.end(true);
      reject(err);
    });
  });
}

/** Collects payloads by text as they arrive; attach before CONNACK so no redelivery is missed. */
export function collect(client: MqttClient): string[] {
  const got: string[] = [];
  client.on('message', (_topic, payload) => got.push(payload.toString()));
  return got;
}

/** Kills the leader with SIGKILL and measures until a client's CONNACK on the new serving leader. */
export async function killLeader(cluster: Cluster, leader: ClusterNode, waitMs: number): Promise<{ next: ClusterNode; ms: number }> {
  const survivors = cluster.nodes.filter((n) => n !== leader);
  const t0 = performance.now();
  leader.signal('SIGKILL');
  await leader.exited(5_000);
  const deadline = t0 + waitMs;
  for (;;) {
    const next = await cluster.serving(Math.max(1, deadline - performance.now()), survivors);
    try {
      const { client } = await connect(next.mqttPort, { clientId: `probe-${next.id}`, clean: true }, 1_000);
      const ms = Math.round(performance.now() - t0);
      client.end(true);
      return { next, ms };
    } catch (err) {
      if (performance.now() > deadline) throw err;
    }
  }
}
