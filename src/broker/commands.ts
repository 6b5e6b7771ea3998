// The seam between connections, the log and the state machine (docs/design.md "The seam").
//
// Every change to broker state that must survive a failover is a Command. A log (LocalLog on one
// node, RaftLog on three) orders commands into Entries and stamps each with a time; the pure state
// machine applies committed entries in order and emits Effects that only the serving node carries
// out. Commands are plain data (strings, integers, booleans, arrays, Uint8Array, null) so that they
// encode once with msgpackr and every replica applies the same bytes. Commands carry no time.
import type { EventKind } from '../events.js';
import type { ProtocolLevel, QoS, UserProperties } from '../protocol/packets.js';
import type { Settings } from './settings.js';

/** `${servePeriod}.${seq}`: servePeriod is the log index of the serve-start entry under which the
 * serving node accepted the connection; seq counts connections accepted in that period from 1. */
export type ConnId = string;

/** The protocol owns these (src/protocol/packets.ts); commands carry them. */
export type { ProtocolLevel, QoS, UserProperties };

/** MQTT 5 properties that travel with an application message from publisher to subscriber. */
export interface MessageProps {
  payloadFormat?: 0 | 1;
  /** Message Expiry Interval in seconds as the publisher sent it. */
  expiryS?: number;
  contentType?: string;
  responseTopic?: string;
  correlationData?: Uint8Array;
  userProps?: UserProperties;
}

/** An application message as published (topic alias already resolved). */
export interface Message {
  topic: string;
  payload: Uint8Array;
  qos: QoS;
  retain: boolean;
  props?: MessageProps;
}

export interface Will {
  msg: Message;
  /** MQTT 5 Will Delay Interval in seconds; 0 for 3.1.1. */
  delayS: number;
}

export interface SubscriptionRequest {
  /** The filter as sent, including a `$share/{group}/` prefix. Validated before proposing. */
  filter: string;
  qos: QoS;
  /** MQTT 5 No Local. */
  nl: boolean;
  /** MQTT 5 Retain As Published. */
  rap: boolean;
  /** MQTT 5 Retain Handling: 0 send retained, 1 only if the subscription is new, 2 never. */
  rh: 0 | 1 | 2;
}

export type { AclRule, Settings } from './settings.js';

export type AckKind = 'puback' | 'pubrec' | 'pubcomp';

export interface AckItem {
  readonly pid: number;
  readonly kind: AckKind;
}

/** Acks carried by one `acks` command at most (the command codec writes the count as a u16). */
export const ACKS_PER_COMMAND_MAX = 1_024;

/** Publishes carried by one `publishes` command at most (the command codec writes the count as a u16). */
export const PUBLISHES_PER_COMMAND_MAX = 1_024;

/** A `publishes` command is closed once its topics and payloads reach this many bytes, so that an
 * entry stays within one of the raft log's 64 KiB slabs; a larger publish goes alone. */
export const PUBLISHES_BYTES_MAX = 32 * 1024;

export type Command =
  /** A node begins serving; ends every connection of an older serving period. configHash: the
   * serving node's configuration (src/cluster/config-hash.ts), compared by every replica; apply
   * ignores it. generation: the raft epoch generation of the proposing leader (absent from
   * LocalLog); one above the last seen fences every session's packet ids (docs/design.md
   * "Force-start"; src/broker/deliver.ts). */
  | { t: 'serve-start'; node: number; settings: Settings; configHash?: string; generation?: number }
  /** Configuration reload; configHash as for serve-start. */
  | { t: 'settings'; settings: Settings; configHash?: string }
  | ConnectCommand
  | DisconnectCommand
  | SubscribeCommand
  | UnsubscribeCommand
  | PublishCommand
  | PubrelCommand
  /** Delivery progress from a subscriber. */
  | { t: 'ack'; conn: ConnId; pid: number; kind: AckKind }
  /** Several acks of one connection read in one turn, applied in order as if each were its own
   * entry: a subscriber under load sends many PUBACKs per read, and one entry for all of them
   * halves the log a QoS 1 message costs. */
  | { t: 'acks'; conn: ConnId; acks: readonly AckItem[] }
  /** Several publishes and PUBRELs of one connection read in one turn, applied in order as if
   * each were its own entry (at this entry's index and time): a publisher under load sends many
   * PUBLISH (and, for QoS 2, PUBREL) packets per read, and one entry for all of them saves what the
   * log pays per entry on every node. Each item is a whole `publish` or `pubrel` of this `conn`. */
  | PublishesCommand
  /** Only advances time, so that deadlines pass while the broker is idle. */
  | { t: 'tick' }
  /** Replicas compare state digests: each replica records its digest at every check entry, and
   * compares the digest the leader recorded at an earlier check entry (atIndex) with its own. The
   * digest costs O(state), so it is computed only at check entries, whose rate the leader sets;
   * a single node never proposes one. */
  | { t: 'check'; atIndex: number; digest: string }
  /** The serving node's bridge NAME has completed, at its remote, every message of its outbox
   * below log index `below` (PUBACK for QoS 1, the write for QoS 0): apply removes them, and a
   * later serving node resumes from there (docs/bridges.md "The promise"). */
  | { t: 'bridge-position'; bridge: string; below: number }
  | BridgePubrecCommand
  | BridgeInCommand
  /** The remote sent PUBREL for its QoS 2 message `pid` (docs/bridges.md "QoS 2 from the remote"):
   * apply lets the id go and answers with a PUBCOMP effect to `conn`, the bridge's connection, so
   * the remote may reuse the id only once no later leader holds it. */
  | { t: 'bridge-in-rel'; bridge: string; conn: ConnId; pid: number }
  /** The remote answered CONNACK without the bridge's session: it will send PUBREL for none of the
   * ids held, which apply lets go. */
  | { t: 'bridge-in-reset'; bridge: string }
  /** JetStream acknowledged, in the stream of shard `dest`, every message of its outbox below
   * sequence `below`: apply removes them, and a later serving node resumes from there
   * (docs/scale-out.md "Forwarding"). */
  | { t: 'shard-position'; dest: string; below: number }
  | ShardInCommand;

