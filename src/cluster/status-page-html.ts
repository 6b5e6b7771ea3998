// The status page (docs/operations.md "Status page"), shipped in the package as one string: plain
// HTML, CSS and script, no framework and nothing fetched from elsewhere (a broker host may have no
// internet). The script polls /status.json every 2 s, draws the charts as SVG itself, and opens
// /trace?filter=F as an EventSource. A ?token= in the page's address is kept for both.
export const STATUS_PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>raftmq status</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 2em; color: #222; background: #fafafa; }
  h1 { font-size: 1.4em; margin: 0 0 .2em; }
  h2 { font-size: 1.1em; margin: 1.2em 0 .4em; }
  table { border-collapse: collapse; background: #fff; }
  th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; font-variant-numeric: tabular-nums; }
  th { background: #eee; }
  tr.leader td:first-child { font-weight: bold; }
  .bad { color: #b00; }
  .good { color: #070; }
  #error { color: #b00; white-space: pre-wrap; }
  #charts { display: flex; gap: 1em; flex-wrap: wrap; }
  figure { margin: 0; background: #fff; border: 1px solid #ddd; padding: 4px; }
  figcaption { font-size: .9em; }
  svg { display: block; }
  #events { max-height: 14em; overflow: auto; background: #fff; border: 1px solid #ddd; margin: 0; padding: .3em 1.5em; }
  #events .fault { color: #b00; }
  #trace td { white-space: nowrap; }
  .pending { color: #999; }
</style>
</head>
<body>
<h1 id="title">raftmq</h1>
<div id="summary">loading…</div>
<div id="error"></div>
<h2>Nodes</h2>
<table id="nodes"><thead><tr><th>node</th><th>role</th><th>term</th><th>match lag</th><th>last contact</th><th>clock offset</th><th>link</th></tr></thead><tbody></tbody></table>
<div id="nodes-note"></div>
<h2>Last minutes</h2>
<div id="charts">
  <figure><figcaption>clients (connections)</figcaption><svg id="chart-clients" width="320" height="90"></svg></figure>
  <figure><figcaption>sessions (all, <span style="color:#c60">online</span>)</figcaption><svg id="chart-sessions" width="320" height="90"></svg></figure>
  <figure><figcaption>messages/s (in, <span style="color:#c60">out</span>)</figcaption><svg id="chart-rates" width="320" height="90"></svg></figure>
</div>
<h2>Leader changes and faults</h2>
<ul id="events"></ul>
<h2>Live trace</h2>
<form id="trace-form">
  <label>topic filter <input id="filter" value="#" size="30"></label>
  <button id="watch" type="submit">watch</button>
  <button id="stop" type="button" disabled>stop</button>
  <span id="trace-state"></span>
</form>
<p>The last publishes matching the filter, as this node sees them; times after the read are in ms.</p>
<table id="trace"><thead><tr><th>#</th><th>topic</th><th>QoS</th><th>client</th><th>read</th><th>appended</th><th>committed</th><th>applied</th><th>delivered</th><th>acknowledged</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
var token = new URLSearchParams(location.search).get('token') || '';
var es = null;
function $(id) { return document.getElementById(id); }
function text(el, s) { el.textContent = s; return el; }
function cell(tr, s, cls) { var td = document.createElement('td'); td.textContent = s; if (cls) td.className = cls; tr.appendChild(td); return td; }
function ms(n) { return n === null || n === undefined ? '—' : (n < 1000 ? Math.round(n) + ' ms' : (n / 1000).toFixed(1) + ' s'); }
function clock(t) { return new Date(t).toISOString().slice(11, 23); }
function withToken(path) { return token ? path + (path.indexOf('?') < 0 ? '?' : '&') + 'token=' + encodeURIComponent(token) : path; }
function api(path) {
  var h = {};
  if (token) h.Authorization = 'Bearer ' + token;
  return fetch(path, { headers: h, cache: 'no-store' }).then(function (r) {
    if (!r.ok) return r.text().then(function (t) { throw new Error(r.status + ': ' + t); });
    return r.json();
  });
}
function poll() {
  api('/status.json').then(function (v) { text($('error'), ''); render(v); }, function (e) { text($('error'), 'status.json: ' + e.message); })
    .then(function () { setTimeout(poll, 2000); });
}
function render(v) {
  var s = v.status;
  text($('title'), 'raftmq node ' + s.node + (v.cluster ? '' : ' (single node)') + (v.shard ? ', shard ' + v.shard : ''));
  document.title = 'raftmq ' + s.node + ' ' + s.role;
  var sum = $('summary');
  sum.innerHTML = '';
  var parts = ['role ' + s.role, 'term ' + s.term, 'leader ' + (s.leader === 0 ? 'none' : s.leader), 'commit ' + s.commitIndex, 'applied ' + s.appliedIndex];
  var sp = text(document.createElement('span'), parts.join(' · ') + ' · ');
  sp.id = 'summary-text';
  sum.appendChild(sp);
  var sv = text(document.createElement('span'), s.serving ? 'serving' : 'not serving');
  sv.id = 'serving';
  sv.className = s.serving ? 'good' : 'bad';
  sum.appendChild(sv);
  if (s.failure) sum.appendChild(text(document.createElement('div'), 'failure: ' + s.failure)).className = 'bad';
  var tb = $('nodes').tBodies[0];
  tb.innerHTML = '';
  v.nodes.forEach(function (n) {
    var tr = document.createElement('tr');
    tr.dataset.node = String(n.id);
    if (n.id === s.leader) tr.className = 'leader';
    cell(tr, n.id + (n.self ? ' (this node)' : ''));
    cell(tr, n.role === null ? '?' : n.role, 'role');
    cell(tr, n.term === null ? '—' : String(n.term));
    cell(tr, n.matchLag === null ? '—' : String(n.matchLag));
    cell(tr, n.self ? '—' : ms(n.lastContactAgoMs));
    cell(tr, n.clockOffsetMs === null ? '—' : Math.round(n.clockOffsetMs) + ' ms');
    cell(tr, n.self ? '—' : (n.connected ? 'up' : 'down'), n.connected ? 'good' : 'bad');
    tb.appendChild(tr);
  });
  text($('nodes-note'), v.cluster && s.role !== 'leader' ? 'This node does not lead: match lag and clock offsets are known to the leader only.' : '');
  var h = v.history;
  chart($('chart-clients'), [h.map(function (x) { return [x.t, x.connections]; })]);
  chart($('chart-sessions'), [h.map(function (x) { return [x.t, x.sessions]; }), h.map(function (x) { return [x.t, x.online]; })]);
  var rin = [], rout = [];
  for (var i = 1; i < h.length; i++) {
    var dt = (h[i].t - h[i - 1].t) / 1000;
    if (dt <= 0) continue;
    rin.push([h[i].t, Math.max(0, h[i].received - h[i - 1].received) / dt]);
    rout.push([h[i].t, Math.max(0, h[i].sent - h[i - 1].sent) / dt]);
  }
  chart($('chart-rates'), [rin, rout]);
  var ul = $('events');
  ul.innerHTML = '';
  v.events.slice().reverse().forEach(function (e) {
    var li = text(document.createElement('li'), clock(e.t) + ' ' + e.text);
    li.className = e.kind;
    ul.appendChild(li);
  });
}
var COLORS = ['#06c', '#c60'];
function chart(svg, series) {
  var W = +svg.getAttribute('width'), H = +svg.getAttribute('height'), pad = 14;
  var ns = 'http://www.w3.org/2000/svg';
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  var t0 = Infinity, t1 = -Infinity, max = 1;
  series.forEach(function (pts) { pts.forEach(function (p) { t0 = Math.min(t0, p[0]); t1 = Math.max(t1, p[0]); max = Math.max(max, p[1]); }); });
  var label = document.createElementNS(ns, 'text');
  label.setAttribute('x', '2'); label.setAttribute('y', '10'); label.setAttribute('font-size', '10');
  label.textContent = 'max ' + (max < 10 ? Math.round(max * 10) / 10 : Math.round(max));
  svg.appendChild(label);
  if (!(t1 > t0)) return;
  series.forEach(function (pts, k) {
    var pl = document.createElementNS(ns, 'polyline');
    pl.setAttribute('fill', 'none'); pl.setAttribute('stroke', COLORS[k % 2]); pl.setAttribute('stroke-width', '1.5');
    pl.setAttribute('points', pts.map(function (p) {
      return ((p[0] - t0) / (t1 - t0) * (W - 4) + 2).toFixed(1) + ',' + (H - 2 - p[1] / max * (H - pad - 4)).toFixed(1);
    }).join(' '));
    svg.appendChild(pl);
  });
}
function after(r, t) { return t ? '+' + (t - r.readAt) + ' ms' : ''; }
function traceRow(r) {
  var tb = $('trace').tBodies[0];
  var tr = tb.querySelector('tr[data-seq="' + r.seq + '"]');
  if (!tr) {
    tr = document.createElement('tr');
    tr.dataset.seq = String(r.seq);
    tb.insertBefore(tr, tb.firstChild);
    while (tb.rows.length > 64) tb.deleteRow(tb.rows.length - 1);
  }
  tr.innerHTML = '';
  cell(tr, String(r.seq));
  cell(tr, r.topic, 'topic');
  cell(tr, String(r.qos) + (r.retain ? ' retained' : ''));
  cell(tr, r.client === null ? '—' : r.client);
  cell(tr, 'read ' + clock(r.readAt), 'read');
  if (r.path === 'direct') cell(tr, 'not logged (QoS 0)', 'appended');
  else cell(tr, r.appendedAt ? 'appended at ' + r.index + (r.term ? ' (term ' + r.term + ')' : '') + ' ' + after(r, r.appendedAt) : '…', r.appendedAt ? 'appended' : 'appended pending');
  if (r.path === 'direct') cell(tr, '—', 'committed');
  else cell(tr, r.committedAt ? 'committed' + (r.storedOn.length ? ' on ' + r.storedOn.join(', ') : '') + ' ' + after(r, r.committedAt) : '…', r.committedAt ? 'committed' : 'committed pending');
  cell(tr, r.appliedAt ? 'applied ' + after(r, r.appliedAt) : '…', r.appliedAt ? 'applied' : 'applied pending');
  cell(tr, r.delivered >= 0 ? 'delivered to ' + r.delivered + (r.delivered === 1 ? ' session' : ' sessions') : '…', r.delivered >= 0 ? 'delivered' : 'delivered pending');
  if (r.qos === 0) cell(tr, 'no ack (QoS 0)', 'acked');
  else cell(tr, r.ack ? r.ack + ' ' + after(r, r.ackedAt) : '…', r.ack ? 'acked' : 'acked pending');
}
function stopTrace() {
  if (es) es.close();
  es = null;
  $('stop').disabled = true;
  text($('trace-state'), 'stopped');
}
$('trace-form').addEventListener('submit', function (ev) {
  ev.preventDefault();
  stopTrace();
  var f = $('filter').value;
  var url = withToken('/trace?filter=' + encodeURIComponent(f));
  $('trace').tBodies[0].innerHTML = '';
  text($('trace-state'), 'opening…');
  es = new EventSource(url);
  $('stop').disabled = false;
  es.addEventListener('open', function () { text($('trace-state'), 'watching ' + f); });
  es.onmessage = function (m) { traceRow(JSON.parse(m.data)); };
  es.onerror = function () {
    if (!es || es.readyState !== EventSource.CLOSED) { text($('trace-state'), 'reconnecting…'); return; }
    es = null;
    $('stop').disabled = true;
    // The stream was refused: ask again to read why (a 400 names the filter's problem).
    var ctl = new AbortController();
    fetch(url, { signal: ctl.signal }).then(function (r) {
      if (r.ok) { ctl.abort(); text($('trace-state'), 'trace closed'); return; }
      return r.text().then(function (t) { text($('trace-state'), r.status + ': ' + t); });
    }, function (e) { text($('trace-state'), 'trace failed: ' + e.message); });
  };
});
$('stop').addEventListener('click', stopTrace);
poll();
</script>
</body>
</html>
`;
