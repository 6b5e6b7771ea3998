// The fuzzing harness: every byte reader of the project gets a target that takes an input (bytes,
// cut points, a knob for the reader's options) and fails only when the reader does something a
// peer or a file must never make it do: throw anything but its own typed error, or hold more than
// its bound. Inputs come from fast-check: random bytes, and valid inputs (the seed corpus kept in
// fuzz/corpus, and generators of valid ones) mutated byte by byte. docs/fuzzing.md says why this is
// not Jazzer.js.
import { readdirSync, readFileSync } from 'node:fs';
import fc from 'fast-check';

/** One input: the bytes, where to cut them into chunks (offsets taken modulo the length), and a
 * number the target reads its options from (a protocol level, a bound). */
export interface FuzzInput {
  data: Uint8Array;
  cuts: number[];
  knob: number;
}

export interface FuzzTarget {
  /** Also the corpus folder's name: fuzz/corpus/<name>/. */
  readonly name: string;
  /** The reader's source files, for the coverage report (paths from the repository root). */
  readonly modules: readonly string[];
  /** Valid inputs made from scratch, mutated like the corpus is; none for a corpus-only target. */
  readonly valid?: fc.Arbitrary<Uint8Array>;
  /** Byte strings the format gives meaning to (keywords, headers, msgpack values that are edge
   * cases for a JavaScript reader); mutations insert them or write them over the input. */
  readonly dictionary?: readonly Uint8Array[];
  /** Largest random input, in bytes (default 512). */
  readonly maxBytes?: number;
  /** Runs one input; throws a FuzzFailure (or anything) when the reader misbehaved. */
  run(input: FuzzInput): void | Promise<void>;
  /** Async targets (sockets) need fewer runs; npm test runs this many (default QUICK_RUNS). */
  readonly quickRuns?: number;
  /** Inputs per seed in npm run fuzz (default 200): fewer for slow targets, so seeds change often. */
  readonly batchRuns?: number;
  /** Called once after the last run of a session (closes a listener). */
  close?(): Promise<void>;
}

/** What a target throws when the reader broke a rule; the message names the rule. */
export class FuzzFailure extends Error {
  override readonly name = 'FuzzFailure';
}

/** Runs `read` and passes its result on; any throw that `typed` does not accept becomes a
 * FuzzFailure naming what was thrown, so a TypeError from a reader is never mistaken for a
 * refusal. Returns undefined when a typed error was thrown. */
export function onlyTyped<T>(read: () => T, typed: (e: unknown) => boolean, what: string): T | undefined {
  try {
    return read();
  } catch (e) {
    if (typed(e)) return undefined;
    throw new FuzzFailure(`${what} threw ${describe(e)}`, { cause: e });
  }
}

export async function onlyTypedAsync<T>(read: () => Promise<T>, typed: (e: unknown) => boolean, what: string): Promise<T | undefined> {
  try {
    return await read();
  } catch (e) {
    if (typed(e)) return undefined;
    throw new FuzzFailure(`${what} threw ${describe(e)}`, { cause: e });
  }
}

export function check(ok: boolean, rule: string): void {
  if (!ok) throw new FuzzFailure(rule);
}

export function describe(e: unknown): string {
  if (e instanceof Error) return `${e.name}: ${e.message}`;
  return `a non-Error ${typeof e} ${String(e)}`;
}

/** The chunks `data` is fed in: cut at each offset of `cuts`, taken modulo the length + 1 and
 * sorted, so every input has a valid split and an empty cut list feeds the whole input. */
export function split(data: Uint8Array, cuts: readonly number[]): Uint8Array[] {
  const at = [...new Set(cuts.map((c) => c % (data.length + 1)))].sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let prev = 0;
  for (const c of [...at, data.length]) {
    out.push(data.subarray(prev, c));
    prev = c;
  }
  return out;
}

// ---- mutation: the byte-level operators of a mutating fuzzer ----

