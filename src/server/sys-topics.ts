// The $SYS topics (docs/operations.md "$SYS topics"): what the serving node says about itself, under
// Mosquitto's names for the common ones, kept in a local table of retained values. Nothing here is
// replicated: every value is this process's own (counters start at 0 with it), the table is
// consulted when a subscription to $SYS is granted, and changed values are routed to live
// subscribers without a log entry. Pure: readings come in, messages go out.
import { Buffer } from 'node:buffer';
import type { Message } from '../broker/commands.js';
import { RetainedTrie } from '../broker/retained-trie.js';

/** What one update reads from the node. Counters only grow; the load averages are their rates. */
export interface SysReadings {
  uptimeS: number;
  connected: number;
  disconnected: number;
  maximum: number;
  /** MQTT packets of any type. */
  packetsIn: number;
  packetsOut: number;
  publishIn: number;
  publishOut: number;
  publishDropped: number;
  bytesIn: number;
  bytesOut: number;
  connections: number;
  subscriptions: number;
  retained: number;
  heapBytes: number;
  /** A cluster node's raft view; absent on a single node. */
  cluster?: { role: string; leader: number; term: number; redundant: boolean };
  /** Each configured bridge (docs/bridges.md): connected to its remote or not; absent: none. */
  bridges?: readonly { name: string; up: boolean }[];
  /** --shard: this node's shard (docs/scale-out.md); absent: not sharded. */
  shard?: string;
}

/** Mosquitto's load periods: exponentially weighted averages of the per-minute rate. */
const LOAD_PERIODS = [
  ['1min', 60],
  ['5min', 300],
  ['15min', 900],
] as const;

/** Counters with $SYS/broker/load/{name}/{period} averages, as Mosquitto names them. */
const LOADS = [
  ['messages/received', (r: SysReadings) => r.packetsIn],
  ['messages/sent', (r: SysReadings) => r.packetsOut],
  ['publish/received', (r: SysReadings) => r.publishIn],
  ['publish/sent', (r: SysReadings) => r.publishOut],
  ['publish/dropped', (r: SysReadings) => r.publishDropped],
  ['bytes/received', (r: SysReadings) => r.bytesIn],
  ['bytes/sent', (r: SysReadings) => r.bytesOut],
  ['connections', (r: SysReadings) => r.connections],
] as const;

export const SYS_PREFIX = '$SYS/broker/';

/** Whether `filter` can match a $SYS topic: its first level is `$SYS` itself, since `+` and `#`
 * there never match a topic starting with `$` [MQTT-4.7.2-1]. A shared subscription gets no
 * retained messages (§4.8.2), so only plain filters count. */
export function filterReachesSys(filter: string): boolean {
  return filter === '$SYS' || filter.startsWith('$SYS/');
}

export class SysTopics {
  private readonly table = new RetainedTrie<Message>();
  private readonly version: string;
  /** Counter values at the previous update and the averages, by load name and period. */
  private readonly lastCounts = new Map<string, number>();
  private readonly loads = new Map<string, number>();
  private lastUptimeS: number | null = null;

  constructor(version: string) {
    this.version = version;
  }

  /** Updates the table from `r`; returns the messages whose payload changed (the first update:
   * all of them), in topic order, for the caller to route to live subscribers. */
  update(r: SysReadings): Message[] {
    const values = this.values(r);
    const changed: Message[] = [];
    for (const [topic, text] of values) {
      const old = this.table.get(topic);
      if (old !== undefined && Buffer.from(old.payload).toString('utf8') === text) continue;
      const msg: Message = { topic, payload: Buffer.from(text, 'utf8'), qos: 0, retain: true };
      this.table.set(topic, msg);
      changed.push(msg);
    }
    return changed.sort((a, b) => (a.topic < b.topic ? -1 : a.topic > b.topic ? 1 : 0));
  }

  /** Calls fn for each stored message whose topic `filter` matches. */
  match(filter: string, fn: (topic: string, msg: Message) => void): void {
    this.table.match(filter, fn);
  }

  get size(): number {
    return this.table.size;
  }

  private values(r: SysReadings): [string, string][] {
    const p = SYS_PREFIX;
    const out: [string, string][] = [
      [`${p}version`, `raftmq version ${this.version}`],
      [`${p}uptime`, `${Math.floor(r.uptimeS)} seconds`],
      [`${p}clients/connected`, String(r.connected)],
      [`${p}clients/active`, String(r.connected)],
      [`${p}clients/disconnected`, String(r.disconnected)],
      [`${p}clients/inactive`, String(r.disconnected)],
      [`${p}clients/total`, String(r.connected + r.disconnected)],
      [`${p}clients/maximum`, String(r.maximum)],
      [`${p}messages/received`, String(r.packetsIn)],
      [`${p}messages/sent`, String(r.packetsOut)],
      [`${p}publish/messages/received`, String(r.publishIn)],
      [`${p}publish/messages/sent`, String(r.publishOut)],
      [`${p}publish/messages/dropped`, String(r.publishDropped)],
      [`${p}bytes/received`, String(r.bytesIn)],
      [`${p}bytes/sent`, String(r.bytesOut)],
      [`${p}subscriptions/count`, String(r.subscriptions)],
      [`${p}retained messages/count`, String(r.retained)],
      [`${p}heap/current`, String(r.heapBytes)],
    ];
    this.updateLoads(r);
    for (const [name] of LOADS) {
      for (const [period] of LOAD_PERIODS) out.push([`${p}load/${name}/${period}`, (this.loads.get(`${name}/${period}`) ?? 0).toFixed(2)]);
    }
    if (r.cluster !== undefined) {
      out.push(
        [`${p}cluster/role`, r.cluster.role],
        [`${p}cluster/leader`, String(r.cluster.leader)],
        [`${p}cluster/term`, String(r.cluster.term)],
        [`${p}cluster/redundant`, r.cluster.redundant ? 'true' : 'false'],
      );
    }
    // Mosquitto's bridge state: 1 while the bridge's connection to its remote is up, else 0.
    for (const b of r.bridges ?? []) out.push([`${p}connection/${b.name}/state`, b.up ? '1' : '0']);
    if (r.shard !== undefined) out.push([`${p}shard`, r.shard]);
    return out;
  }

  /** Mosquitto's load: per update, the counter's rate per minute since the previous update, folded
   * into each period's average with weight 1 - exp(-interval / period). */
  private updateLoads(r: SysReadings): void {
    const last = this.lastUptimeS;
    this.lastUptimeS = r.uptimeS;
    const interval = last === null ? 0 : r.uptimeS - last;
    for (const [name, read] of LOADS) {
      const count = read(r);
      const before = this.lastCounts.get(name);
      this.lastCounts.set(name, count);
      if (before === undefined || interval <= 0) continue;
      const perMinute = (Math.max(0, count - before) * 60) / interval;
      for (const [period, seconds] of LOAD_PERIODS) {
        const key = `${name}/${period}`;
        const w = Math.exp(-interval / seconds);
        this.loads.set(key, (this.loads.get(key) ?? 0) * w + perMinute * (1 - w));
      }
    }
  }
}
