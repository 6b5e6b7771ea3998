// Outbound Topic Aliases (§3.3.2.3.4): per connection, the broker gives topics it sends aliases
// from 1 up to min(client's Topic Alias Maximum, --topic-alias-maximum), so a client that asks
// for none (or 0) never sees one [MQTT-3.3.2-9]. When every alias is taken, the least recently
// sent topic gives up its alias to the new one (LRU): the next PUBLISH carries topic and alias
// again, which replaces the client's mapping. The map starts empty with every connection
// [MQTT-3.3.2-7].

export class OutboundAliases {
  /** topic → alias, in least- to most-recently used order (Map keeps insertion order). */
  private readonly byTopic = new Map<string, number>();
  /** Alias numbers given back by cancel(), reused before new ones. */
  private readonly free: number[] = [];
  private next = 1;
  /** After assign(): true when the client already knows the alias, so the topic can be omitted. */
  known = false;

  /** @param max the largest alias this connection may use; at least 1. */
  constructor(private readonly max: number) {}

  /** The alias for `topic`, assigning one (and evicting the least recently used) if needed. */
  assign(topic: string): number {
    const have = this.byTopic.get(topic);
    if (have !== undefined) {
      this.byTopic.delete(topic);
      this.byTopic.set(topic, have);
      this.known = true;
      return have;
    }
    this.known = false;
    let alias = this.free.pop();
    if (alias === undefined && this.next <= this.max) alias = this.next++;
    if (alias === undefined) {
      const [lru, n] = this.byTopic.entries().next().value as [string, number];
      this.byTopic.delete(lru);
      alias = n;
    }
    this.byTopic.set(topic, alias);
    return alias;
  }

  /** Undoes the last assign() of a new alias (the packet was not sent). The client may still map
   * the alias to an evicted topic; it gets the topic again with the alias before using it. */
  cancel(topic: string): void {
    const alias = this.byTopic.get(topic);
    if (alias === undefined) return;
    this.byTopic.delete(topic);
    this.free.push(alias);
  }

  get size(): number {
    return this.byTopic.size;
  }
}
