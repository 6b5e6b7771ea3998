// How a node acts on a core's Ready: the order of its parts and when handling stops. The driver
// (raft/driver/driver.ts) and the simulator (raft/sim/sim.ts) both run this, each with its own
// sink, so what the simulator checks is the handling the driver ships.
import type { LogEntry, Message } from './messages.js';
import type { HardState, Ready, SoftState } from './raft.js';
import type { Snapshot } from './snapshot.js';

/** What a node does with each part of a Ready. With in-memory storage `hardState` needs nothing: the
 * log and the vote live in RAM and go to the state file at a clean stop. A sink over durable
 * storage writes the term and vote and the entries, and reports them back to a core made with
 * `awaitStorage` once they are durable (docs/raft.md "Persistence"). */
export interface ReadySink {
  /** False once the node stopped or was replaced: nothing more of the Ready, nor another Ready, is
   * handled. */
  live(): boolean;
  /** The Ready as taken, before any part of it is acted on (the driver writes a newly joined
   * epoch's membership record here, the simulator checks the Ready). */
  begin(rd: Ready): void;
  send(m: Message): void;
  /** Term or vote changed: written before the entries of the same Ready. */
  hardState?(h: HardState): void;
  /** Entries written to the log, after deleting from `truncatedFrom` (§5.3) if not null. */
  appended(entries: readonly LogEntry[], truncatedFrom: number | null): void;
  /** Replace the application's state; `committed` continues from snapshot.index + 1. */
  restore(s: Snapshot): void;
  committed(entries: readonly LogEntry[]): void;
  softState(s: SoftState): void;
}

/** A core as the handler reads it (RaftCore). */
export interface ReadySource {
  hasReady(): boolean;
  takeReady(): Ready;
}

/** Acts on one Ready: begin, send every message, hard state, appended, restore the snapshot; then,
 * only if the node is still live (a failed restore stops it), committed entries and soft state.
 * Messages go out before anything is written: with in-memory storage there is nothing to persist
 * first, and a core that waits for its storage holds back the answers that need it until the
 * storage reports them durable. */
export function handleReady(rd: Ready, sink: ReadySink): void {
  sink.begin(rd);
  for (const m of rd.messages) sink.send(m);
  if (rd.hardState !== null && sink.hardState !== undefined) sink.hardState(rd.hardState);
  if (rd.appended.length > 0 || rd.truncatedFrom !== null) sink.appended(rd.appended, rd.truncatedFrom);
  if (rd.snapshot !== null) sink.restore(rd.snapshot);
  if (!sink.live()) return;
  if (rd.committed.length > 0) sink.committed(rd.committed);
  if (rd.softState !== null) sink.softState(rd.softState);
}

/** Handles Readies until the core has none or the node is no longer live; returns how many. */
export function drainReady(core: ReadySource, sink: ReadySink): number {
  let handled = 0;
  while (sink.live() && core.hasReady()) {
    handleReady(core.takeReady(), sink);
    handled++;
  }
  return handled;
}
