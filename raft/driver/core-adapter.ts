// The one place where the driver touches the core's lease and cluster-time API (DESIGN.md "Leases
// and votes", "Cluster time"). Those methods arrive in the core with part 2's lease work; until the
// core has them this adapter reports "no lease" and "no cluster time" rather than inventing either:
// a lease guessed by the driver could let two nodes serve at once.
import type { RaftError } from '../errors.js';
import type { RaftCore } from '../core/raft.js';
import { DriverError } from './errors.js';

/** The lease and cluster-time methods the core will expose, by the names agreed for part 2. */
interface LeaseApi {
  hasLease(monotonic: number): boolean;
  leaseUntil(): number;
  clusterTime(monotonic: number): number;
  transferLeadership(to: number): RaftError | null;
}

export class CoreAdapter {
  private readonly lease: Partial<LeaseApi>;

  constructor(core: RaftCore) {
    this.lease = core as RaftCore & Partial<LeaseApi>;
  }

  /** Whether the core implements leases at all; false means hasLease() is always false. */
  get leasesSupported(): boolean {
    return typeof this.lease.hasLease === 'function';
  }

  hasLease(monotonic: number): boolean {
    return this.lease.hasLease?.(monotonic) ?? false;
  }

  /** Monotonic ms at which the current lease ends; null without a lease implementation. */
  leaseUntil(): number | null {
    return this.lease.leaseUntil?.() ?? null;
  }

  /** Cluster ms (DESIGN.md "Cluster time"); null without a cluster-time implementation. */
  clusterTime(monotonic: number): number | null {
    return this.lease.clusterTime?.(monotonic) ?? null;
  }

  /** Null when the transfer started; an error when the core refused it or cannot transfer. */
  transferLeadership(to: number): RaftError | DriverError | null {
    if (this.lease.transferLeadership === undefined) {
      return new DriverError('RAFT_DRIVER_UNSUPPORTED', 'this core has no transferLeadership()');
    }
    return this.lease.transferLeadership(to);
  }
}
