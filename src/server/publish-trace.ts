// The live trace of the status page (docs/operations.md "Live trace"): the last publishes whose
// topic matches a watched filter, with the times this node observes each step of their way — read
// from the socket, appended to the log at an index, committed (and on which nodes the leader knew it
// stored), applied, delivered to how many sessions, acknowledged to the publisher. It is read-only:
// the message path calls it behind one boolean (`on`), which is false while nobody watches, so an
// unwatched node pays one field read per PUBLISH and `evaluations` stays 0.

import { topicMatches } from '../broker/acl.js';
import type { Command, ConnId, Effect, Entry, Message } from '../broker/commands.js';

/** Filters watched at once; the health port refuses the next watcher with 503. */
export const TRACE_WATCHERS_MAX = 16;
/** Traced publishes kept; the oldest is forgotten (and stops being followed) first. */
export const TRACE_RECORDS_MAX = 64;

/** One traced publish. Times are ms since the Unix epoch on this node's wall clock; 0: not (yet). */
export interface TraceRecord {
  /** Numbered in the order read, from 1. */
  seq: number;
  /** The tracer's version at this record's latest change (a watcher sends what changed). */
  v: number;
  /** Watchers whose filter matched the topic. */
  watchers: number[];
  topic: string;
  qos: number;
  retain: boolean;
  bytes: number;
  client: string | null;
  readAt: number;
  /** 'log': through the log; 'direct': QoS 0 non-retained, routed at once without the log. */
  path: 'log' | 'direct';
  /** Raft index and term of the append; 0 on a single node, whose log has no index to report here. */
  index: number;
  term: number;
  appendedAt: number;
  committedAt: number;
  /** Nodes that held the entry when it committed, as the leader knew (its own id included). */
  storedOn: number[];
  appliedAt: number;
  /** Sessions the message was written to when applied (or routed); -1: not yet. */
  delivered: number;
  /** 'puback' / 'pubrec' written to the publisher; null for QoS 0 or not yet. */
  ack: string | null;
  ackedAt: number;
  /** Internal: the message read, to find its proposal; the connection and packet id, to find
   * its applied entry; the raft proposal's ticket, whose index the driver may still move (an
   * entry the core appended first). Not sent to watchers. */
  msg: Message | null;
  conn: ConnId;
  pid: number;
  ticket: { readonly index: number; readonly term: number } | null;
}

/** What a watcher is sent of a record. */
type ShownRecord = Omit<TraceRecord, 'msg' | 'conn' | 'pid' | 'ticket' | 'watchers'>;

export class PublishTracer {
  /** True while a watcher is open: the message path calls the tracer only then. */
  on = false;
  /** Times a PUBLISH was matched against the watched filters (docs/operations.md "Metrics"). */
  evaluations = 0;
  /** Bumped at every change of a record. */
  version = 0;
  private readonly watchers = new Map<number, string>();
  private nextWatcher = 1;
  private nextSeq = 1;
  /** Oldest first, at most TRACE_RECORDS_MAX. */
  readonly records: TraceRecord[] = [];
  /** The record read last, until its proposal is seen (the proposal follows in the same turn). */
  private reading: TraceRecord | null = null;

  /** Starts watching `filter` (already validated); null when TRACE_WATCHERS_MAX are open. */
  open(filter: string): number | null {
    if (this.watchers.size >= TRACE_WATCHERS_MAX) return null;
    const id = this.nextWatcher++;
    this.watchers.set(id, filter);
    this.on = true;
    return id;
  }

  close(id: number): void {
    this.watchers.delete(id);
    this.on = this.watchers.size > 0;
    if (!this.on) {
      this.records.length = 0;
      this.reading = null;
    }
  }

  get watching(): number {
    return this.watchers.size;
  }

  // ---- the message path: each called only while `on` ----

