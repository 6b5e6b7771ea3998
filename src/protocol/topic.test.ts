import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { parseSharedFilter, validateTopicFilter, validateTopicName } from './topic.js';

const valid = (reason: string | null, input: string) => assert.equal(reason, null, `${JSON.stringify(input)}: ${reason}`);
const invalid = (reason: string | null, input: string) => assert.notEqual(reason, null, `${JSON.stringify(input)} accepted`);

describe('topic names', { timeout: 30_000 }, () => {
  it('accepts ordinary, empty-level, $-prefixed and non-ASCII names', () => {
    for (const t of ['a', 'sport/tennis/player1', '/', '//', 'a//b', '/finance', '$SYS/broker/load', ' ', 'ü/€/𝄞']) {
      valid(validateTopicName(t), t);
    }
  });

  it('refuses wildcards anywhere in a name [MQTT-3.3.2-2]', () => {
    for (const t of ['+', '#', 'a/+', 'a/#', 'a+b', 'sport/tennis#', '$SYS/#']) invalid(validateTopicName(t), t);
  });

  it('refuses the empty name and U+0000 [MQTT-4.7.3-1] [MQTT-4.7.3-2]', () => {
    for (const t of ['', '\u0000', 'a/\u0000', 'a\u0000b']) invalid(validateTopicName(t), t);
  });

  it('counts the length in UTF-8 bytes, not characters', () => {
    valid(validateTopicName('a'.repeat(65_535)), 'a * 65535');
    invalid(validateTopicName('a'.repeat(65_536)), 'a * 65536');
    // 21_845 three-byte characters are exactly 65535 bytes; one more ASCII byte is too many.
    valid(validateTopicName('€'.repeat(21_845)), '€ * 21845');
    invalid(validateTopicName(`${'€'.repeat(21_845)}a`), '€ * 21845 + a');
  });
});

describe('topic filters', { timeout: 30_000 }, () => {
  it('accepts the wildcard forms of §4.7.1 and empty levels', () => {
    const filters = [
      '#',
      '+',
      '+/+',
      '/+',
      '+/',
      'sport/#',
      'sport/tennis/player1/#',
      'sport/+',
      'sport/+/player1',
      '+/tennis/#',
      'a//b',
      '/',
      '//',
      '$SYS/#',
      '$SYS/monitor/+',
      'a/+/+/#',
    ];
    for (const f of filters) valid(validateTopicFilter(f), f);
  });

  it('refuses # anywhere but alone as the last level [MQTT-4.7.1-2]', () => {
    for (const f of ['sport/tennis#', '#/a', 'a/#/b', '##', 'a/b#', '#a', '#/']) invalid(validateTopicFilter(f), f);
  });

  it('refuses + that does not fill its whole level [MQTT-4.7.1-3]', () => {
    for (const f of ['sport+', 'sport/+tennis', 'a/++', '+a/b', 'a/b+/c']) invalid(validateTopicFilter(f), f);
  });

  it('refuses the empty filter, U+0000 and more than 65535 bytes', () => {
    for (const f of ['', 'a\u0000', '\u0000/#', 'a'.repeat(65_536)]) invalid(validateTopicFilter(f), f.slice(0, 20));
  });

  it('accepts shared subscriptions with a share name and a valid filter', () => {
    for (const f of ['$share/g/a', '$share/group/sport/+/player1', '$share/g/#', '$share/g/+', '$share/g//', '$share/$g/x']) {
      valid(validateTopicFilter(f), f);
    }
  });

  it('refuses shared subscriptions with an empty or wildcard share name, or no filter [MQTT-4.8.2-1] [MQTT-4.8.2-2]', () => {
    for (const f of [
      '$share/',
      '$share//a',
      '$share/g',
      '$share/g/',
      '$share/+/a',
      '$share/#/a',
      '$share/g+/a',
      '$share/g#/a',
      '$share/g/a#',
      '$share/g/a/#/b',
    ]) {
      invalid(validateTopicFilter(f), f);
    }
  });

  it('treats $share without its slash, and other $ prefixes, as ordinary filters', () => {
    for (const f of ['$share', '$shared/g/a', '$SHARE/g/a']) valid(validateTopicFilter(f), f);
    assert.equal(parseSharedFilter('$share'), null);
    assert.equal(parseSharedFilter('$SHARE/g/a'), null);
    assert.equal(parseSharedFilter('a/$share/g/b'), null);
  });

  it('splits a shared filter at the first slash after the share name', () => {
    assert.deepEqual(parseSharedFilter('$share/g/a/b'), { group: 'g', filter: 'a/b' });
    assert.deepEqual(parseSharedFilter('$share/g//'), { group: 'g', filter: '/' });
    assert.deepEqual(parseSharedFilter('$share/g'), { group: 'g', filter: '' });
    assert.deepEqual(parseSharedFilter('$share//a'), { group: '', filter: 'a' });
  });

  it('agrees with a per-level reading of the rules on random filters', () => {
    // The reference: split into levels, each level is either free of wildcards, exactly `+`, or
    // exactly `#` in the last position.
    const reference = (f: string) => {
      const levels = f.split('/');
      return levels.every((l, i) => (!l.includes('+') && !l.includes('#')) || l === '+' || (l === '#' && i === levels.length - 1));
    };
    const level = fc.constantFrom('a', 'b', '', '+', '#', 'a+', '#b', '$x', '++');
    fc.assert(
      fc.property(fc.array(level, { minLength: 1, maxLength: 6 }), (levels) => {
        const f = levels.join('/');
        if (f.length === 0) return;
        assert.equal(validateTopicFilter(f) === null, reference(f), f);
        assert.equal(validateTopicFilter(`$share/g/${f}`) === null, reference(f), f);
        assert.equal(validateTopicName(f) === null, !f.includes('+') && !f.includes('#'), f);
      }),
      { numRuns: 2_000 },
    );
  });
});
