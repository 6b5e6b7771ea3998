// Prints the functions with the most self time in a V8 .cpuprofile (node --cpu-prof), and the
// same grouped by file, so a benchmark run's hot path can be read without a GUI.
// Usage: node build/bench/cpu-top.js FILE.cpuprofile [N]
import { readFileSync } from 'node:fs';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const DEFAULT_TOP = 25;

function shortUrl(url: string): string {
  const i = url.indexOf('/build/');
  if (i >= 0) return url.slice(i + '/build/'.length);
  const nm = url.lastIndexOf('/node_modules/');
  if (nm >= 0) return url.slice(nm + '/node_modules/'.length);
  return url === '' ? '(native)' : url;
}

/** Self time in µs per node id: each sample's delta goes to the node it landed in. */
function selfTimes(p: Profile): Map<number, number> {
  const t = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const id = p.samples[i] as number;
    t.set(id, (t.get(id) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  return t;
}

function table(title: string, rows: Map<string, number>, total: number, n: number): string {
  const sorted = [...rows.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);
  const lines = [`${title}`, '| self % | self ms | function |', '|--:|--:|---|'];
  for (const [k, us] of sorted) lines.push(`| ${((100 * us) / total).toFixed(1)} | ${(us / 1000).toFixed(0)} | ${k} |`);
  return lines.join('\n');
}

function main(argv: string[]): number {
  const file = argv[0];
  if (file === undefined) {
    process.stderr.write('usage: node build/bench/cpu-top.js FILE.cpuprofile [N]\n');
    return 2;
  }
  const n = argv[1] === undefined ? DEFAULT_TOP : Number(argv[1]);
  let p: Profile;
  try {
    p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  } catch (err) {
    process.stderr.write(`cpu-top: cannot read ${file}: ${(err as Error).message}\n`);
    return 1;
  }
  if (!Array.isArray(p.nodes) || !Array.isArray(p.samples) || !Array.isArray(p.timeDeltas)) {
    process.stderr.write(`cpu-top: ${file} is not a V8 cpu profile (nodes, samples, timeDeltas)\n`);
    return 1;
  }
  const self = selfTimes(p);
  const byFn = new Map<string, number>();
  const byFile = new Map<string, number>();
  let total = 0;
  for (const node of p.nodes) {
    const us = self.get(node.id) ?? 0;
    if (us === 0) continue;
    total += us;
    const cf = node.callFrame;
    const where = shortUrl(cf.url);
    const fn = `${cf.functionName || '(anonymous)'} ${where}${cf.url === '' ? '' : `:${cf.lineNumber + 1}`}`;
    byFn.set(fn, (byFn.get(fn) ?? 0) + us);
    byFile.set(where, (byFile.get(where) ?? 0) + us);
  }
  process.stdout.write(`${file}: ${(total / 1e6).toFixed(2)} s sampled\n\n`);
  process.stdout.write(`${table('By function (self time)', byFn, total, n)}\n\n${table('By file (self time)', byFile, total, n)}\n`);
  return 0;
}

process.exitCode = main(process.argv.slice(2));
