// The soak's pass criteria (docs/operations.md "The soak"), as pure functions of the figures a run
// collected, so that they are tested apart from the processes that produce them.

/** Heap and RSS of one node, read at the end of one minute of the run. */
export interface MemorySample {
  /** Minutes since the load started (0: before it). */
  minute: number;
  node: number;
  heapUsedBytes: number;
  rssBytes: number;
  /** raftmq_queued_messages of the node at that moment. */
  queuedMessages: number;
  /** The heap was read right after a collection the soak forced. */
  afterForcedGc: boolean;
  /** Bytes used per V8 heap space (nodejs_heap_space_size_used_bytes), for the report. */
  spaces?: Record<string, number>;
}

/** The most a node's heap may grow per minute over the last two thirds of the run (percent). */
export const HEAP_GROWTH_MAX_PCT_PER_MIN = 1;

/** The samples of the last two thirds of a run of `minutes`: those taken at or after minute
 * minutes/3, the first third being warm-up (JIT code, pools and windows filling to their bounds). */
export function lastTwoThirds(samples: readonly MemorySample[], minutes: number): MemorySample[] {
  return samples.filter((s) => s.minute >= minutes / 3 && s.minute > 0);
}

/** Growth of the heap in percent per minute: the least-squares slope of heapUsed over the minutes of
 * `samples`, relative to their mean heap. A slope rather than last-minus-first, so one noisy minute
 * neither hides nor fakes a trend. null with fewer than two samples. */
export function heapGrowthPctPerMin(samples: readonly MemorySample[]): number | null {
  const n = samples.length;
  if (n < 2) return null;
  let sx = 0;
  let sy = 0;
  for (const s of samples) {
    sx += s.minute;
    sy += s.heapUsedBytes;
  }
  const mx = sx / n;
  const my = sy / n;
  let num = 0;
  let den = 0;
  for (const s of samples) {
    num += (s.minute - mx) * (s.heapUsedBytes - my);
    den += (s.minute - mx) ** 2;
  }
  if (den === 0 || my === 0) return null;
  return (num / den / my) * 100;
}

/** What the workload saw, for the criteria. */
export interface WorkloadFigures {
  /** QoS 1/2 messages acknowledged to the checked publisher (PUBACK, PUBCOMP). */
  acked: number;
  /** Of those, the ones the persistent subscriber that stayed subscribed never received. */
  lost: number;
  /** QoS 2 messages that subscriber received more than once. */
  qos2Duplicates: number;
  /** The slow subscriber's bound: --max-queued-messages plus its Receive Maximum. */
  slowBound: number;
  /** The most messages the slow subscriber received after its publisher's last acknowledged burst
   * message, over every burst: what the broker held for it at that moment. */
  slowHeldMax: number;
  /** Bursts to the slow subscriber whose drain was measured. */
  slowBursts: number;
  /** Connections closed abruptly while they carried a will, and the wills the watcher got of them. */
  abruptCloses: number;
  willsOfAbrupt: number;
  /** Wills the watcher got of connections that ended with a normal DISCONNECT (must be 0). */
  willsOfNormal: number;
}

/** How each node process ended, or null while it still runs. */
export interface NodeEnd {
  node: number;
  exit: string | null;
}

/** The named figures that fail the run; empty when it passes. */
export function failures(minutes: number, samples: readonly MemorySample[], w: WorkloadFigures, deaths: readonly NodeEnd[]): string[] {
  const out: string[] = [];
  const nodes = [...new Set(samples.map((s) => s.node))].sort((a, b) => a - b);
  for (const node of nodes) {
    const window = lastTwoThirds(
      samples.filter((s) => s.node === node),
      minutes,
    );
    const g = heapGrowthPctPerMin(window);
    if (g === null) out.push(`heap growth of node ${node}: fewer than two samples in the last two thirds of the run`);
    else if (g > HEAP_GROWTH_MAX_PCT_PER_MIN) {
      out.push(
        `heap growth of node ${node}: ${g.toFixed(2)} %/min over minutes ${window[0]!.minute}-${window[window.length - 1]!.minute} (at most ${HEAP_GROWTH_MAX_PCT_PER_MIN})`,
      );
    }
  }
  if (w.acked === 0) out.push('acknowledged QoS 1/2 messages: none (the workload did not run)');
  if (w.lost > 0) out.push(`lost: ${w.lost} of ${w.acked} acknowledged QoS 1/2 messages never reached the persistent subscriber`);
  if (w.qos2Duplicates > 0) out.push(`qos2 duplicates: ${w.qos2Duplicates}`);
  if (w.slowBursts === 0) out.push('slow subscriber: no burst was measured');
  if (w.slowHeldMax > w.slowBound) out.push(`slow subscriber queue: ${w.slowHeldMax} held, over its bound of ${w.slowBound}`);
  if (w.willsOfAbrupt !== w.abruptCloses) out.push(`wills: ${w.willsOfAbrupt} of ${w.abruptCloses} abrupt closes published`);
  if (w.willsOfNormal > 0) out.push(`wills after a normal disconnect: ${w.willsOfNormal}`);
  for (const d of deaths) if (d.exit !== null) out.push(`node ${d.node} died during the run (${d.exit})`);
  return out;
}