/** A message another shard forwarded (docs/scale-out.md "Receiving"), as the serving node's
 * receiver pulled it from this shard's inbound stream: published here like a client's QoS 1
 * publish, without the publish ACL (the origin checked it), if `seq` is the next of (origin, log);
 * a repeat is dropped, and one ahead of a gap is not applied. Apply answers with a PUBACK effect to
 * `conn`, the receiver, with packet id `handle`: a code below 0x80 (applied, or a repeat) lets it
 * acknowledge JetStream, 0x80 (a gap) leaves the message for redelivery. */
export interface ShardInCommand {
  t: 'shard-in';
  conn: ConnId;
  handle: number;
  origin: string;
  /** The origin's log identity (src/broker/shard-outbox.ts `log`). */
  log: string;
  seq: number;
  msg: Message;
}

/** The remote answered PUBREC to QoS 2 messages of bridge NAME's outbox, each named by the log
 * index of its entry and its packet id: apply records each one still in the outbox and answers
 * with a PUBREL effect to `conn`, the bridge's connection, for every one, so PUBREL reaches the
 * remote only after the record is committed (docs/bridges.md "QoS 2 to the remote"). */
export interface BridgePubrecCommand {
  t: 'bridge-pubrec';
  bridge: string;
  conn: ConnId;
  /** [log index, packet id] pairs, 1 to BRIDGE_PUBRECS_MAX. */
  recs: readonly (readonly [number, number])[];
}

/** Most PUBRECs one `bridge-pubrec` command records. */
export const BRIDGE_PUBRECS_MAX = 1_024;

/** A message the serving node's bridge NAME received from its remote through an inbound rule
 * (topic remapped, QoS the lower of the rule's and the remote's): published here like a client's,
 * without the publish ACL. `conn` names the bridge's connection to the remote and `pid` the
 * remote's packet id of a QoS 1 message: apply answers with a PUBACK effect to `conn`, which the
 * bridge passes on to the remote, so the remote is acknowledged only after this entry is committed
 * (docs/bridges.md "Inbound"). QoS 0 messages come here only when retained or sent at QoS 2. */
export interface BridgeInCommand {
  t: 'bridge-in';
  bridge: string;
  conn: ConnId;
  pid?: number;
  /** The remote sent it at QoS 2 under `pid` (docs/bridges.md "QoS 2 from the remote"): published
   * here once per id held (at `msg.qos`, the rule's QoS at most), answered with a PUBREC effect. */
  q2?: true;
  msg: Message;
}

export interface ConnectCommand {
  t: 'connect';
  conn: ConnId;
  /** null: the client sent an empty id and apply assigns one derived from conn, or `assignedId`. */
  clientId: string | null;
  /** With clientId null: the id to assign instead of the one derived from conn (a shard's, chosen to
   * belong to it: docs/scale-out.md "Assigned client ids"). */
  assignedId?: string;
  protocol: ProtocolLevel;
  /** Clean Session (3.1.1) or Clean Start (5.0). */
  clean: boolean;
  /** Session Expiry Interval in seconds; 0xFFFFFFFF never expires. 3.1.1: 0 if clean, else never. */
  expiryS: number;
  will: Will | null;
  username: string | null;
  /** Client's Receive Maximum (v5), 65535 if absent. */
  receiveMax: number;
  /** Client's Maximum Packet Size (v5), 0 if absent (no limit beyond the protocol's). */
  maxPacketSize: number;
  /** MQTT 5 Request Problem Information (default true). */
  problemInfo: boolean;
}

