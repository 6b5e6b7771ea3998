// Bridge configuration (docs/bridges.md "Configuration"): `--bridge NAME=URL` (repeatable) and the
// config file's `bridges` map, NAME to its settings. The topic rules become the replicated setting
// `bridgeRules`; everything else (addresses, client id, credentials, certificates) stays on this
// node, covered by its configuration hash and never written into the log or a state file.
import { BRIDGE_NAME, type BridgeRule, isInbound, isOutbound, loopingPair, parseBridgeRule, ruleText } from '../../broker/bridge-rules.js';
import { CONFIG_ERROR, ConfigError } from '../../errors.js';
import { checkTls, type PemFile, readPem } from '../../tls-files.js';

export interface BridgeAddress {
  /** As configured, for log lines. */
  url: string;
  /** mqtts:// or wss://. */
  tls: boolean;
  /** MQTT over WebSocket (ws:// or wss://), to the `path` of the URL. */
  ws: boolean;
  host: string;
  port: number;
  /** The WebSocket request path (/mqtt when the URL has none); '' for mqtt:// and mqtts://. */
  path: string;
}

/** The schemes a bridge address may have, and each one's default port. */
const BRIDGE_SCHEMES: Record<string, { tls: boolean; ws: boolean; port: number }> = {
  'mqtt:': { tls: false, ws: false, port: 1883 },
  'mqtts:': { tls: true, ws: false, port: 8883 },
  'ws:': { tls: false, ws: true, port: 80 },
  'wss:': { tls: true, ws: true, port: 443 },
};
const WS_PATH_DEFAULT = '/mqtt';
const EXPECTED_URL = 'mqtt://HOST:PORT, mqtts://HOST:PORT, ws://HOST:PORT/PATH or wss://HOST:PORT/PATH';

/** The node-local part of one bridge, checked. */
export interface BridgeSpec {
  name: string;
  /** Tried in turn, from the first, after each failed attempt. */
  addresses: BridgeAddress[];
  clientId: string;
  username: string | null;
  password: string | null;
  /** 4: MQTT 3.1.1; 5: MQTT 5.0. */
  protocol: 4 | 5;
  keepaliveS: number;
  /** Seconds of failed attempts in a row after which one error line says the bridge is still down. */
  downAlertS: number;
  cleanStart: boolean;
  /** Messages at once (QoS 1 and 2) the remote has not completed; an MQTT 5 remote's Receive
   * Maximum may bound them lower. */
  maxInflight: number;
  /** QoS 2 messages at once the remote has not completed, at most maxInflight. A 3.1.1 remote
   * cannot say its limit, so this is where its operator says it. */
  maxInflightQos2: number;
  /** MQTT 3.1.1: Mosquitto's bridge bit (0x80 added to the protocol level in CONNECT). */
  tryPrivate: boolean;
  /** PEM bytes of the files named by tls-ca, tls-cert and tls-key; null when not given. */
  tlsCa: Buffer | null;
  tlsCert: Buffer | null;
  tlsKey: Buffer | null;
  /** The file names, for the configuration hash and messages. */
  files: string[];
  rules: BridgeRule[];
}

/** The keys of one bridge in the config file's `bridges` map. */
const BRIDGE_KEYS = [
  'address',
  'client-id',
  'username',
  'password',
  'protocol-version',
  'keepalive-s',
  'down-alert-s',
  'clean-start',
  'max-inflight',
  'max-inflight-qos2',
  'try-private',
  'tls-ca',
  'tls-cert',
  'tls-key',
  'topic',
] as const;

/** Default of max-inflight. */
export const BRIDGE_MAX_INFLIGHT_DEFAULT = 64;
/** Default of max-inflight-qos2 to a 3.1.1 remote: Mosquitto answers PUBREC to QoS 2 messages
 * beyond its max_inflight_messages (20 by default) and drops them. To an MQTT 5 remote the default
 * is max-inflight (its Receive Maximum bounds them with the rest). */