type Mutation =
  | { k: 'flip'; pos: number; bit: number }
  | { k: 'set'; pos: number; value: number }
  | { k: 'insert'; pos: number; bytes: Uint8Array }
  | { k: 'delete'; pos: number; len: number }
  | { k: 'copy'; from: number; to: number; len: number }
  | { k: 'word'; pos: number; value: number; width: 2 | 4; little: boolean }
  | { k: 'token'; pos: number; index: number; over: boolean };

/** Byte values and words that sit on the edges readers test: 0, sign bits, all ones. */
const EDGE_BYTES = [0x00, 0x01, 0x02, 0x7f, 0x80, 0x81, 0xfe, 0xff];
const EDGE_WORDS = [0, 1, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000, 0xffffffff];

const pos = fc.nat();
const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ k: fc.constant('flip' as const), pos, bit: fc.integer({ min: 0, max: 7 }) }) },
  {
    weight: 3,
    arbitrary: fc.record({
      k: fc.constant('set' as const),
      pos,
      value: fc.oneof(fc.constantFrom(...EDGE_BYTES), fc.integer({ min: 0, max: 255 })),
    }),
  },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('insert' as const), pos, bytes: fc.uint8Array({ minLength: 1, maxLength: 16 }) }) },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('delete' as const), pos, len: fc.integer({ min: 1, max: 16 }) }) },
  { weight: 1, arbitrary: fc.record({ k: fc.constant('copy' as const), from: pos, to: pos, len: fc.integer({ min: 1, max: 64 }) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      k: fc.constant('word' as const),
      pos,
      value: fc.constantFrom(...EDGE_WORDS),
      width: fc.constantFrom<2 | 4>(2, 4),
      little: fc.boolean(),
    }),
  },
  { weight: 2, arbitrary: fc.record({ k: fc.constant('token' as const), pos, index: fc.nat(), over: fc.boolean() }) },
);

export function mutate(base: Uint8Array, mutations: readonly Mutation[], dictionary: readonly Uint8Array[] = []): Uint8Array {
  let b: Uint8Array = Uint8Array.from(base);
  for (const m of mutations) b = mutateOnce(b, m, dictionary);
  return b;
}

function mutateOnce(b: Uint8Array, m: Mutation, dictionary: readonly Uint8Array[]): Uint8Array {
  const n = b.length;
  switch (m.k) {
    case 'token': {
      const t = dictionary[m.index % Math.max(1, dictionary.length)];
      if (t === undefined) return b;
      const at = m.pos % (n + 1);
      return concat(b.subarray(0, at), t, b.subarray(m.over ? Math.min(n, at + t.length) : at));
    }
    case 'flip':
      if (n > 0) b[m.pos % n] = (b[m.pos % n] as number) ^ (1 << m.bit);
      return b;
    case 'set':
      if (n > 0) b[m.pos % n] = m.value;
      return b;
    case 'insert': {
      const at = m.pos % (n + 1);
      return concat(b.subarray(0, at), m.bytes, b.subarray(at));
    }
    case 'delete': {
      if (n === 0) return b;
      const at = m.pos % n;
      return concat(b.subarray(0, at), b.subarray(Math.min(n, at + m.len)));
    }
    case 'copy': {
      if (n === 0) return b;
      const from = m.from % n;
      const to = m.to % (n + 1);
      return concat(b.subarray(0, to), b.subarray(from, Math.min(n, from + m.len)), b.subarray(to));
    }
    case 'word': {
      if (n < m.width) return b;
      const at = m.pos % (n - m.width + 1);
      const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
      if (m.width === 2) dv.setUint16(at, m.value & 0xffff, m.little);
      else dv.setUint32(at, m.value >>> 0, m.little);
      return b;
    }
  }
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Some valid input with up to `max` mutations; an unmutated one now and then. */
export function mutated(base: fc.Arbitrary<Uint8Array>, dictionary: readonly Uint8Array[] = [], max = 6): fc.Arbitrary<Uint8Array> {
  return fc.tuple(base, fc.array(mutation, { maxLength: max })).map(([b, ms]) => mutate(b, ms, dictionary));
}

/** The inputs of a target: random bytes, the corpus mutated, the target's valid inputs mutated,
 * and `extra` inputs (found interesting in this run) mutated. */
export function inputs(target: FuzzTarget, corpus: readonly Uint8Array[], extra: readonly Uint8Array[] = []): fc.Arbitrary<FuzzInput> {
  const sources: { weight: number; arbitrary: fc.Arbitrary<Uint8Array> }[] = [
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: target.maxBytes ?? 512 }) },
  ];
  const dict = target.dictionary ?? [];
  if (corpus.length > 0) sources.push({ weight: 3, arbitrary: mutated(fc.constantFrom(...corpus), dict) });
  if (target.valid !== undefined) sources.push({ weight: 3, arbitrary: mutated(target.valid, dict) });
  if (extra.length > 0) sources.push({ weight: 3, arbitrary: mutated(fc.constantFrom(...extra), dict) });
  return fc.record({
    data: fc.oneof(...sources),
    cuts: fc.array(fc.nat(), { maxLength: 8 }),
    knob: fc.nat(),
  });
}