export interface DisconnectCommand {
  t: 'disconnect';
  conn: ConnId;
  /** MQTT 5 reason code from the client's DISCONNECT, or the reason the broker closed it. */
  reason: number;
  /** False only after a normal DISCONNECT (reason 0x00) from the client [MQTT-3.1.2-10]. */
  publishWill: boolean;
  /** New Session Expiry Interval from an MQTT 5 DISCONNECT, if the client sent one. */
  expiryS?: number;
}

export interface SubscribeCommand {
  t: 'subscribe';
  conn: ConnId;
  pid: number;
  subs: SubscriptionRequest[];
  /** MQTT 5 Subscription Identifier, if sent. */
  subId?: number;
  /** The SUBACK codes the connection decided itself, one per filter of the packet in order:
   * TOPIC_FILTER_INVALID for a filter it refused, REFUSED_NONE where apply decides (the next of
   * `subs`). Absent: every filter of the packet is in `subs` (entries written before it existed). */
  refused?: number[];
}

export interface UnsubscribeCommand {
  t: 'unsubscribe';
  conn: ConnId;
  pid: number;
  filters: string[];
  /** As SubscribeCommand.refused, for the UNSUBACK: REFUSED_NONE where apply decides (the next of
   * `filters`). */
  refused?: number[];
}

/** The slot of `refused` whose code apply decides. */
export const REFUSED_NONE = -1;

/** QoS 1/2 publishes, and retained QoS 0 publishes. pid is absent for QoS 0. */
export interface PublishCommand {
  t: 'publish';
  conn: ConnId;
  pid?: number;
  msg: Message;
  /** A QoS 2 retry (DUP) over the publisher's own quota: only apply knows whether the id is held
   * (then it is a duplicate, answered PUBREC 0x00) or not (PUBREC 0x97, nothing held, nothing
   * routed). The message travels without payload. */
  quotaExceeded?: true;
  /** The other shards this QoS 1 publish is forwarded to (sorted, each once), as the proposing
   * serving node found them in its routes and placement rules (docs/scale-out.md "Forwarding"):
   * decided when proposed and carried in the entry, so every replica applies the same decision. */
  fwd?: string[];
}

/** PUBREL from a publisher: releases the held inbound QoS 2 packet id. */
export interface PubrelCommand {
  t: 'pubrel';
  conn: ConnId;
  pid: number;
}

export interface PublishesCommand {
  t: 'publishes';
  conn: ConnId;
  /** 2 to PUBLISHES_PER_COMMAND_MAX publishes and releases, each with this command's conn. */
  pubs: readonly (PublishCommand | PubrelCommand)[];
}

/** A command as the log orders it. time: integer ms since the Unix epoch, stamped by the log,
 * never decreasing along the log; apply reads time from nowhere else. */
export interface Entry {
  index: number;
  time: number;
  cmd: Command;
}

/** A packet as apply decides it; the connection encodes it for its protocol level. */
export type OutPacket =
  | {
      type: 'connack';
      sessionPresent: boolean;
      /** MQTT 5 reason code; the connection maps it to a 3.1.1 return code. */
      code: number;
      /** Set when apply assigned the client id. */
      assignedClientId?: string;
      /** A refusal the connection decides itself for a client of another shard (never apply):
       * MQTT 5 Server Reference and Reason String. */
      serverReference?: string;
      reasonString?: string;
    }
  | { type: 'suback'; pid: number; codes: number[] }
  | { type: 'unsuback'; pid: number; codes: number[] }
  | { type: 'puback' | 'pubrec' | 'pubcomp'; pid: number; code: number }
  | { type: 'pubrel'; pid: number }
  | {
      type: 'publish';
      /** Absent for QoS 0. */
      pid?: number;
      qos: QoS;
      retain: boolean;
      dup: boolean;
      /** The message as published; shared by every delivery of one fan-out. */
      msg: Message;
      /** Remaining Message Expiry Interval in seconds, when the message has one. */
      expiryS?: number;
      /** MQTT 5 Subscription Identifiers of the matching subscriptions. */
      subIds?: number[];
    };

export type Effect =
  | { t: 'send'; conn: ConnId; packet: OutPacket }
  /** Close the connection, with an MQTT 5 DISCONNECT reason where the protocol allows one. */
  | { t: 'close'; conn: ConnId; reason: number }
  /** Counters and log lines: apply itself does no I/O. */
  | { t: 'event'; kind: EventKind; detail?: Record<string, string | number | boolean> };
