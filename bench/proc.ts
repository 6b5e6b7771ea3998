// CPU time, resident memory and system calls of a process, read from Linux /proc: /proc/PID/stat
// gives utime and stime (all threads, in clock ticks), /proc/PID/status gives VmRSS, /proc/PID/io
// the read and write system calls (syscr, syscw: socket reads and writes count there too). Two
// samples make a window.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';

let ticksPerSecond = 0;

/** Clock ticks per second of /proc/PID/stat (`getconf CLK_TCK`, 100 on Linux when getconf fails). */
export function clockTicks(): number {
  if (ticksPerSecond === 0) {
    const r = spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' });
    const n = Number(r.stdout?.trim());
    ticksPerSecond = r.status === 0 && Number.isInteger(n) && n > 0 ? n : 100;
  }
  return ticksPerSecond;
}

export interface ProcSample {
  pid: number;
  /** utime + stime in clock ticks. */
  ticks: number;
  rssKb: number;
  /** Read and write system calls so far (/proc/PID/io); null when it cannot be read. */
  syscr: number | null;
  syscw: number | null;
  /** performance.now() when read. */
  atMs: number;
}

/** syscr and syscw of /proc/PID/io; nulls when the file cannot be read (another user's process). */
function syscalls(pid: number): { syscr: number | null; syscw: number | null } {
  try {
    const io = readFileSync(`/proc/${pid}/io`, 'utf8');
    const r = /^syscr:\s+(\d+)/m.exec(io);
    const w = /^syscw:\s+(\d+)/m.exec(io);
    return { syscr: r === null ? null : Number(r[1]), syscw: w === null ? null : Number(w[1]) };
  } catch {
    return { syscr: null, syscw: null };
  }
}

/** One reading of `pid`, or null when the process is gone (or /proc cannot be read). */
export function sampleProc(pid: number): ProcSample | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The command name (field 2) is in parentheses and may hold spaces and ')': fields after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    const ticks = Number(rest[11]) + Number(rest[12]);
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = /^VmRSS:\s+(\d+)\s+kB/m.exec(status);
    if (!Number.isFinite(ticks)) return null;
    return { pid, ticks, rssKb: rss === null ? 0 : Number(rss[1]), ...syscalls(pid), atMs: performance.now() };
  } catch {
    return null;
  }
}

export interface ProcWindow {
  pid: number;
  /** CPU seconds used between the two samples. */
  cpuS: number;
  /** Wall seconds between the two samples. */
  wallS: number;
  /** cpuS / wallS in % of one core. */
  cpuPct: number;
  /** VmRSS at the end of the window. */
  rssKb: number;
  /** Read and write system calls in the window; null when /proc/PID/io could not be read. */
  reads: number | null;
  writes: number | null;
}

export function windowOf(a: ProcSample | null, b: ProcSample | null): ProcWindow | null {
  if (a === null || b === null || a.pid !== b.pid || b.atMs <= a.atMs) return null;
  const cpuS = (b.ticks - a.ticks) / clockTicks();
  const wallS = (b.atMs - a.atMs) / 1000;
  const delta = (x: number | null, y: number | null): number | null => (x === null || y === null ? null : y - x);
  return {
    pid: a.pid,
    cpuS,
    wallS,
    cpuPct: (100 * cpuS) / wallS,
    rssKb: b.rssKb,
    reads: delta(a.syscr, b.syscr),
    writes: delta(a.syscw, b.syscw),
  };
}
