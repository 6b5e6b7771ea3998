// A first-in first-out queue with O(1) amortised push and shift, for session queues that may hold
// tens of thousands of messages (Array.prototype.shift is O(n)).

export class Fifo<T> {
  private items: T[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  push(item: T): void {
    this.items.push(item);
  }

  /** The item `i` places behind the head. */
  at(i: number): T | undefined {
    return i < 0 ? undefined : this.items[this.head + i];
  }

  /** Replaces the item `i` places behind the head (which must exist). */
  set(i: number, item: T): void {
    if (i < 0 || i >= this.length) throw new RangeError(`no item ${i} in a queue of ${this.length}`);
    this.items[this.head + i] = item;
  }

  clear(): void {
    this.items = [];
    this.head = 0;
  }

  peek(): T | undefined {
    return this.items[this.head];
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head];
    this.head++;
    // Compact once the consumed prefix is at least half of the array, keeping shift amortised O(1).
    if (this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }

  /** A queue of the same items that later pushes and shifts of this one do not change. */
  copy(): Fifo<T> {
    const f = new Fifo<T>();
    f.items = this.items.slice(this.head);
    return f;
  }

  /** Items in queue order. */
  toArray(): T[] {
    return this.items.slice(this.head);
  }
}
