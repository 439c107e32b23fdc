// mixtune dashboard: polls the JSON API and draws its own SVG charts.
"use strict";

const POLL_MS = 2000;
const PALETTE = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#5d4037", "#ad1457"];
const CHARTS = [
  { id: "loss", title: "loss (lines) and validation loss (dots)", lines: ["loss"], dots: ["val_loss"] },
  { id: "lr", title: "learning rate", lines: ["lr"] },
  { id: "loss_scale", title: "loss scale", lines: ["loss_scale"], log: true },
  { id: "grad_norm", title: "gradient norm", lines: ["grad_norm"] },
  { id: "tokens_per_s", title: "tokens/s", lines: ["tokens_per_s"] },
];
const SVG = "http://www.w3.org/2000/svg";

const state = { runs: [], selected: new Set(), touched: false, metrics: {}, detail: null, busy: false };

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function color(name) {
  const i = state.runs.findIndex((r) => r.name === name);
  return PALETTE[(i < 0 ? 0 : i) % PALETTE.length];
}

async function getJSON(url) {
  const res = await fetch(url, { cache: "no-store" });
  if (!res.ok) throw new Error(url + ": " + res.status + " " + (await res.text()).trim());
  return res.json();
}

function fmt(x, digits) {
  if (x === undefined || x === null) return "-";
  return Number(x).toFixed(digits);
}

function renderRuns() {
  const body = document.querySelector("#runs tbody");
  body.replaceChildren();
  for (const r of state.runs) {
    const tr = el("tr", { "data-run": r.name });
    const box = el("input", { type: "checkbox" });
    box.checked = state.selected.has(r.name);
    box.addEventListener("change", () => {
      state.touched = true;
      if (box.checked) state.selected.add(r.name); else state.selected.delete(r.name);
      update();
    });
    const td0 = el("td");
    td0.append(box);
    const name = el("td");
    const sw = el("span", { class: "swatch", style: "background:" + color(r.name) });
    const link = el("a", { href: "#" + encodeURIComponent(r.name) }, r.name);
    link.addEventListener("click", (ev) => { ev.preventDefault(); showDetail(r.name); });
    name.append(sw, link);
    const status = el("td");
    status.append(r.error ? el("span", { class: "warn" }, r.error) : el("span", { class: "status " + r.status }, r.status));
    const step = r.steps ? r.step + " / " + r.steps : String(r.step);
    const acc = r.task_accuracy === undefined ? "-" : fmt(100 * r.task_accuracy, 1) + "%";
    tr.append(td0, name, status, el("td", {}, r.recipe || "-"), el("td", {}, r.precision || "-"), el("td", {}, r.adapter || "-"),
      el("td", { class: "num" }, step), el("td", { class: "num" }, fmt(r.best_val_loss, 4)), el("td", { class: "num" }, acc));
    body.append(tr);
  }
  document.getElementById("diffbtn").disabled = state.selected.size !== 2;
}

// niceTicks: about n round values covering [lo, hi].
function niceTicks(lo, hi, n) {
  if (!(hi > lo)) { hi = lo + 1; }
  const raw = (hi - lo) / n;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

function tickLabel(v) {
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e5)) return v.toExponential(1);
  return String(+v.toPrecision(4));
}

