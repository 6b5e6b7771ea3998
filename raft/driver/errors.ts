// Stable codes for what the driver and its node program report, in the style of raft/errors.ts and
// raft/transport/errors.ts: one registry per module, tests compare codes, never text;
// docs/errors.md lists every code.
export const DriverErrorCodes = {
  /** Options given to the driver are out of range. */
  RAFT_DRIVER_BAD_OPTIONS: 'bad raft driver options',
  /** A method was called in a state that does not allow it (start twice, propose after stop). */
  RAFT_DRIVER_STATE: 'raft driver not in a state for this',
  /** The core does not implement what was asked (leadership transfer before the lease work lands). */
  RAFT_DRIVER_UNSUPPORTED: 'not supported by this raft core',
  /** The node program was started with a bad flag or value; the message names the flag. */
  RAFT_DRIVER_BAD_ARGS: 'bad raft node arguments',
  /** A state file or membership record failed its checksum or shape; the message names the file. */
  RAFT_STATE_FILE_CORRUPT: 'raft state file is corrupt',
  /** A state file of another cluster or node id; the message names the file. */
  RAFT_STATE_FILE_FOREIGN: 'raft state file belongs to another cluster or node',
  /** A state file already consumed, or restored from an older copy (docs/design.md "State file"). */
  RAFT_STATE_FILE_CONSUMED: 'raft state file was already consumed',
  /** --cluster-force-start found neither the state file nor its consumed .prev copy. */
  RAFT_STATE_FILE_MISSING: 'no raft state file to force-start from',
  /** The force-start was refused (a peer shows a leader, a newer log or a newer epoch) or its
   * epoch found no second voter in time (docs/design.md "Force-start"). */
  RAFT_FORCE_START_FAILED: 'raft force-start failed',
  /** --data-dir holds a state and the state file beside it is newer (written by a start
   * without the data directory, or by another member): resuming either could roll back. */
  RAFT_STATE_FILE_NEWER: 'raft state file is newer than the data directory',
  /** Another live process holds the PID lock beside the state file. */
  RAFT_STATE_FILE_LOCKED: 'raft state file is locked by another process',
} as const;

export type DriverErrorCode = keyof typeof DriverErrorCodes;

export class DriverError extends Error {
  readonly code: DriverErrorCode;
  constructor(code: DriverErrorCode, detail: string) {
    super(`${DriverErrorCodes[code]}: ${detail}`);
    this.name = 'DriverError';
    this.code = code;
  }
}
