// The error registry: every error the broker reports to an operator has a class with a stable code,
// and every way the raftmq command ends has one exit status. Tests assert the code, not the message
// text; docs/errors.md lists them all (test/errors-doc.test.ts keeps the two in sync).

/** Exit statuses of the raftmq command (sysexits.h where one fits). The raft node program of
 * raft/driver uses the same values for the same causes (raft/driver/node-app.ts). */
export const EXIT = {
  /** A clean stop, --help, --version. */
  OK: 0,
  /** The start failed (a listener or port could not open), or a stop ran into
   * --shutdown-timeout-ms (the state file is written all the same). */
  FAILED: 1,
  /** A flag, config key, value or file named by a flag cannot be used; the message names it. */
  USAGE: 2,
  /** A write, fsync, rename or remove in --data-dir failed (EX_IOERR); never retried. */
  DATA_DIR_IO: 74,
  /** --cluster-force-start was refused or its epoch found no second voter (EX_TEMPFAIL). */
  FORCE_START_FAILED: 75,
  /** A state file, membership record, data directory or PID lock was refused (EX_CONFIG); the
   * message names the file, which is left as it was. */
  STATE_FILE_REFUSED: 78,
} as const;

export class RaftmqError extends Error {
  readonly code: string;
  constructor(code: string, message: string) {
    super(message);
    this.code = code;
    this.name = new.target.name;
  }
}

/** A flag, config key or value that cannot be used. The message names the flag or key. */
export class ConfigError extends RaftmqError {
  constructor(code: ConfigErrorCode, message: string) {
    super(code, message);
  }
}

export const CONFIG_ERROR = {
  UNKNOWN_FLAG: 'ERR_CONFIG_UNKNOWN_FLAG',
  UNKNOWN_KEY: 'ERR_CONFIG_UNKNOWN_KEY',
  BAD_VALUE: 'ERR_CONFIG_BAD_VALUE',
  UNREADABLE_FILE: 'ERR_CONFIG_UNREADABLE_FILE',
  /** A file the node must append to (--audit-log) cannot be opened. */
  UNWRITABLE_FILE: 'ERR_CONFIG_UNWRITABLE_FILE',
  BAD_FILE: 'ERR_CONFIG_BAD_FILE',
  BAD_ARGUMENTS: 'ERR_CONFIG_BAD_ARGUMENTS',
  /** A setting that another setting requires is absent (a TLS listener without --tls-cert). */
  MISSING_VALUE: 'ERR_CONFIG_MISSING_VALUE',
  /** TLS files that OpenSSL refuses (not PEM, key does not match the certificate). */
  BAD_TLS: 'ERR_CONFIG_BAD_TLS',
} as const;
export type ConfigErrorCode = (typeof CONFIG_ERROR)[keyof typeof CONFIG_ERROR];

/** A password SASLprep (RFC 4013) refuses for a SCRAM credential; the message names the rule. */
export class SaslprepError extends RaftmqError {
  constructor(message: string) {
    super('ERR_SASLPREP', message);
  }
}

/** A listener could not start (port in use, permission). */
export class ListenError extends RaftmqError {
  constructor(message: string) {
    super('ERR_LISTEN', message);
  }
}
