// Citations of the docs resolve (docs/design.md "Citing this page"): every `docs/<page>.md "Heading"`
// in the source tree names a page that exists and a heading that page has, one heading per
// citation, and no file names a design page outside the repository.
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

/** The repository root: this file runs as build/test/doc-citations.test.js. */
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
/** What is scanned, relative to the root. */
const SCANNED = ['src', 'raft', 'test', 'bench', 'jepsen-like-tests', 'scripts', 'cluster-scripts', 'docs', 'README.md'];
const SKIPPED_DIRS = new Set(['node_modules', 'build']);
/** Files above this size are data, not text that cites. */
const FILE_BYTES_MAX = 4 * 1024 * 1024;
/** The name of the design brief that once lived outside the repository, built here so that this
 * file does not mention it itself. */
const OUTSIDE_BRIEF = ['DESIGN', 'md'].join('.');

/** A line break plus the next line's indentation and comment leader (`//`, `*`, `#`, `>`), so a
 * citation that wraps across comment lines reads as one. */
const WRAP = /[ \t]*\r?\n[ \t]*(?:\/\/+|\*(?!\/)|#+(?=[ \t])|>)?[ \t]*/g;
/** Stands for a line break once wraps are joined (U+2028, which \s matches), to count lines. */
const BREAK = '\u2028';
/** A page of docs/ named anywhere (not as part of a longer path). */
const PAGE = /(?<![\w./-])docs\/([A-Za-z0-9_.-]+\.md)\b/g;
/** A citation: the page, one space, the heading in double quotes. */
const CITATION = /(?<![\w./-])docs\/([A-Za-z0-9_.-]+\.md)[ \u2028]+"([^"]+)"/g;
const FENCE = /^\s*(```|~~~)/;
const ATX_HEADING = /^ {0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$/;

export interface Citation {
  page: string;
  heading: string;
  /** 1-based line of the citation's start. */
  line: number;
  /** Another quoted heading follows after a comma: the form that cites two headings at once. */
  listed: boolean;
}

/** The citations in a file's text. */
export function citationsIn(text: string): Citation[] {
  const out: Citation[] = [];
  const joined = text.replace(WRAP, ` ${BREAK}`);
  for (const m of joined.matchAll(CITATION)) {
    const start = m.index ?? 0;
    const after = joined.slice(start + m[0].length, start + m[0].length + 4);
    out.push({
      page: m[1] as string,
      heading: (m[2] as string).replace(/\s+/g, ' ').trim(),
      line: joined.slice(0, start).split(BREAK).length,
      listed: /^,\s*"/.test(after),
    });
  }
  return out;
}

/** The pages of docs/ a file's text names, cited or not. */
export function pagesIn(text: string): string[] {
  return [...text.matchAll(PAGE)].map((m) => m[1] as string);
}

/** The ATX headings of a markdown page (any level), outside fenced code blocks. */
export function headingsOf(markdown: string): Set<string> {
  const out = new Set<string>();
  let fenced = false;
  for (const line of markdown.split(/\r?\n/)) {
    if (FENCE.test(line)) {
      fenced = !fenced;
      continue;
    }
    if (fenced) continue;
    const m = ATX_HEADING.exec(line);
    if (m !== null) out.add((m[1] as string).replace(/\s+/g, ' ').trim());
  }
  return out;
}

function filesUnder(path: string, out: string[]): void {
  let st: ReturnType<typeof statSync>;
  try {
    st = statSync(path);
  } catch {
    return;
  }
  if (st.isDirectory()) {
    for (const name of readdirSync(path).sort()) {
      if (!SKIPPED_DIRS.has(name)) filesUnder(join(path, name), out);
    }
  } else if (st.isFile() && st.size <= FILE_BYTES_MAX) {
    out.push(path);
  }
}

/** Everything wrong with the citations of the tree under `root`, one line each. */
export function citationProblems(root: string): string[] {
  const files: string[] = [];
  for (const p of SCANNED) filesUnder(join(root, p), files);
  const headings = new Map<string, Set<string> | null>();
  const headingsOfPage = (page: string): Set<string> | null => {
    let h = headings.get(page);
    if (h === undefined) {
      try {
        h = headingsOf(readFileSync(join(root, 'docs', page), 'utf8'));
      } catch {
        h = null;
      }
      headings.set(page, h);
    }
    return h;
  };
  const problems: string[] = [];
  for (const file of files) {
    const buf = readFileSync(file);
    if (buf.includes(0)) continue;
    const text = buf.toString('utf8');
    const where = relative(root, file);
    if (text.includes(OUTSIDE_BRIEF)) problems.push(`${where}: names ${OUTSIDE_BRIEF}, which is not in the repository`);
    for (const page of new Set(pagesIn(text))) {
      if (headingsOfPage(page) === null) problems.push(`${where}: names docs/${page}, which does not exist`);
    }
    for (const c of citationsIn(text)) {
      const h = headingsOfPage(c.page);
      if (h !== null && !h.has(c.heading)) problems.push(`${where}:${c.line}: docs/${c.page} has no heading "${c.heading}"`);
      if (c.listed) problems.push(`${where}:${c.line}: a second heading follows docs/${c.page} "${c.heading}"; repeat the page`);
    }
  }
  return problems;
}

describe('documentation citations', { timeout: 30_000 }, () => {
  const page = ['docs/design', 'md'].join('.');
  const gone = ['docs/gone', 'md'].join('.');

  it('finds a citation wrapped across comment lines, with its line', () => {
    const text = `// one\n// see (${page}\n// "Serving\n//  periods") and more\n * ${page} "State file"`;
    assert.deepEqual(citationsIn(text), [
      { page: 'design.md', heading: 'Serving periods', line: 2, listed: false },
      { page: 'design.md', heading: 'State file', line: 5, listed: false },
    ]);
  });

  it('marks a citation followed by a second quoted heading', () => {
    const [c] = citationsIn(`(${page} "Force-start", "Beyond the model")`);
    assert.equal(c?.listed, true);
  });

  it('reads headings of any level and skips fenced code', () => {
    const h = headingsOf('# Title\n\n## Two words ##\n```\n# not a heading\n```\n#### Deep\n#no-space\n');
    assert.deepEqual([...h], ['Title', 'Two words', 'Deep']);
  });

  it('reports a missing heading, a missing page, a listed citation and the outside brief', () => {
    const fake = mkdtempSync(join(tmpdir(), 'raftmq-citations-'));
    try {
      mkdirSync(join(fake, 'docs'), { recursive: true });
      mkdirSync(join(fake, 'src'), { recursive: true });
      writeFileSync(join(fake, 'docs', 'design.md'), '# Design\n\n## Serving periods\n');
      writeFileSync(
        join(fake, 'src', 'a.ts'),
        [
          `// ${page} "Serving periods"`,
          `// ${page} "No such heading"`,
          `// ${gone} "Anything"`,
          `// ${page} "Serving periods", "Design"`,
          `// ${OUTSIDE_BRIEF}`,
        ].join('\n'),
      );
      assert.deepEqual(citationProblems(fake), [
        `src/a.ts: names ${OUTSIDE_BRIEF}, which is not in the repository`,
        `src/a.ts: names ${gone}, which does not exist`,
        'src/a.ts:2: docs/design.md has no heading "No such heading"',
        'src/a.ts:4: a second heading follows docs/design.md "Serving periods"; repeat the page',
      ]);
    } finally {
      rmSync(fake, { recursive: true, force: true });
    }
  });

  it('every citation in the repository names an existing page and heading', () => {
    assert.deepEqual(citationProblems(ROOT), []);
  });
});
