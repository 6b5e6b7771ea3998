// `--listen URL`: which listeners a node opens. Pure parsing; errors name the flag and the URL.
import { CONFIG_ERROR, ConfigError } from '../../errors.js';
import type { ProxyVersion } from '../proxy-protocol.js';
import type { ListenerKind } from '../transport.js';

export interface ListenerSpec {
  kind: ListenerKind;
  /** Bind address, without IPv6 brackets. */
  host: string;
  port: number;
  /** WebSocket listeners only: the HTTP path of the upgrade (default /mqtt). */
  path: string;
  /** PROXY protocol version expected before any other byte, or null. */
  proxy: ProxyVersion | null;
}

export const WS_DEFAULT_PATH = '/mqtt';
/** IANA ports for MQTT and MQTT over TLS; WebSocket listeners have none, so they need one. */
const DEFAULT_PORT: Record<ListenerKind, number | null> = { mqtt: 1883, mqtts: 8883, ws: null, wss: null };

function isKind(s: string): s is ListenerKind {
  return Object.hasOwn(DEFAULT_PORT, s);
}

/** Parses one listener URL; `where` names the flag or config key in errors. */
export function parseListenUrl(raw: string, where = '--listen'): ListenerSpec {
  const bad = (why: string): ConfigError => new ConfigError(CONFIG_ERROR.BAD_VALUE, `${where} ${raw}: ${why}`);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw bad('not a URL (expected e.g. mqtt://0.0.0.0:1883 or wss://0.0.0.0:8084/mqtt)');
  }
  const kind = url.protocol.slice(0, -1);
  if (!isKind(kind)) throw bad('scheme must be mqtt, mqtts, ws or wss');
  if (url.username !== '' || url.password !== '' || url.hash !== '') throw bad('no user, password or fragment allowed');
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (host === '') throw bad('needs a host to bind, e.g. 0.0.0.0');
  const port = url.port === '' ? DEFAULT_PORT[kind] : Number(url.port);
  if (port === null) throw bad('needs a port');
  const ws = kind === 'ws' || kind === 'wss';
  const pathname = url.pathname === '' || url.pathname === '/' ? '' : url.pathname;
  if (!ws && pathname !== '') throw bad('a path is only meaningful for ws:// and wss://');
  let proxy: ProxyVersion | null = null;
  for (const [key, value] of url.searchParams) {
    if (key !== 'proxy') throw bad(`unknown option "${key}" (known: proxy)`);
    if (value !== 'v1' && value !== 'v2') throw bad('proxy must be v1 or v2');
    proxy = value === 'v1' ? 1 : 2;
  }
  return { kind, host, port, path: ws ? pathname || WS_DEFAULT_PATH : '', proxy };
}

/** The URL of a listener as logged once it is bound (with the real port). */
export function listenerUrl(spec: ListenerSpec, port: number): string {
  const host = spec.host.includes(':') ? `[${spec.host}]` : spec.host;
  const query = spec.proxy === null ? '' : `?proxy=v${spec.proxy}`;
  return `${spec.kind}://${host}:${port}${spec.path}${query}`;
}

export function isTlsKind(kind: ListenerKind): boolean {
  return kind === 'mqtts' || kind === 'wss';
}
