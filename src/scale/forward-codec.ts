// What a shard forwards to another over JetStream (docs/scale-out.md "Forwarding"): the subject and
// stream of the destination's inbound stream, the headers naming the message's origin and place in
// its sequence, and the message itself, in the state image's encoding of a message.
import { JetStreamApiCodes, JetStreamApiError, type JetStreamManager, RetentionPolicy, StorageType } from '@nats-io/jetstream';
import { Packr } from 'msgpackr';
import type { Message } from '../broker/commands.js';
import { decodeMsg, encodeMsg } from '../broker/snapshot.js';

const packr = new Packr({ useRecords: false, mapsAsObjects: true, variableMapSize: true });

/** The subject a shard's inbound stream takes. */
export const inboundSubject = (shard: string): string => `raftmq.${shard}.in`;
/** The stream's name: stream names allow no `.`, so not the subject itself. */
export const inboundStream = (shard: string): string => `raftmq-${shard}-in`;

/** Makes shard `shard`'s inbound stream when it is missing: file storage, and work-queue retention,
 * so that a message the receiver acknowledged leaves the stream (one durable consumer takes them
 * all). Whoever comes first makes it, the origin's forwarder or the destination's receiver, with
 * this same configuration. */
export async function ensureInboundStream(jsm: JetStreamManager, shard: string): Promise<void> {
  const name = inboundStream(shard);
  try {
    await jsm.streams.info(name);
  } catch (err) {
    if (!(err instanceof JetStreamApiError && err.code === JetStreamApiCodes.StreamNotFound)) throw err;
    await jsm.streams.add({ name, subjects: [inboundSubject(shard)], storage: StorageType.File, retention: RetentionPolicy.Workqueue });
  }
}

/** The origin shard. */
export const HDR_ORIGIN = 'Raftmq-Origin';
/** The identity of the origin's sequence (src/broker/shard-outbox.ts `log`). */
export const HDR_LOG = 'Raftmq-Log';
/** The message's sequence in (origin, log, destination): 1, 2, 3, … */
export const HDR_SEQ = 'Raftmq-Seq';

/** The JetStream message id: a repeat of one within the stream's duplicate window is stored once. */
export const forwardMsgId = (origin: string, log: string, seq: number): string => `${origin}:${log}:${seq}`;

export function encodeForwarded(msg: Message): Uint8Array {
  return packr.pack(encodeMsg(msg));
}

/** The message of encodeForwarded; throws (SnapshotError, or msgpackr's) for bytes that are not one. */
export function decodeForwarded(bytes: Uint8Array): Message {
  return decodeMsg(packr.unpack(bytes));
}
