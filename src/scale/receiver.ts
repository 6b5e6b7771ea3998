// The serving node's receiving of what other shards forward (docs/scale-out.md "Receiving"): it
// pulls from a durable consumer on this shard's inbound stream and proposes each message as a
// `shard-in` command carrying its origin; it acknowledges JetStream only when apply has answered
// that entry, that is after its commit: applied or a repeat, acknowledged; ahead of a gap, left for
// redelivery. What arrives from NATS is untrusted: a message whose headers or data do not decode,
// or that names an unknown shard (or this one), is refused, logged with its origin, counted, and
// never proposed; JetStream is told not to deliver it again.
import { AckPolicy, type ConsumerMessages, type JsMsg, jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/transport-node';
import type { Command, ConnId, Message, OutPacket } from '../broker/commands.js';
import { SHARD_LOG } from '../broker/validate.js';
import type { EventKind } from '../events.js';
import { validateTopicName } from '../protocol/topic.js';
import { decodeForwarded, ensureInboundStream, HDR_LOG, HDR_ORIGIN, HDR_SEQ, inboundStream } from './forward-codec.js';
import type { Placement } from './placement.js';

/** Messages pulled and not yet answered by apply, at most (the consumer's max_ack_pending). */
export const RECEIVE_WINDOW = 256;
/** A message ahead of a gap is delivered again after this (ms). */
export const GAP_REDELIVERY_MS = 200;
/** A message whose entry is not answered within this is delivered again (ms). */
export const RECEIVE_ACK_WAIT_MS = 30_000;
/** After the consumer cannot be made or read, the receiver waits this long before trying again (ms). */
export const RECEIVE_RETRY_MS = 1_000;
const HANDLE_MAX = 0xffff;
const SEQ = /^[1-9][0-9]{0,15}$/;

export interface ReceiverHost {
  /** Whether this node serves and its lease holds now: only then does it receive. */
  mayWrite(): boolean;
  propose(cmd: Command): void;
  event(kind: EventKind, fields?: Record<string, unknown>): void;
  /** A connection id of this serving period, which apply's answers name. */
  newConnId(): ConnId;
  /** Bytes of a message's payload at most (the node's maximum packet size). */
  readonly maxPayload: number;
}

export type Decoded = { ok: true; origin: string; log: string; seq: number; msg: Message } | { ok: false; origin: string; reason: string };

/** The headers and data of a message from the inbound stream, checked. `self`: this shard, which
 * never forwards to itself. */
export function decodeInbound(
  header: { get(k: string): string } | undefined,
  data: Uint8Array,
  placement: Placement,
  self: string,
  maxPayload: number,
): Decoded {
  const origin = header?.get(HDR_ORIGIN) ?? '';
  const shown = origin.slice(0, 64);
  if (origin === '') return { ok: false, origin: shown, reason: 'no origin' };
  if (!placement.shards.includes(origin)) return { ok: false, origin: shown, reason: `unknown shard ${JSON.stringify(shown)}` };
  if (origin === self) return { ok: false, origin, reason: 'from this shard itself' };
  const log = header?.get(HDR_LOG) ?? '';
  if (!SHARD_LOG.test(log)) return { ok: false, origin, reason: 'bad log identity' };
  const seqText = header?.get(HDR_SEQ) ?? '';
  const seq = SEQ.test(seqText) ? Number(seqText) : 0;
  if (!Number.isSafeInteger(seq) || seq < 1) return { ok: false, origin, reason: 'bad sequence' };
  let msg: Message;
  try {
    msg = decodeForwarded(data);
  } catch (err) {
    return { ok: false, origin, reason: `data does not decode: ${err instanceof Error ? err.message : String(err)}` };
  }
  if (msg.qos !== 1 || msg.retain) return { ok: false, origin, reason: 'not a QoS 1 message without retain' };
  const topicProblem = validateTopicName(msg.topic);
  if (topicProblem !== null) return { ok: false, origin, reason: `bad topic: ${topicProblem}` };
  if (msg.payload.length > maxPayload) return { ok: false, origin, reason: `payload of ${msg.payload.length} bytes` };
  return { ok: true, origin, log, seq, msg };
}

export class ShardReceiver {
  private nc: NatsConnection | null = null;
  private messages: ConsumerMessages | null = null;
  private conn: ConnId = '';
  private gen = 0;
  private running = false;
  private retry: NodeJS.Timeout | null = null;
  private readonly inflight = new Map<number, JsMsg>();
  private nextHandle = 1;
  /** Messages refused as bad input, since this process started. */
  refused = 0;
  /** Messages acknowledged to JetStream after apply answered them. */
  received = 0;

  constructor(
    private readonly shard: string,
    private readonly placement: Placement,
    private readonly host: ReceiverHost,
  ) {}

  attach(nc: NatsConnection): void {
    this.nc = nc;
    this.start();
  }

  detach(): void {
    this.stop();
    this.nc = null;
  }

  /** Starts pulling when connected and serving; a no-op otherwise or when already pulling. */
  start(): void {
    if (this.running || this.nc === null || this.retry !== null || !this.host.mayWrite()) return;
    this.running = true;
    const gen = ++this.gen;
    this.conn = this.host.newConnId();
    void this.run(this.nc, gen).then(
      () => this.ended(gen, null),
      (err: unknown) => this.ended(gen, err),
    );
  }

  /** Stops pulling; what is pulled and not answered is delivered again after the ack wait. */
  stop(): void {
    this.gen++;
    this.running = false;
    if (this.retry !== null) clearTimeout(this.retry);
    this.retry = null;
    this.inflight.clear();
    this.messages?.stop();
    this.messages = null;
  }

  /** An effect of apply for a connection that is not a client's: the answer to a `shard-in`. */
  onEffect(conn: ConnId, packet: OutPacket): void {
    if (conn !== this.conn || packet.type !== 'puback') return;
    const m = this.inflight.get(packet.pid);
    if (m === undefined) return;
    this.inflight.delete(packet.pid);
    if (packet.code < 0x80) {
      m.ack();
      this.received++;
    } else m.nak(GAP_REDELIVERY_MS);
  }

  private async run(nc: NatsConnection, gen: number): Promise<void> {
    const jsm = await jetstreamManager(nc);
    const stream = inboundStream(this.shard);
    await ensureInboundStream(jsm, this.shard);
    const durable = `raftmq-${this.shard}`;
    await jsm.consumers.add(stream, {
      durable_name: durable,
      ack_policy: AckPolicy.Explicit,
      max_ack_pending: RECEIVE_WINDOW,
      ack_wait: RECEIVE_ACK_WAIT_MS * 1_000_000,
    });
    if (gen !== this.gen) return;
    const consumer = await jetstream(nc).consumers.get(stream, durable);
    const messages = await consumer.consume({ max_messages: 64 });
    if (gen !== this.gen) {
      messages.stop();
      return;
    }
    this.messages = messages;
    for await (const m of messages) {
      if (gen !== this.gen) break;
      this.take(m);
    }
  }

  private take(m: JsMsg): void {
    const d = decodeInbound(m.headers, m.data, this.placement, this.shard, this.host.maxPayload);
    if (!d.ok) {
      this.refused++;
      this.host.event('forward-in-refused', { origin: d.origin, reason: d.reason, streamSeq: m.seq });
      m.term();
      return;
    }
    if (!this.host.mayWrite()) return;
    const handle = this.allocHandle();
    if (handle === 0) return; // more in flight than handles: left for redelivery
    this.inflight.set(handle, m);
    this.host.propose({ t: 'shard-in', conn: this.conn, handle, origin: d.origin, log: d.log, seq: d.seq, msg: d.msg });
  }

  private allocHandle(): number {
    for (let i = 0; i < HANDLE_MAX; i++) {
      const h = this.nextHandle;
      this.nextHandle = h >= HANDLE_MAX ? 1 : h + 1;
      if (!this.inflight.has(h)) return h;
    }
    return 0;
  }

  private ended(gen: number, err: unknown): void {
    if (gen !== this.gen) return;
    this.running = false;
    this.messages = null;
    if (err !== null)
      this.host.event('forward-failed', { shard: this.shard, receive: true, err: err instanceof Error ? err.message : String(err) });
    if (this.nc === null) return;
    this.retry = setTimeout(() => {
      this.retry = null;
      this.start();
    }, RECEIVE_RETRY_MS);
    this.retry.unref();
  }
}