// ---- the corpus ----

/** fuzz/corpus from the compiled harness (build/fuzz/harness.js) or from the sources. */
export const CORPUS_DIR = new URL('../../fuzz/corpus/', import.meta.url);

export function readCorpus(name: string): Uint8Array[] {
  const dir = new URL(`${name}/`, CORPUS_DIR);
  let files: string[];
  try {
    files = readdirSync(dir).sort();
  } catch {
    return [];
  }
  return files.map((f) => new Uint8Array(readFileSync(new URL(f, dir))));
}

// ---- saved inputs: what a failure leaves behind to become a regression test ----

export interface SavedInput {
  target: string;
  seed: number;
  failure: string;
  data: string; // hex
  cuts: number[];
  knob: number;
}

export function saveable(target: string, seed: number, failure: string, input: FuzzInput): SavedInput {
  return { target, seed, failure, data: Buffer.from(input.data).toString('hex'), cuts: input.cuts, knob: input.knob };
}

export function loadSaved(s: SavedInput): FuzzInput {
  return { data: new Uint8Array(Buffer.from(s.data, 'hex')), cuts: s.cuts, knob: s.knob };
}

/** Runs a target over `runs` inputs from `seed`; fast-check shrinks a failure to a small input. */
export async function runTarget(
  target: FuzzTarget,
  opts: { runs: number; seed: number; corpus?: readonly Uint8Array[]; extra?: readonly Uint8Array[] },
): Promise<fc.RunDetails<[FuzzInput]>> {
  const arb = inputs(target, opts.corpus ?? readCorpus(target.name), opts.extra);
  const property = fc.asyncProperty(arb, async (input) => {
    await target.run(input);
  });
  return fc.check(property, { numRuns: opts.runs, seed: opts.seed, endOnFailure: false });
}

/** msgpack values a JavaScript reader of msgpackr's output must survive: keys that name
 * Object.prototype's methods (a map {toString: 1} cannot be made a string), 64-bit integers (read
 * as BigInt), NaN and infinities, extension types, and headers that announce huge counts. */
