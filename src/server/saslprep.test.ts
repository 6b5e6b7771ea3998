import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { saslprep } from './saslprep.js';

const ok = (input: string, stored = true): string => {
  const r = saslprep(input, stored);
  assert.ok(r.ok, `${JSON.stringify(input)} refused: ${r.ok ? '' : r.reason}`);
  return r.value;
};
const refused = (input: string, stored = true): string => {
  const r = saslprep(input, stored);
  assert.ok(!r.ok, `${JSON.stringify(input)} accepted as ${r.ok ? JSON.stringify(r.value) : ''}`);
  return r.reason;
};

describe('SASLprep (RFC 4013)', { timeout: 10_000 }, () => {
  it('gives the results of the examples of RFC 4013 §3', () => {
    assert.equal(ok('I\u00ADX'), 'IX');
    assert.equal(ok('user'), 'user');
    assert.equal(ok('USER'), 'USER');
    assert.equal(ok('\u00AA'), 'a');
    assert.equal(ok('\u2168'), 'IX');
    assert.match(refused('\u0007'), /C\.2\.1/);
    assert.match(refused('\u0627\u0031'), /RFC 3454 §6/);
  });

  it('maps non-ASCII spaces to SPACE and the B.1 characters to nothing', () => {
    assert.equal(ok('a\u00A0b\u3000c'), 'a b c');
    assert.equal(ok('pa\u200Bss\uFEFFword\uFE0F'), 'password');
  });

  it('refuses each prohibited table of RFC 4013 §2.3', () => {
    const cases: [string, RegExp][] = [
      ['\u0085', /C\.2\.2/],
      ['\u{1D173}', /C\.2\.2/],
      ['\uE000', /C\.3/],
      ['\u{10FFFD}', /C\.3/],
      ['\uFDD0', /C\.4/],
      ['\uD800', /C\.5/],
      ['\uFFFD', /C\.6/],
      ['\u2FF0', /C\.7/],
      ['\u202E', /C\.8/],
      ['\u{E0041}', /C\.9/],
    ];
    for (const [ch, table] of cases) assert.match(refused(`x${ch}y`), table, `U+${ch.codePointAt(0)?.toString(16)}`);
  });

  it('refuses unassigned code points in stored strings only', () => {
    assert.match(refused('a\u0378'), /unassigned/);
    assert.equal(ok('a\u0378', false), 'a\u0378');
  });

  it('accepts right-to-left text that starts and ends right-to-left, and refuses it mixed with left-to-right letters', () => {
    assert.equal(ok('\u0627\u0031\u0628'), '\u0627\u0031\u0628');
    assert.equal(ok('\u05D0\u05D1'), '\u05D0\u05D1');
    assert.match(refused('\u0627a\u0628'), /mixed/);
    assert.match(refused('1\u0627'), /start and end/);
  });
});
