// What the embedding API (src/index.ts) hears of a node: the serving node reports each applied
// command of its clients and each QoS 0 publish it routes. The node asks `active` first and
// calls nothing while it is false, so a node nobody listens to builds no event and pays one
// property read per entry.
import type { Command, ConnId, Effect, Message } from '../broker/commands.js';

export interface NodeObserver {
  /** False: the node calls neither applied() nor routed(). */
  readonly active: boolean;
  /** A command applied while serving, with the effects apply made for it; `leaving`: the client
   * id a disconnect ended (known only before apply). */
  applied(cmd: Command, out: readonly Effect[], leaving: string | null, clientIdOf: (conn: ConnId) => string | null): void;
  /** A QoS 0 publish routed without the log. */
  routed(from: ConnId, msg: Message, clientIdOf: (conn: ConnId) => string | null): void;
  /** Serving started (a single node: once listening; a cluster node: as leader with a lease) or
   * ended (lease lost, or stop). Called whether or not `active`. */
  serving(on: boolean, period: number): void;
}
