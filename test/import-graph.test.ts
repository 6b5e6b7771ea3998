// The layers hold at folder level: no folder cycle among src/protocol, src/broker, src/server,
// src/cluster, src/log and raft/* (scripts/import-graph.mjs prints the whole graph).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';

interface ImportGraph {
  folderEdges(o?: { roots?: string[]; tests?: boolean; root?: string }): Map<string, Set<string>>;
  cycles(edges: Map<string, Set<string>>): string[][];
  isLayer(folder: string): boolean;
}

const graph = (await import(pathToFileURL(join(process.cwd(), 'scripts', 'import-graph.mjs')).href)) as ImportGraph;

describe('import graph', { timeout: 30_000 }, () => {
  it('has no folder cycle through a layer folder of src/ or raft/', () => {
    const edges = graph.folderEdges();
    assert.ok(edges.has('src/broker') && edges.has('raft/core'), 'the walk found the source tree');
    assert.deepEqual(
      graph.cycles(edges).filter((c) => c.some((f) => graph.isLayer(f))),
      [],
    );
  });

  it('finds a cycle when there is one', () => {
    const edges = new Map([
      ['src/protocol', new Set(['src/broker'])],
      ['src/broker', new Set(['src/protocol'])],
      ['raft/core', new Set<string>()],
    ]);
    assert.deepEqual(graph.cycles(edges), [['src/broker', 'src/protocol']]);
  });
});
