/** Raft messages and log entries. Every message carries the sender's term (§5.1: a node that sees a
 * higher term adopts it; a lower one marks the message stale), and the identity of docs/design.md
 * "Identity": cluster id, epoch, the sender's member and the member it is meant for. RaftCore.step
 * checks the identity in one place before any handler runs. */
import type { Configuration, Membership } from './membership.js';

/** One log entry. `data` is null for the empty entry a new leader appends in its own term (§5.4.2,
 * §8); the application skips it. Entries are immutable once created: logs and messages share them.
 * `time` is cluster time (integer ms since the Unix epoch), stamped by the leader once per append
 * and never decreasing along the log (docs/design.md "Cluster time"); apply reads time from nowhere else. */
export interface LogEntry {
  readonly index: number;
  readonly term: number;
  readonly time: number;
  readonly data: Uint8Array | null;
  /** Set on a configuration entry (data null): the voters from this index on, committed or not
   * (docs/design.md "Configuration"). */
  readonly config?: Configuration;
}

export interface Envelope {
  readonly from: number;
  readonly to: number;
  readonly term: number;
  readonly cluster: string;
  /** The sender's epoch (generation and id); 0 and '' before it has one. */
  readonly epoch: number;
  readonly epochId: string;
  /** The sender's incarnation. */
  readonly fromInc: string;
  /** The incarnation of `to` this is meant for; '' for anyone (an announcement). A message for
   * another incarnation of this node id is not this member's business. */
  readonly toInc: string;
}

/** The envelope fields the core fills in as it sends. */
export type Identity = 'cluster' | 'epoch' | 'epochId' | 'fromInc' | 'toInc';

/** Pre-vote (Ongaro's thesis §9.6) asks "would you vote for me at `term`?" without anyone adopting
 * that term; `term` is the candidate's term + 1. */
export interface PreVoteRequest extends Envelope {
  readonly type: 'pre-vote-request';
  readonly lastIndex: number;
  readonly lastTerm: number;
}

/** Granted: `term` is the request's term. Rejected: the responder's own term. */
export interface PreVoteResponse extends Envelope {
  readonly type: 'pre-vote-response';
  readonly granted: boolean;
}

/** `transfer`: sent by the target of a leadership transfer (thesis §3.10), whose old leader gave up
 * its lease before TimeoutNow; only such a request overrides the vote-ignoring rule. `sentAt` is the
 * candidate's monotonic ms, echoed with the voter's wall clock: a new leader starts its term with
 * clock samples (docs/design.md "Cluster time"). */
export interface VoteRequest extends Envelope {
  readonly type: 'vote-request';
  readonly lastIndex: number;
  readonly lastTerm: number;
  readonly transfer: boolean;
  readonly sentAt: number;
}

export interface VoteResponse extends Envelope {
  readonly type: 'vote-response';
  readonly granted: boolean;
  /** The request's sentAt, echoed. */
  readonly sentAt: number;
  /** The voter's wall clock when it answered, ms since the Unix epoch. */
  readonly wall: number;
}

/** AppendEntries (§5.3). `entries` hold indexes prevIndex+1 .. prevIndex+entries.length. */
export interface Append extends Envelope {
  readonly type: 'append';
  readonly prevIndex: number;
  readonly prevTerm: number;
  readonly entries: readonly LogEntry[];
  /** Leader's commit index. */
  readonly commit: number;
  /** Leader's monotonic ms when it sent this round; the lease runs from it (docs/design.md "Leases and votes"). */
  readonly sentAt: number;
}

/** success: `index` is the last index known to match the leader (prevIndex + entries). Rejected:
 * `index` is the rejected prevIndex and `hint` the highest index at which the follower's log might
 * still match (its last index, lowered past entries of terms above the probe's prevTerm). */
export interface AppendResponse extends Envelope {
  readonly type: 'append-response';
  readonly success: boolean;
  readonly index: number;
  readonly hint: number;
  /** The append's sentAt, echoed (0 in an answer to a stale append). */
  readonly sentAt: number;
}

/** Sent every E/5. `commit` is min(leader commit, the follower's match), so a follower never
 * commits past what it is known to share with the leader. */
