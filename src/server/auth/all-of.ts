// Several authenticators asked in turn: a CONNECT proceeds only when each allows it, and the first
// refusal is the answer (later ones are not asked). Synchronous answers stay synchronous: a promise
// is made only when one of them answers with one.
import type { ConnectPacket } from '../../protocol/packets.js';
import type { Authenticator, AuthResult } from '../authenticator.js';
import type { Transport } from '../transport.js';

export function allOf(list: readonly Authenticator[]): Authenticator {
  if (list.length === 1) return list[0] as Authenticator;
  const throttle = list.find((a) => a.loginThrottle !== undefined)?.loginThrottle;
  const from = (i: number, c: ConnectPacket, address: string, t: Transport): AuthResult | Promise<AuthResult> => {
    for (; i < list.length; i++) {
      const r = (list[i] as Authenticator).authenticate(c, address, t);
      if (r instanceof Promise) {
        const next = i + 1;
        return r.then((v) => (v.ok ? from(next, c, address, t) : v));
      }
      if (!r.ok) return r;
    }
    return { ok: true };
  };
  return {
    ...(throttle === undefined ? {} : { loginThrottle: throttle }),
    authenticate: (c, address, t) => from(0, c, address, t),
  };
}
