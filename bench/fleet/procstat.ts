// CPU and memory of processes by PID from /proc (Linux), read by bench/proc.ts, plus the peak
// resident size. A sample of a process that has exited is null.
import { readFileSync } from 'node:fs';
import { clockTicks, sampleProc as readProc } from '../proc.js';

export interface ProcSample {
  pid: number;
  cpuS: number;
  rssBytes: number;
  hwmBytes: number;
}

export function sampleProc(pid: number): ProcSample | null {
  const s = readProc(pid);
  if (s === null) return null;
  let hwmBytes = 0;
  try {
    const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    if (hwm !== null) hwmBytes = Number(hwm[1]) * 1024;
  } catch {
    return null;
  }
  return { pid, cpuS: s.ticks / clockTicks(), rssBytes: s.rssKb * 1024, hwmBytes };
}

export interface ProcUsage {
  pid: number;
  role: string;
  cpuS: number;
  /** cpuS over the wall time of the phase, in % of one core. */
  cpuPct: number;
  rssMiB: number;
  peakRssMiB: number;
}

/** CPU of each process over a phase: take `start()` at its beginning and `end()` at its end. */
export class CpuMeter {
  private before = new Map<number, ProcSample>();
  private t0 = 0;

  constructor(private readonly procs: () => { pid: number; role: string }[]) {}

  start(): void {
    this.before.clear();
    this.t0 = performance.now();
    for (const p of this.procs()) {
      const s = sampleProc(p.pid);
      if (s !== null) this.before.set(p.pid, s);
    }
  }

  end(): { wallS: number; procs: ProcUsage[]; cpuS: number; cpuPct: number } {
    const wallS = (performance.now() - this.t0) / 1000;
    const out: ProcUsage[] = [];
    for (const p of this.procs()) {
      // A process started during the phase (a broker restarted in place) counts from zero.
      const a = this.before.get(p.pid) ?? { cpuS: 0 };
      const b = sampleProc(p.pid);
      if (b === null) continue;
      const cpuS = Math.round((b.cpuS - a.cpuS) * 100) / 100;
      out.push({
        pid: p.pid,
        role: p.role,
        cpuS,
        cpuPct: Math.round((1000 * cpuS) / wallS) / 10,
        rssMiB: Math.round(b.rssBytes / 1024 / 102.4) / 10,
        peakRssMiB: Math.round(b.hwmBytes / 1024 / 102.4) / 10,
      });
    }
    const cpuS = Math.round(out.reduce((s, p) => s + p.cpuS, 0) * 100) / 100;
    return { wallS: Math.round(wallS * 100) / 100, procs: out, cpuS, cpuPct: Math.round((1000 * cpuS) / wallS) / 10 };
  }
}

/** Busy CPU of the whole host (all cores, /proc/stat) in clock ticks: total less idle and iowait. */
function hostBusyS(): number {
  try {
    const f = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = f.reduce((s, v) => s + v, 0);
    return (total - (f[3] ?? 0) - (f[4] ?? 0)) / clockTicks();
  } catch {
    return 0;
  }
}

/** The host's busy CPU over a phase, so a row can say how much of the machine other work took:
 * other = host busy less the bench's own processes (broker and load generator). */
export class HostMeter {
  private busy0 = 0;
  private t0 = 0;

  start(): void {
    this.busy0 = hostBusyS();
    this.t0 = performance.now();
  }

  /** Host busy and "other" CPU in % of one core; `ownCpuS` is the bench's own CPU over the phase. */
  end(ownCpuS: number): { hostBusyPct: number; otherCpuPct: number } {
    const wallS = (performance.now() - this.t0) / 1000;
    const busy = hostBusyS() - this.busy0;
    const pct = (v: number): number => Math.round((1000 * v) / wallS) / 10;
    return { hostBusyPct: pct(busy), otherCpuPct: pct(Math.max(0, busy - ownCpuS)) };
  }
}
