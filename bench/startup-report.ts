// The arithmetic of the start-up bench (bench/startup.ts), kept apart so it is tested without a
// process: the /proc readings of a starting node (CPU ticks, peak RSS, bytes read) and the split of
// its start into phases from the times of its own log lines.

/** What /proc says about a process at one moment. */
export interface StartReading {
  /** utime + stime in clock ticks, since the process began. */
  ticks: number;
  /** VmHWM: the peak resident set so far. */
  peakRssKb: number;
  /** rchar: bytes its read system calls returned (page cache hits included). */
  readChars: number | null;
  /** read_bytes: bytes it caused to be fetched from the storage device. */
  readDeviceBytes: number | null;
}

/** utime + stime (fields 14 and 15) of a /proc/PID/stat line; null if it does not parse. */
export function statTicks(stat: string): number | null {
  // The command name (field 2) is in parentheses and may hold spaces and ')'.
  const close = stat.lastIndexOf(')');
  if (close < 0) return null;
  const rest = stat.slice(close + 2).split(' ');
  const t = Number(rest[11]) + Number(rest[12]);
  return Number.isFinite(t) ? t : null;
}

/** A "Name:   value" field of /proc/PID/status or /proc/PID/io, as a number; null if absent. */
export function procField(text: string, name: string): number | null {
  const m = new RegExp(`^${name}:\\s+(\\d+)`, 'm').exec(text);
  return m === null ? null : Number(m[1]);
}

/** One log line of the node as the bench reads it: pino's epoch ms and message. */
export interface LogMark {
  msg: string;
  timeMs: number;
}

/** The pino JSON lines among `lines` that carry a message and a time; others are skipped. */
export function logMarks(lines: readonly string[]): LogMark[] {
  const out: LogMark[] = [];
  for (const line of lines) {
    if (!line.startsWith('{')) continue;
    try {
      const v = JSON.parse(line) as { msg?: unknown; time?: unknown };
      if (typeof v.msg === 'string' && typeof v.time === 'number') out.push({ msg: v.msg, timeMs: v.time });
    } catch {
      // a torn line says nothing
    }
  }
  return out;
}

/** The moment a single node began to open its data directory, as a mark named `msg`: its
 * `listening` line less the `recovered.ms` of its `started` line (which counts from opening the
 * directory to serving, src/server/durable-node.ts); null without a listening line. */
export function openMark(marks: readonly LogMark[], recoveredMs: number, msg: string): LogMark | null {
  const l = marks.find((m) => m.msg === 'listening');
  return l === undefined ? null : { msg, timeMs: l.timeMs - recoveredMs };
}

/** A phase of the start: from the end of the one before to the first log line `until`. */
export interface PhaseSpec {
  name: string;
  until: string;
}

export interface Phase {
  name: string;
  ms: number;
}

/** Splits the time from spawn (`spawnMs`, epoch) to the first CONNACK (`servedMs`) at the first
 * line of each spec's message, in order; a phase whose line is missing (or earlier than the one
 * before, as clocks of two processes may disagree by a ms) is merged into the next. The last phase
 * runs to `servedMs`, named `last`. */
export function splitPhases(
  spawnMs: number,
  servedMs: number,
  marks: readonly LogMark[],
  specs: readonly PhaseSpec[],
  last: string,
): Phase[] {
  const out: Phase[] = [];
  let from = spawnMs;
  let pending: string[] = [];
  for (const s of specs) {
    pending.push(s.name);
    const m = marks.find((x) => x.msg === s.until);
    if (m === undefined || m.timeMs < from || m.timeMs > servedMs) continue;
    out.push({ name: pending.join(' + '), ms: m.timeMs - from });
    from = m.timeMs;
    pending = [];
  }
  pending.push(last);
  out.push({ name: pending.join(' + '), ms: Math.max(0, servedMs - from) });
  return out;
}

const KiB = 1024;
const MiB = 1024 * KiB;
const GiB = 1024 * MiB;

/** Bytes as GiB, MiB or KiB with one decimal (B below 1 KiB). */
export function formatBytes(n: number): string {
  if (n >= GiB) return `${(n / GiB).toFixed(2)} GiB`;
  if (n >= MiB) return `${(n / MiB).toFixed(1)} MiB`;
  if (n >= KiB) return `${(n / KiB).toFixed(1)} KiB`;
  return `${n} B`;
}

/** A duration in ms as s with two decimals from one second on. */
export function formatMs(ms: number): string {
  return ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${Math.round(ms)} ms`;
}

/** The report lines of one measured start. */
export function startLines(
  label: string,
  wallMs: number,
  reading: StartReading,
  ticksPerSecond: number,
  phases: readonly Phase[],
  extra: readonly string[],
  reached = 'serving',
): string[] {
  const cpuS = reading.ticks / ticksPerSecond;
  const read =
    reading.readChars === null
      ? 'bytes read unknown (/proc/PID/io unreadable)'
      : `read ${formatBytes(reading.readChars)} (from the device: ${reading.readDeviceBytes === null ? 'unknown' : formatBytes(reading.readDeviceBytes)})`;
  return [
    `${label}: ${reached} after ${formatMs(wallMs)}; CPU ${cpuS.toFixed(2)} s (${Math.round((100 * cpuS * 1000) / Math.max(1, wallMs))} % of one core), peak RSS ${formatBytes(reading.peakRssKb * KiB)}, ${read}`,
    `  phases: ${phases.map((p) => `${p.name} ${formatMs(p.ms)}`).join(', ')}`,
    ...extra.map((l) => `  ${l}`),
  ];
}

/** The median of `xs` (the mean of the middle two for an even count); NaN for none. */
export function median(xs: readonly number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const m = s.length >> 1;
  return s.length % 2 === 1 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
}

/** The medians of several starts of one directory, with the range of the wall times. */
export function summaryLine(label: string, rounds: readonly { wallMs: number; cpuS: number; peakRssKb: number }[]): string {
  const wall = rounds.map((r) => r.wallMs);
  return `${label}: median of ${rounds.length} starts: serving after ${formatMs(median(wall))} (${formatMs(Math.min(...wall))}–${formatMs(Math.max(...wall))}), CPU ${median(rounds.map((r) => r.cpuS)).toFixed(2)} s, peak RSS ${formatBytes(median(rounds.map((r) => r.peakRssKb)) * KiB)}`;
}
