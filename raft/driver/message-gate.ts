// The check every raft message from a peer passes before it reaches the core. The transport runs it
// as its `validate` hook, so a message that fails closes the link it came on (the link is not
// trusted further) and never reaches onMessage; the refusal is logged at a bounded rate.
import type { Message } from '../core/messages.js';
import { type ValidationContext, validateMessage } from '../core/validate.js';
import type { LogLimiter } from './log-limiter.js';

export interface DriverLogger {
  info(fields: Record<string, unknown>, msg: string): void;
  warn(fields: Record<string, unknown>, msg: string): void;
  error(fields: Record<string, unknown>, msg: string): void;
}

export class MessageGate {
  /** Messages refused since start. */
  refused = 0;
  private readonly ctx: ValidationContext;
  private readonly logger: DriverLogger;
  private readonly limiter: LogLimiter;
  private readonly clock: () => number;

  constructor(ctx: ValidationContext, logger: DriverLogger, limiter: LogLimiter, clock: () => number) {
    this.ctx = ctx;
    this.logger = logger;
    this.limiter = limiter;
    this.clock = clock;
  }

  /** The transport's validate hook (a type guard over decoded msgpack values). */
  readonly validate = (m: unknown): m is Message => {
    const error = validateMessage(m, this.ctx);
    if (error === null) return true;
    this.refused++;
    const suppressed = this.limiter.admit(`refused:${error.code}`, this.clock());
    if (suppressed !== null) {
      this.logger.warn({ code: error.code, detail: error.message, suppressed }, 'raft message refused; closing its link');
    }
    return false;
  };
}
