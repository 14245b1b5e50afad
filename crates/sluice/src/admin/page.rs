//! The status page: one self-contained HTML document (no build step, no external scripts, so
//! it works on machines without internet access). It polls `/api/v1` once a second and draws
//! its charts on canvases by hand; each chart carries `data-points` (samples drawn) and
//! `data-last` (the newest value) so tests and scripts can read what it shows.

/// `GET /`.
pub const STATUS_PAGE: &str = r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice status</title>
<style>
  :root { --fg:#1d2330; --muted:#687083; --bg:#f6f7f9; --card:#fff; --line:#2f6fde; --warn:#b26b00; --bad:#c0292b; --ok:#1f8a4c; }
  * { box-sizing: border-box; }
  body { margin:0; font:14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color:var(--fg); background:var(--bg); }
  header { padding:12px 20px; background:#1d2330; color:#fff; display:flex; gap:16px; align-items:baseline; }
  header h1 { font-size:18px; margin:0; }
  header span { color:#aab; }
  main { padding:16px 20px; }
  .pipeline { background:var(--card); border-radius:8px; padding:16px; margin-bottom:16px; box-shadow:0 1px 2px rgba(0,0,0,.08); }
  .top { display:flex; flex-wrap:wrap; gap:20px; align-items:baseline; }
  .name { font-size:18px; font-weight:600; }
  .state { font-weight:600; padding:2px 8px; border-radius:10px; color:#fff; background:var(--muted); }
  .state.streaming { background:var(--ok); } .state.backoff, .state.paused, .state.starting, .state.snapshotting { background:var(--warn); } .state.failed { background:var(--bad); }
  .kv { color:var(--muted); } .kv b { color:var(--fg); font-weight:600; }
  .charts { display:grid; grid-template-columns:repeat(auto-fill, minmax(320px, 1fr)); gap:12px; margin-top:12px; }
  .chart { border:1px solid #e3e6eb; border-radius:6px; padding:8px; }
  .chart h3 { margin:0 0 4px; font-size:13px; font-weight:600; }
  .chart .now { float:right; color:var(--muted); font-weight:400; }
  canvas { width:100%; height:120px; display:block; }
  .error { color:var(--bad); white-space:pre-wrap; margin-top:8px; }
  .hint, .walwarn { color:var(--warn); white-space:pre-wrap; }
  .controls button { margin-right:6px; }
  #auth { display:none; margin-bottom:12px; }
  table { border-collapse:collapse; margin-top:8px; } td, th { padding:2px 10px 2px 0; text-align:left; font-size:13px; vertical-align:top; }
  .findings-title { font-size:13px; margin:14px 0 0; }
  .sev-critical { color:var(--bad); font-weight:600; } .sev-warning { color:var(--warn); font-weight:600; } .sev-info { color:var(--muted); }
  .fix { color:var(--muted); }
</style>
</head>
<body>
<header><h1>sluice</h1><span id="updated">connecting…</span></header>
<main>
  <div id="auth">This admin server needs its token (admin.token):
    <input id="token" type="password" size="40"> <button id="save-token">Use</button></div>
  <div id="pipelines"></div>
</main>
<script>
"use strict";
const params = new URLSearchParams(location.hash.slice(1));
if (params.get("token")) sessionStorage.setItem("sluice-token", params.get("token"));
function headers() {
  const t = sessionStorage.getItem("sluice-token");
  return t ? { "Authorization": "Bearer " + t } : {};
}
document.getElementById("save-token").onclick = () => {
  sessionStorage.setItem("sluice-token", document.getElementById("token").value);
  document.getElementById("auth").style.display = "none";
  refresh();
};
async function api(path, options) {
  const response = await fetch(path, Object.assign({ headers: headers() }, options || {}));
  if (response.status === 401) { document.getElementById("auth").style.display = "block"; throw new Error("unauthorized"); }
  return response.json();
}
function fmtBytes(n) {
  if (n == null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}
function fmtNum(n) { return n == null ? "–" : Math.round(n).toLocaleString("en-US"); }
function fmtMs(n) { return n == null ? "–" : (n < 10 ? n.toFixed(2) : n.toFixed(0)) + " ms"; }
const CHARTS = [
  { id: "throughput", title: "Throughput (records/s)", series: [["records_per_s", s => s.records_per_s]], fmt: fmtNum },
  { id: "lag", title: "Replication lag (slot)", series: [["lag_bytes", s => s.lag_bytes]], fmt: fmtBytes },
  { id: "inflight", title: "In-flight bytes", series: [["inflight_bytes", s => s.inflight_bytes]], fmt: fmtBytes },
  { id: "latency", title: "Commit → Kafka ack latency (p50 blue, p99 orange, max red)", fmt: fmtMs,
    series: [["p50", s => s.latency_ms && s.latency_ms.p50], ["p99", s => s.latency_ms && s.latency_ms.p99], ["max", s => s.latency_ms && s.latency_ms.max]] },
];
const COLORS = ["#2f6fde", "#d9822b", "#c0292b"];
function draw(canvas, samples, chart) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 320, h = canvas.clientHeight || 120;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const ctx = canvas.getContext("2d"); ctx.scale(dpr, dpr); ctx.clearRect(0, 0, w, h);
  const lines = chart.series.map(([, f]) => samples.map(f));
  let max = 0; let points = 0; let last = null;
  for (const values of lines) for (const v of values) if (v != null) { max = Math.max(max, v); }
  if (max <= 0) max = 1;
  ctx.strokeStyle = "#e3e6eb"; ctx.beginPath(); ctx.moveTo(0, h - 0.5); ctx.lineTo(w, h - 0.5); ctx.stroke();
  ctx.fillStyle = "#687083"; ctx.font = "11px system-ui"; ctx.fillText(chart.fmt(max), 4, 12);
  lines.forEach((values, k) => {
    ctx.strokeStyle = COLORS[k % COLORS.length]; ctx.lineWidth = 1.5; ctx.beginPath();
    let started = false;
    values.forEach((v, i) => {
      if (v == null) { started = false; return; }
      const x = values.length > 1 ? i * (w - 2) / (values.length - 1) + 1 : w / 2;
      const y = h - 2 - (v / max) * (h - 18);
      if (started) ctx.lineTo(x, y); else { ctx.moveTo(x, y); started = true; }
      if (k === 0) { points++; last = v; }
    });
    ctx.stroke();
  });
  canvas.dataset.points = String(points);
  canvas.dataset.last = last == null ? "" : String(last);
  return last;
}
function card(p) {
  let el = document.getElementById("p-" + p.pipeline);
  if (!el) {
    el = document.createElement("section");
    el.className = "pipeline"; el.id = "p-" + p.pipeline;
    el.innerHTML = `<div class="top"><span class="name"></span><span class="state"></span>
      <span class="kv">restarts <b class="restarts"></b></span><span class="kv">watermark <b class="watermark"></b></span>
      <span class="kv">slot lag <b class="slotlag"></b></span><span class="kv">WAL budget <b class="walbudget"></b></span><span class="kv">in flight <b class="inflight"></b></span>
      <span class="controls"><button data-a="pause">Pause</button><button data-a="resume">Resume</button><button data-a="restart">Restart</button></span></div>
      <div class="walwarn"></div><div class="hint"></div><div class="error"></div><div class="charts"></div>
      <h3 class="findings-title">Doctor</h3><table class="findings"><tbody></tbody></table>`;
    el.querySelector(".name").textContent = p.pipeline;
    for (const b of el.querySelectorAll("button")) b.onclick = () =>
      api(`/api/v1/pipelines/${encodeURIComponent(p.pipeline)}/${b.dataset.a}`, { method: "POST" }).then(refresh);
    const charts = el.querySelector(".charts");
    for (const c of CHARTS) {
      const div = document.createElement("div"); div.className = "chart";
      div.innerHTML = `<h3>${c.title}<span class="now"></span></h3><canvas id="chart-${c.id}-${p.pipeline}" data-chart="${c.id}" data-points="0"></canvas>`;
      charts.appendChild(div);
    }
    document.getElementById("pipelines").appendChild(el);
  }
  return el;
}
let lastDoctor = 0;
async function doctor(p, el) {
  if (Date.now() - lastDoctor < 30000) return;
  lastDoctor = Date.now();
  const { findings } = await api(`/api/v1/pipelines/${encodeURIComponent(p.pipeline)}/doctor`);
  const body = el.querySelector(".findings tbody");
  body.textContent = "";
  const shown = findings.filter(f => f.severity !== "ok");
  shown.sort((a, b) => ["critical", "warning", "info"].indexOf(a.severity) - ["critical", "warning", "info"].indexOf(b.severity));
  for (const f of shown) {
    const tr = document.createElement("tr");
    tr.dataset.code = f.code;
    tr.innerHTML = `<td class="sev-${f.severity}"></td><td><b></b> <span class="summary"></span><div class="fix"></div></td>`;
    tr.children[0].textContent = f.severity;
    tr.querySelector("b").textContent = f.code;
    tr.querySelector(".summary").textContent = f.summary;
    tr.querySelector(".fix").textContent = f.fix ? "fix: " + f.fix : "";
    body.appendChild(tr);
  }
  el.querySelector(".findings").dataset.findings = String(shown.length);
  el.querySelector(".findings-title").textContent = `Doctor: ${shown.length} finding(s), ${findings.length - shown.length} ok`;
}
async function refresh() {
  try {
    const { pipelines } = await api("/api/v1/pipelines");
    for (const p of pipelines) {
      const el = card(p);
      const state = el.querySelector(".state"); state.textContent = p.state; state.className = "state " + p.state;
      el.querySelector(".restarts").textContent = p.restarts;
      el.querySelector(".watermark").textContent = p.watermark_lsn || "–";
      el.querySelector(".slotlag").textContent = (p.slot ? fmtBytes(p.slot.lag_bytes) + (p.slot.stalled ? " (stalled)" : "") : "–")
        + (p.standby ? `; standby replay lag ${fmtBytes(p.standby.replay_lag_bytes)} (${p.standby.replay_lag_s.toFixed(1)} s)` : "");
      const wal = p.wal_budget;
      el.querySelector(".walbudget").textContent = wal ? `${fmtBytes(wal.retained_bytes)} / ${fmtBytes(wal.budget_bytes)} (${Math.round(wal.used_percent)}%)` : "–";
      el.querySelector(".walwarn").textContent = wal && wal.warning ? "WAL budget: " + wal.warning : "";
      el.querySelector(".inflight").textContent = fmtBytes(p.inflight_bytes) + " / " + fmtBytes(p.inflight_limit_bytes);
      el.querySelector(".error").textContent = p.last_error ? "last error: " + p.last_error : "";
      el.querySelector(".hint").textContent = p.hint ? "fix: " + p.hint : "";
      doctor(p, el).catch(() => {});
      const { samples } = await api(`/api/v1/pipelines/${encodeURIComponent(p.pipeline)}/series`);
      for (const c of CHARTS) {
        const canvas = document.getElementById(`chart-${c.id}-${p.pipeline}`);
        const last = draw(canvas, samples, c);
        canvas.parentElement.querySelector(".now").textContent = c.fmt(last);
      }
    }
    document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
    document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
  } catch (e) {
    document.getElementById("updated").textContent = "cannot reach the admin API: " + e.message;
  }
}
refresh();
setInterval(refresh, 1000);
</script>
</body>
</html>
"##;
