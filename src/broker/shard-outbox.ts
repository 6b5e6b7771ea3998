// The outbox of one destination shard in the replicated state (docs/scale-out.md "Forwarding"):
// copies of the committed QoS 1 publishes to forward to that shard, each with its sequence, which
// is contiguous per destination (1, 2, 3, …), so the receiver can tell a repeat and a gap. The
// serving node forwards them in sequence order and proposes `shard-position` as JetStream
// acknowledges a prefix; apply then removes that prefix. Bounded by the bridges' settings
// (bridgeOutboxMessages, bridgeOutboxBytes) with their refusal rule: a QoS 1 publish that would
// not fit is refused, never accepted and dropped.
//
// Not the bridges' outbox (src/broker/bridge-outbox.ts) itself: that one is keyed by log index and
// removes an expired message from anywhere in it, which would leave a gap in the sequence that the
// receiver waits on for ever. Here nothing leaves but a forwarded prefix.
import type { Message } from './commands.js';
import { Fifo } from './fifo.js';

export interface ShardOutboxItem {
  readonly seq: number;
  /** Log index of the entry that published the message. */
  readonly index: number;
  readonly msg: Message;
}

export interface ShardOutbox {
  readonly dest: string;
  /** The identity of this outbox's sequence: `TIME-INDEX` of the entry that made it, so a state
   * started afresh (a single node without a data directory) starts a new sequence that a receiver
   * cannot take for the old one, and a restored state goes on with its own. */
  readonly log: string;
  /** The sequence the next message gets; the first is 1. */
  next: number;
  /** Every message below this sequence was acknowledged by JetStream; items hold position..next-1. */
  position: number;
  items: Fifo<ShardOutboxItem>;
  /** Topic and payload bytes of `items`. */
  bytes: number;
}

export const shardItemSize = (msg: Message): number => msg.topic.length + msg.payload.length;

export function newShardOutbox(dest: string, log: string): ShardOutbox {
  return { dest, log, next: 1, position: 1, items: new Fifo(), bytes: 0 };
}

/** Appends a message with the next sequence and returns that sequence. */
export function pushShardOutbox(o: ShardOutbox, index: number, msg: Message): number {
  const seq = o.next++;
  o.items.push({ seq, index, msg });
  o.bytes += shardItemSize(msg);
  return seq;
}

/** Removes the items below sequence `below` and moves the position there. */
export function advanceShardOutbox(o: ShardOutbox, below: number): void {
  for (;;) {
    const head = o.items.peek();
    if (head === undefined || head.seq >= below) break;
    o.items.shift();
    o.bytes -= shardItemSize(head.msg);
  }
  o.position = below;
}
