// SASLprep (RFC 4013), the stringprep profile (RFC 3454) SCRAM applies to passwords (RFC 5802
// §2.2, RFC 7677). Exact where RFC 3454 gives a short table; approximated, and said so, where it
// gives a snapshot of Unicode 3.2:
// - NFKC is Node's (the Unicode version of its ICU), not Unicode 3.2's: they differ only for the
//   few characters whose decomposition a corrigendum changed since 3.2.
// - Unassigned code points (table A.1 is Unicode 3.2's) are \p{Cn} of Node's Unicode version, so a
//   stored string may use characters assigned after 3.2, which A.1 would refuse.
// - LCat (table D.2, Unicode 3.2's bidirectional class L) is approximated by letters, spacing marks
//   and letter numbers (\p{L}, \p{Mc}, \p{Nl}) outside the right-to-left scripts; RandALCat (table
//   D.1) is the exact table.

type Ranges = readonly (readonly [number, number])[];
const one = (cp: number): readonly [number, number] => [cp, cp];

/** Table B.1: commonly mapped to nothing. */
const MAP_TO_NOTHING: Ranges = [
  one(0x00ad),
  one(0x034f),
  one(0x1806),
  [0x180b, 0x180d],
  [0x200b, 0x200d],
  one(0x2060),
  [0xfe00, 0xfe0f],
  one(0xfeff),
];
/** Table C.1.2: non-ASCII space characters, mapped to SPACE (RFC 4013 §2.1). U+200B is in B.1 too,
 * which is applied first (RFC 4013 §2.1 lists it first), so it maps to nothing. */
const NON_ASCII_SPACE: Ranges = [one(0x00a0), one(0x1680), [0x2000, 0x200b], one(0x202f), one(0x205f), one(0x3000)];

/** Table C.4: U+FDD0..U+FDEF and the last two code points of every plane. */
const NON_CHARACTERS: Ranges = [
  [0xfdd0, 0xfdef],
  ...Array.from({ length: 17 }, (_, plane) => [plane * 0x10000 + 0xfffe, plane * 0x10000 + 0xffff] as const),
];

/** Prohibited output (RFC 4013 §2.3), one table per entry. */
const PROHIBITED: readonly [string, Ranges][] = [
  ['non-ASCII space (C.1.2)', NON_ASCII_SPACE],
  ['ASCII control character (C.2.1)', [[0x0000, 0x001f], one(0x007f)]],
  [
    'non-ASCII control character (C.2.2)',
    [
      [0x0080, 0x009f],
      one(0x06dd),
      one(0x070f),
      one(0x180e),
      one(0x200c),
      one(0x200d),
      one(0x2028),
      one(0x2029),
      [0x2060, 0x2063],
      [0x206a, 0x206f],
      one(0xfeff),
      [0xfff9, 0xfffc],
      [0x1d173, 0x1d17a],
    ],
  ],
  [
    'private use character (C.3)',
    [
      [0xe000, 0xf8ff],
      [0xf0000, 0xffffd],
      [0x100000, 0x10fffd],
    ],
  ],
  ['non-character code point (C.4)', NON_CHARACTERS],
  ['surrogate code point (C.5)', [[0xd800, 0xdfff]]],
  ['character inappropriate for plain text (C.6)', [[0xfff9, 0xfffd]]],
  ['character inappropriate for canonical representation (C.7)', [[0x2ff0, 0x2ffb]]],
  [
    'character that changes display properties or is deprecated (C.8)',
    [one(0x0340), one(0x0341), one(0x200e), one(0x200f), [0x202a, 0x202e], [0x206a, 0x206f]],
  ],
  ['tagging character (C.9)', [one(0xe0001), [0xe0020, 0xe007f]]],
];

/** Table D.1: characters with bidirectional property R or AL (Unicode 3.2). */
const RAND_AL: Ranges = [
  one(0x05be),
  one(0x05c0),
  one(0x05c3),
  [0x05d0, 0x05ea],
  [0x05f0, 0x05f4],
  one(0x061b),
  one(0x061f),
  [0x0621, 0x063a],
  [0x0640, 0x064a],
  [0x066d, 0x066f],
  [0x0671, 0x06d5],
  one(0x06dd),
  [0x06e5, 0x06e6],
  [0x06fa, 0x06fe],
  [0x0700, 0x070d],
  one(0x0710),
  [0x0712, 0x072c],
  [0x0780, 0x07a5],
  one(0x07b1),
  one(0x200f),
  one(0xfb1d),
  [0xfb1f, 0xfb28],
  [0xfb2a, 0xfb36],
  [0xfb38, 0xfb3c],
  one(0xfb3e),
  [0xfb40, 0xfb41],
  [0xfb43, 0xfb44],
  [0xfb46, 0xfbb1],
  [0xfbd3, 0xfd3d],
  [0xfd50, 0xfd8f],
  [0xfd92, 0xfdc7],
  [0xfdf0, 0xfdfc],
  [0xfe70, 0xfe74],
  [0xfe76, 0xfefc],
];
/** Table D.2 approximated (see the head of this file). */
const L_CAT = /^(?![\p{Script=Hebrew}\p{Script=Arabic}\p{Script=Syriac}\p{Script=Thaana}\p{Script=Nko}])[\p{L}\p{Mc}\p{Nl}]$/u;
const UNASSIGNED = /\p{Cn}/u;

const inRanges = (cp: number, ranges: Ranges): boolean => {
  for (const [lo, hi] of ranges) if (cp >= lo && cp <= hi) return true;
  return false;
};

export type SaslprepResult = { ok: true; value: string } | { ok: false; reason: string };

/** Prepares `input` (RFC 4013 §2). `stored`: a string kept for later comparison (a password when
 * its credential is made), for which unassigned code points are refused (RFC 3454 §7); a query
 * (a password being checked) allows them. */
export function saslprep(input: string, stored: boolean): SaslprepResult {
  let mapped = '';
  for (const ch of input) {
    const cp = ch.codePointAt(0) as number;
    if (inRanges(cp, MAP_TO_NOTHING)) continue;
    mapped += inRanges(cp, NON_ASCII_SPACE) ? ' ' : ch;
  }
  const value = mapped.normalize('NFKC');
  const cps = Array.from(value, (ch) => ch.codePointAt(0) as number);
  for (const [what, table] of PROHIBITED) if (cps.some((cp) => inRanges(cp, table))) return { ok: false, reason: `prohibited ${what}` };
  if (stored && UNASSIGNED.test(value)) return { ok: false, reason: 'unassigned code point' };
  const bidi = bidiProblem(value, cps);
  return bidi === null ? { ok: true, value } : { ok: false, reason: bidi };
}

/** RFC 3454 §6: a string with a RandALCat character has no LCat character, and starts and ends
 * with a RandALCat character. */
function bidiProblem(s: string, cps: readonly number[]): string | null {
  if (!cps.some((cp) => inRanges(cp, RAND_AL))) return null;
  if (Array.from(s).some((ch) => L_CAT.test(ch))) return 'right-to-left and left-to-right characters mixed (RFC 3454 §6)';
  if (!inRanges(cps[0] as number, RAND_AL) || !inRanges(cps[cps.length - 1] as number, RAND_AL)) {
    return 'right-to-left text that does not start and end with a right-to-left character (RFC 3454 §6)';
  }
  return null;
}
