// The broker benchmark's figure: one small bar chart per scenario (deliveries per second; connects per
// second for idle), one bar per broker, each panel on a linear scale of its own so 20k and 1.5M both
// read. Bars of a failed row (✗) or of a row whose load generator used more than the given share of a
// core (⚠) are hatched. The fleet scenarios, when they ran, follow on lines of their own: connect-tls
// connects/s per transport, fleet-failover p50 and p99 in seconds, fleet delivered/s and p99.
// Hand-written, self-contained SVG: no script, no external font or style.
import { type FleetRun, failoverTimes, num, transportRow } from './fleet-child.js';
import type { FleetSection } from './fleet-report.js';
import { loadgenPct, type Row } from './report.js';
import { TARGET_NAMES } from './targets.js';

const WIDTH = 960;
const MARGIN = 16;
const COL_GAP = 28;
const COLS = 2;
const PANEL_W = (WIDTH - 2 * MARGIN - (COLS - 1) * COL_GAP) / COLS;
/** Left of the bars: the broker's name. */
const NAME_W = 96;
/** Right of the longest bar: its value label. */
const LABEL_W = 64;
const BAR_H = 16;
const BAR_GAP = 6;
const PANEL_TITLE_H = 22;
const AXIS_H = 16;
const PANEL_GAP = 18;
const FONT = 'system-ui,-apple-system,Segoe UI,DejaVu Sans,Arial,sans-serif';
/** Okabe–Ito colours, told apart with the common colour-vision deficiencies. */
const COLOURS: Record<string, string> = { raftmq: '#0072b2', 'raftmq-cluster': '#56b4e9', mosquitto: '#e69f00' };
const OTHER_COLOURS = ['#009e73', '#cc79a7', '#d55e00', '#999999'];
const FAIL = '#c0392b';

