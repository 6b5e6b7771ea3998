/** Raft messages and log entries. Every message carries the sender's term (§5.1: a node that sees a
 * higher term adopts it; a lower one marks the message stale). The envelope is where part 3 adds
 * cluster id, epoch and the sender's member (node id + incarnation): every handler reads the
 * envelope through `from` and `term` only, so the added fields are checked in one place. */

/** One log entry. `data` is null for the empty entry a new leader appends in its own term (§5.4.2,
 * §8); the application skips it. Entries are immutable once created: logs and messages share them. */
export interface LogEntry {
  readonly index: number;
  readonly term: number;
  readonly data: Uint8Array | null;
}

export interface Envelope {
  readonly from: number;
  readonly to: number;
  readonly term: number;
}

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

export interface VoteRequest extends Envelope {
  readonly type: 'vote-request';
  readonly lastIndex: number;
  readonly lastTerm: number;
}

export interface VoteResponse extends Envelope {
  readonly type: 'vote-response';
  readonly granted: boolean;
}

/** AppendEntries (§5.3). `entries` hold indexes prevIndex+1 .. prevIndex+entries.length. */
export interface Append extends Envelope {
  readonly type: 'append';
  readonly prevIndex: number;
  readonly prevTerm: number;
  readonly entries: readonly LogEntry[];
  /** Leader's commit index. */
  readonly commit: number;
}

/** success: `index` is the last index known to match the leader (prevIndex + entries). Rejected:
 * `index` is the rejected prevIndex and `hint` the highest index at which the follower's log might
 * still match (its last index, lowered past entries of terms above the probe's prevTerm). */
export interface AppendResponse extends Envelope {
  readonly type: 'append-response';
  readonly success: boolean;
  readonly index: number;
  readonly hint: number;
}

/** Sent every E/5. `commit` is min(leader commit, the follower's match), so a follower never
 * commits past what it is known to share with the leader. */
export interface Heartbeat extends Envelope {
  readonly type: 'heartbeat';
  readonly commit: number;
}

export interface HeartbeatResponse extends Envelope {
  readonly type: 'heartbeat-response';
}

export type Message =
  | PreVoteRequest
  | PreVoteResponse
  | VoteRequest
  | VoteResponse
  | Append
  | AppendResponse
  | Heartbeat
  | HeartbeatResponse;

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
];

export function isVoteRequest(m: Message): m is PreVoteRequest | VoteRequest {
  return m.type === 'pre-vote-request' || m.type === 'vote-request';
}
