// The serving node's forwarding of its shard outboxes (docs/scale-out.md "Forwarding"): each
// destination's messages, in sequence order, into that shard's inbound JetStream stream, with the
// origin, the log identity and the sequence in headers and as the JetStream message id; once
// JetStream acknowledges a prefix, the node proposes `shard-position`, and apply removes it. What
// is sent and not yet acknowledged when the connection or the serving ends is sent again by the
// next serving node from the recorded position: JetStream stores a repeat within its duplicate
// window once, and the receiver drops any repeat by its sequence.
import { type JetStreamClient, jetstream, jetstreamManager } from '@nats-io/jetstream';
import { headers, type NatsConnection } from '@nats-io/transport-node';
import type { Command } from '../broker/commands.js';
import type { ShardOutbox } from '../broker/shard-outbox.js';
import type { EventKind } from '../events.js';
import {
  encodeForwarded,
  ensureInboundStream,
  forwardMsgId,
  HDR_LOG,
  HDR_ORIGIN,
  HDR_SEQ,
  inboundStream,
  inboundSubject,
} from './forward-codec.js';

/** Messages sent to one destination and not yet acknowledged, at most. */
export const FORWARD_WINDOW = 256;
/** After a failed publish or stream check, the destination waits this long before sending again (ms). */
export const FORWARD_RETRY_MS = 1_000;

export interface ForwarderHost {
  outbox(dest: string): Readonly<ShardOutbox> | undefined;
  /** The shards with an outbox. */
  dests(): readonly string[];
  /** Whether this node serves and its lease holds now: only then does it forward. */
  mayWrite(): boolean;
  propose(cmd: Command): void;
  event(kind: EventKind, fields?: Record<string, unknown>): void;
}

/** Where the forwarding to one destination stands, on the current connection. */
interface DestState {
  /** Bumped at each reset, so that the answers to what was sent before are ignored. */
  gen: number;
  streamReady: boolean;
  checking: boolean;
  /** Every sequence below was sent on this connection (since the last reset). */
  sentBelow: number;
  /** Every sequence below was acknowledged by JetStream. */
  ackedBelow: number;
  /** Acknowledged at or above ackedBelow (JetStream may answer out of order). */
  acked: Set<number>;
  proposedBelow: number;
  retry: NodeJS.Timeout | null;
}

export class ShardForwarder {
  private js: JetStreamClient | null = null;
  private nc: NatsConnection | null = null;
  private readonly state = new Map<string, DestState>();
  private positionQueued = false;
  /** Messages JetStream acknowledged, since this process started. */
  forwarded = 0;

  constructor(
    private readonly origin: string,
    private readonly host: ForwarderHost,
  ) {}

  /** A new connection: forwarding starts again from each outbox's recorded position. */
  attach(nc: NatsConnection): void {
    this.reset();
    this.nc = nc;
    this.js = jetstream(nc);
    this.pump();
  }

  /** The connection is gone. */
  detach(): void {
    this.reset();
    this.nc = null;
    this.js = null;
  }

  /** Serving ended: nothing in flight counts any more; the next serving period starts from the
   * recorded positions. */
  servingEnded(): void {
    for (const st of this.state.values()) this.restart(st);
  }

  /** Sends what the outboxes hold beyond what is in flight, within the window. */
  pump(): void {
    const js = this.js;
    if (js === null) return;
    let writable: boolean | null = null;
    for (const dest of this.host.dests()) {
      const o = this.host.outbox(dest);
      if (o === undefined || o.items.length === 0) continue;
      writable ??= this.host.mayWrite();
      if (!writable) return;
      const st = this.destState(dest);
      if (st.retry !== null) continue;
      // The committed position passed what this connection knew (its own proposals committed, or a
      // restore): nothing below it is sent again.
      if (st.ackedBelow < o.position) {
        st.ackedBelow = o.position;
        for (const s of st.acked) if (s < o.position) st.acked.delete(s);
      }
      if (st.sentBelow < st.ackedBelow) st.sentBelow = st.ackedBelow;
      if (!st.streamReady) {
        this.checkStream(dest, st);
        continue;
      }
      while (st.sentBelow < o.next && st.sentBelow - st.ackedBelow < FORWARD_WINDOW) {
        const item = o.items.at(st.sentBelow - o.position);
        if (item === undefined) break;
        this.send(js, dest, o.log, item.seq, encodeForwarded(item.msg), st);
        st.sentBelow++;
      }
    }
  }

  private send(js: JetStreamClient, dest: string, log: string, seq: number, data: Uint8Array, st: DestState): void {
    const h = headers();
    h.set(HDR_ORIGIN, this.origin);
    h.set(HDR_LOG, log);
    h.set(HDR_SEQ, String(seq));
    const gen = st.gen;
    js.publish(inboundSubject(dest), data, { msgID: forwardMsgId(this.origin, log, seq), headers: h }).then(
      () => {
        if (gen !== st.gen) return;
        this.forwarded++;
        st.acked.add(seq);
        while (st.acked.delete(st.ackedBelow)) st.ackedBelow++;
        this.queuePosition();
        this.pump();
      },
      (err: unknown) => {
        if (gen !== st.gen) return;
        this.host.event('forward-failed', { shard: dest, seq, err: message(err) });
        this.backOff(st);
      },
    );
  }

  /** Makes the destination's stream when it is missing (file storage), once per connection. */
  private checkStream(dest: string, st: DestState): void {
    const nc = this.nc;
    if (nc === null || st.checking) return;
    st.checking = true;
    const gen = st.gen;
    void (async () => ensureInboundStream(await jetstreamManager(nc), dest))().then(
      () => {
        st.checking = false;
        if (gen !== st.gen) return;
        st.streamReady = true;
        this.pump();
      },
      (err: unknown) => {
        st.checking = false;
        if (gen !== st.gen) return;
        this.host.event('forward-failed', { shard: dest, stream: inboundStream(dest), err: message(err) });
        this.backOff(st);
      },
    );
  }

  /** One `shard-position` per destination whose acknowledged prefix grew, per turn. */
  private queuePosition(): void {
    if (this.positionQueued) return;
    this.positionQueued = true;
    setImmediate(() => {
      this.positionQueued = false;
      if (this.js === null || !this.host.mayWrite()) return;
      for (const [dest, st] of this.state) {
        const o = this.host.outbox(dest);
        if (o === undefined || st.ackedBelow <= o.position || st.ackedBelow <= st.proposedBelow) continue;
        st.proposedBelow = st.ackedBelow;
        this.host.propose({ t: 'shard-position', dest, below: st.ackedBelow });
      }
    });
  }

  private backOff(st: DestState): void {
    this.restart(st);
    st.retry = setTimeout(() => {
      st.retry = null;
      this.pump();
    }, FORWARD_RETRY_MS);
    st.retry.unref();
  }

  /** Forgets what is in flight: sent again from the acknowledged prefix. */
  private restart(st: DestState): void {
    st.gen++;
    st.sentBelow = st.ackedBelow;
    st.acked.clear();
  }

  private reset(): void {
    for (const st of this.state.values()) {
      st.gen++;
      if (st.retry !== null) clearTimeout(st.retry);
    }
    this.state.clear();
  }

  private destState(dest: string): DestState {
    let st = this.state.get(dest);
    if (st === undefined) {
      st = { gen: 0, streamReady: false, checking: false, sentBelow: 0, ackedBelow: 0, acked: new Set(), proposedBelow: 0, retry: null };
      this.state.set(dest, st);
    }
    return st;
  }
}

function message(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