export const MSGPACK_TOKENS: readonly Uint8Array[] = [
  ...['toString', 'valueOf', '__proto__', 'constructor', 'hasOwnProperty', 'toJSON', 't', 'type'].map((k) =>
    Uint8Array.from([0xa0 | k.length, ...Buffer.from(k)]),
  ),
  Uint8Array.from([0x81, 0xa8, ...Buffer.from('toString'), 0x01]),
  Uint8Array.from([0x81, 0xa7, ...Buffer.from('valueOf'), 0xc0]),
  Uint8Array.of(0xcf, 0, 0, 0, 1, 0, 0, 0, 0),
  Uint8Array.of(0xd3, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0),
  Uint8Array.of(0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0),
  Uint8Array.of(0xcb, 0x7f, 0xf0, 0, 0, 0, 0, 0, 0),
  Uint8Array.of(0xcb, 0x43, 0x40, 0, 0, 0, 0, 0, 0),
  Uint8Array.of(0xd6, 0xff, 0, 0, 0, 0),
  Uint8Array.of(0xd4, 0x01, 0x00),
  Uint8Array.of(0xc7, 0x01, 0x65, 0x90),
  Uint8Array.of(0xc0),
  Uint8Array.of(0xc3),
  Uint8Array.of(0x80),
  Uint8Array.of(0x90),
  Uint8Array.of(0xdc, 0xff, 0xff),
  Uint8Array.of(0xde, 0xff, 0xff),
  Uint8Array.of(0xdd, 0x7f, 0xff, 0xff, 0xff),
  Uint8Array.of(0xc6, 0x7f, 0xff, 0xff, 0xff),
];

// ---- value-level mutation, for readers of msgpackr bodies: edge values where a field was ----

/** Values a reader of a decoded msgpack body may not expect where any other value was: objects
 * that cannot be made strings or numbers, BigInts, non-finite numbers, huge strings, nesting. */
const EDGE_VALUES: readonly (() => unknown)[] = [
  () => ({ toString: 1 }),
  () => ({ valueOf: null, toString: null }),
  () => JSON.parse('{"__proto__": {"x": 1}}'),
  () => 2n ** 64n - 1n,
  () => -(2n ** 63n),
  () => Number.NaN,
  () => Number.POSITIVE_INFINITY,
  () => -0,
  () => 2 ** 53,
  () => -1,
  () => 1.5,
  () => '',
  () => 'x'.repeat(600),
  () => null,
  () => true,
  () => [],
  () => ({}),
  () => new Uint8Array(3),
  () => [[[[]]]],
  () => new Date(0),
];
const EDGE_KEYS = ['toString', 'valueOf', '__proto__', 'constructor', 'toJSON'];

/** Replaces the node numbered `at` (pre-order over arrays and plain objects, the root included)
 * with `edge`, or, when `renameKey` is set and the node is an object's field, renames the field. */
export function replaceNode(root: unknown, at: number, edge: unknown, renameKey: string | null): unknown {
  let n = 0;
  const count = (v: unknown): number => {
    let c = 1;
    if (Array.isArray(v)) for (const x of v) c += count(x);
    else if (isPlain(v)) for (const x of Object.values(v)) c += count(x);
    return c;
  };
  const target = at % count(root);
  const walk = (v: unknown): unknown => {
    if (n++ === target) return edge;
    if (Array.isArray(v)) return v.map(walk);
    if (!isPlain(v)) return v;
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) {
      const hit = n === target && renameKey !== null;
      const w = walk(x);
      Object.defineProperty(out, hit ? renameKey : k, { value: hit ? x : w, enumerable: true, writable: true, configurable: true });
    }
    return out;
  };
  return walk(root);
}

function isPlain(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !(v instanceof Uint8Array) && !(v instanceof Date) && !Array.isArray(v);
}

/** Values from `base` with one node replaced by an edge value, or one field renamed to a name
 * of Object.prototype's. */
export function valueMutated<T>(base: fc.Arbitrary<T>): fc.Arbitrary<unknown> {
  return fc
    .tuple(base, fc.nat(), fc.nat(EDGE_VALUES.length - 1), fc.option(fc.constantFrom(...EDGE_KEYS), { freq: 3 }))
    .map(([v, at, e, key]) => replaceNode(v, at, (EDGE_VALUES[e] as () => unknown)(), key));
}

export const textTokens = (...words: string[]): Uint8Array[] => words.map((w) => new Uint8Array(Buffer.from(w, 'utf8')));

/** Quick runs in npm test: enough to exercise every path of the harness and the corpus. */
export const QUICK_RUNS = 400;
