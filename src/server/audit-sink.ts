// What a broker node reports to the audit stream (docs/operations.md "The audit stream"): the node
// declares the sink it needs; src/cluster/audit-log.ts writes it to a file.
import type { OutPacket } from '../broker/commands.js';

/** What the broker node reports: one call per ack or delivery written to a client. */
export interface AuditSink {
  packet(p: OutPacket, clientId: string | null): void;
}