export const BRIDGE_MAX_INFLIGHT_QOS2_V4_DEFAULT = 20;
/** The bound of both: the link numbers its QoS 1 packets in the upper half of the id space and the
 * outbox its QoS 2 items in the lower half (src/server/bridge/bridge-link.ts). */
const BRIDGE_MAX_INFLIGHT_MAX = 32_767;

/** Default of down-alert-s: two backoff ceilings, so a remote that restarts does not raise it. */
export const BRIDGE_DOWN_ALERT_S_DEFAULT = 60;

const bad = (where: string, why: string): ConfigError => new ConfigError(CONFIG_ERROR.BAD_VALUE, `${where}: ${why}`);

/** mqtt://HOST[:PORT] or mqtts://HOST[:PORT] without a path, or ws://HOST[:PORT][/PATH] or
 * wss://HOST[:PORT][/PATH] (path default /mqtt); no query, fragment or credentials. */
export function parseBridgeUrl(text: string, where: string): BridgeAddress {
  let u: URL;
  try {
    u = new URL(text);
  } catch {
    throw bad(where, `${JSON.stringify(text)} is not a URL (expected ${EXPECTED_URL})`);
  }
  const scheme = Object.hasOwn(BRIDGE_SCHEMES, u.protocol) ? BRIDGE_SCHEMES[u.protocol] : undefined;
  if (scheme === undefined)
    throw bad(where, `${JSON.stringify(text)}: scheme ${u.protocol.slice(0, -1)} is not supported (expected mqtt, mqtts, ws or wss)`);
  if (u.username !== '' || u.password !== '')
    throw bad(where, `${JSON.stringify(text)}: credentials do not go into the URL (give username and password in the bridge's settings)`);
  if (u.search !== '' || u.hash !== '') throw bad(where, `${JSON.stringify(text)}: expected no query or fragment`);
  if (!scheme.ws && u.pathname !== '' && u.pathname !== '/')
    throw bad(where, `${JSON.stringify(text)}: expected no path (a path is for ws:// and wss://)`);
  const host = u.hostname.replace(/^\[(.*)\]$/, '$1');
  if (host === '') throw bad(where, `${JSON.stringify(text)}: no host`);
  const port = u.port === '' ? scheme.port : Number(u.port);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) throw bad(where, `${JSON.stringify(text)}: bad port`);
  // Without a path a WebSocket goes to /mqtt, as raftmq's own ws listeners (and most brokers') do.
  const path = !scheme.ws ? '' : /^[a-z]+:\/\/[^/]+\//i.test(text) ? u.pathname : WS_PATH_DEFAULT;
  return { url: text, tls: scheme.tls, ws: scheme.ws, host, port, path };
}

