// An embedding application's hook answers at once or with a promise (src/index.ts): this settles
// either into a verdict, bounded by a timeout, so a hook that throws, rejects, never answers or
// answers nonsense costs the client a refusal and never the broker a hang.

/** What to make of each way a hook can end. */
export interface HookOutcomes<A, R> {
  /** The hook answered; an answer it may not give is turned into a failure by `decide` itself. */
  decide(answer: A): R;
  /** It threw or its promise rejected; `problem` says how. */
  failed(problem: string): R;
  /** No answer within the timeout. */
  timedOut(): R;
}

/** Calls the hook and settles its answer: synchronously when it answered synchronously (no
 * promise, no timer), else within `timeoutMs`. */
export function settleHook<A, R>(call: () => A | Promise<A>, timeoutMs: number, o: HookOutcomes<A, R>): R | Promise<R> {
  let answer: A | Promise<A>;
  try {
    answer = call();
  } catch (err) {
    return o.failed(`threw: ${messageOf(err)}`);
  }
  if (!(answer instanceof Promise)) return o.decide(answer);
  return new Promise<R>((resolve) => {
    const timer = setTimeout(() => resolve(o.timedOut()), timeoutMs);
    answer.then(
      (a) => {
        clearTimeout(timer);
        resolve(o.decide(a));
      },
      (err: unknown) => {
        clearTimeout(timer);
        resolve(o.failed(`rejected: ${messageOf(err)}`));
      },
    );
  });
}

function messageOf(err: unknown): string {
  return (err as Error)?.message ?? String(err);
}

/** A hook's answer as a log field shows it. */
export function describeAnswer(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return typeof v;
  }
}
