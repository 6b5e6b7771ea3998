// The files of a data directory, behind an interface: the write-ahead log and the snapshots go
// through it, so unit tests run them on MemStorage (mem-storage.ts), which at a simulated power cut
// keeps only what was synced. FsStorage is the real one. Every method rejects on an I/O error; the
// caller stops the node and never retries (an fsync retried after EIO can report success for
// pages the kernel already dropped).
import { constants, type FileHandle, open, readdir, readFile, rename, truncate, unlink } from 'node:fs/promises';
import { join } from 'node:path';

/** A file open for appending. */
export interface AppendFile {
  /** Appends the chunks at the end, in order. */
  append(chunks: readonly Uint8Array[]): Promise<void>;
  /** fdatasync: the bytes appended so far, and the file size, are on disk when this resolves. */
  sync(): Promise<void>;
  close(): Promise<void>;
}

export interface Storage {
  /** The names in the directory. */
  list(): Promise<string[]>;
  /** The whole file; null when there is none. */
  read(name: string): Promise<Uint8Array | null>;
  /** A new, empty file; rejects if one of that name exists. Its name is durable only after
   * syncDir(). */
  create(name: string): Promise<AppendFile>;
  /** An existing file, appended to at its end. */
  openAppend(name: string): Promise<AppendFile>;
  /** Replaces `to` with `from`; durable after syncDir(). */
  rename(from: string, to: string): Promise<void>;
  /** Cuts a file to `length` bytes and syncs it. */
  truncate(name: string, length: number): Promise<void>;
  remove(name: string): Promise<void>;
  /** fsync of the directory: creates, renames and removes before it are on disk. */
  syncDir(): Promise<void>;
}

class FsAppendFile implements AppendFile {
  constructor(private readonly fh: FileHandle) {}

  async append(chunks: readonly Uint8Array[]): Promise<void> {
    // writev may write less than asked (a signal, a full pipe); the rest follows.
    const rest = chunks.filter((c) => c.length > 0);
    while (rest.length > 0) {
      const { bytesWritten } = await this.fh.writev(rest as Uint8Array[]);
      let n = bytesWritten;
      while (rest.length > 0 && n >= (rest[0] as Uint8Array).length) n -= (rest.shift() as Uint8Array).length;
      if (n > 0) rest[0] = (rest[0] as Uint8Array).subarray(n);
    }
  }

  sync(): Promise<void> {
    return this.fh.datasync();
  }

  close(): Promise<void> {
    return this.fh.close();
  }
}

export class FsStorage implements Storage {
  constructor(readonly dir: string) {}

  private path(name: string): string {
    return join(this.dir, name);
  }

  list(): Promise<string[]> {
    return readdir(this.dir);
  }

  async read(name: string): Promise<Uint8Array | null> {
    try {
      return await readFile(this.path(name));
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
  }

  async create(name: string): Promise<AppendFile> {
    return new FsAppendFile(
      await open(this.path(name), constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_APPEND, 0o600),
    );
  }

  async openAppend(name: string): Promise<AppendFile> {
    return new FsAppendFile(await open(this.path(name), constants.O_WRONLY | constants.O_APPEND));
  }

  rename(from: string, to: string): Promise<void> {
    return rename(this.path(from), this.path(to));
  }

  async truncate(name: string, length: number): Promise<void> {
    await truncate(this.path(name), length);
    const fh = await open(this.path(name), constants.O_WRONLY);
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  }

  remove(name: string): Promise<void> {
    return unlink(this.path(name));
  }

  async syncDir(): Promise<void> {
    const fh = await open(this.dir, constants.O_RDONLY);
    try {
      await fh.sync();
    } finally {
      await fh.close();
    }
  }
}
