import { Broker } from './broker.js';
import type { Command, ConnectCommand, Effect, Message, OutPacket, Settings, SubscriptionRequest } from './commands.js';

// Test support: drives a Broker with entries only, the way a log would, and reads its effects.

export const testSettings: Settings = {
  maxQueuedMessages: 100,
  maxQueuedBytes: 1 << 20,
  maxInflight: 4,
  maxQos: 2,
  retainAvailable: true,
  maxPacketSize: 1 << 20,
  willGraceS: 30,
  maxSubscriptions: 0,
  acl: null,
  bridgeRules: [],
  bridgeOutboxMessages: 10_000,
  bridgeOutboxBytes: 1 << 20,
};

export const T0 = 1_700_000_000_000;

export function msg(topic: string, payload: string, qos: 0 | 1 | 2 = 0, retain = false, props?: Message['props']): Message {
  const m: Message = { topic, payload: new TextEncoder().encode(payload), qos, retain };
  if (props !== undefined) m.props = props;
  return m;
}

export const text = (m: Message): string => new TextDecoder().decode(m.payload);

export type PublishPacket = Extract<OutPacket, { type: 'publish' }>;

export class Harness {
  readonly broker: Broker;
  index = 0;
  time = T0;
  /** Every effect of every apply, in order. */
  readonly log: Effect[] = [];

  /** Index of the latest serve-start: the period of new conn ids. */
  period = 0;

  /** `broker`: a test kit's variant with a planted bug, or the real one. */
  constructor(
    readonly settings: Settings = testSettings,
    broker: Broker = new Broker(),
  ) {
    this.broker = broker;
    this.serveStart();
  }

  /** A node (re)starts serving: every older connection ends as by a failover. */
  serveStart(advanceMs = 0, settings: Settings = this.settings): Effect[] {
    const out = this.apply({ t: 'serve-start', node: 1, settings }, advanceMs);
    this.period = this.index;
    return out;
  }

  /** Applies one command at the current time plus `advanceMs`; returns its effects. */
  apply(cmd: Command, advanceMs = 0): Effect[] {
    this.time += advanceMs;
    this.index++;
    const out: Effect[] = [];
    this.broker.apply({ index: this.index, time: this.time, cmd }, out);
    this.log.push(...out);
    return out;
  }

  /** The conn id for sequence number `seq` in the current serving period. */
  conn(seq: number): string {
    return `${this.period}.${seq}`;
  }

  connect(conn: string, clientId: string | null, opts: Partial<ConnectCommand> = {}): Effect[] {
    const protocol = opts.protocol ?? 4;
    const clean = opts.clean ?? false;
    const cmd: ConnectCommand = {
      t: 'connect',
      conn,
      clientId,
      protocol,
      clean,
      expiryS: protocol === 5 ? 0 : clean ? 0 : 0xffff_ffff,
      will: null,
      username: null,
      receiveMax: 65_535,
      maxPacketSize: 0,
      problemInfo: true,
      ...opts,
    };
    return this.apply(cmd);
  }

  subscribe(conn: string, pid: number, subs: (Partial<SubscriptionRequest> & { filter: string })[], subId?: number): Effect[] {
    const reqs = subs.map((s) => ({ qos: 2 as const, nl: false, rap: false, rh: 0 as const, ...s }));
    const cmd: Command = subId === undefined ? { t: 'subscribe', conn, pid, subs: reqs } : { t: 'subscribe', conn, pid, subs: reqs, subId };
    return this.apply(cmd);
  }

  publish(conn: string, m: Message, pid?: number): Effect[] {
    return this.apply(pid === undefined ? { t: 'publish', conn, msg: m } : { t: 'publish', conn, pid, msg: m });
  }
}

/** The packets sent to `conn` among `effects`. */
export function sent(effects: readonly Effect[], conn: string): OutPacket[] {
  const packets: OutPacket[] = [];
  for (const e of effects) if (e.t === 'send' && e.conn === conn) packets.push(e.packet);
  return packets;
}

export function published(effects: readonly Effect[], conn: string): PublishPacket[] {
  return sent(effects, conn).filter((p): p is PublishPacket => p.type === 'publish');
}

export function events(effects: readonly Effect[], kind: string): Effect[] {
  return effects.filter((e) => e.t === 'event' && e.kind === kind);
}