function drawChart(spec) {
  const W = 420, H = 220, L = 56, R = 10, T = 8, B = 26;
  const svg = svgEl("svg", { viewBox: `0 0 ${W} ${H}`, "data-chart": spec.id });
  const series = [];
  for (const name of state.selected) {
    const m = state.metrics[name];
    if (!m) continue;
    for (const f of spec.lines.concat(spec.dots || [])) {
      const s = m.series[f];
      if (!s || s.steps.length === 0) continue;
      const pts = s.steps.map((x, i) => [x, s.values[i]]).filter((p) => !spec.log || p[1] > 0);
      if (pts.length) series.push({ name, field: f, dots: (spec.dots || []).includes(f), pts });
    }
  }
  let points = 0;
  series.forEach((s) => { points += s.pts.length; });
  svg.setAttribute("data-points", String(points));
  svg.setAttribute("data-series", String(series.length));
  if (series.length === 0) {
    svg.append(svgEl("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "no data"));
    return svg;
  }
  const xs = series.flatMap((s) => s.pts.map((p) => p[0]));
  const ys = series.flatMap((s) => s.pts.map((p) => (spec.log ? Math.log2(p[1]) : p[1])));
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x1 === x0) x1 = x0 + 1;
  if (spec.id === "loss" && y0 > 0) y0 = 0;
  if (y1 === y0) { const pad = Math.abs(y0) * 0.1 || 1; y0 -= pad; y1 += pad; } // a flat line sits mid-chart
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  for (const t of niceTicks(y0, y1, 4)) {
    svg.append(svgEl("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), class: "grid" }));
    svg.append(svgEl("text", { x: L - 4, y: sy(t) + 3, "text-anchor": "end", class: "tick" }, spec.log ? "2^" + t : tickLabel(t)));
  }
  for (const t of niceTicks(x0, x1, 5).filter((t) => Number.isInteger(t))) {
    svg.append(svgEl("text", { x: sx(t), y: H - B + 14, "text-anchor": "middle", class: "tick" }, String(t)));
  }
  svg.append(svgEl("line", { x1: L, x2: L, y1: T, y2: H - B, class: "axis" }));
  svg.append(svgEl("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, class: "axis" }));
  for (const s of series) {
    const c = color(s.name);
    const y = (v) => sy(spec.log ? Math.log2(v) : v);
    if (s.dots) {
      for (const [px, py] of s.pts) svg.append(svgEl("circle", { cx: sx(px), cy: y(py), r: 3, fill: c, "data-run": s.name }));
    } else {
      const d = s.pts.map(([px, py], i) => (i ? "L" : "M") + sx(px).toFixed(1) + " " + y(py).toFixed(1)).join(" ");
      svg.append(svgEl("path", { d, fill: "none", stroke: c, "stroke-width": 1.5, "data-run": s.name }));
    }
  }
  return svg;
}

function renderCharts() {
  const box = document.getElementById("charts");
  box.replaceChildren();
  for (const spec of CHARTS) {
    const div = el("div", { class: "chart" });
    div.append(el("h3", {}, spec.title), drawChart(spec));
    box.append(div);
  }
}

async function showDetail(name) {
  const sec = document.getElementById("detail");
  sec.hidden = false;
  sec.replaceChildren(el("h2", {}, name));
  try {
    const d = await getJSON("api/runs/" + encodeURIComponent(name) + "/detail");
    const s = d.summary || {}, m = d.manifest || {};
    const lines = [];
    if (d.status) lines.push("status: " + d.status);
    if (s.engine) lines.push("engine: " + s.engine);
    if (s.backend || m.blas) lines.push("kernels: " + (s.backend || m.blas) + (s.backend_reason ? " (" + s.backend_reason + ")" : ""));
    if (m.device) lines.push("device: " + (typeof m.device === "string" ? m.device : JSON.stringify(m.device)));
    if (d.error) lines.push("error: " + d.error);
    sec.append(el("pre", { "data-lines": "" }, lines.join("\n") || "(no summary or run.json yet)"));
    const samples = (s.task_after && s.task_after.samples) || [];
    if (samples.length) {
      sec.append(el("h3", {}, "samples after training"));
      const ul = el("ul");
      for (const a of samples) ul.append(el("li", {}, JSON.stringify(a.prompt) + " → " + JSON.stringify(a.got) + " (want " + JSON.stringify(a.want) + ")"));
      sec.append(ul);
    }
    sec.append(el("h3", {}, "resolved recipe"), el("pre", { "data-recipe": name }, d.recipe || d.recipe_error || ""));
  } catch (e) {
    sec.append(el("p", { class: "warn" }, String(e.message || e)));
  }
}

async function showDiff() {
  const [a, b] = state.runs.map((r) => r.name).filter((n) => state.selected.has(n)); // in the list's order
  const sec = document.getElementById("diff");
  sec.hidden = false;
  sec.replaceChildren(el("h2", {}, "recipe diff: " + a + " → " + b));
  try {
    const d = await getJSON("api/diff?a=" + encodeURIComponent(a) + "&b=" + encodeURIComponent(b));
    if (d.changes.length === 0) { sec.append(el("p", {}, "the recipes are the same")); return; }
    const t = el("table");
    t.append(el("tr", {}, ""));
    t.firstChild.append(el("th", {}, "field"), el("th", {}, a), el("th", {}, b));
    for (const c of d.changes) {
      const tr = el("tr", { "data-key": c.key });
      tr.append(el("td", {}, c.key), el("td", {}, c.a === null ? "(absent)" : c.a), el("td", {}, c.b === null ? "(absent)" : c.b));
      t.append(tr);
    }
    sec.append(t);
  } catch (e) {
    sec.append(el("p", { class: "warn" }, String(e.message || e)));
  }
}

// update refreshes the runs list and the selected runs' metrics. A failed
// request keeps what the page showed and says so.
async function update() {
  if (state.busy) return;
  state.busy = true;
  const st = document.getElementById("state");
  try {
    const d = await getJSON("api/runs");
    document.getElementById("dir").textContent = d.dir;
    state.runs = d.runs;
    const names = new Set(d.runs.map((r) => r.name));
    for (const n of [...state.selected]) if (!names.has(n)) state.selected.delete(n);
    if (!state.touched && state.selected.size === 0) {
      // at first, the running runs, else the newest two by name
      const running = d.runs.filter((r) => r.status === "running").map((r) => r.name);
      (running.length ? running : d.runs.slice(-2).map((r) => r.name)).forEach((n) => state.selected.add(n));
    }
    const warnings = [];
    await Promise.all([...state.selected].map(async (n) => {
      try {
        state.metrics[n] = await getJSON("api/runs/" + encodeURIComponent(n) + "/metrics");
        for (const p of state.metrics[n].problems || []) warnings.push(n + ": skipped " + p);
      } catch (e) {
        warnings.push(String(e.message || e));
      }
    }));
    renderRuns();
    renderCharts();
    document.getElementById("note").textContent = warnings.join("; ");
    st.textContent = "updated " + new Date().toLocaleTimeString();
  } catch (e) {
    st.textContent = "update failed (showing the last data): " + (e.message || e);
  } finally {
    state.busy = false;
  }
}

document.getElementById("diffbtn").addEventListener("click", showDiff);
update();
setInterval(update, POLL_MS);
