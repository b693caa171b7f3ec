// The live web view of `--web HOST:PORT`: one page of HTML and JavaScript,
// served from the binary; it reads /api/v1/events (or, where a browser
// cannot, polls /api/v1/state) and fetches nothing else.

#include "cli/metrics_server.hpp"

namespace swarmflow::cli {

const char* web_view_page() {
  return R"swarmflow(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>swarmflow</title>
<style>
  body { font: 13px/1.35 system-ui, sans-serif; margin: 12px; color: #222; background: #fafafa; }
  h1 { font-size: 16px; margin: 0 0 6px; }
  h2 { font-size: 14px; margin: 14px 0 4px; }
  #status { color: #555; }
  #status.gone { color: #b00; font-weight: bold; }
  svg { background: #fff; border: 1px solid #ddd; }
  .stage rect { fill: #eef3fb; stroke: #4a6fa5; }
  .stage text { font-size: 12px; }
  .replica rect { fill: #fff; stroke: #999; }
  .edge line { stroke: #4a6fa5; stroke-width: 1.5; marker-end: url(#arrow); }
  .edge.dropping line { stroke: #c0392b; }
  .edge text { font-size: 11px; fill: #333; }
  table { border-collapse: collapse; background: #fff; }
  td, th { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
  td:first-child, th:first-child { text-align: left; }
  .failover { color: #b00; }
  canvas { background: #fff; border: 1px solid #ddd; }
</style>
</head>
<body>
<h1>swarmflow <span id="pipeline"></span></h1>
<div id="status">connecting…</div>
<h2>Pipeline</h2>
<svg id="graph" width="900" height="200">
  <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" orient="auto">
    <path d="M0,0 L10,5 L0,10 z" fill="#4a6fa5"/></marker></defs>
</svg>
<h2>Stages</h2>
<table id="stages"><thead><tr><th>stage</th><th>replicas</th><th>processed</th><th>rate/s</th><th>queued</th>
  <th>errors</th><th>p99 step ms</th><th>p50 / p99 residence ms</th></tr></thead><tbody></tbody></table>
<h2>Edges</h2>
<table id="edges"><thead><tr><th>edge</th><th>sent</th><th>rate/s</th><th>delivered</th><th>dropped</th><th>why</th><th>p50 / p99 hop ms</th><th>p50 / p99 held ms</th></tr></thead><tbody></tbody></table>
<h2>Units: load over the last minutes</h2>
<canvas id="load" width="900" height="140"></canvas>
<table id="units"><thead><tr><th>unit</th><th>replicas</th><th>load</th><th>speed</th><th>sent</th><th>received</th></tr></thead><tbody></tbody></table>
<h2>Failovers</h2>
<ul id="failovers"><li>none</li></ul>
<h2>Moves</h2>
<ul id="moves"><li>none</li></ul>
<script>
"use strict";
const kHistoryS = 300;
let previous = null, previousAt = 0, history = {}, stamp = 0;
const bounds = [1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 1e-2, 5e-2, 0.1, 0.5, 1.0, 5.0];
// The keys of service_s.le, in order (as the report prints the bounds).
const boundKeys = ["1e-05", "5e-05", "0.0001", "0.0005", "0.001", "0.005", "0.01", "0.05", "0.1", "0.5", "1", "5"];

function esc(s) { return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c])); }
function stageOf(port) { return port.slice(0, port.lastIndexOf("/")); }
function rate(now, before, dt) { return dt > 0 && before !== undefined ? Math.max(0, (now - before) / dt) : 0; }
function fmt(x) { return x >= 1e6 ? (x / 1e6).toFixed(1) + "M" : x >= 1e3 ? (x / 1e3).toFixed(1) + "k" : x.toFixed(0); }

/// p99 of a service-time histogram (per bucket counts, +Inf last), in ms.
function p99(buckets) {
  const total = buckets.reduce((a, b) => a + b, 0);
  if (total === 0) return 0;
  let seen = 0;
  for (let i = 0; i < buckets.length; ++i) {
    seen += buckets[i];
    if (seen >= 0.99 * total) return i < bounds.length ? bounds[i] * 1e3 : bounds[bounds.length - 1] * 1e3;
  }
  return 0;
}

function render(s) {
  // Rates over the coordinator's own clock (the run's duration), not this page's.
  const at = s.duration_s;
  const dt = previous ? at - previousAt : 0;
  ++stamp;
  document.getElementById("pipeline").textContent = s.pipeline;
  const st = document.getElementById("status");
  st.className = "";
  st.textContent = (s.finished ? "finished" : "running") + (s.ok ? "" : " — FAILED: " + (s.error || "")) +
                   " — " + s.duration_s.toFixed(1) + " s";
  st.dataset.stamp = stamp;
  // Stages by depth: a stage sits one column right of its deepest producer.
  const ids = Object.keys(s.stages);
  const depth = {};
  ids.forEach(id => depth[id] = 0);
  for (let pass = 0; pass < ids.length; ++pass) {
    s.edges.forEach(e => { const f = stageOf(e.from), t = stageOf(e.to);
      if (!(e.feedback) && depth[t] < depth[f] + 1 && depth[f] + 1 < ids.length) depth[t] = depth[f] + 1; });
  }
  const replicasOf = {};
  s.replicas.forEach(r => (replicasOf[r.stage] = replicasOf[r.stage] || []).push(r));
  const columns = {};
  ids.forEach(id => (columns[depth[id]] = columns[depth[id]] || []).push(id));
  const colW = 220, boxW = 170, rowH = 26, pos = {};
  let height = 60;
  Object.keys(columns).forEach(c => {
    let y = 20;
    columns[c].forEach(id => {
      const h = 24 + rowH * (replicasOf[id] || []).length;
      pos[id] = {x: 20 + c * colW, y: y, h: h};
      y += h + 30;
    });
    height = Math.max(height, y);
  });
  const svg = document.getElementById("graph");
  svg.setAttribute("width", Math.max(900, 40 + Object.keys(columns).length * colW));
  svg.setAttribute("height", height);
  let out = svg.querySelector("defs").outerHTML;
  const prevEdges = {};
  if (previous) previous.edges.forEach(e => prevEdges[e.from + ">" + e.to] = e);
  s.edges.forEach(e => {
    const f = pos[stageOf(e.from)], t = pos[stageOf(e.to)];
    if (!f || !t) return;
    const before = prevEdges[e.from + ">" + e.to];
    const r = rate(e.sent, before && before.sent, dt);
    const x1 = f.x + boxW, y1 = f.y + f.h / 2, x2 = t.x, y2 = t.y + t.h / 2;
    const waiting = e.sent - e.delivered - e.dropped;
    out += `<g class="edge${e.dropped > 0 ? " dropping" : ""}"><line x1="${x1}" y1="${y1}" x2="${x2}" y2="${y2}"/>` +
           `<text x="${(x1 + x2) / 2 - 20}" y="${(y1 + y2) / 2 - 4}">${fmt(r)}/s q${Math.max(0, waiting)}` +
           `${e.dropped > 0 ? " drop " + e.dropped : ""}</text></g>`;
  });
  ids.forEach(id => {
    const p = pos[id];
    out += `<g class="stage" id="stage-${esc(id)}"><rect x="${p.x}" y="${p.y}" width="${boxW}" height="${p.h}" rx="4"/>` +
           `<text x="${p.x + 6}" y="${p.y + 16}">${esc(id)} <tspan fill="#666">${esc(s.stages[id].type)}</tspan></text>`;
    (replicasOf[id] || []).forEach((r, i) => {
      const y = p.y + 22 + i * rowH;
      out += `<g class="replica"><rect x="${p.x + 6}" y="${y}" width="${boxW - 12}" height="${rowH - 4}" rx="3"/>` +
             `<text x="${p.x + 10}" y="${y + 15}">#${r.replica} on ${esc(r.unit || "lost")} · ${r.processed} · q${r.queued}</text></g>`;
    });
    out += `</g>`;
  });
  svg.innerHTML = out;
  // Stages.
  const prevStages = previous ? previous.stages : {};
  let rows = "";
  ids.forEach(id => {
    const x = s.stages[id];
    const reps = replicasOf[id] || [];
    const queued = reps.reduce((a, r) => a + r.queued, 0);
    const buckets = new Array(bounds.length + 1).fill(0);
    reps.forEach(r => {
      let below = 0;
      boundKeys.forEach((k, i) => { const n = k in r.service_s.le ? r.service_s.le[k] : below; buckets[i] += n - below; below = n; });
      buckets[bounds.length] += r.service_s.count - below;
    });
    const r = rate(x.processed, prevStages[id] && prevStages[id].processed, dt);
    rows += `<tr id="row-${esc(id)}"><td>${esc(id)}</td><td>${x.replicas}</td><td class="processed">${x.processed}</td>` +
            `<td class="rate">${fmt(r)}</td><td>${queued}</td><td>${x.errors}</td><td>${p99(buckets).toFixed(3)}</td>` +
            `<td>${x.residence_ms ? x.residence_ms.p50.toFixed(3) + " / " + x.residence_ms.p99.toFixed(3) : ""}</td></tr>`;
  });
  document.querySelector("#stages tbody").innerHTML = rows;
  rows = "";
  s.edges.forEach(e => {
    const before = prevEdges[e.from + ">" + e.to];
    const why = [];
    const overflow = e.dropped - e.too_large - e.refused;
    if (overflow > 0) why.push(overflow + " " + (e.overflow === "block" ? "live source, no credit" : e.overflow));
    if (e.too_large > 0) why.push(e.too_large + " too large");
    if (e.refused > 0) why.push(e.refused + " refused");
    rows += `<tr><td>${esc(e.from)} → ${esc(e.to)}</td><td>${e.sent}</td><td>${fmt(rate(e.sent, before && before.sent, dt))}</td>` +
            `<td>${e.delivered}</td><td>${e.dropped}</td><td>${esc(why.join("; "))}</td>` +
            `<td>${e.latency_ms ? e.latency_ms.p50.toFixed(3) + " / " + e.latency_ms.p99.toFixed(3) : ""}</td>` +
            `<td>${e.held_ms ? e.held_ms.p50.toFixed(3) + " / " + e.held_ms.p99.toFixed(3) : ""}</td></tr>`;
  });
  document.querySelector("#edges tbody").innerHTML = rows;
  // Units and their load over the last minutes.
  rows = "";
  Object.keys(s.units).forEach(id => {
    const u = s.units[id];
    (history[id] = history[id] || []).push([at, u.utilisation]);
    while (history[id].length && history[id][0][0] < at - kHistoryS) history[id].shift();
    rows += `<tr><td>${esc(id)}</td><td>${u.replicas}</td><td>${(100 * u.utilisation).toFixed(0)}%</td>` +
            `<td>${u.speed !== undefined ? u.speed.toFixed(2) : ""}</td><td>${u.sent}</td><td>${u.received}</td></tr>`;
  });
  document.querySelector("#units tbody").innerHTML = rows;
  const canvas = document.getElementById("load"), g = canvas.getContext("2d");
  g.clearRect(0, 0, canvas.width, canvas.height);
  const colours = ["#4a6fa5", "#c0392b", "#27ae60", "#8e44ad", "#d35400", "#16a085", "#7f8c8d", "#2c3e50"];
  Object.keys(history).forEach((id, k) => {
    g.strokeStyle = colours[k % colours.length];
    g.fillStyle = g.strokeStyle;
    g.fillText(id, 6 + 60 * k, 12);
    g.beginPath();
    history[id].forEach(([t, v], i) => {
      const x = canvas.width - (at - t) / kHistoryS * canvas.width, y = canvas.height - 4 - v * (canvas.height - 20);
      i ? g.lineTo(x, y) : g.moveTo(x, y);
    });
    g.stroke();
  });
  // Failovers, newest last.
  const list = document.getElementById("failovers");
  list.innerHTML = s.failovers.length === 0 ? "<li>none</li>" : s.failovers.map(f =>
    `<li class="failover">${f.detected_s.toFixed(2)} s: unit ${esc(f.unit)} ${esc(f.cause)}, epoch ${f.epoch}: ` +
    `${esc(f.moved.join(", ") || "nothing moved")}${f.lost.length ? "; lost " + esc(f.lost.join(", ")) : ""}</li>`).join("");
  // Moves (placement that follows the load), newest first.
  const moves = document.getElementById("moves");
  const made = s.moves || [];
  moves.innerHTML = made.length === 0 ? "<li>none</li>" : made.slice(-50).reverse().map(m =>
    `<li class="move">${m.at_s.toFixed(2)} s: ${esc(m.kind)} ${esc(m.stage)}/${m.replica} ${esc(m.from)} -> ` +
    `${esc(m.to)}, drained in ${m.drain_ms.toFixed(1)} ms: ${esc(m.why)}</li>`).join("");
  previous = s;
  previousAt = at;
}

function gone() {
  const st = document.getElementById("status");
  st.className = "gone";
  st.textContent = "the coordinator does not answer (the run is over, or it is gone)";
}

function poll() {
  fetch("/api/v1/state", {cache: "no-store"}).then(r => r.json()).then(s => { render(s); setTimeout(poll, 1000); })
    .catch(() => { gone(); setTimeout(poll, 2000); });
}

if (window.EventSource && !location.search.includes("poll")) {
  const events = new EventSource("/api/v1/events");
  events.addEventListener("state", m => render(JSON.parse(m.data)));
  events.onerror = () => { if (events.readyState === EventSource.CLOSED) { gone(); poll(); } };
} else {
  poll();
}
</script>
</body>
</html>
)swarmflow";
}

}  // namespace swarmflow::cli
