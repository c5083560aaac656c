// The runs page (`minigpt runs DIR --html`). DATA: folder, differ (the config keys whose values
// differ between runs), runs [{run, steps, best_val_loss_est, val_loss_full, val_full_sampled, params, wall_s,
// problem, config (flat, or null), results (results.json, or null), curve ({step, seconds, value},
// or null without event files)}].
const RUNS = DATA.runs, DIFFER = DATA.differ;
const SVGNS = "http://www.w3.org/2000/svg";
const W = 760, H = 330, M = { l: 56, r: 16, t: 12, b: 42 };
const colour = (i) => `rgb(${headColour(i).join(",")})`;
let xKey = "step", sortCol = "loss", sortDir = 1, picked = null;

// each run's points: its val estimate curve (val/loss_est), or results.json's last point without event files
const POINTS = RUNS.map((r) => {
  const c = r.curve;
  if (c && c.step.length) return c.step.map((s, k) => ({ step: s, seconds: c.seconds[k], value: c.value[k] }));
  const res = r.results || {};
  const value = res.val_loss_full ?? r.best_val_loss_est;
  return value == null || r.steps == null ? [] : [{ step: r.steps, seconds: res.wall_s ?? null, value, only: true }];
});

function duration(s) {
  if (s < 90) return `${+s.toFixed(s < 10 ? 1 : 0)}s`;
  if (s < 5400) return `${+(s / 60).toFixed(s < 600 ? 1 : 0)}m`;
  return `${+(s / 3600).toFixed(1)}h`;
}
function ticks(lo, hi, n) {
  const raw = (hi - lo) / n || 1, p = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * p).find((s) => s >= raw);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}
