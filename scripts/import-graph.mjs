#!/usr/bin/env node
// Folder-level import edges of the source tree, and the cycles among them. A module is counted by
// its folder (src/broker, raft/core; a file directly in src/ counts as itself, src/config.ts: the
// entry point and the leaf modules there are not one layer); an edge A -> B says some
// module of A imports one of B (type-only imports count: they tie the folders as much). Test files
// (*.test.ts) are left out unless --tests is given: a test may reach across layers.
//   node scripts/import-graph.mjs            edges and cycles of src/ and raft/
//   node scripts/import-graph.mjs --all      also test/, bench/, jepsen-like-tests/, fuzz/
//   node scripts/import-graph.mjs --check    exit 1 when a layer folder is in a cycle
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
export const LAYER_ROOTS = ['src', 'raft'];
export const ALL_ROOTS = ['src', 'raft', 'test', 'bench', 'jepsen-like-tests', 'fuzz'];
/** Folders that must never be in a folder cycle. */
export const LAYERS = ['src/protocol', 'src/broker', 'src/server', 'src/cluster', 'src/log', 'raft/*'];
/** Bounds for the walk: a tree larger than this is not this project's. */
const FILES_MAX = 10_000;
const DEPTH_MAX = 12;

const IMPORT = /(?:^|\n)\s*(?:import|export)\s[^'"`;]*?from\s*['"]([^'"]+)['"]|(?:^|\n)\s*import\s*['"]([^'"]+)['"]/g;

function sourceFiles(dir, depth, out) {
  if (depth > DEPTH_MAX || out.length > FILES_MAX) return out;
  let names;
  try {
    names = readdirSync(dir).sort();
  } catch {
    return out;
  }
  for (const name of names) {
    if (name === 'node_modules' || name === 'build' || name.startsWith('.')) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) sourceFiles(path, depth + 1, out);
    else if (name.endsWith('.ts') && !name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

/** The folder a repository-relative path counts under. */
export function folderOf(rel) {
  const parts = rel.split(sep).join('/').split('/');
  if (parts.length <= 2 && parts[0] === 'src') return `${parts[0]}/${parts[1].replace(/\.js$/, '.ts')}`;
  if (parts.length <= 2) return parts[0];
  return `${parts[0]}/${parts[1]}`;
}

/** Folder edges: Map from folder to the set of folders it imports. */
export function folderEdges({ roots = LAYER_ROOTS, tests = false, root = ROOT } = {}) {
  const edges = new Map();
  for (const r of roots) {
    for (const file of sourceFiles(join(root, r), 0, [])) {
      if (!tests && file.endsWith('.test.ts')) continue;
      const from = folderOf(relative(root, file));
      if (!edges.has(from)) edges.set(from, new Set());
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(IMPORT)) {
        const spec = m[1] ?? m[2];
        if (spec === undefined || !spec.startsWith('.')) continue;
        const target = relative(root, normalize(join(dirname(file), spec)));
        if (target.startsWith('..')) continue;
        const to = folderOf(target);
        if (to !== from) edges.get(from).add(to);
      }
    }
  }
  return edges;
}

/** Strongly connected components of more than one folder (Tarjan), each sorted. */
export function cycles(edges) {
  let index = 0;
  const idx = new Map();
  const low = new Map();
  const stack = [];
  const on = new Set();
  const out = [];
  const visit = (v) => {
    idx.set(v, index);
    low.set(v, index);
    index++;
    stack.push(v);
    on.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!idx.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v), low.get(w)));
      } else if (on.has(w)) low.set(v, Math.min(low.get(v), idx.get(w)));
    }
    if (low.get(v) === idx.get(v)) {
      const scc = [];
      for (let w = stack.pop(); ; w = stack.pop()) {
        on.delete(w);
        scc.push(w);
        if (w === v) break;
      }
      if (scc.length > 1) out.push(scc.sort());
    }
  };
  for (const v of [...edges.keys()].sort()) if (!idx.has(v)) visit(v);
  return out.sort((a, b) => a[0].localeCompare(b[0]));
}

/** Whether `folder` is one of LAYERS (raft/* is every folder of raft/). */
export function isLayer(folder) {
  return LAYERS.some((l) => (l.endsWith('/*') ? folder.startsWith(l.slice(0, -1)) : folder === l));
}

function main(argv) {
  const all = argv.includes('--all');
  const edges = folderEdges({ roots: all ? ALL_ROOTS : LAYER_ROOTS, tests: argv.includes('--tests') });
  const found = cycles(edges);
  if (!argv.includes('--check')) {
    for (const from of [...edges.keys()].sort()) {
      for (const to of [...edges.get(from)].sort()) console.log(`${from} -> ${to}`);
    }
    console.log(found.length === 0 ? '\nno folder cycles' : `\n${found.length} folder cycle(s):`);
    for (const c of found) console.log(`  ${c.join(' <-> ')}`);
  }
  const bad = found.filter((c) => c.some(isLayer));
  if (argv.includes('--check') && bad.length > 0) {
    for (const c of bad) console.error(`import-graph: folder cycle ${c.join(' <-> ')}`);
    return 1;
  }
  return 0;
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === normalize(process.argv[1]))
  process.exit(main(process.argv.slice(2)));
