/** The Raft library's error registry: stable codes that callers and tests compare, never the
 * message text. docs/raft.md lists every code; raft/core/errors.test.ts keeps the two in sync. */
export const RaftErrorCodes = {
  /** An invariant of the core or the simulator's model was broken: a bug, never bad input. */
  RAFT_INVARIANT: 'raft invariant broken',
  /** A message from outside failed validation (shape, ranges, entry order); it changed nothing. */
  RAFT_BAD_MESSAGE: 'malformed raft message',
  /** A message names a sender or receiver that is not a voter of this node's configuration. */
  RAFT_UNKNOWN_PEER: 'raft message from or to an unknown node',
  /** A message from another cluster or epoch (docs/design.md "Identity"); it changed nothing. */
  RAFT_FOREIGN_MESSAGE: 'raft message from another cluster or epoch',
  /** A message meant for another incarnation of this node id; it changed nothing. */
  RAFT_OTHER_MEMBER: 'raft message for another incarnation',
  /** propose() on a node that is not the leader. */
  RAFT_NOT_LEADER: 'not the raft leader',
  /** propose() would take the uncommitted tail of the log over its bound. */
  RAFT_PROPOSALS_FULL: 'too many uncommitted raft entries',
  /** transferLeadership() to itself, to a node that is not a voter, or while a transfer runs. */
  RAFT_BAD_TRANSFER: 'bad leadership transfer',
  /** propose() while the leader hands leadership over (thesis §3.10: proposals stop). */
  RAFT_TRANSFERRING: 'raft leadership transfer in progress',
  /** compact() at an index not above the current snapshot's, or above what was applied. */
  RAFT_SNAPSHOT_STALE: 'stale raft snapshot',
  /** propose() on a force-started leader before two node ids are voters in its epoch
   * (docs/design.md "Force-start": the new epoch serves only then). */
  RAFT_NOT_SERVING: 'force-started epoch does not serve yet',
  /** Options given to the core or the simulator are out of range. */
  RAFT_BAD_OPTIONS: 'bad raft options',
  /** The simulator found a run that breaks a safety or liveness property. */
  RAFT_SIM_VIOLATION: 'raft simulation found a violation',
  /** A scenario script line could not be parsed or names an unknown node. */
  RAFT_SCENARIO_BAD_COMMAND: 'bad raft scenario command',
} as const;

export type RaftErrorCode = keyof typeof RaftErrorCodes;

export class RaftError extends Error {
  readonly code: RaftErrorCode;

  constructor(code: RaftErrorCode, detail: string) {
    super(`${RaftErrorCodes[code]}: ${detail}`);
    this.name = 'RaftError';
    this.code = code;
  }
}
