// The bytes of one raft entry that carries a broker command. Until raft/core stamps cluster time on
// its entries (DESIGN.md "Cluster time", the lease work of raft part 2), the proposing leader
// carries the time inside the entry: a 9-byte header (version, then the time as a float64) in
// front of the command bytes. Once the core's LogEntry has `time`, the header goes and RaftLog
// reads the entry's own time; nothing else changes.

export const ENTRY_FRAME_VERSION = 1;
export const ENTRY_HEADER_BYTES = 9;

export class EntryFrameError extends Error {
  readonly code = 'ERR_ENTRY_FRAME';
}

/** One copy: the header and the already-encoded command. `time`: integer ms since the Unix epoch. */
export function frameEntry(time: number, command: Uint8Array): Uint8Array {
  const out = new Uint8Array(ENTRY_HEADER_BYTES + command.length);
  out[0] = ENTRY_FRAME_VERSION;
  new DataView(out.buffer, out.byteOffset, ENTRY_HEADER_BYTES).setFloat64(1, time);
  out.set(command, ENTRY_HEADER_BYTES);
  return out;
}

export interface EntryFrame {
  time: number;
  command: Uint8Array;
}

/** Splits an entry made by frameEntry; bytes from a peer are untrusted, so every field is checked. */
export function unframeEntry(data: Uint8Array): EntryFrame {
  if (data.length < ENTRY_HEADER_BYTES) throw new EntryFrameError(`entry of ${data.length} bytes has no header`);
  if (data[0] !== ENTRY_FRAME_VERSION) throw new EntryFrameError(`entry frame version ${data[0]}`);
  const time = new DataView(data.buffer, data.byteOffset, ENTRY_HEADER_BYTES).getFloat64(1);
  if (!Number.isSafeInteger(time) || time < 0) throw new EntryFrameError(`entry time ${time}`);
  return { time, command: data.subarray(ENTRY_HEADER_BYTES) };
}
