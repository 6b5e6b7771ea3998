// The soak's brokers: one raftmq process, or three as a cluster, each with Node's inspector on a
// loopback port of its own, through which the soak forces a full collection before it reads the
// node's heap from its own /metrics (nodejs_heap_size_used_bytes, process_resident_memory_bytes).
// The broker has no admin path that collects garbage, and adding one is not the soak's business;
// the inspector is the runtime's own debug path and needs no broker code.
import { once } from 'node:events';
import WebSocket from 'ws';
import { Cluster, ClusterNode } from '../../test/support/cluster.js';
import { httpGet } from '../../test/support/net.js';
import { sleep } from '../../test/support/wait.js';
import type { MemorySample } from './verdict.js';

/** The inspector on an ephemeral loopback port; its address is printed on stderr. */
const INSPECT_ENV = { NODE_OPTIONS: '--inspect=127.0.0.1:0' };
const INSPECTOR_URL = /Debugger listening on (ws:\/\/127\.0\.0\.1:\d+\/[0-9a-f-]+)/;
const START_TIMEOUT_MS = 20_000;
const GC_TIMEOUT_MS = 10_000;
const SCRAPE_TIMEOUT_MS = 5_000;

export interface SoakTarget {
  /** Every node process (one, or three). */
  nodes: ClusterNode[];
  /** The node the load goes to: the only one, or the serving leader. */
  serving: ClusterNode;
  stop(): Promise<void>;
}

/** Starts the brokers with `flags` (every node gets them). */
export async function startTarget(cluster: boolean, flags: string[]): Promise<SoakTarget> {
  if (!cluster) {
    const node = new ClusterNode(1, ['--host', '127.0.0.1', '--port', '0', '--health-port', '0', ...flags], {
      env: INSPECT_ENV,
      keepLogs: false,
    });
    try {
      await node.start(START_TIMEOUT_MS);
      // 'listening' comes before 'health listening', and sets mqttPort (logs are not kept).
      if (node.mqttPort === 0) throw new Error('node 1: no MQTT port logged before its health port');
    } catch (err) {
      await node.stop();
      throw err;
    }
    return { nodes: [node], serving: node, stop: () => node.stop() };
  }
  const c = await Cluster.start({ env: () => INSPECT_ENV, keepLogs: false, extra: () => flags }, START_TIMEOUT_MS);
  try {
    const serving = await c.serving(START_TIMEOUT_MS);
    return { nodes: c.nodes, serving, stop: () => c.dispose() };
  } catch (err) {
    await c.dispose();
    throw err;
  }
}

/** The inspector's WebSocket address of the node's current process (printed right at its start). */
async function inspectorUrl(node: ClusterNode): Promise<string> {
  for (let i = 0; i < 100; i++) {
    const m = INSPECTOR_URL.exec(node.stderr);
    if (m !== null) return m[1]!;
    await sleep(50);
  }
  throw new Error(`node ${node.id}: no inspector address on stderr`);
}

/** A full, synchronous collection of the node's heap (HeapProfiler.collectGarbage), bounded. */
export async function forceGc(node: ClusterNode): Promise<void> {
  const ws = new WebSocket(await inspectorUrl(node));
  const timer = setTimeout(() => ws.terminate(), GC_TIMEOUT_MS);
  try {
    await once(ws, 'open');
    const answered = new Promise<void>((resolve, reject) => {
      ws.on('message', (data) => {
        const m = JSON.parse(String(data)) as { id?: number; error?: { message: string } };
        if (m.id !== 1) return;
        if (m.error !== undefined) reject(new Error(`node ${node.id}: collectGarbage: ${m.error.message}`));
        else resolve();
      });
      ws.once('close', () => reject(new Error(`node ${node.id}: inspector closed before collectGarbage answered`)));
    });
    ws.send(JSON.stringify({ id: 1, method: 'HeapProfiler.collectGarbage' }));
    await answered;
  } finally {
    clearTimeout(timer);
    ws.close();
  }
}

/** One series of Prometheus text, without labels; NaN when absent. */
function series(text: string, name: string): number {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  return m === null ? Number.NaN : Number(m[1]);
}

/** Forces a collection (unless `gc` is false), then reads heap, RSS and queued messages from the
 * node's /metrics. */
export async function sample(node: ClusterNode, minute: number, gc: boolean): Promise<MemorySample> {
  if (gc) await forceGc(node);
  const r = await httpGet(node.healthPort, '/metrics', SCRAPE_TIMEOUT_MS);
  if (r.code !== 200) throw new Error(`node ${node.id}: /metrics answered ${r.code}`);
  const heapUsedBytes = series(r.text, 'nodejs_heap_size_used_bytes');
  const rssBytes = series(r.text, 'process_resident_memory_bytes');
  if (!Number.isFinite(heapUsedBytes) || !Number.isFinite(rssBytes)) throw new Error(`node ${node.id}: /metrics lacks heap or RSS`);
  const spaces: Record<string, number> = {};
  for (const m of r.text.matchAll(/^nodejs_heap_space_size_used_bytes\{space="([a-z_]+)"\} (\S+)$/gm)) spaces[m[1]!] = Number(m[2]);
  return {
    minute,
    node: node.id,
    heapUsedBytes,
    rssBytes,
    queuedMessages: series(r.text, 'raftmq_queued_messages'),
    afterForcedGc: gc,
    spaces,
  };
}

/** How the node's current process ended, or null while it runs. */
export function endOf(node: ClusterNode): string | null {
  if (node.alive) return null;
  const p = node.proc;
  return p.signalCode !== null ? `signal ${p.signalCode}` : `exit ${p.exitCode}`;
}
