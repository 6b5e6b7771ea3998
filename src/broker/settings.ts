// The replicated settings: decided by configuration, carried by `serve-start` and `settings`, and
// consulted by apply, so that every replica decides the same way (docs/design.md "Settings").
//
// One table says everything about a setting: its type, its value before the first serve-start, the
// check a decoded value must pass, and (through the table) its place in commands, snapshots and
// configuration hashes. Adding a setting is one row here, plus a snapshot format version and the
// flag that feeds it.
import type { QoS } from '../protocol/packets.js';
import { type BridgeRule, isBridgeRule } from './bridge-rules.js';

/** One ACL line in Mosquitto's model: `topic` lines (user null: anonymous, or a named user) and
 * `pattern` lines (any user, with %c and %u substituted; user is always null). */
export interface AclRule {
  kind: 'topic' | 'pattern';
  /** For `topic` rules: the user they belong to; null for lines before the first `user` line. */
  user: string | null;
  access: 'read' | 'write' | 'readwrite' | 'deny';
  filter: string;
}

/** What a value of each kind is, and the check of a decoded one. */
interface KindOf {
  int: number;
  bool: boolean;
  qos: QoS;
  acl: AclRule[] | null;
  rules: BridgeRule[];
}

interface SettingRow<K extends keyof KindOf = keyof KindOf> {
  readonly kind: K;
  /** The value until the first serve-start, and the value of a record written before the setting
   * existed: so a new setting's initial value must be the behaviour the broker had without it. */
  readonly initial: KindOf[K];
  /** Inclusive range of an `int`. */
  readonly min?: number;
  readonly max?: number;
}

const U32 = 0xffff_ffff;

/** Every replicated setting, in the order snapshots of format 4 wrote them positionally. */
export const SETTINGS = {
  /** Queue admission bound per session, in messages. */
  maxQueuedMessages: { kind: 'int', initial: 10_000, min: 0, max: Number.MAX_SAFE_INTEGER },
  /** Queue admission bound per session, in payload plus topic bytes. */
  maxQueuedBytes: { kind: 'int', initial: 64 * 1024 * 1024, min: 0, max: Number.MAX_SAFE_INTEGER },
  /** Unacknowledged outbound QoS 1/2 publishes per session (v5: min with the client's Receive Maximum). */
  maxInflight: { kind: 'int', initial: 32, min: 1, max: 65_535 },
  maxQos: { kind: 'qos', initial: 2 },
  retainAvailable: { kind: 'bool', initial: true },
  /** Largest packet the broker sends or accepts, in bytes. */
  maxPacketSize: { kind: 'int', initial: 1024 * 1024, min: 1, max: 268_435_460 },
  /** Wills of connections ended by a failover wait max(grace, will delay), in seconds. */
  willGraceS: { kind: 'int', initial: 30, min: 0, max: U32 },
  /** Subscriptions per session; a SUBSCRIBE beyond it is refused per filter with 0x97. 0: no bound. */
  maxSubscriptions: { kind: 'int', initial: 0, min: 0, max: U32 },
  /** Access control table in file order (src/broker/acl.ts); null allows everything. */
  acl: { kind: 'acl', initial: null },
  /** Bridge topic rules in configuration order (src/broker/bridge-rules.ts); none: no bridge. */
  bridgeRules: { kind: 'rules', initial: [] as BridgeRule[] },
  /** Messages one bridge outbox holds at most (docs/bridges.md "When the remote is down"). */
  bridgeOutboxMessages: { kind: 'int', initial: 10_000, min: 1, max: 100_000_000 },
  /** Topic and payload bytes one bridge outbox holds at most. */
  bridgeOutboxBytes: { kind: 'int', initial: 64 * 1024 * 1024, min: 1, max: Number.MAX_SAFE_INTEGER },
} as const satisfies Record<string, SettingRow>;

export type SettingName = keyof typeof SETTINGS;

/** Settings decided by configuration that apply() consults. */
export type Settings = { -readonly [N in SettingName]: KindOf[(typeof SETTINGS)[N]['kind']] };

/** The names in table order. */
export const SETTING_NAMES = Object.keys(SETTINGS) as SettingName[];

function initialSettings(): Settings {
  const s: Record<string, unknown> = {};
  for (const n of SETTING_NAMES) s[n] = SETTINGS[n].initial;
  return s as Settings;
}

/** The settings used until the first serve-start; the flags' defaults are in src/config.ts. */
export const DEFAULT_SETTINGS: Settings = initialSettings();

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isStr = (v: unknown): v is string => typeof v === 'string';
const ACL_ACCESS: readonly unknown[] = ['read', 'write', 'readwrite', 'deny'];

function isAclRule(r: unknown): r is AclRule {
  if (!isObj(r) || !isStr(r.filter) || r.filter.length === 0 || !ACL_ACCESS.includes(r.access)) return false;
  if (r.kind === 'pattern') return r.user === null;
  return r.kind === 'topic' && (r.user === null || isStr(r.user));
}

/** Whether `v` is a valid value of setting `name`. */
export function settingValid(name: SettingName, v: unknown): boolean {
  const row: SettingRow = SETTINGS[name];
  switch (row.kind) {
    case 'int':
      return typeof v === 'number' && Number.isInteger(v) && v >= (row.min ?? 0) && v <= (row.max ?? Number.MAX_SAFE_INTEGER);
    case 'bool':
      return typeof v === 'boolean';
    case 'qos':
      return v === 0 || v === 1 || v === 2;
    case 'acl':
      return v === null || (Array.isArray(v) && v.every(isAclRule));
    case 'rules':
      return Array.isArray(v) && v.every(isBridgeRule);
    default: {
      const never: never = row.kind;
      return never;
    }
  }
}

/** Every setting present and valid. Keys the table does not name are ignored, as apply ignores them. */
export function isSettings(s: unknown): s is Settings {
  if (!isObj(s)) return false;
  for (const n of SETTING_NAMES) if (!settingValid(n, s[n])) return false;
  return true;
}

/** The settings of a record that may predate some settings: each absent one takes its initial value
 * (the behaviour before it existed); a present one must be valid. Null when one is invalid or
 * `v` is not an object. Unknown keys are dropped. */
export function completeSettings(v: unknown): Settings | null {
  if (!isObj(v)) return null;
  const s: Record<string, unknown> = {};
  for (const n of SETTING_NAMES) {
    const x = v[n] === undefined ? SETTINGS[n].initial : v[n];
    if (!settingValid(n, x)) return null;
    s[n] = x;
  }
  return s as Settings;
}

/** The settings named by the table, taken from an object that has them among other fields (a node's
 * options); one it leaves out takes its initial value. Not checked: options are checked where
 * they are parsed (src/config.ts). */
export function pickSettings(o: Partial<Settings>): Settings {
  const s: Record<string, unknown> = {};
  for (const n of SETTING_NAMES) s[n] = o[n] === undefined ? SETTINGS[n].initial : o[n];
  return s as Settings;
}