export interface Heartbeat extends Envelope {
  readonly type: 'heartbeat';
  readonly commit: number;
  /** Leader's monotonic ms when it sent this round. */
  readonly sentAt: number;
}

/** Carries the follower's wall clock; the leader places it at the midpoint of the round trip in
 * its own monotonic frame (docs/design.md "Cluster time"). */
export interface HeartbeatResponse extends Envelope {
  readonly type: 'heartbeat-response';
  /** The heartbeat's sentAt, echoed. */
  readonly sentAt: number;
  /** The follower's wall clock when it answered, ms since the Unix epoch. */
  readonly wall: number;
}

/** Leadership transfer (thesis §3.10): the leader, having brought the target up to date and given
 * up its lease, tells it to campaign at once. */
export interface TimeoutNow extends Envelope {
  readonly type: 'timeout-now';
}

/** InstallSnapshot (§7), one chunk per message: the leader sends chunk `seq` of `chunks` of the
 * snapshot whose last entry is (`index`, `lastTerm`), to a follower whose next entry it has
 * compacted away. One chunk is in flight per follower, so a transfer is sliced into one message per
 * event-loop turn, and heartbeats never wait behind more than one chunk. */
export interface InstallSnapshot extends Envelope {
  readonly type: 'snapshot';
  readonly index: number;
  readonly lastTerm: number;
  /** Cluster time of the entry at `index`. */
  readonly time: number;
  /** The newest configuration at or below `index`; null: the log had none. */
  readonly config: Configuration | null;
  readonly seq: number;
  readonly chunks: number;
  readonly data: Uint8Array;
  /** Leader's monotonic ms when it sent this chunk (the lease counts the answer like an append's). */
  readonly sentAt: number;
}

/** `received`: chunks of the snapshot at `index` the follower holds, in order from 0; equal to the
 * chunk count once it is installed (or the follower had committed past it), and then `match` is
 * the follower's commit index, which the leader may take as its matchIndex. */
export interface SnapshotResponse extends Envelope {
  readonly type: 'snapshot-response';
  readonly index: number;
  readonly received: number;
  readonly match: number;
  /** The chunk's sentAt, echoed. */
  readonly sentAt: number;
}

/** Sent every E/5 by a node that is not a voter of its own configuration, or has heard no leader
 * for E: a leader learns a learner to replicate to, the lowest node id learns whether it may
 * bootstrap (docs/design.md "Fresh, amnesiac, bootstrap"), and everyone learns whether the cluster can
 * still elect anyone. */
export interface Announce extends Envelope {
  readonly type: 'announce';
  readonly membership: Membership;
  /** Digest of the configured node list (--cluster-peers); bootstrap needs all three equal. */
  readonly peers: string;
  readonly lastIndex: number;
  readonly lastTerm: number;
  /** The sender is a voter of the newest configuration it holds. */
  readonly voter: boolean;
  /** The sender judged that no configuration it knows can elect a leader again. */
  readonly stuck: boolean;
  /** The leader the sender follows (itself if it leads); 0: none. A force-start refuses while a
   * peer shows a leader in the old epoch (docs/design.md "Force-start"). */
  readonly leader: number;
  /** Node ids that are voters in the sender's newest committed configuration, when it leads; 0
   * otherwise. A member of an older epoch switches to the sender's once this is at least two. */
  readonly committedVoters: number;
}

export type Message =
  | PreVoteRequest
  | PreVoteResponse
  | VoteRequest
  | VoteResponse
  | Append
  | AppendResponse
  | Heartbeat
  | HeartbeatResponse
  | TimeoutNow
  | Announce
  | InstallSnapshot
  | SnapshotResponse;

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** A message as a handler builds it; send() adds the identity. */
export type Outgoing = DistributiveOmit<Message, Identity>;

export type MessageType = Message['type'];
export const messageTypes: readonly MessageType[] = [
  'pre-vote-request',
  'pre-vote-response',
  'vote-request',
  'vote-response',
  'append',
  'append-response',
  'heartbeat',
  'heartbeat-response',
  'timeout-now',
  'announce',
  'snapshot',
  'snapshot-response',
];

export function isVoteRequest(m: Message): m is PreVoteRequest | VoteRequest {
  return m.type === 'pre-vote-request' || m.type === 'vote-request';
}
