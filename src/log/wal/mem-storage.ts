// A Storage in memory that models what a power cut leaves (for unit tests): a file keeps the bytes
// it had at its last sync, and of what was appended since only a random prefix survives, in which
// each 512-byte sector may or may not have reached the disk (pages are written back in any order).
// Directory changes since the last syncDir survive as a random prefix of them, in order (a
// journalling file system commits metadata in order). Every call completes in a later turn, as
// real I/O does, and after the cut the old instance refuses every call.
import type { AppendFile, Storage } from './storage.js';

const SECTOR = 512;

interface MemFile {
  data: Uint8Array;
  length: number;
  /** The bytes as of the last sync. */
  durable: Uint8Array;
}

type DirOp = { t: 'create'; name: string; file: MemFile } | { t: 'rename'; from: string; to: string } | { t: 'remove'; name: string };

const later = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class PowerCutError extends Error {
  constructor() {
    super('the power is off');
    this.name = 'PowerCutError';
  }
}

export class MemStorage implements Storage {
  /** fdatasync calls so far, for tests that count syncs per batch. */
  syncs = 0;
  private names: Map<string, MemFile>;
  private durableNames: Map<string, MemFile>;
  private ops: DirOp[] = [];
  private dead = false;
  private syncGate: Promise<void> | null = null;
  private held = 0;
  private syncError: Error | null = null;
  /** fdatasync calls that failed (failSyncs). */
  failedSyncs = 0;

  constructor(files: Map<string, Uint8Array> = new Map()) {
    this.names = new Map();
    for (const [name, bytes] of files) this.names.set(name, { data: bytes.slice(), length: bytes.length, durable: bytes.slice() });
    this.durableNames = new Map(this.names);
  }

  /** The current bytes of a file (what a reader would see before any cut); null when absent. */
  bytes(name: string): Uint8Array | null {
    const f = this.names.get(name);
    return f === undefined ? null : f.data.slice(0, f.length);
  }

  /** Overwrites bytes of a file in place, synced (for tests that damage a synced log). */
  damage(name: string, at: number, value: number): void {
    const f = this.mustGet(name);
    f.data[at] = value;
    f.durable = f.data.slice(0, f.length);
  }

  /** Cuts the power: this instance stops working; the returned one holds what survived. `random`
   * gives floats in [0, 1). */
  powerCut(random: () => number): MemStorage {
    this.dead = true;
    const names = new Map(this.durableNames);
    const kept = Math.floor(random() * (this.ops.length + 1));
    for (const op of this.ops.slice(0, kept)) apply(names, op);
    const out = new Map<string, Uint8Array>();
    for (const [name, f] of names) out.set(name, torn(f, random));
    return new MemStorage(out);
  }

  private async alive(): Promise<void> {
    if (this.dead) throw new PowerCutError();
    await later();
    if (this.dead) throw new PowerCutError();
  }

  private mustGet(name: string): MemFile {
    const f = this.names.get(name);
    if (f === undefined) throw Object.assign(new Error(`ENOENT: ${name}`), { code: 'ENOENT' });
    return f;
  }

  private change(op: DirOp): void {
    apply(this.names, op);
    this.ops.push(op);
  }

  async list(): Promise<string[]> {
    await this.alive();
    return [...this.names.keys()].sort();
  }

  async read(name: string): Promise<Uint8Array | null> {
    await this.alive();
    return this.bytes(name);
  }

  async create(name: string): Promise<AppendFile> {
    await this.alive();
    if (this.names.has(name)) throw Object.assign(new Error(`EEXIST: ${name}`), { code: 'EEXIST' });
    const file: MemFile = { data: new Uint8Array(1024), length: 0, durable: new Uint8Array(0) };
    this.change({ t: 'create', name, file });
    return this.handle(file);
  }

  async openAppend(name: string): Promise<AppendFile> {
    await this.alive();
    return this.handle(this.mustGet(name));
  }

  async rename(from: string, to: string): Promise<void> {
    await this.alive();
    this.mustGet(from);
    this.change({ t: 'rename', from, to });
  }

  async truncate(name: string, length: number): Promise<void> {
    await this.alive();
    const f = this.mustGet(name);
    if (length < f.length) f.data.fill(0, length, f.length);
    f.length = Math.min(f.length, length);
    f.durable = f.data.slice(0, f.length);
  }

  async remove(name: string): Promise<void> {
    await this.alive();
    this.mustGet(name);
    this.change({ t: 'remove', name });
  }

  async syncDir(): Promise<void> {
    await this.alive();
    this.durableNames = new Map(this.names);
    this.ops = [];
  }

  /** Every later fdatasync fails with `err` and, as Linux does after a writeback error, the bytes
   * appended since the file's last good sync are gone from the page cache: a retried sync would
   * then succeed without them on disk. */
  failSyncs(err: Error): void {
    this.syncError = err;
  }

  /** Holds every sync until the returned function is called (for tests of what waits for one). */
  holdSyncs(): () => void {
    let release = (): void => {};
    this.syncGate = new Promise<void>((resolve) => {
      release = () => {
        this.syncGate = null;
        resolve();
      };
    });
    return release;
  }

  /** A sync is waiting on holdSyncs(). */
  get syncsHeld(): number {
    return this.held;
  }

  private handle(file: MemFile): AppendFile {
    let closed = false;
    const open = async (): Promise<void> => {
      await this.alive();
      if (closed) throw new Error('file closed');
    };
    return {
      append: async (chunks) => {
        await open();
        for (const c of chunks) {
          if (file.length + c.length > file.data.length) {
            const grown = new Uint8Array(Math.max(file.data.length * 2, file.length + c.length));
            grown.set(file.data.subarray(0, file.length));
            file.data = grown;
          }
          file.data.set(c, file.length);
          file.length += c.length;
        }
      },
      sync: async () => {
        await open();
        while (this.syncGate !== null) {
          this.held++;
          await this.syncGate;
          this.held--;
          await this.alive();
        }
        if (this.syncError !== null) {
          this.failedSyncs++;
          file.length = file.durable.length;
          throw this.syncError;
        }
        this.syncs++;
        file.durable = file.data.slice(0, file.length);
      },
      close: async () => {
        await open();
        closed = true;
      },
    };
  }
}

function apply(names: Map<string, MemFile>, op: DirOp): void {
  if (op.t === 'create') names.set(op.name, op.file);
  else if (op.t === 'remove') names.delete(op.name);
  else {
    const f = names.get(op.from);
    if (f === undefined) return;
    names.delete(op.from);
    names.set(op.to, f);
  }
}

/** The durable bytes, then a random prefix of the unsynced ones with random sectors missing. */
function torn(f: MemFile, random: () => number): Uint8Array {
  const durable = f.durable;
  const current = f.data.subarray(0, f.length);
  const unsynced = current.length - durable.length;
  if (unsynced <= 0) return durable.slice();
  const keep = Math.floor(random() * (unsynced + 1));
  const out = new Uint8Array(durable.length + keep);
  out.set(durable);
  for (let at = durable.length; at < out.length; ) {
    const sectorEnd = Math.min(out.length, (Math.floor(at / SECTOR) + 1) * SECTOR);
    if (random() < 0.75) out.set(current.subarray(at, sectorEnd), at);
    at = sectorEnd;
  }
  return out;
}

/** A deterministic random source for powerCut, from a seed (mulberry32). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
