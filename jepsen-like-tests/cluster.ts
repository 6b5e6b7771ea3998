// The fault-injection harness's cluster: the shared launcher (test/support/cluster.ts) with a relay on
// every directed peer link. Node i listens for peers on L_i; its --cluster-peers names every other
// node j by the relay i→j, which forwards to L_j. Each process has its own audit file and every
// node appends its output to node-ID.log in the run's directory. A node id may be started again with
// the same flags after a kill or a SIGTERM (ClusterNode.start). Every signal goes to a PID the
// launcher spawned; every wait is bounded.
import { Prng } from '../raft/core/prng.js';
import { Cluster, type ClusterNode, livePids, NODE_IDS } from '../test/support/cluster.js';
import { freePort, httpGet, LOOPBACK } from '../test/support/net.js';
import { Relay } from './relay.js';

export type { NodeState, ProcessRun, RunEnd } from '../test/support/cluster.js';
export { freePort, httpGet, LOOPBACK, livePids, NODE_IDS };

export interface ClusterOptions {
  /** Path of the built raftmq CLI. */
  cli: string;
  dir: string;
  electionTimeoutMs: number;
  seed: number;
  /** Start-up of all three processes, in ms. */
  startTimeoutMs: number;
}

export class JepsenCluster {
  /** Relay of each directed link, keyed `${from}>${to}`. */
  readonly relays: Map<string, Relay>;

  private constructor(
    private readonly cluster: Cluster,
    relays: Map<string, Relay>,
  ) {
    this.relays = relays;
  }

  get nodes(): ClusterNode[] {
    return this.cluster.nodes;
  }

  static async start(o: ClusterOptions): Promise<JepsenCluster> {
    const random = new Prng(o.seed ^ 0x5eed);
    const relays = new Map<string, Relay>();
    let cluster: Cluster;
    try {
      cluster = await Cluster.start({
        cli: o.cli,
        dir: o.dir,
        electionTimeoutMs: o.electionTimeoutMs,
        startTimeoutMs: o.startTimeoutMs,
        stateFileName: (id) => `state-${id}`,
        // Sized so that no queue ever drops in a run (the checker assumes no admission drops).
        extra: () => ['--max-queued-messages', '1000000', '--max-queued-bytes', '1GiB'],
        link: async (from, to, listenPort) => {
          const r = new Relay(from, to, { host: LOOPBACK, port: listenPort }, random.fork());
          relays.set(`${from}>${to}`, r);
          return r.listen(LOOPBACK, 0);
        },
        logFiles: true,
        auditPerRun: true,
        keepLogs: false,
      });
    } catch (err) {
      await Promise.all([...relays.values()].map((r) => r.close()));
      throw err;
    }
    return new JepsenCluster(cluster, relays);
  }

  node(id: number): ClusterNode {
    return this.cluster.node(id);
  }

  /** The node answering /health 200 and listening, if exactly one does; as a load balancer sees it. */
  async servingNode(timeoutMs: number): Promise<ClusterNode | null> {
    const { serving } = await this.healthCheck(timeoutMs);
    return serving;
  }

  /** One health check of every node: the serving one (if exactly one), and the MQTT ports of the
   * nodes that failed the check. */
  async healthCheck(timeoutMs: number): Promise<{ serving: ClusterNode | null; downPorts: number[] }> {
    const codes = await Promise.all(this.nodes.map((n) => n.healthCode(timeoutMs)));
    const up = this.nodes.filter((n, i) => codes[i] === 200 && n.mqttPort !== 0);
    const downPorts = this.nodes.filter((n, i) => codes[i] !== 200 && n.mqttPort !== 0).map((n) => n.mqttPort);
    return { serving: up.length === 1 ? up[0]! : null, downPorts };
  }

  /** Whether a live node leads and says `redundant` on /health (only the leader knows). */
  async redundant(timeoutMs: number): Promise<boolean> {
    const bodies = await Promise.all(this.nodes.map((n) => n.healthBody(timeoutMs)));
    return bodies.some((b) => b !== null && b.role === 'leader' && b.redundant);
  }

  relay(from: number, to: number): Relay {
    const r = this.relays.get(`${from}>${to}`);
    if (r === undefined) throw new Error(`no relay ${from}>${to}`);
    return r;
  }

  healAll(): void {
    for (const r of this.relays.values()) r.heal();
  }

  async stop(timeoutMs: number): Promise<void> {
    await this.cluster.stop(timeoutMs);
    await Promise.all([...this.relays.values()].map((r) => r.close()));
  }
}
