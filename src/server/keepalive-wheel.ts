import { performance } from 'node:perf_hooks';

// Keep-alive deadlines of every connection on one timer (docs/design.md "Performance principles": almost
// nothing per idle connection). A Node Timeout with its callback cost about 210 bytes per idle
// connection (heap snapshot, bench idle scenario); a wheel member costs three small integers on
// the connection and a slot in an array. Deadlines fire up to one slot late, never early, which
// [MQTT-3.1.2-24] allows: the server disconnects once one and a half keep-alives have passed.

/** Something with a deadline on the wheel; the wheel owns the three fields. */
export interface WheelMember {
  /** Deadline in ms of the wheel's clock, rounded up to whole ms. */
  wheelAt: number;
  /** Index of the slot holding the member, -1 when not scheduled. */
  wheelSlot: number;
  /** Position in that slot's array. */
  wheelIndex: number;
  /** The deadline has passed; the member is no longer scheduled. */
  wheelDue(now: number): void;
}

export interface WheelOptions {
  /** Width of one slot in ms: the most a deadline fires late. */
  slotMs?: number;
  /** Slots per lap; a later deadline waits in its slot for further laps. */
  slotCount?: number;
  clock?: () => number;
  /** False: no timer runs and the owner calls advance() (tests). */
  autoTick?: boolean;
}

export const WHEEL_SLOT_MS = 250;
export const WHEEL_SLOT_COUNT = 512;

export class KeepAliveWheel {
  private readonly slotMs: number;
  private readonly slots: WheelMember[][];
  private readonly clock: () => number;
  private readonly autoTick: boolean;
  private timer: NodeJS.Timeout | null = null;
  private members = 0;
  /** The next tick (clock / slotMs) to process. */
  private nextTick: number;
  /** Members found due in one slot, reused so a tick allocates nothing. */
  private readonly due: WheelMember[] = [];
  private readonly tickBound = (): void => this.advance(this.clock());

  constructor(opts: WheelOptions = {}) {
    this.slotMs = opts.slotMs ?? WHEEL_SLOT_MS;
    this.slots = Array.from({ length: opts.slotCount ?? WHEEL_SLOT_COUNT }, () => []);
    this.clock = opts.clock ?? (() => performance.now());
    this.autoTick = opts.autoTick ?? true;
    this.nextTick = Math.floor(this.clock() / this.slotMs);
  }

  /** Number of scheduled members. */
  get size(): number {
    return this.members;
  }

  /** Schedules m at `at` (ms of the clock), replacing its earlier deadline. */
  schedule(m: WheelMember, at: number): void {
    this.cancel(m);
    const deadline = Math.ceil(at);
    // The slot of the tick in which the deadline has passed, and never one already processed.
    const tick = Math.max(Math.ceil(deadline / this.slotMs), this.nextTick);
    const slot = this.slots[tick % this.slots.length] as WheelMember[];
    m.wheelAt = deadline;
    m.wheelSlot = tick % this.slots.length;
    m.wheelIndex = slot.length;
    slot.push(m);
    this.members++;
    if (this.autoTick && this.timer === null) {
      this.timer = setInterval(this.tickBound, this.slotMs);
      this.timer.unref();
    }
  }

  cancel(m: WheelMember): void {
    if (m.wheelSlot < 0) return;
    const slot = this.slots[m.wheelSlot] as WheelMember[];
    const last = slot.pop() as WheelMember;
    if (last !== m) {
      slot[m.wheelIndex] = last;
      last.wheelIndex = m.wheelIndex;
    }
    m.wheelSlot = -1;
    this.members--;
    if (this.members === 0 && this.timer !== null) {
      clearInterval(this.timer);
      this.timer = null;
    }
  }

  /** Fires every member whose deadline is at or before now, slot by slot; at most one lap of
   * slots per call, however long the process was stopped. */
  advance(now: number): void {
    const last = Math.floor(now / this.slotMs);
    const first = Math.max(this.nextTick, last - this.slots.length + 1);
    for (let tick = first; tick <= last; tick++) this.fireSlot(tick % this.slots.length, now);
    if (last >= this.nextTick) this.nextTick = last + 1;
  }

  private fireSlot(index: number, now: number): void {
    const slot = this.slots[index] as WheelMember[];
    const due = this.due;
    for (let i = 0; i < slot.length; i++) {
      const m = slot[i] as WheelMember;
      if (m.wheelAt <= now) due.push(m);
    }
    // Removed before any callback runs: a callback may schedule itself or others again.
    for (let i = 0; i < due.length; i++) this.cancel(due[i] as WheelMember);
    try {
      for (let i = 0; i < due.length; i++) (due[i] as WheelMember).wheelDue(now);
    } finally {
      due.length = 0;
    }
  }
}

/** The process's wheel for connection keep-alive. */
export const keepAliveWheel = new KeepAliveWheel();
