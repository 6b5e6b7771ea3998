// Prometheus text as a test reads it.

/** Series name with its labels (as written) → value. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (m !== null) out.set(m[1] as string, Number(m[2]));
  }
  return out;
}
