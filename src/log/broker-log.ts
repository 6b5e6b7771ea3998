import type { Command, Entry, Settings } from '../broker/commands.js';

/** What a log tells the broker. Every call happens in a turn of its own, never inside propose(). */
export interface LogListener {
  /** Committed entries, in log order, each exactly once. */
  committed(entries: readonly Entry[]): void;
  /** Serving starts (with the servePeriod: log index of this node's committed serve-start) or
   * stops (servePeriod 0). Connections of an older period must be closed. */
  serving(on: boolean, servePeriod: number): void;
  /** accepting became true again after back-pressure. */
  drain(): void;
}

/** The log under the broker: LocalLog on one node, RaftLog on three (docs/design.md "The seam").
 * Both pass the contract suite in src/log/broker-log.contract.ts. */
export interface BrokerLog {
  /** Queues a command; all proposals of one event-loop turn travel as one append. Proposals made
   * while not serving are dropped (the node is about to close every connection). */
  propose(cmd: Command): void;
  /** False: uncommitted data is over its bound; stop reading sockets until drain(). */
  readonly accepting: boolean;
  /** True when committed() comes amid the reads of a turn (a cluster leader commits as it reads its
   * followers' answers, among its clients' packets, several times a turn): the broker then writes
   * at once only after the first commit of a turn and leaves the rest to the turn's end
   * (Outbox.writeCommitted). Otherwise (LocalLog commits at the turn's end) it writes after each
   * committed batch. */
  readonly commitsMidTurn?: boolean;
  /** The serving rule as it holds now; a plain query with no side effect. */
  readonly serving: boolean;
  /** Judges the serving rule at a moment that acts on it (an accept, a write turn, a proposal, the
   * effects of an entry): accept connections and write to them only while true. When the rule has
   * just failed inside a serving period, the log ends that period in a turn of its own, so the
   * listener hears `serving(false)` without waiting for the next periodic check. */
  checkServing(): boolean;
  /** Log index of the serve-start entry of the current serving period; 0 when not serving. */
  readonly servePeriod: number;
  /** The settings of a reload (SIGHUP): a later serve-start of this node carries them. The caller
   * proposes the `settings` command itself while serving. */
  updateSettings(settings: Settings): void;
  /** Cluster time in integer ms since the Unix epoch; never decreases. */
  now(): number;
  /** Sets the one listener and starts the log; serving begins once serve-start commits. */
  start(listener: LogListener): void;
  /** Stops the log; no listener call happens after the returned promise resolves. */
  stop(): Promise<void>;
}
