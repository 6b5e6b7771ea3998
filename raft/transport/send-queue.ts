// Frames waiting for a peer link. Bounded in bytes: over the bound the oldest frames are dropped,
// because raft tolerates loss and the newest messages (latest term, latest commit) matter most.

export class SendQueue {
  private frames: Uint8Array[] = [];
  private head = 0; // frames[0..head) are already taken
  private bytes = 0;
  readonly bytesMax: number;

  constructor(bytesMax: number) {
    this.bytesMax = bytesMax;
  }

  get queuedBytes(): number {
    return this.bytes;
  }

  get length(): number {
    return this.frames.length - this.head;
  }

  /** Appends a frame, then drops from the front until within the bound. Returns how many frames
   * were dropped; the new frame itself is dropped when it alone exceeds the bound. */
  push(frame: Uint8Array): number {
    this.frames.push(frame);
    this.bytes += frame.length;
    let dropped = 0;
    while (this.bytes > this.bytesMax) {
      this.shift();
      dropped++;
    }
    return dropped;
  }

  shift(): Uint8Array | undefined {
    if (this.head === this.frames.length) return undefined;
    const frame = this.frames[this.head];
    this.frames[this.head] = EMPTY;
    this.head++;
    this.bytes -= frame.length;
    if (this.head === this.frames.length) {
      this.frames = [];
      this.head = 0;
    } else if (this.head >= COMPACT_AFTER && this.head * 2 >= this.frames.length) {
      this.frames = this.frames.slice(this.head);
      this.head = 0;
    }
    return frame;
  }

  clear(): number {
    const n = this.length;
    this.frames = [];
    this.head = 0;
    this.bytes = 0;
    return n;
  }
}

const EMPTY = new Uint8Array(0);
const COMPACT_AFTER = 1024;
