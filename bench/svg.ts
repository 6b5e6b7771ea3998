// The broker benchmark's figure: one small bar chart per scenario (deliveries per second; connects per
// second for idle), one bar per broker, each panel on a linear scale of its own so 20k and 1.5M both
// read. Bars of a failed row (✗) or of a row whose load generator used more than the given share of a
// core (⚠) are hatched. Hand-written, self-contained SVG: no script, no external font or style.
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
    out.push(`<text x="${x}" y="${n(barsBottom + 14)}" class="tk">${esc(compact(t))}</text>`);
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
    const text = b.value === null ? `${mark}${b.failed ? 'failed' : 'no result'}` : `${mark}${compact(b.value)}`;
    out.push(`<text x="${n(plotX + w + 4)}" y="${n(y + BAR_H - 4)}" class="v${b.failed ? ' f' : ''}">${esc(text)}</text></g>`);
  });
  return out;
}

/** The figure of one bench run: `rows` as from rowsOf, `meta` as in the results JSON. */
export function svg(rows: Row[], meta: Record<string, unknown>, loadgenMaxPct: number): string {
  const panels = panelsOf(rows, loadgenMaxPct);
  const brokers = [...new Set(rows.map((r) => r.broker as string))].sort((a, b) => {
    const ia = (TARGET_NAMES as readonly string[]).indexOf(a);
    const ib = (TARGET_NAMES as readonly string[]).indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
  });
  const body: string[] = [];
  const headerH = 58;
  let y = MARGIN + headerH;
  for (let i = 0; i < panels.length; i += COLS) {
    const line = panels.slice(i, i + COLS);
    line.forEach((p, j) => {
      body.push(...panel(p, MARGIN + j * (PANEL_W + COL_GAP), y, brokers));
    });
    y += Math.max(...line.map(panelHeight)) + PANEL_GAP;
  }
  if (panels.length === 0) {
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
  const warned = rows.filter((r) => r.result.warnings.length > 0);
  const kinds = [...new Set(warned.flatMap((r) => r.result.warnings.map((w) => w.replace(/(:| \d| \().*$/, ''))))];
  const caption = [
    `${String(meta.date ?? '?')} · commit ${String(meta.commit ?? '?')} · ${String(meta.cpus ?? '?')} × ${String(meta.cpuModel ?? '?')}`,
    `Node ${String(meta.node ?? '?')} · ${String(meta.mosquitto ?? '?')} · ${String(meta.durationS ?? '?')} s window after ${String(meta.warmupS ?? '?')} s warm-up${meta.quick === true ? ' (--quick)' : ''}${runs > 1 ? ` · median of ${runs} runs` : ''} · each panel has its own linear scale`,
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
    `<title>raftmq broker bench ${esc(meta.date ?? '')}: throughput per scenario and broker</title>`,
    '<style>',
    'text{fill:#222;font-size:11px}.t{font-size:16px;font-weight:600}.pt{font-size:13px;font-weight:600}',
    '.u{font-size:11px;font-weight:400;fill:#666}.nm{text-anchor:end}.tk{fill:#777;font-size:10px;text-anchor:middle}',
    `.v{font-variant-numeric:tabular-nums}.f{fill:${FAIL};font-weight:600}.lg{font-size:12px}.c{fill:#555}`,
    '.g{stroke:#e3e3e3}.ax{stroke:#999}',
    '</style>',
    '<defs><pattern id="h" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">',
    '<rect width="3" height="6" fill="#000" fill-opacity=".35"/></pattern></defs>',
    `<rect width="100%" height="100%" fill="#fff"/>`,
    `<text x="${MARGIN}" y="${MARGIN + 14}" class="t">Broker throughput per scenario</text>`,
    ...legend,
    ...body,
    ...caption.map((c, i) => `<text x="${MARGIN}" y="${n(capY + i * 15)}" class="c">${esc(c)}</text>`),
    '</svg>',
    '',
  ].join('\n');
}
