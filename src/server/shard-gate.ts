// The node's side of placement (docs/scale-out.md "Refusal at the wrong shard"): whether a client id
// is served on this shard, where a client of another shard is sent, and the id this shard assigns
// to a client that sent none. Consulted at CONNECT by the connection (src/server/connect-phase.ts)
// and, on a follower with --cluster-server-reference, by the referrer (src/server/referrer.ts),
// before anything else of the CONNECT is looked at: a client of another shard is never
// authenticated, admitted or given a session here. The counts are this process's own.
import { assignedIdHere, type Placement } from '../scale/placement.js';

export interface ShardGateOptions {
  shard: string;
  placement: Placement;
  /** --shard-address; null: refusals carry no Server Reference. */
  addresses: ReadonlyMap<string, string> | null;
}

export interface Referral {
  /** The shard the client id belongs to. */
  shard: string;
  /** Its address for the MQTT 5 Server Reference, or null when none is configured. */
  reference: string | null;
  /** The Reason String of the refusal. */
  reason: string;
}

export class ShardGate {
  readonly shard: string;
  /** CONNECTs refused since start, by the shard their client id belongs to (a label of /metrics:
   * the values are the configured names, a fixed set). */
  readonly refused = new Map<string, number>();
  /** Empty client ids for which no candidate belonged here (see assignedIdHere). */
  assignFailed = 0;

  constructor(private readonly opts: ShardGateOptions) {
    this.shard = opts.shard;
    for (const s of opts.placement.shards) if (s !== opts.shard) this.refused.set(s, 0);
  }

  /** Null when `clientId` (non-empty) is served here; where to send its client otherwise, counted. */
  referral(clientId: string): Referral | null {
    const owner = this.opts.placement.owner(clientId);
    if (owner === this.shard) return null;
    this.refused.set(owner, (this.refused.get(owner) ?? 0) + 1);
    return {
      shard: owner,
      reference: this.opts.addresses?.get(owner) ?? null,
      reason: `client id belongs to shard ${owner}`,
    };
  }

  /** The id to assign in place of `base` (the node's usual assigned id), one that belongs here; null
   * when the bounded search found none (counted). */
  assign(base: string): string | null {
    const id = assignedIdHere(base, this.shard, this.opts.placement);
    if (id === null) this.assignFailed++;
    return id;
  }
}