  /** A PUBLISH was read and admitted (inbound-publish.ts). */
  read(conn: ConnId, client: string | null, msg: Message, pid: number): void {
    this.evaluations++;
    let matched: number[] | null = null;
    for (const [id, filter] of this.watchers) {
      if (!topicMatches(filter, msg.topic)) continue;
      matched ??= [];
      matched.push(id);
    }
    this.reading = null;
    if (matched === null) return;
    const r: TraceRecord = {
      seq: this.nextSeq++,
      v: ++this.version,
      watchers: matched,
      topic: msg.topic,
      qos: msg.qos,
      retain: msg.retain,
      bytes: msg.payload.length,
      client,
      readAt: Date.now(),
      path: msg.qos === 0 && !msg.retain ? 'direct' : 'log',
      index: 0,
      term: 0,
      appendedAt: 0,
      committedAt: 0,
      storedOn: [],
      appliedAt: 0,
      delivered: -1,
      ack: null,
      ackedAt: 0,
      msg,
      conn,
      pid,
      ticket: null,
    };
    if (this.records.length >= TRACE_RECORDS_MAX) this.records.shift();
    this.records.push(r);
    this.reading = r;
  }

  /** A command was proposed to the leader's log under `ticket` (raft-log.ts). */
  appended(cmd: Command, ticket: { readonly index: number; readonly term: number }): void {
    const r = this.reading;
    if (r === null || cmd.t !== 'publish' || cmd.msg !== r.msg) return;
    this.reading = null;
    r.ticket = ticket;
    r.index = ticket.index;
    r.term = ticket.term;
    r.appendedAt = Date.now();
    r.v = ++this.version;
  }

  /** Entries `first`..`last` committed; `holders(index)` names the nodes known to store it. */
  committed(first: number, last: number, holders: (index: number) => number[]): void {
    for (let i = 0; i < this.records.length; i++) {
      const r = this.records[i] as TraceRecord;
      if (r.ticket !== null) r.index = r.ticket.index;
      if (r.index === 0 || r.committedAt !== 0 || r.index < first || r.index > last) continue;
      r.committedAt = Date.now();
      r.storedOn = holders(r.index);
      r.v = ++this.version;
    }
  }

  /** An entry was applied and its effects `out` executed (broker-node.ts). */
  applied(e: Entry, out: readonly Effect[] | null): void {
    const cmd = e.cmd;
    if (cmd.t !== 'publish') return;
    const pid = cmd.pid ?? 0;
    for (let i = this.records.length - 1; i >= 0; i--) {
      const r = this.records[i] as TraceRecord;
      if (r.appliedAt !== 0 || r.path !== 'log') continue;
      if (r.index !== 0 ? r.index !== e.index : r.conn !== cmd.conn || r.pid !== pid || r.msg?.topic !== cmd.msg.topic) continue;
      const now = Date.now();
      // A single node's log has no raft index: its entry's index stands for the append.
      if (r.index === 0) {
        r.index = e.index;
        r.appendedAt = r.readAt;
        r.committedAt = now;
      }
      r.appliedAt = now;
      this.noteEffects(r, out, now);
      r.msg = null;
      r.v = ++this.version;
      return;
    }
  }

  /** A QoS 0 non-retained message was routed at once, with effects `out` (broker-node.ts). */
  routed(msg: Message, out: readonly Effect[]): void {
    for (let i = this.records.length - 1; i >= 0; i--) {
      const r = this.records[i] as TraceRecord;
      if (r.msg !== msg) continue;
      const now = Date.now();
      r.appliedAt = now;
      this.noteEffects(r, out, now);
      r.msg = null;
      r.v = ++this.version;
      return;
    }
  }

  private noteEffects(r: TraceRecord, out: readonly Effect[] | null, now: number): void {
    let delivered = 0;
    if (out !== null) {
      for (let i = 0; i < out.length; i++) {
        const f = out[i] as Effect;
        if (f.t !== 'send') continue;
        if (f.packet.type === 'publish') delivered++;
        else if (f.conn === r.conn && (f.packet.type === 'puback' || f.packet.type === 'pubrec') && f.packet.pid === r.pid) {
          r.ack = f.packet.type;
          r.ackedAt = now;
        }
      }
    }
    r.delivered = delivered;
  }

  /** The records of watcher `id` changed after version `since`, without internal fields. */
  changedFor(id: number, since: number): ShownRecord[] {
    const out: ShownRecord[] = [];
    for (const r of this.records) {
      if (r.v <= since || !r.watchers.includes(id)) continue;
      const { msg: _m, conn: _c, pid: _p, ticket: _t, watchers: _w, ...shown } = r;
      out.push(shown);
    }
    return out;
  }
}
