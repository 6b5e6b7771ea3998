// Topic names and topic filters (MQTT 3.1.1 §4.7, MQTT 5.0 §4.7 and §4.8.2). Pure checks on
// strings that the decoder has already proven to be well-formed UTF-8.

import { Buffer } from 'node:buffer';

/** A UTF-8 string in MQTT is at most 65535 bytes [MQTT-1.5.3], and a topic at least 1 [MQTT-4.7.3-1]. */
const TOPIC_BYTES_MAX = 65_535;
const SHARE_PREFIX = '$share/';

/** Returns null if `topic` may be published to, else a short reason. */
export function validateTopicName(topic: string): string | null {
  const length = lengthProblem(topic);
  if (length !== null) return length;
  // [MQTT-3.3.2-2] wildcards are for filters only.
  if (topic.includes('+') || topic.includes('#')) return 'wildcard in topic name';
  return null;
}

/** Returns null if `filter` may be subscribed to (including `$share/{ShareName}/{filter}`), else a
 * short reason. */
export function validateTopicFilter(filter: string): string | null {
  const length = lengthProblem(filter);
  if (length !== null) return length;
  const shared = parseSharedFilter(filter);
  if (shared === null) return wildcardProblem(filter);
  // [MQTT-4.8.2-1] ShareName is at least one character; [MQTT-4.8.2-2] it has no `/`, `+` or `#`.
  if (shared.group.length === 0) return 'empty share name';
  if (shared.group.includes('+') || shared.group.includes('#')) return 'wildcard in share name';
  if (shared.filter.length === 0) return 'shared subscription without a topic filter';
  return wildcardProblem(shared.filter);
}

/**
 * Splits `$share/{ShareName}/{filter}`; null when `filter` does not start with `$share/`. It only
 * splits: for a malformed shared filter (`$share/g`, `$share//x`) the group or filter comes back
 * empty, so callers validate with validateTopicFilter first.
 */
export function parseSharedFilter(filter: string): { group: string; filter: string } | null {
  if (!filter.startsWith(SHARE_PREFIX)) return null;
  const slash = filter.indexOf('/', SHARE_PREFIX.length);
  if (slash < 0) return { group: filter.slice(SHARE_PREFIX.length), filter: '' };
  return { group: filter.slice(SHARE_PREFIX.length, slash), filter: filter.slice(slash + 1) };
}

function lengthProblem(topic: string): string | null {
  if (topic.length === 0) return 'empty topic';
  // A UTF-16 code unit encodes to at most 3 UTF-8 bytes, so short strings skip the byte count.
  if (topic.length * 3 > TOPIC_BYTES_MAX && Buffer.byteLength(topic, 'utf8') > TOPIC_BYTES_MAX) {
    return 'topic longer than 65535 bytes';
  }
  // [MQTT-4.7.3-2] topics must not contain U+0000.
  if (topic.includes('\u0000')) return 'U+0000 in topic';
  return null;
}

/** `#` only as the whole last level [MQTT-4.7.1-2]; `+` only as a whole level [MQTT-4.7.1-3]. */
function wildcardProblem(filter: string): string | null {
  const levels = filter.split('/');
  const last = levels.length - 1;
  for (let i = 0; i <= last; i++) {
    const level = levels[i];
    if (level.includes('#') && (level !== '#' || i !== last)) return '# not alone as the last level';
    if (level.includes('+') && level !== '+') return '+ not alone in its level';
  }
  return null;
}
