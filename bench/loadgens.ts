// Several mqttload processes against one broker (`--loadgens K`). A single mqttload process is one
// thread: against a broker that answers each PUBLISH with a write of its own it can use a whole core
// and set the pace. K processes split the fan-in's publishers (each with its own topic prefix and
// its own subscriber) and the open-loop rate; their results are merged into one result line.

/** Counts that add up over the processes. */
const SUMMED = [
  'publishers',
  'subscribers',
  'sent',
  'delivered',
  'delivered_per_s',
  'lost',
  'sent_all',
  'lost_all',
  'out_of_order',
  'duplicates',
  'lat_samples',
  'lag_stalls',
  'lag_forgiven',
  'rate',
  'rate_skipped',
  'qos_downgraded',
  'rejected',
  'foreign',
  'bad_payload',
  'protocol_errors',
  'lost_conns',
  'errors',
] as const;

/** Figures where the merged line keeps the worst process: latency percentiles (the histograms are
 * not in the result line, so the merged percentile is the highest of the processes', an upper
 * bound) and the load generator's own CPU (the criterion is that no process sets the pace). */
const HIGHEST = ['lat_p50_us', 'lat_p99_us', 'lat_p999_us', 'lat_max_us', 'lg_cpu_pct'] as const;

/** A fan-in whose publishers `k` divides can be split; anything else runs as one process. */
export function splittable(args: readonly string[], k: number): boolean {
  if (k <= 1) return false;
  const s = args[args.indexOf('-s') + 1];
  const p = Number(args[args.indexOf('-P') + 1]);
  return s === 'fanin' && Number.isInteger(p) && p % k === 0;
}

/** mqttload's arguments for process `j` of `k`: its share of publishers and rate, its own topic
 * prefix and label. */
export function argsFor(args: readonly string[], j: number, k: number, label: string): string[] {
  const out = [...args];
  const p = out.indexOf('-P');
  const r = out.indexOf('-r');
  out[p + 1] = String(Number(out[p + 1]) / k);
  if (r >= 0) out[r + 1] = String(Number(out[r + 1]) / k);
  out.push('-x', `bench${j}`, '-l', `${label}#${j}`);
  return out;
}

/** One result line from the processes' lines: counts summed, percentiles and load-generator CPU
 * the highest, `ok` only if every process was ok, host_other_pct less the other processes' own CPU
 * (each process counts the others as "other"). `loadgens` keeps each process's own figures. */
export function mergeResults(lines: readonly Record<string, unknown>[]): Record<string, unknown> {
  if (lines.length === 1) return lines[0] as Record<string, unknown>;
  const first = lines[0] as Record<string, unknown>;
  const merged: Record<string, unknown> = { ...first };
  for (const key of SUMMED) {
    const values = lines.map((l) => l[key]).filter((v): v is number => typeof v === 'number');
    if (values.length > 0) merged[key] = values.reduce((a, b) => a + b, 0);
  }
  for (const key of HIGHEST) {
    const values = lines.map((l) => l[key]).filter((v): v is number => typeof v === 'number');
    if (values.length > 0) merged[key] = Math.max(...values);
  }
  const durations = lines.map((l) => l.duration_s).filter((v): v is number => typeof v === 'number');
  if (durations.length > 0) merged.duration_s = durations.reduce((a, b) => a + b, 0) / durations.length;
  merged.ok = lines.every((l) => l.ok === true);
  const errors = lines.map((l) => l.error).filter((e) => typeof e === 'string' && e !== '');
  merged.error = errors.length > 0 ? errors.join('; ') : (first.error ?? '');
  for (const key of ['host_other_pct', 'ramp_host_other_pct'] as const) {
    if (typeof first[key] !== 'number') continue;
    const others = lines.slice(1).reduce((s, l) => s + (typeof l.lg_cpu_pct === 'number' ? l.lg_cpu_pct : 0), 0);
    merged[key] = (first[key] as number) - others;
  }
  merged.label = String(first.label ?? '').replace(/#0$/, '');
  merged.loadgens = lines.map((l) => ({
    label: l.label,
    delivered_per_s: l.delivered_per_s,
    lat_p99_us: l.lat_p99_us,
    lg_cpu_pct: l.lg_cpu_pct,
  }));
  return merged;
}
