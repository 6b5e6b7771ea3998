// The retained-message index: one value per topic, in a trie of levels, matched by a subscription's
// filter (MQTT 5.0 §3.3.1.3, §4.7). Part of the replicated state, so match order is fixed by the
// stored topics alone: children are kept in sorted order, never walked in Map insertion order.

import { SortedStringMap } from './topic-trie.js';

const DOLLAR = 0x24; // '$'
/** Stack frame depth meaning "emit this node and everything below it", for a `#` level. */
const SUBTREE = -1;

class TopicNode<V> {
  /** Child levels in sorted order, so wildcard matches visit them in that order. */
  children: SortedStringMap<TopicNode<V>> | undefined = undefined;
  /** Separate from `value` so that undefined can be stored as a value. */
  has = false;
  value: V | undefined = undefined;
  topic = '';
}

export class RetainedTrie<V> {
  private readonly root = new TopicNode<V>();
  private count = 0;

  /** Number of stored topics. */
  get size(): number {
    return this.count;
  }

  set(topic: string, value: V): void {
    let node = this.root;
    for (const level of topic.split('/')) node = childFor(node, level);
    if (!node.has) this.count++;
    node.has = true;
    node.value = value;
    node.topic = topic;
  }

  /** Removes the value stored under topic; false if there was none. Prunes empty nodes. */
  delete(topic: string): boolean {
    const levels = topic.split('/');
    const path: TopicNode<V>[] = [this.root];
    for (const level of levels) {
      const next = path[path.length - 1].children?.get(level);
      if (next === undefined) return false;
      path.push(next);
    }
    const node = path[path.length - 1];
    if (!node.has) return false;
    node.has = false;
    node.value = undefined;
    this.count--;
    for (let d = levels.length; d > 0 && !path[d].has && path[d].children === undefined; d--) {
      detach(path[d - 1], levels[d - 1]);
    }
    return true;
  }

  get(topic: string): V | undefined {
    let node: TopicNode<V> | undefined = this.root;
    for (const level of topic.split('/')) {
      node = node.children?.get(level);
      if (node === undefined) return undefined;
    }
    return node.value;
  }

  /**
   * Calls fn for each stored topic that filter matches: `+` one level, `#` this level and all
   * below including the parent [MQTT-4.7.1-2]; a topic starting with `$` is not matched by a
   * filter starting with `+` or `#` [MQTT-4.7.2-1].
   *
   * Order: topics sorted level by level (code-unit order within a level, a parent before its
   * descendants), which is string order with `/` ranking below every other character. Walks an
   * explicit stack, so filters of many levels cannot overflow the call stack.
   */
  match(filter: string, fn: (topic: string, value: V) => void): void {
    const levels = filter.split('/');
    const dollarGuard = levels[0] === '+' || levels[0] === '#';
    const nodes: TopicNode<V>[] = [this.root];
    const depths: number[] = [0];
    while (nodes.length > 0) {
      const node = nodes.pop() as TopicNode<V>;
      const depth = depths.pop() as number;
      if (depth === SUBTREE || depth === levels.length) {
        if (node.has) fn(node.topic, node.value as V);
        if (depth === SUBTREE) pushChildren(node, SUBTREE, false, nodes, depths);
        continue;
      }
      const level = levels[depth];
      const skipDollar = depth === 0 && dollarGuard;
      if (level === '#') {
        // The parent: `a/#` matches `a`. The root holds no topic, since every topic has a level.
        if (node.has) fn(node.topic, node.value as V);
        pushChildren(node, SUBTREE, skipDollar, nodes, depths);
      } else if (level === '+') {
        pushChildren(node, depth + 1, skipDollar, nodes, depths);
      } else {
        const child = node.children?.get(level);
        if (child !== undefined) {
          nodes.push(child);
          depths.push(depth + 1);
        }
      }
    }
  }

  /** Every stored (topic, value), in no particular order; for snapshots. */
  *entries(): IterableIterator<[string, V]> {
    const stack: TopicNode<V>[] = [this.root];
    while (stack.length > 0) {
      const node = stack.pop() as TopicNode<V>;
      if (node.has) yield [node.topic, node.value as V];
      if (node.children !== undefined) for (const chunk of node.children.valueChunks) stack.push(...chunk);
    }
  }
}

/** Pushes the children in descending order, so that they pop in ascending order. */
function pushChildren<V>(node: TopicNode<V>, depth: number, skipDollar: boolean, nodes: TopicNode<V>[], depths: number[]): void {
  if (node.children === undefined) return;
  const { keyChunks, valueChunks } = node.children;
  for (let c = keyChunks.length - 1; c >= 0; c--) {
    const levels = keyChunks[c];
    for (let i = levels.length - 1; i >= 0; i--) {
      if (skipDollar && levels[i].charCodeAt(0) === DOLLAR) continue;
      nodes.push(valueChunks[c][i]);
      depths.push(depth);
    }
  }
}

function childFor<V>(node: TopicNode<V>, level: string): TopicNode<V> {
  const existing = node.children?.get(level);
  if (existing !== undefined) return existing;
  const created = new TopicNode<V>();
  node.children ??= new SortedStringMap();
  node.children.set(level, created);
  return created;
}

function detach<V>(parent: TopicNode<V>, level: string): void {
  parent.children?.delete(level);
  if (parent.children?.size === 0) parent.children = undefined;
}