function el(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

function drawChart() {
  const svg = byId("chart");
  svg.innerHTML = "";
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  const pts = POINTS.flat().filter((p) => p[xKey] != null);
  if (!pts.length) {
    el("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, svg).textContent = "no val loss was logged";
    return;
  }
  const xs = pts.map((p) => p[xKey]), ys = pts.map((p) => p.value);
  const x0 = 0, x1 = Math.max(...xs) || 1;
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  const pad = (y1 - y0) * 0.06 || 0.05;
  y0 -= pad; y1 += pad;
  const X = (v) => M.l + ((v - x0) / (x1 - x0)) * (W - M.l - M.r);
  const Y = (v) => M.t + (1 - (v - y0) / (y1 - y0)) * (H - M.t - M.b);
  const axis = el("g", { class: "axis" }, svg);
  for (const v of ticks(y0, y1, 5)) {
    el("line", { x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v) }, axis);
    el("text", { x: M.l - 6, y: Y(v) + 4, "text-anchor": "end" }, axis).textContent = v.toFixed(2);
  }
  for (const v of ticks(x0, x1, 6)) {
    el("line", { x1: X(v), x2: X(v), y1: H - M.b, y2: H - M.b + 4 }, axis);
    el("text", { x: X(v), y: H - M.b + 16, "text-anchor": "middle" }, axis).textContent = xKey === "step" ? num(v) : duration(v);
  }
  el("line", { x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b }, axis);
  el("text", { x: (M.l + W - M.r) / 2, y: H - 6, "text-anchor": "middle", class: "title", id: "x-title" }, axis).textContent =
    xKey === "step" ? "step" : "wall time since the run's first event";
  el("text", { x: 12, y: (M.t + H - M.b) / 2, "text-anchor": "middle", class: "title", transform: `rotate(-90 12 ${(M.t + H - M.b) / 2})` }, axis).textContent = "val loss (nats)";
  RUNS.forEach((r, i) => {
    const own = POINTS[i].filter((p) => p[xKey] != null);
    if (!own.length) return;
    const g = el("g", { class: "run" + (picked === i ? " on" : ""), "data-run": r.run }, svg);
    if (own.length > 1) {
      const d = own.map((p, k) => `${k ? "L" : "M"}${X(p[xKey]).toFixed(1)},${Y(p.value).toFixed(1)}`).join("");
      el("path", { d, class: "curve", stroke: colour(i), "data-run": r.run }, g);
    }
    const last = own[own.length - 1];
    el("circle", { cx: X(last[xKey]), cy: Y(last.value), r: picked === i ? 4.5 : 3, fill: colour(i), class: "dot" }, g);
    g.addEventListener("click", () => pick(i));
    g.addEventListener("mousemove", (e) => showTip(`<b>${esc(r.run)}</b><br>val loss ${last.value.toFixed(4)} at step ${num(last.step)}` +
      (last.only ? "<br>(results.json: no event files)" : ""), e.clientX, e.clientY));
    g.addEventListener("mouseleave", hideTip);
  });
}

// ---- the table
const tails = DIFFER.map((k) => k.split(".").pop());
const shortKey = (k, n) => (tails.filter((t) => t === tails[n]).length > 1 ? k : tails[n]);
function valueText(v) {
  if (v == null) return "-";
  if (Array.isArray(v)) return "[" + v.join(", ") + "]";
  if (typeof v === "number" && !Number.isInteger(v)) return +v.toPrecision(6) + "";
  return String(v);
}
const COLUMNS = [
  { id: "run", label: "run", name: true, get: (r) => r.run },
  ...DIFFER.map((k, n) => ({ id: k, label: shortKey(k, n), title: k, diff: true, get: (r) => (r.config ? r.config[k] : null) })),
  { id: "steps", label: "steps", get: (r) => r.steps, show: (v) => num(v) },
  { id: "est", label: "val est", title: "the best estimate in training (train.eval_steps batches)", get: (r) => r.best_val_loss_est,
    show: (v) => v.toFixed(4) },
  { id: "loss", label: "val full", title: "the whole validation split (~: a spread sample of it)", get: (r) => r.val_loss_full ?? null,
    show: (v, r) => v.toFixed(4) + (r.val_full_sampled ? "~" : "") },
  { id: "params", label: "params", get: (r) => r.params, show: (v) => (v / 1e6).toFixed(2) + "M" },
  { id: "wall", label: "wall", get: (r) => r.wall_s, show: (v) => duration(v) },
];
function compare(a, b) {
  if (a == null || b == null) return a == null && b == null ? 0 : a == null ? 1 : -1; // empty cells last either way
  if (typeof a === "number" && typeof b === "number") return (a - b) * sortDir;
  return String(valueText(a)).localeCompare(String(valueText(b)), "en", { numeric: true }) * sortDir;
}
function drawTable() {
  const col = COLUMNS.find((c) => c.id === sortCol);
  const order = RUNS.map((r, i) => i).sort((a, b) => compare(col.get(RUNS[a]), col.get(RUNS[b])) || a - b);
  const head = COLUMNS.map((c) => {
    const arrow = c.id === sortCol ? `<span class="arrow">${sortDir > 0 ? " \u25b2" : " \u25bc"}</span>` : "";
    return `<th class="${c.name ? "name" : ""}${c.diff ? " diff" : ""}" data-col="${esc(c.id)}" title="${esc(c.title || "")}">${esc(c.label)}${arrow}</th>`;
  }).join("");
  const rows = order.map((i) => {
    const r = RUNS[i];
    const cells = COLUMNS.map((c) => {
      const v = c.get(r);
      let shown = v == null ? "-" : c.show ? c.show(v, r) : valueText(v);
      if (c.id === "run") shown = `<span class="sw" style="background:${colour(i)}"></span>${esc(shown)}`;
      else if (c.id === "est" || (c.id === "loss" && r.val_full_sampled)) shown = `<span class="est">${esc(shown)}</span>`;
      else shown = esc(shown);
      if (c.id === "run" && r.problem) shown += ` <span class="problem">unreadable</span>`;
      return `<td class="${c.name ? "name" : ""}${c.diff ? " diff" : ""}">${shown}</td>`;
    }).join("");
    return `<tr class="row${picked === i ? " on" : ""}" data-run="${esc(r.run)}" data-i="${i}">${cells}</tr>`;
  }).join("");
  const table = byId("table");
  table.innerHTML = `<thead><tr>${head}</tr></thead><tbody>${rows}</tbody>`;
  table.querySelectorAll("th").forEach((th) => th.addEventListener("click", () => {
    const id = th.dataset.col;
    sortDir = id === sortCol ? -sortDir : 1;
    sortCol = id;
    drawTable();
  }));
  table.querySelectorAll("tr.row").forEach((tr) => tr.addEventListener("click", () => pick(+tr.dataset.i)));
}

// ---- one run's config
const SECTIONS = ["model", "data", "train", "optim", "log"];
function drawConfig() {
  const r = RUNS[picked];
  byId("config-title").innerHTML = `<span class="sw" style="background:${colour(picked)}"></span>${esc(r.run)}`;
  const res = r.results || {};
  const facts = [];
  if (r.problem) facts.push(`<div class="problem">unreadable: ${esc(r.problem)}</div>`);
  for (const [name, v, what] of [["val full", r.val_loss_full, r.val_full_sampled ? "a sample of the validation split" : "the whole validation split"],
    ["val est", r.best_val_loss_est, "the best estimate in training"]]) {
    if (v != null) facts.push(`<div>${name} <b>${v.toFixed(4)}</b> nats (${what}), ${(v / Math.LN2).toFixed(4)} bits/char</div>`);
  }
  if (r.steps != null) facts.push(`<div>${num(r.steps)} steps` + (res.best_step != null ? `, the best at step ${num(res.best_step)}` : "") + "</div>");
  if (res.stopped) facts.push(`<div>ended by ${esc(res.stopped)}</div>`);
  if (r.wall_s != null) facts.push(`<div>${duration(r.wall_s)} of wall time` + (res.tokens_per_s ? `, ${num(Math.round(res.tokens_per_s))} tokens/s` : "") + "</div>");
  if (!r.results && !r.problem) facts.push(`<div class="est">no results.json: unfinished, or its final evaluation was cut short</div>`);
  byId("config-facts").innerHTML = facts.join("");
  const config = r.config || {};
  const keys = Object.keys(config);
  const rows = [];
  for (const s of SECTIONS.concat([...new Set(keys.map((k) => k.split(".")[0]))].filter((s) => !SECTIONS.includes(s)))) {
    const own = keys.filter((k) => k.split(".")[0] === s);
    if (!own.length) continue;
    rows.push(`<tr class="section"><td colspan="2">${esc(s)}</td></tr>`);
    for (const k of own) {
      rows.push(`<tr class="${DIFFER.includes(k) ? "diff" : ""}" data-key="${esc(k)}"><td class="k">${esc(k.slice(s.length + 1))}</td><td class="v">${esc(valueText(config[k]))}</td></tr>`);
    }
  }
  byId("config-keys").innerHTML = rows.join("");
}

function pick(i) {
  picked = i;
  drawChart();
  drawTable();
  drawConfig();
}

byId("source").textContent = DATA.folder;
const curves = POINTS.filter((p) => p.length > 1).length;
byId("counts").textContent = `${RUNS.length} run${RUNS.length === 1 ? "" : "s"}, ${curves} with a curve; ` +
  (DIFFER.length ? `${DIFFER.length} config ${DIFFER.length === 1 ? "key differs" : "keys differ"} (marked)` : "every config key is the same");
segmented(byId("xaxis"), ["step", "wall time"], 0, (k) => { xKey = k ? "seconds" : "step"; drawChart(); });
byId("note").textContent = "The curves are the val estimate at each evaluation, on train.eval_steps fixed batches " +
  "(TensorBoard's val/loss_est); a run without event files shows results.json's last point. The table's val full is " +
  "the whole validation split after training (a ~ marks a sample of it), val est the best estimate. " +
  "Wall time counts from each run's first event: a resumed run's pause is in it.";
const LOSS = COLUMNS.find((c) => c.id === "loss");
pick(RUNS.map((r, i) => i).sort((a, b) => compare(LOSS.get(RUNS[a]), LOSS.get(RUNS[b])) || a - b)[0]);