/** Escapes text for XML content and attribute values. */
export function esc(s: unknown): string {
  return String(s).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** 3 significant digits with k/M: 953, 20.1k, 1.52M. */
export function compact(v: number): string {
  const a = Math.abs(v);
  const [d, unit] = a >= 1e6 ? [1e6, 'M'] : a >= 1e3 ? [1e3, 'k'] : [1, ''];
  const x = v / d;
  const digits = Math.abs(x) >= 100 || unit === '' ? 0 : Math.abs(x) >= 10 ? 1 : 2;
  const r = Number(x.toFixed(digits));
  // 999,700 rounds to 1000k: 1M.
  if (Math.abs(r) >= 1000 && unit !== 'M') return compact(Math.sign(v) * d * 1000);
  return `${r}${unit}`;
}

/** 3 significant digits below 1000 (0.25, 5.33, 17.4), compact above. */
export function sig3(v: number): string {
  return Math.abs(v) >= 1000 ? compact(v) : String(Number(v.toPrecision(3)));
}

function full(v: number): string {
  return v.toLocaleString('en-US', { maximumFractionDigits: 0 });
}

/** A tick step of 1, 2 or 5 × 10^k giving about `n` steps up to `max`. */
function tickStep(max: number, n = 4): number {
  const raw = max / n;
  const p = 10 ** Math.floor(Math.log10(raw));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

function n(v: number): string {
  return String(Math.round(v * 10) / 10);
}

interface Bar {
  broker: string;
  value: number | null;
  failed: boolean;
  loadgenHigh: boolean;
  note: string;
}

interface Panel {
  scenario: string;
  unit: string;
  bars: Bar[];
  /** Value and tick labels; compact by default. */
  fmt?: (v: number) => string;
}

function panelsOf(rows: Row[], loadgenMaxPct: number): Panel[] {
  const order = (b: string) => {
    const i = (TARGET_NAMES as readonly string[]).indexOf(b);
    return i < 0 ? TARGET_NAMES.length : i;
  };
  const panels: Panel[] = [];
  for (const row of rows) {
    const r = row.result;
    let p = panels.find((x) => x.scenario === row.scenario);
    if (p === undefined) {
      const unit = r.idle ? 'connects/s' : r.rate > 0 ? `delivered/s at ${full(r.rate)}/s offered` : 'delivered/s';
      p = { scenario: row.scenario, unit, bars: [] };
      panels.push(p);
    }
    const raw = r.idle ? r.mqttload?.connects_per_s : r.mqttload?.delivered_per_s;
    const value = typeof raw === 'number' && Number.isFinite(raw) ? raw : null;
    const lg = loadgenPct(r);
    const loadgenHigh = !r.idle && lg !== null && lg > loadgenMaxPct;
    const failed = row.failedRuns > 0;
    const notes = [
      `${row.scenario} / ${row.broker}: ${value === null ? 'no result' : `${full(value)} ${p.unit}`}`,
      ...(row.runs > 1 ? [`median of ${row.runs} runs`] : []),
      ...(failed ? [`${row.failedRuns} of ${row.runs} runs failed: ${r.failures.join('; ')}`] : []),
      ...(lg !== null ? [`load generator ${lg.toFixed(0)} % of a core`] : []),
      ...r.warnings.map((w) => `⚠ ${w}`),
    ];
    p.bars.push({ broker: row.broker, value, failed, loadgenHigh, note: notes.join('\n') });
  }
  for (const p of panels) p.bars.sort((a, b) => order(a.broker) - order(b.broker));
  // Idle (connects/s) last: it is not a throughput of messages.
  return [...panels.filter((p) => p.unit !== 'connects/s'), ...panels.filter((p) => p.unit === 'connects/s')];
}

/** One panel of a fleet figure: a bar per target, in target order. */
function fleetPanel(
  runs: FleetRun[],
  scenario: string,
  unit: string,
  pick: (r: FleetRun) => number | null,
  fmt?: (v: number) => string,
): Panel {
  const bars = runs.map((r) => {
    const value = pick(r);
    const failed = r.failures.length > 0;
    const notes = [
      `${scenario} / ${r.target}: ${value === null ? 'no result' : `${sig3(value)} ${unit}`}`,
      ...(failed ? [`failed: ${r.failures.join('; ')}`] : []),
      ...(r.result?.notes ?? []),
    ];
    return { broker: r.target, value, failed, loadgenHigh: false, note: notes.join('\n') };
  });
  const order = (b: string) => (TARGET_NAMES as readonly string[]).indexOf(b);
  bars.sort((a, b) => order(a.broker) - order(b.broker));
  return { scenario, unit, bars, ...(fmt === undefined ? {} : { fmt }) };
}

/** The fleet scenarios' panels, in pairs: each pair starts a line of the figure. */
function fleetPanels(section: FleetSection | null): Panel[][] {
  if (section === null) return [];
  const lines: Panel[][] = [];
  const of = (s: string) => section.runs.filter((r) => r.scenario === s);
  const first = (r: FleetRun) => r.result?.rows[0];
  for (const s of new Set(section.runs.map((r) => r.scenario))) {
    const runs = of(s);
    if (s === 'fleet-failover') {
      const sec = (q: 'p50' | 'p99') => (r: FleetRun) => {
        const row = first(r);
        const ms = row === undefined ? null : failoverTimes(row)[q];
        return ms === null ? null : ms / 1000;
      };
      const unit = 's from the kill to CONNACK';
      lines.push([fleetPanel(runs, `${s} p50`, unit, sec('p50'), sig3), fleetPanel(runs, `${s} p99`, unit, sec('p99'), sig3)]);
    } else if (s === 'fleet') {
      // --find-max: the highest step held (else the first); otherwise the one step.
      const findMax = runs.some((r) => r.result?.options.findMax === true);
      const rowOf = (r: FleetRun) => (findMax ? r.result?.rows.filter((row) => row.holds === true).at(-1) : undefined) ?? first(r);
      const rate = num(first(runs[0] as FleetRun)?.ratePerDevice);
      const at = findMax ? ' at the highest rate held' : rate === null ? '' : ` at ${sig3(rate)} msg/s per device`;
      lines.push([
        fleetPanel(runs, s, `delivered/s${at}`, (r) => num(rowOf(r)?.deliveredPerS)),
        fleetPanel(runs, `${s} p99`, `ms${at}`, (r) => num(rowOf(r)?.p99Ms), sig3),
      ]);
    } else {
      const cps = (t: 'tcp' | 'tls') => (r: FleetRun) => num(transportRow(r, t)?.connectsPerS);
      lines.push([fleetPanel(runs, `${s} tcp`, 'connects/s', cps('tcp')), fleetPanel(runs, `${s} tls`, 'connects/s', cps('tls'))]);
    }
  }
  return lines;
}

function colourOf(broker: string, brokers: string[]): string {
  return COLOURS[broker] ?? OTHER_COLOURS[brokers.indexOf(broker) % OTHER_COLOURS.length] ?? '#999999';
}

function panelHeight(p: Panel): number {
  return PANEL_TITLE_H + p.bars.length * (BAR_H + BAR_GAP) + AXIS_H;
}

function panel(p: Panel, x0: number, y0: number, brokers: string[]): string[] {
  const out: string[] = [];
  const plotX = x0 + NAME_W;
  const plotW = PANEL_W - NAME_W - LABEL_W;
  const fmt = p.fmt ?? compact;
  const max = Math.max(0, ...p.bars.map((b) => b.value ?? 0));
  const step = max > 0 ? tickStep(max) : 1;
  const top = Math.max(step, Math.ceil(max / step - 1e-9) * step);
  const xOf = (v: number) => plotX + (Math.max(0, v) / top) * plotW;
  const barsTop = y0 + PANEL_TITLE_H;
  const barsBottom = barsTop + p.bars.length * (BAR_H + BAR_GAP) - BAR_GAP;
  out.push(`<text x="${n(x0)}" y="${n(y0 + 13)}" class="pt">${esc(p.scenario)}<tspan class="u" dx="8">${esc(p.unit)}</tspan></text>`);
  for (let t = 0; t <= top + step / 2; t += step) {
    const x = n(xOf(t));
    out.push(`<line x1="${x}" y1="${n(barsTop - 3)}" x2="${x}" y2="${n(barsBottom + 3)}" class="${t === 0 ? 'ax' : 'g'}"/>`);
    out.push(`<text x="${x}" y="${n(barsBottom + 14)}" class="tk">${esc(fmt(t))}</text>`);
  }
  p.bars.forEach((b, i) => {
    const y = barsTop + i * (BAR_H + BAR_GAP);
    const w = b.value === null ? 0 : xOf(b.value) - plotX;
    const marked = b.failed || b.loadgenHigh;
    out.push(`<g><title>${esc(b.note)}</title>`);
    out.push(`<text x="${n(plotX - 6)}" y="${n(y + BAR_H - 4)}" class="nm">${esc(b.broker)}</text>`);
    out.push(
      `<rect class="bar" data-scenario="${esc(p.scenario)}" data-broker="${esc(b.broker)}"${b.failed ? ' data-failed="1"' : ''}${b.loadgenHigh ? ' data-loadgen="1"' : ''} x="${n(plotX)}" y="${n(y)}" width="${n(w)}" height="${BAR_H}" fill="${colourOf(b.broker, brokers)}"${b.failed ? ` stroke="${FAIL}" stroke-width="1.5"` : ''}/>`,
    );
    if (marked && w > 0) out.push(`<rect x="${n(plotX)}" y="${n(y)}" width="${n(w)}" height="${BAR_H}" fill="url(#h)"/>`);
    const mark = `${b.failed ? '✗ ' : ''}${b.loadgenHigh ? '⚠ ' : ''}`;
    const text = b.value === null ? `${mark}${b.failed ? 'failed' : 'no result'}` : `${mark}${fmt(b.value)}`;
    out.push(`<text x="${n(plotX + w + 4)}" y="${n(y + BAR_H - 4)}" class="v${b.failed ? ' f' : ''}">${esc(text)}</text></g>`);
  });
  return out;
}

/** The figure of one bench run: `rows` as from rowsOf, `meta` as in the results JSON. */
export function svg(rows: Row[], meta: Record<string, unknown>, loadgenMaxPct: number, fleet: FleetSection | null = null): string {
  const panels = panelsOf(rows, loadgenMaxPct);
  const fleetLines = fleetPanels(fleet);
  const brokers = [...new Set([...rows.map((r) => r.broker as string), ...(fleet?.runs ?? []).map((r) => r.target as string)])].sort(
    (a, b) => {
      const ia = (TARGET_NAMES as readonly string[]).indexOf(a);
      const ib = (TARGET_NAMES as readonly string[]).indexOf(b);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
    },
  );
  const body: string[] = [];
  const headerH = 58;
  let y = MARGIN + headerH;
  const lines: Panel[][] = [];
  for (let i = 0; i < panels.length; i += COLS) lines.push(panels.slice(i, i + COLS));
  lines.push(...fleetLines);
  for (const line of lines) {
    line.forEach((p, j) => {
      body.push(...panel(p, MARGIN + j * (PANEL_W + COL_GAP), y, brokers));
    });
    y += Math.max(...line.map(panelHeight)) + PANEL_GAP;
  }
  if (lines.length === 0) {
    body.push(`<text x="${MARGIN}" y="${y + 14}" class="u">no rows</text>`);
    y += 30;
  }
  // Legend: one swatch per broker, then the two marks.
  const legend: string[] = [];
  let lx = MARGIN;
  const ly = MARGIN + 32;
  for (const b of brokers) {
    legend.push(`<rect x="${lx}" y="${ly}" width="12" height="12" fill="${colourOf(b, brokers)}"/>`);
    legend.push(`<text x="${lx + 17}" y="${ly + 10}" class="lg">${esc(b)}</text>`);
    lx += 17 + b.length * 7 + 18;
  }
  legend.push(
    `<rect x="${lx}" y="${ly}" width="12" height="12" fill="#bbbbbb"/><rect x="${lx}" y="${ly}" width="12" height="12" fill="url(#h)"/>`,
  );
  legend.push(
    `<text x="${lx + 17}" y="${ly + 10}" class="lg">✗ failed · ⚠ load generator above ${esc(loadgenMaxPct)} % of a core (it may have set the pace)</text>`,
  );
  const runs = Number(meta.runs);
  const mqttload = rows.length > 0 || fleet === null;
  const clients = [...new Set((fleet?.runs ?? []).map((r) => num(r.result?.options.clients)).filter((c) => c !== null))];
  const fleetCaption = fleetLines.length > 0 ? ` · fleet: ${clients.map((c) => full(c)).join(', ')} devices or connections` : '';
  const warned = rows.filter((r) => r.result.warnings.length > 0);
  const kinds = [...new Set(warned.flatMap((r) => r.result.warnings.map((w) => w.replace(/(:| \d| \().*$/, ''))))];
  const caption = [
    `${String(meta.date ?? '?')} · commit ${String(meta.commit ?? '?')} · ${String(meta.cpus ?? '?')} × ${String(meta.cpuModel ?? '?')}`,
    `Node ${String(meta.node ?? '?')} · ${String(meta.mosquitto ?? '?')}${mqttload ? ` · ${String(meta.durationS ?? '?')} s window after ${String(meta.warmupS ?? '?')} s warm-up` : ''}${meta.quick === true ? ' (--quick)' : ''}${mqttload && runs > 1 ? ` · median of ${runs} runs` : ''}${fleetCaption} · each panel has its own linear scale`,
    ...(warned.length > 0
      ? [
          `${warned.length} of ${rows.length} rows have warnings in the .md table (${kinds.slice(0, 3).join('; ')}${kinds.length > 3 ? '; …' : ''})`,
        ]
      : []),
  ];
  const height = y - PANEL_GAP + 14 + caption.length * 15 + MARGIN;
  const capY = y - PANEL_GAP + 22;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${n(height)}" viewBox="0 0 ${WIDTH} ${n(height)}" role="img" font-family="${FONT}">`,
    `<title>raftmq broker bench ${esc(meta.date ?? '')}: ${fleetLines.length > 0 ? 'figures' : 'throughput'} per scenario and broker</title>`,
    '<style>',
    'text{fill:#222;font-size:11px}.t{font-size:16px;font-weight:600}.pt{font-size:13px;font-weight:600}',
    '.u{font-size:11px;font-weight:400;fill:#666}.nm{text-anchor:end}.tk{fill:#777;font-size:10px;text-anchor:middle}',
    `.v{font-variant-numeric:tabular-nums}.f{fill:${FAIL};font-weight:600}.lg{font-size:12px}.c{fill:#555}`,
    '.g{stroke:#e3e3e3}.ax{stroke:#999}',
    '</style>',
    '<defs><pattern id="h" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">',
    '<rect width="3" height="6" fill="#000" fill-opacity=".35"/></pattern></defs>',
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="${MARGIN}" y="${MARGIN + 14}" class="t">${fleetLines.length > 0 ? 'Broker throughput, fleet connects and failover per scenario' : 'Broker throughput per scenario'}</text>`,
    ...legend,
    ...body,
    ...caption.map((c, i) => `<text x="${MARGIN}" y="${n(capY + i * 15)}" class="c">${esc(c)}</text>`),
    '</svg>',
    '',
  ].join('\n');
}
