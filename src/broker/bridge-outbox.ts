// A bridge's outbox in the replicated state (docs/bridges.md "The promise"): copies of the
// committed messages its outbound rules forward, in log order, until a `bridge-position` command
// records that the remote has completed them. Held in the state rather than read back from the log,
// so log compaction never waits for a remote that is down; bounded by the settings
// bridgeOutboxMessages and bridgeOutboxBytes, and part of every snapshot.
import type { Message, QoS } from './commands.js';
import { Fifo } from './fifo.js';

export interface OutboxItem {
  /** Log index of the entry that published the message. */
  readonly index: number;
  /** The remote topic (prefix remapped). */
  readonly topic: string;
  /** The QoS it is forwarded at: min(the message's, the rule's). */
  readonly qos: QoS;
  /** The message as published; shared with every local delivery of it. */
  readonly msg: Message;
}

export interface BridgeOutbox {
  readonly name: string;
  /** Every message of this bridge below this log index was completed at the remote. */
  position: number;
  items: Fifo<OutboxItem>;
  /** Topic and payload bytes of `items`. */
  bytes: number;
}

/** What an item counts against bridgeOutboxBytes. */
export const outboxItemSize = (it: { topic: string; msg: Message }): number => it.topic.length + it.msg.payload.length;

export function newOutbox(name: string, position: number): BridgeOutbox {
  return { name, position, items: new Fifo(), bytes: 0 };
}

/** Removes the items below `below` and moves the position there. */
export function advanceOutbox(o: BridgeOutbox, below: number): number {
  let removed = 0;
  for (;;) {
    const head = o.items.peek();
    if (head === undefined || head.index >= below) break;
    o.items.shift();
    o.bytes -= outboxItemSize(head);
    removed++;
  }
  o.position = below;
  return removed;
}

/** The offset in `o.items` of the first item at or above log index `index` (items are in log order). */
export function firstAtOrAbove(o: BridgeOutbox, index: number): number {
  let lo = 0;
  let hi = o.items.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if ((o.items.at(mid) as OutboxItem).index < index) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