/** `NAME=URL` of --bridge. */
export function parseBridgeFlag(text: string): { name: string; address: BridgeAddress } {
  const eq = text.indexOf('=');
  const name = eq < 0 ? '' : text.slice(0, eq);
  if (!BRIDGE_NAME.test(name)) throw bad(`--bridge ${text}`, 'expected NAME=URL, NAME of letters, digits, - and _ (at most 64)');
  return { name, address: parseBridgeUrl(text.slice(eq + 1), `--bridge ${text}`) };
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function strings(v: unknown, where: string): string[] {
  const items = typeof v === 'string' ? [v] : v;
  if (!Array.isArray(items) || items.some((x) => typeof x !== 'string' || x.length === 0))
    throw bad(where, 'expected a string or a list of strings');
  return items as string[];
}

function oneString(v: unknown, where: string): string {
  if (typeof v !== 'string' || v.length === 0) throw bad(where, 'expected a non-empty string');
  return v;
}

/** What the configuration gives for bridges. */
export interface BridgeConfigInput {
  bridge: readonly string[];
  bridges: Readonly<Record<string, unknown>>;
}

/** Every bridge of the configuration, checked; the topic rules of all of them in order. Throws a
 * ConfigError naming the flag or the key (`bridges.NAME.KEY`). */
export function bridgeSpecs(config: BridgeConfigInput): BridgeSpec[] {
  const flagged = new Map<string, BridgeAddress[]>();
  for (const text of config.bridge) {
    const { name, address } = parseBridgeFlag(text);
    flagged.set(name, [...(flagged.get(name) ?? []), address]);
  }
  const section = config.bridges;
  if (!isObj(section)) throw bad('bridges', 'expected a map of bridge names to their settings');
  for (const name of Object.keys(section)) {
    if (!BRIDGE_NAME.test(name)) throw bad(`bridges.${name}`, 'a bridge name has letters, digits, - and _ only (at most 64)');
  }
  const names = [...new Set([...flagged.keys(), ...Object.keys(section)])];
  const specs = names.map((name) => bridgeSpec(name, flagged.get(name), section[name]));
  const rules = specs.flatMap((s) => s.rules);
  const loop = loopingPair(rules);
  if (loop !== null) {
    const [o, i] = loop;
    throw bad(
      `bridges.${o.bridge}.topic`,
      `rules "${ruleText(o)}" and "${ruleText(i)}" would loop: what the first forwards the second brings back, and the first forwards it again`,
    );
  }
  return specs;
}

function bridgeSpec(name: string, flagged: BridgeAddress[] | undefined, raw: unknown): BridgeSpec {
  const where = `bridges.${name}`;
  const s = raw ?? {};
  if (!isObj(s)) throw bad(where, 'expected a map of settings');
  for (const key of Object.keys(s)) {
    if (!(BRIDGE_KEYS as readonly string[]).includes(key)) {
      throw new ConfigError(CONFIG_ERROR.UNKNOWN_KEY, `${where}: unknown key "${key}" (expected one of ${BRIDGE_KEYS.join(', ')})`);
    }
  }
  // A flag beats the file.
  const addresses =
    flagged ?? (s.address === undefined ? [] : strings(s.address, `${where}.address`).map((u) => parseBridgeUrl(u, `${where}.address`)));
  if (addresses.length === 0)
    throw new ConfigError(CONFIG_ERROR.MISSING_VALUE, `${where}: no address (give --bridge ${name}=URL or ${where}.address)`);
  const protocol = s['protocol-version'] === undefined ? 4 : s['protocol-version'];
  if (protocol !== 4 && protocol !== 5 && protocol !== '4' && protocol !== '5')
    throw bad(`${where}.protocol-version`, `expected 4 (MQTT 3.1.1) or 5 (MQTT 5.0) (got ${JSON.stringify(protocol)})`);
  const keepalive = s['keepalive-s'] === undefined ? 60 : s['keepalive-s'];
  if (typeof keepalive !== 'number' || !Number.isInteger(keepalive) || keepalive < 1 || keepalive > 65_535)
    throw bad(`${where}.keepalive-s`, `expected a whole number of seconds from 1 to 65535 (got ${JSON.stringify(keepalive)})`);
  const downAlert = s['down-alert-s'] === undefined ? BRIDGE_DOWN_ALERT_S_DEFAULT : s['down-alert-s'];
  if (typeof downAlert !== 'number' || !Number.isInteger(downAlert) || downAlert < 1 || downAlert > 86_400)
    throw bad(`${where}.down-alert-s`, `expected a whole number of seconds from 1 to 86400 (got ${JSON.stringify(downAlert)})`);
  const topics = s.topic === undefined ? [] : strings(s.topic, `${where}.topic`);
  if (topics.length === 0) throw new ConfigError(CONFIG_ERROR.MISSING_VALUE, `${where}: no topic rule (${where}.topic)`);
  const rules = topics.map((text) => {
    const r = parseBridgeRule(name, text);
    if (typeof r === 'string') throw bad(`${where}.topic "${text}"`, r);
    return r;
  });
  // A bridge that brings messages in keeps its session at the remote by default, so what is
  // published there while the bridge is down waits for it (docs/bridges.md "Inbound"); so does one
  // that forwards at QoS 2, whose exactly once rests on the remote keeping the packet ids of the
  // messages it has (docs/bridges.md "QoS 2 to the remote").
  const keepSession = rules.some((r) => isInbound(r) || (isOutbound(r) && r.qos === 2));
  const clean = s['clean-start'] === undefined ? !keepSession : s['clean-start'];
  if (typeof clean !== 'boolean') throw bad(`${where}.clean-start`, `expected true or false (got ${JSON.stringify(clean)})`);
  const count = (key: 'max-inflight' | 'max-inflight-qos2', dflt: number, max: number): number => {
    const v = s[key] === undefined ? dflt : s[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > max)
      throw bad(`${where}.${key}`, `expected a whole number of messages from 1 to ${max} (got ${JSON.stringify(v)})`);
    return v;
  };
  const maxInflight = count('max-inflight', BRIDGE_MAX_INFLIGHT_DEFAULT, BRIDGE_MAX_INFLIGHT_MAX);
  const qos2Default = Number(protocol) === 4 ? Math.min(BRIDGE_MAX_INFLIGHT_QOS2_V4_DEFAULT, maxInflight) : maxInflight;
  const maxInflightQos2 = count('max-inflight-qos2', qos2Default, maxInflight);
  const tryPrivate = s['try-private'] === undefined ? true : s['try-private'];
  if (typeof tryPrivate !== 'boolean') throw bad(`${where}.try-private`, `expected true or false (got ${JSON.stringify(tryPrivate)})`);
  const clientId = s['client-id'] === undefined ? `raftmq-bridge-${name}` : oneString(s['client-id'], `${where}.client-id`);
  const username = s.username === undefined ? null : oneString(s.username, `${where}.username`);
  const password = s.password === undefined ? null : oneString(s.password, `${where}.password`);
  if (password !== null && username === null && Number(protocol) === 4)
    throw new ConfigError(CONFIG_ERROR.MISSING_VALUE, `${where}.password: MQTT 3.1.1 needs a username with a password`);
  const file = (key: 'tls-ca' | 'tls-cert' | 'tls-key'): string | null =>
    s[key] === undefined ? null : oneString(s[key], `${where}.${key}`);
  const ca = file('tls-ca');
  const cert = file('tls-cert');
  const key = file('tls-key');
  if ((cert === null) !== (key === null))
    throw new ConfigError(CONFIG_ERROR.MISSING_VALUE, `${where}: tls-cert and tls-key go together (a client certificate and its key)`);
  if ((ca !== null || cert !== null) && !addresses.some((a) => a.tls))
    throw bad(where, 'tls-ca, tls-cert and tls-key need an mqtts:// or wss:// address');
  const pem = (k: 'tls-ca' | 'tls-cert' | 'tls-key', f: string | null): PemFile | null =>
    f === null ? null : { key: `${where}.${k}`, file: f, pem: readPem(f, `${where}.${k}`) };
  const caPem = pem('tls-ca', ca);
  const certPem = pem('tls-cert', cert);
  const keyPem = pem('tls-key', key);
  checkTls(caPem, certPem, keyPem);
  return {
    name,
    addresses,
    clientId,
    username,
    password,
    protocol: Number(protocol) as 4 | 5,
    keepaliveS: keepalive,
    downAlertS: downAlert,
    cleanStart: clean,
    maxInflight,
    maxInflightQos2,
    tryPrivate,
    tlsCa: caPem?.pem ?? null,
    tlsCert: certPem?.pem ?? null,
    tlsKey: keyPem?.pem ?? null,
    files: [ca, cert, key].filter((f): f is string => f !== null),
    rules,
  };
}

/** What the configuration hash covers of the bridges: every setting that decides what the bridge
 * does, credentials included (down-alert-s only times a log line, so nodes may differ in it); the
 * certificate files go in by their bytes (src/cluster/config-hash.ts). */
export function bridgesHashInput(specs: readonly BridgeSpec[]): unknown {
  return specs.map((s) => ({
    name: s.name,
    addresses: s.addresses.map((a) => a.url),
    clientId: s.clientId,
    username: s.username,
    password: s.password,
    protocol: s.protocol,
    keepaliveS: s.keepaliveS,
    cleanStart: s.cleanStart,
    maxInflight: s.maxInflight,
    maxInflightQos2: s.maxInflightQos2,
    tryPrivate: s.tryPrivate,
    files: s.files,
  }));
}
