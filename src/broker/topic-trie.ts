// The subscription index: topic filters in a trie of levels, matched against a published topic
// (MQTT 5.0 §4.7). Used inside the replicated state machine, so the order of `match` callbacks
// must follow from the set of entries alone, never from the order they were added in: a replica
// that rebuilt its trie from a snapshot must deliver in the same order as one that never did.

const DOLLAR = 0x24; // '$'

class FilterNode<V> {
  /** Literal levels only: wildcard levels live in `plus` and `hash`, so a topic level that
   * happens to be `+` or `#` can never reach a wildcard node by exact lookup. */
  children: Map<string, FilterNode<V>> | undefined = undefined;
  plus: FilterNode<V> | undefined = undefined;
  hash: FilterNode<V> | undefined = undefined;
  /** Subscriber key to value, iterated in ascending key order. */
  readonly entries = new SortedStringMap<V>();
  /** The filter that ends at this node, as given to `add`. */
  filter = '';

  isEmpty(): boolean {
    return (
      this.entries.size === 0 &&
      this.plus === undefined &&
      this.hash === undefined &&
      (this.children === undefined || this.children.size === 0)
    );
  }
}

/** Index of the first element of sorted `list` that is not less than `key` (code-unit order). */
function lowerBound(list: readonly string[], key: string): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (list[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Keys per chunk before a chunk splits: bounds the array shift of one insert or delete. */
const chunkKeysMax = 128;

/**
 * A map from string keys to values, iterated in ascending code-unit order of the keys, never in
 * insertion order. Keys live in sorted chunks of at most `chunkKeysMax`, so an insert or delete
 * costs O(log n + chunkKeysMax) rather than shifting one array of all n keys (measured: 100k random
 * inserts into one flat sorted array took 1.5 s). Iterate with the chunk arrays directly, which
 * allocates nothing. Also used by the retained index for its child levels.
 */
export class SortedStringMap<V> {
  /** Invariant: no chunk is empty; keys ascend within a chunk and from each chunk to the next;
   * valueChunks[c][i] belongs to keyChunks[c][i]. */
  readonly keyChunks: string[][] = [];
  readonly valueChunks: V[][] = [];
  private count = 0;

  get size(): number {
    return this.count;
  }

  get(key: string): V | undefined {
    if (this.keyChunks.length === 0) return undefined;
    const c = this.chunkOf(key);
    const keys = this.keyChunks[c];
    const i = lowerBound(keys, key);
    return keys[i] === key ? this.valueChunks[c][i] : undefined;
  }

  /** Sets (replacing) the value under key; true if the key was new. */
  set(key: string, value: V): boolean {
    if (this.keyChunks.length === 0) {
      this.keyChunks.push([key]);
      this.valueChunks.push([value]);
      this.count = 1;
      return true;
    }
    const c = this.chunkOf(key);
    const keys = this.keyChunks[c];
    const values = this.valueChunks[c];
    const i = lowerBound(keys, key);
    if (keys[i] === key) {
      values[i] = value;
      return false;
    }
    keys.splice(i, 0, key);
    values.splice(i, 0, value);
    this.count++;
    if (keys.length > chunkKeysMax) {
      const half = keys.length >>> 1;
      this.keyChunks.splice(c + 1, 0, keys.splice(half));
      this.valueChunks.splice(c + 1, 0, values.splice(half));
    }
    return true;
  }

  /** Removes key; true if it was there. */
  delete(key: string): boolean {
    if (this.keyChunks.length === 0) return false;
    const c = this.chunkOf(key);
    const keys = this.keyChunks[c];
    const i = lowerBound(keys, key);
    if (keys[i] !== key) return false;
    keys.splice(i, 1);
    this.valueChunks[c].splice(i, 1);
    this.count--;
    if (keys.length === 0) {
      this.keyChunks.splice(c, 1);
      this.valueChunks.splice(c, 1);
    }
    return true;
  }

  /** The chunk that holds key if present: the first whose last key is not less than key, else the
   * last chunk. Requires at least one chunk. */
  private chunkOf(key: string): number {
    let lo = 0;
    let hi = this.keyChunks.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const keys = this.keyChunks[mid];
      if (keys[keys.length - 1] < key) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
}

export class TopicTrie<V> {
  private readonly root = new FilterNode<V>();
  private entryCount = 0;
  /** > 0 while `match` runs; the trie refuses changes then, since they would shift the arrays
   * being walked. */
  private matching = 0;
  /** The depth-first stack of `match`, kept between calls so a match allocates no frames. */
  private readonly stackNodes: FilterNode<V>[] = [];
  private readonly stackStarts: number[] = [];
  private readonly collector = new ValueCollector<V>();
  private lastFilters = 0;

  /** Number of (filter, key) entries. */
  get size(): number {
    return this.entryCount;
  }

  /** Sets (replacing) the value stored under (filter, key). Returns true if it was new. */
  add(filter: string, key: string, value: V): boolean {
    this.assertNotMatching();
    let node = this.root;
    for (const level of filter.split('/')) node = childFor(node, level);
    node.filter = filter;
    if (!node.entries.set(key, value)) return false;
    this.entryCount++;
    return true;
  }

  /** Removes (filter, key); returns the removed value or undefined. Prunes empty nodes. */
  remove(filter: string, key: string): V | undefined {
    this.assertNotMatching();
    const levels = filter.split('/');
    const path: FilterNode<V>[] = [this.root];
    for (const level of levels) {
      const next = childOf(path[path.length - 1], level);
      if (next === undefined) return undefined;
      path.push(next);
    }
    const node = path[path.length - 1];
    const value = node.entries.get(key);
    if (!node.entries.delete(key)) return undefined;
    this.entryCount--;
    for (let d = levels.length; d > 0 && path[d].isEmpty(); d--) detach(path[d - 1], levels[d - 1]);
    return value;
  }

  get(filter: string, key: string): V | undefined {
    let node: FilterNode<V> | undefined = this.root;
    for (const level of filter.split('/')) {
      node = childOf(node, level);
      if (node === undefined) return undefined;
    }
    return node.entries.get(key);
  }

  /** Calls fn for every (key, value) stored under exactly `filter` (no wildcard matching). */
  forEachAt(filter: string, fn: (key: string, value: V) => void): void {
    let node: FilterNode<V> | undefined = this.root;
    for (const level of filter.split('/')) {
      node = childOf(node, level);
      if (node === undefined) return;
    }
    const { keyChunks, valueChunks } = node.entries;
    for (let c = 0; c < keyChunks.length; c++) {
      const keys = keyChunks[c] as string[];
      const values = valueChunks[c] as V[];
      for (let i = 0; i < keys.length; i++) fn(keys[i] as string, values[i] as V);
    }
  }

  /**
   * Calls fn once per (filter, key) whose filter matches topic: `+` matches one level, `#` this
   * level and all below including the parent (`a/#` matches `a`) [MQTT-4.7.1-2]; a topic whose
   * first level starts with `$` is not matched by a filter starting with `+` or `#`
   * [MQTT-4.7.2-1].
   *
   * Order, fixed by the set of entries alone: depth first along the topic's levels; at each node
   * first the entries of its `#` child, then the `+` subtree, then the literal subtree; where the
   * topic ends, the node's own entries and then those of its `#` child; within one filter, keys in
   * ascending code-unit order. fn must not add or remove entries (that throws).
   */
  match(topic: string, fn: (key: string, value: V, filter: string) => void): void {
    this.visit(topic, { visit: fn });
  }

  /** Writes the value of every matching (filter, key) to out[0], out[1], … in `match` order and
   * returns how many; sets `matchedFilters`. Entries of out beyond the count are left as they
   * were. Allocates nothing and truncates no array (setting `length` is a runtime call): the
   * routing hot path passes a scratch array it owns. */
  matchValues(topic: string, out: V[]): number {
    const collector = this.collector;
    collector.out = out;
    collector.count = 0;
    collector.filters = 0;
    try {
      this.visit(topic, collector);
      this.lastFilters = collector.filters;
      return collector.count;
    } finally {
      collector.out = noValues;
    }
  }

  /** Distinct filters that matched in the last `matchValues`: with at most one, no key repeats. */
  get matchedFilters(): number {
    return this.lastFilters;
  }

  private visit(topic: string, visitor: MatchVisitor<V>): void {
    const outermost = this.matching === 0;
    const nodes = outermost ? this.stackNodes : [];
    const starts = outermost ? this.stackStarts : [];
    this.matching++;
    try {
      walk(this.root, topic, nodes, starts, visitor);
    } finally {
      // The stack is overwritten, not truncated: it holds at most one walk's worth of nodes.
      this.matching--;
    }
  }

  private assertNotMatching(): void {
    if (this.matching > 0) throw new Error('TopicTrie changed from inside its own match callback');
  }
}

interface MatchVisitor<V> {
  visit(key: string, value: V, filter: string): void;
  /** Called before the entries of each filter that matches, if at all. */
  nextFilter?(): void;
}

const noValues: never[] = [];

/** The visitor of `matchValues`: one per trie, pointed at the caller's array for one call. */
class ValueCollector<V> implements MatchVisitor<V> {
  out: V[] = noValues;
  count = 0;
  filters = 0;

  nextFilter(): void {
    this.filters++;
  }

  visit(_key: string, value: V): void {
    this.out[this.count++] = value;
  }
}

/**
 * Iterative, so a topic or filter of tens of thousands of levels cannot overflow the call stack.
 * Each frame is a node and the offset in topic where its next level starts; the levels are found
 * with indexOf instead of split, and a level string is cut only where a literal child may match.
 * An offset past topic.length means every level has been consumed.
 */
function walk<V>(root: FilterNode<V>, topic: string, nodes: FilterNode<V>[], starts: number[], visitor: MatchVisitor<V>): void {
  const dollarTopic = topic.charCodeAt(0) === DOLLAR;
  const topicEnd = topic.length;
  let top = 0;
  nodes[0] = root;
  starts[0] = 0;
  while (top >= 0) {
    const node = nodes[top];
    const start = starts[top];
    top--;
    if (start > topicEnd) {
      emit(node, visitor);
      if (node.hash !== undefined) emit(node.hash, visitor);
      continue;
    }
    const wildcards = start > 0 || !dollarTopic;
    if (wildcards && node.hash !== undefined) emit(node.hash, visitor);
    let end = topic.indexOf('/', start);
    if (end < 0) end = topicEnd;
    // Pushed in reverse of the documented visiting order.
    const literal = node.children === undefined ? undefined : node.children.get(topic.slice(start, end));
    if (literal !== undefined) {
      nodes[++top] = literal;
      starts[top] = end + 1;
    }
    if (wildcards && node.plus !== undefined) {
      nodes[++top] = node.plus;
      starts[top] = end + 1;
    }
  }
}

function emit<V>(node: FilterNode<V>, visitor: MatchVisitor<V>): void {
  const { keyChunks, valueChunks } = node.entries;
  if (keyChunks.length > 0) visitor.nextFilter?.();
  for (let c = 0; c < keyChunks.length; c++) {
    const keys = keyChunks[c];
    const values = valueChunks[c];
    for (let i = 0; i < keys.length; i++) visitor.visit(keys[i], values[i], node.filter);
  }
}

function childOf<V>(node: FilterNode<V>, level: string): FilterNode<V> | undefined {
  if (level === '+') return node.plus;
  if (level === '#') return node.hash;
  return node.children?.get(level);
}

function childFor<V>(node: FilterNode<V>, level: string): FilterNode<V> {
  const existing = childOf(node, level);
  if (existing !== undefined) return existing;
  const created = new FilterNode<V>();
  if (level === '+') node.plus = created;
  else if (level === '#') node.hash = created;
  else {
    node.children ??= new Map();
    node.children.set(level, created);
  }
  return created;
}

function detach<V>(parent: FilterNode<V>, level: string): void {
  if (level === '+') parent.plus = undefined;
  else if (level === '#') parent.hash = undefined;
  else {
    parent.children?.delete(level);
    if (parent.children?.size === 0) parent.children = undefined;
  }
}
