// The heads page (`minigpt heads --html`). DATA: source, unit, nLayer, nHead, tokens (the repeated
// probe sequence), labels (a string per token, or null), ceilings and probeUniform (pattern -> a
// perfect and a uniform head's probe score), uniform and positions (pattern -> a uniform head's score
// on the text, and how many positions had a target), text, windows, context (what the text scores read),
// heads [{layer, head, scores (text), probe, evidence (pattern -> 0 uniform .. 1 perfect, what the role
// read), role, ablation: {loss_delta, stderr, exact} | null}], ablation (mean,
// zero, none), baseLoss, ablationTokens, ablationText, blockSize, roleMin, roleMargin, localDistance,
// pool, side, weights (base64: every head's pattern, side x side bytes of weight x 255, the largest
// weight over pool x pool positions).
const L = DATA.nLayer, NH = DATA.nHead, TOK = DATA.tokens, T = TOK.length, HALF = T / 2;
const SIDE = DATA.side, POOL = DATA.pool, UNIT = DATA.unit === "char" ? "character" : DATA.unit;
const PATTERNS = ["previous", "duplicate", "induction", "first"];
const SHORT = { previous: "prev", duplicate: "dup", induction: "ind", first: "first" };
// one colour per role, and for each pattern its role's (as `minigpt heads` colours the terminal)
const ROLE_COLOURS = { previous: "#1b95ad", induction: "#bd3893", duplicate: "#c98500", first: "#3d6fd8", local: "#3a8f43", mixed: "#8b94a3" };
const GAMMA = 0.5; // heat maps show sqrt(weight): a stripe of 0.2 still shows beside one of 1
const RAW = Uint8Array.from(atob(DATA.weights), (c) => c.charCodeAt(0));
const HEADS = DATA.heads;
const headAt = (l, h) => HEADS[l * NH + h];
const name = (x) => `layer ${x.layer}, head ${x.head}`;

// where a perfect head of each pattern looks (TransformerLens' detection patterns, minigpt/inspect/heads.py)
function isTarget(p, q, k) {
  if (k > q) return false;
  if (p === "previous") return k === q - 1;
  if (p === "duplicate") return k < q && TOK[k] === TOK[q];
  if (p === "induction") return k >= 1 && k - 1 < q && TOK[k - 1] === TOK[q];
  return k === 0;
}
const UNIFORM = DATA.probeUniform; // what a head spreading its weight evenly scores on the probe
const rel = (x, p) => x.evidence[p]; // the pattern's lift above a uniform head, as a share of a perfect head's
const strongest = (x) => PATTERNS.reduce((a, b) => (rel(x, b) > rel(x, a) ? b : a));

function roleTag(role) { return `<span class="role" style="background:${ROLE_COLOURS[role] || "#8b94a3"}">${esc(role)}</span>`; }
function posLabel(i) { return DATA.labels ? `#${i} ${quoted(DATA.labels[i])}` : `#${i}`; }
function half(i) { return i < HALF ? "1st half" : "2nd half"; }

// ---- heat maps: one pixel per (query, key) cell, drawn scaled up without smoothing
const tiles = new Map();
function tile(l, h) { // the pattern as an off-screen canvas of side x side pixels
  const key = l * NH + h;
  if (tiles.has(key)) return tiles.get(key);
  const c = document.createElement("canvas");
  c.width = c.height = SIDE;
  const ctx = c.getContext("2d"), img = ctx.createImageData(SIDE, SIDE), base = key * SIDE * SIDE;
  for (let q = 0; q < SIDE; q++) for (let k = 0; k < SIDE; k++) {
    const o = 4 * (q * SIDE + k);
    const col = k > q ? [246, 247, 250] : viridis(Math.pow(RAW[base + q * SIDE + k] / 255, GAMMA)); // above: masked
    img.data[o] = col[0]; img.data[o + 1] = col[1]; img.data[o + 2] = col[2]; img.data[o + 3] = 255;
  }
  ctx.putImageData(img, 0, 0);
  tiles.set(key, c);
  return c;
}
function sized(canvas) { // a square canvas drawn at the size the page lays it out at (CSS pixels), sharp on high-density screens
  const r = window.devicePixelRatio || 1, css = canvas.clientWidth;
  canvas.width = canvas.height = Math.round(css * r);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(r, 0, 0, r, 0, 0);
  ctx.imageSmoothingEnabled = false;
  return [ctx, css];
}
function halfLines(ctx, x0, y0, size, colour, width) {
  const m = (HALF / POOL) * (size / SIDE);
  ctx.strokeStyle = colour; ctx.lineWidth = width; ctx.setLineDash([4, 3]);
  ctx.beginPath(); ctx.moveTo(x0 + m, y0); ctx.lineTo(x0 + m, y0 + size); ctx.moveTo(x0, y0 + m); ctx.lineTo(x0 + size, y0 + m); ctx.stroke();
  ctx.setLineDash([]);
}

// ---- the grid: a row per layer, its heads side by side; cells of 140 to ~220 px fill the width, and
// wrap onto more lines where it is too narrow for all of a layer's heads (no cell is ever cut off)
const grid = byId("grid"), cells = [];
for (let l = 0; l < L; l++) {
  const r = document.createElement("div"); r.className = "rowhead"; r.textContent = `layer ${l}`; grid.appendChild(r);
  const row = document.createElement("div"); row.className = "cells"; row.style.maxWidth = `${228 * NH}px`; grid.appendChild(row);
  for (let h = 0; h < NH; h++) {
    const x = headAt(l, h), top = strongest(x);
    const cell = document.createElement("div");
    cell.className = "cell"; cell.dataset.layer = l; cell.dataset.head = h; cell.tabIndex = 0;
    cell.title = `${name(x)}: ${x.role} (click for its pattern and numbers)`;
    const bars = PATTERNS.map((p) => {
      const share = Math.max(0, Math.min(1, rel(x, p)));
      return `<div class="s${p === top ? " top-score" : ""}"><span class="n">${SHORT[p]}</span>` +
        `<span class="track"><span style="width:${(100 * share).toFixed(1)}%;background:${ROLE_COLOURS[p]}"></span></span>` +
        `<span class="v">${x.scores[p].toFixed(2)}</span></div>`;
    }).join("");
    cell.innerHTML = `<div class="top"><span class="name">L${l} H${h}</span>${roleTag(x.role)}</div><canvas></canvas>${bars}` +
      `<div class="dist">mean distance back ${x.scores.distance.toFixed(2)}</div>`;
    cell.addEventListener("click", () => select(l, h));
    cell.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); select(l, h); } });
    row.appendChild(cell);
    cells.push(cell);
  }
}
function drawThumbs() {
  for (const cell of cells) {
    const [ctx, px] = sized(cell.querySelector("canvas"));
    ctx.drawImage(tile(+cell.dataset.layer, +cell.dataset.head), 0, 0, px, px);
    halfLines(ctx, 0, 0, px, "rgba(255,255,255,.55)", 1);
  }
}
drawThumbs();

// ---- one head large
const big = byId("big"), PAD = 20; // the map: PAD px from the canvas's top left, to 4 px from its other sides
let MAP = 0;
const guides = byId("guides"), GUIDED = ["previous", "induction"]; // the two stripes to look for
let current = null;
byId("guides-text").innerHTML = `outline where a perfect <b style="color:${ROLE_COLOURS.previous}">previous-token</b> and ` +
  `<b style="color:${ROLE_COLOURS.induction}">induction</b> head would look`;
if (POOL > 1) byId("guides-label").style.display = "none"; // one pixel stands for several positions
function drawBig() {
  const { layer: l, head: h } = current;
  const [ctx, BIG] = sized(big);
  MAP = BIG - PAD - 4;
  ctx.clearRect(0, 0, BIG, BIG);
  ctx.drawImage(tile(l, h), PAD, PAD, MAP, MAP);
  const cellPx = MAP / SIDE;
  if (guides.checked && POOL === 1) {
    ctx.lineWidth = 1.2;
    for (const p of GUIDED) {
      ctx.strokeStyle = ROLE_COLOURS[p];
      for (let q = 0; q < T; q++) for (let k = 0; k <= q; k++) {
        if (isTarget(p, q, k)) ctx.strokeRect(PAD + k * cellPx + 0.6, PAD + q * cellPx + 0.6, cellPx - 1.2, cellPx - 1.2);
      }
    }
  }
  halfLines(ctx, PAD, PAD, MAP, "rgba(255,255,255,.8)", 1.2);
  ctx.fillStyle = "#5f6b7a"; ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "center"; ctx.textBaseline = "middle";
  const m = MAP / 2;
  ctx.fillText("keys: 1st half", PAD + m / 2, PAD / 2); ctx.fillText("keys: 2nd half (the repeat)", PAD + m + m / 2, PAD / 2);
  for (const [y, text] of [[PAD + m / 2, "queries: 1st half"], [PAD + m + m / 2, "queries: 2nd half"]]) {
    ctx.save(); ctx.translate(PAD / 2, y); ctx.rotate(-Math.PI / 2); ctx.fillText(text, 0, 0); ctx.restore();
  }
}
function select(l, h) {
  current = headAt(l, h);
  cells.forEach((c) => c.classList.toggle("on", +c.dataset.layer === l && +c.dataset.head === h));
  document.querySelectorAll("#bars .row").forEach((r) => r.classList.toggle("on", +r.dataset.layer === l && +r.dataset.head === h));
  byId("detail-title").textContent = name(current);
  byId("detail-role").outerHTML = roleTag(current.role).replace('class="role"', 'class="role" id="detail-role"');
  drawBig();
  byId("detail-body").innerHTML = detailHtml(current);
  markSeq(-1, -1);
}
guides.addEventListener("change", () => current && drawBig());
byId("big-caption").textContent = `Row: the query (the position reading); column: the key it reads from. Brighter: more weight ` +
  `(square-root scale); the pale triangle is the future, masked. Dashed lines split the two halves` +
  (POOL > 1 ? `; each pixel is the largest weight over ${POOL} x ${POOL} positions.` : ".");

function detailHtml(x) {
  const rows = PATTERNS.map((p) => {
    const share = rel(x, p);
    return `<tr${p === strongest(x) ? ' style="font-weight:650"' : ""}><td>${p}</td><td>${x.scores[p].toFixed(3)}</td><td>${DATA.uniform[p].toFixed(3)}</td>` +
      `<td>${x.probe[p].toFixed(3)}</td><td>${DATA.ceilings[p].toFixed(3)}</td>` +
      `<td>${Math.round(100 * share)}% <span class="track"><span style="width:${(100 * Math.max(0, Math.min(1, share))).toFixed(1)}%;background:${ROLE_COLOURS[p]}"></span></span></td></tr>`;
  }).join("");
  const table = `<table class="nums"><tr><th>pattern</th><th>text</th><th>uniform</th><th>probe</th><th>probe perfect</th><th>evidence</th></tr>${rows}</table>`;
  const ranked = PATTERNS.map((p) => rel(x, p)).sort((a, b) => b - a);
  const lead = Math.round(100 * (ranked[0] - ranked[1]));
  let why;
  if (PATTERNS.includes(x.role)) why = `its ${x.role} score is ${Math.round(100 * rel(x, x.role))}% of the way from a uniform head's to a perfect head's, ${lead} points ahead of the next pattern`;
  else why = `no pattern reaches ${Math.round(100 * DATA.roleMin)}% of the way from a uniform head's score to a perfect head's with a lead of ${Math.round(100 * DATA.roleMargin)} points` +
    (x.role === "local" ? `, and it looks fewer than ${DATA.localDistance} positions back on average` : "");
  const facts = [`<div><b>${esc(x.role)}</b>: ${why}.</div>`, `<div>Mean distance back: <b>${x.scores.distance.toFixed(2)}</b> positions.</div>`];
  const a = x.ablation;
  if (a) {
    const value = `${sign(a.loss_delta)}${a.stderr == null ? "" : ` ± ${a.stderr.toFixed(4)}`} nats`;
    facts.push(a.exact ? `<div>Without it (${DATA.ablation} ablation): loss <b>${value}</b>, measured.</div>`
      : `<div>Without it (${DATA.ablation} ablation): loss <b>${value}</b> <span class="est">estimate</span> (from one forward and backward pass, not rerun).</div>`);
  }
  return table + `<div class="facts">${facts.join("")}</div>`;
}
function sign(v) { return (v >= 0 ? "+" : "\u2212") + Math.abs(v).toFixed(4); }

// the sequence under the map: the query and key under the pointer marked
const seqSpans = [];
if (DATA.labels) {
  const seq = byId("seq");
  seq.innerHTML = `<span style="color:var(--muted);font:12px system-ui,sans-serif">the sequence: </span>`;
  for (let i = 0; i < T; i++) {
    const s = document.createElement("span");
    s.textContent = visible(DATA.labels[i]);
    if (i === HALF) s.className = "half2";
    seq.appendChild(s);
    seqSpans.push(s);
  }
}
function markSeq(q, k) {
  seqSpans.forEach((s, i) => { s.classList.toggle("q", i === q); s.classList.toggle("k", i === k && k !== q); });
}
big.addEventListener("mousemove", (e) => {
  const r = big.getBoundingClientRect();
  const k = Math.floor((e.clientX - r.left - PAD) / (MAP / SIDE)), q = Math.floor((e.clientY - r.top - PAD) / (MAP / SIDE));
  if (!current || k < 0 || q < 0 || k >= SIDE || q >= SIDE) { hideTip(); markSeq(-1, -1); return; }
  if (k > q) { showTip("above the diagonal: a later position, masked", e.clientX, e.clientY); markSeq(-1, -1); return; }
  const w = RAW[((current.layer * NH + current.head) * SIDE + q) * SIDE + k] / 255;
  if (POOL > 1) {
    const span = (i) => `${i * POOL}\u2013${Math.min(T, (i + 1) * POOL) - 1}`;
    showTip(`queries ${span(q)} \u2192 keys ${span(k)}<br>largest weight <b>${w.toFixed(3)}</b>`, e.clientX, e.clientY);
    return;
  }
  const tags = PATTERNS.filter((p) => isTarget(p, q, k));
  showTip(`query ${esc(posLabel(q))} (${half(q)}) \u2192 key ${esc(posLabel(k))} (${half(k)})<br>weight <b>${w.toFixed(3)}</b>` +
    (tags.length ? `<br>where a perfect ${tags.join(" or ")} head looks` : ""), e.clientX, e.clientY);
  markSeq(q, k);
});
big.addEventListener("mouseleave", () => { hideTip(); markSeq(-1, -1); });

// ---- ablation: one bar per head, the loss rise with a one-standard-error whisker; estimates hatched
const SVGNS = "http://www.w3.org/2000/svg";
const measured = HEADS.filter((x) => x.ablation);
let order = "layer";
function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}
function ticks(lo, hi, n) { // about n round steps
  const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw))), f = raw / mag;
  const step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag, out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
  return { out, step };
}
function drawBars() {
  const svg = byId("bars");
  svg.innerHTML = "";
  if (!measured.length) return;
  const width = Math.max(300, svg.parentElement.clientWidth - 20), ROW = 17, GAP = order === "layer" ? 10 : 0;
  const LEFT = order === "layer" ? 86 : 60, TOP = 6;
  const narrow = width < 480, RIGHT = narrow ? 110 : 170; // a phone: the values without their standard error
  const lo = Math.min(0, ...measured.map((x) => x.ablation.loss_delta - (x.ablation.stderr || 0)));
  const hi = Math.max(1e-4, ...measured.map((x) => x.ablation.loss_delta + (x.ablation.stderr || 0)));
  const tk = ticks(lo, hi, narrow ? 2 : 5), x0 = Math.min(lo, tk.out[0]), x1 = Math.max(hi, tk.out[tk.out.length - 1]);
  const X = (v) => LEFT + ((v - x0) / (x1 - x0)) * (width - LEFT - RIGHT);
  const rows = order === "layer" ? HEADS.slice() : HEADS.slice().sort((a, b) => (b.ablation ? b.ablation.loss_delta : -Infinity) - (a.ablation ? a.ablation.loss_delta : -Infinity));
  const height = TOP + rows.length * ROW + (order === "layer" ? (L - 1) * GAP : 0) + 34;
  svg.setAttribute("width", width); svg.setAttribute("height", height); svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const defs = svgEl("defs", {}, svg), pat = svgEl("pattern", { id: "hatch", width: 5, height: 5, patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" }, defs);
  svgEl("rect", { width: 2.2, height: 5, fill: "rgba(255,255,255,.75)" }, pat);
  const bottom = height - 30;
  for (const v of tk.out) {
    svgEl("line", { x1: X(v), x2: X(v), y1: TOP - 2, y2: bottom, stroke: v === 0 ? "#8b94a3" : "#e6e9ef", "stroke-width": v === 0 ? 1.2 : 1 }, svg);
    const t = svgEl("text", { x: X(v), y: bottom + 13, "text-anchor": "middle", class: "muted" }, svg);
    t.textContent = (v > 0 ? "+" : v < 0 ? "\u2212" : "") + Math.abs(v).toFixed(Math.max(0, -Math.floor(Math.log10(tk.step) + 1e-9)));
  }
  const axis = svgEl("text", { x: narrow ? LEFT : LEFT + (width - LEFT - RIGHT) / 2, y: bottom + 27, "text-anchor": narrow ? "start" : "middle", class: "muted" }, svg);
  axis.textContent = narrow ? "loss rise without the head (nats)" : "loss rise without the head (nats); whisker: \u00b11 standard error";
  let y = TOP;
  rows.forEach((x, n) => {
    if (order === "layer" && n > 0 && x.head === 0) y += GAP;
    const g = svgEl("g", { class: "row", "data-layer": x.layer, "data-head": x.head }, svg);
    svgEl("rect", { class: "hl", x: 0, y, width, height: ROW, fill: "transparent" }, g);
    const label = svgEl("text", { x: LEFT - 8, y: y + ROW / 2 + 4, "text-anchor": "end" }, g);
    label.textContent = order === "layer" ? `H${x.head}` : `L${x.layer} H${x.head}`;
    if (order === "layer" && x.head === 0) {
      const lt = svgEl("text", { x: 2, y: y + ROW / 2 + 4, class: "muted" }, g);
      lt.textContent = `layer ${x.layer}`;
    }
    const a = x.ablation;
    y += ROW;
    if (!a) return;
    const colour = ROLE_COLOURS[x.role] || "#8b94a3", bx = Math.min(X(0), X(a.loss_delta)), bw = Math.max(1, Math.abs(X(a.loss_delta) - X(0)));
    const top = y - ROW;
    const bar = svgEl("rect", { class: "abl-bar", "data-layer": x.layer, "data-head": x.head, "data-exact": a.exact, x: bx, y: top + 3, width: bw, height: ROW - 6, fill: colour, "fill-opacity": a.exact ? 1 : 0.55, rx: 1.5 }, g);
    svgEl("title", {}, bar).textContent = `${name(x)} (${x.role}): ${sign(a.loss_delta)}${a.stderr == null ? "" : ` \u00b1 ${a.stderr.toFixed(4)}`} nats${a.exact ? "" : ", an estimate"}`;
    if (!a.exact) svgEl("rect", { x: bx, y: top + 3, width: bw, height: ROW - 6, fill: "url(#hatch)", "pointer-events": "none" }, g);
    const err = a.stderr || 0, e0 = X(a.loss_delta - err), e1 = X(a.loss_delta + err), cy = top + ROW / 2;
    if (err) svgEl("path", { d: `M${e0},${cy}H${e1}M${e0},${cy - 4}V${cy + 4}M${e1},${cy - 4}V${cy + 4}`, stroke: "#1d2330", "stroke-width": 1.1, fill: "none", "pointer-events": "none" }, g);
    const v = svgEl("text", { x: width - RIGHT + 8, y: cy + 4 }, g);
    v.textContent = `${sign(a.loss_delta)}${a.stderr == null || narrow ? "" : ` \u00b1 ${a.stderr.toFixed(4)}`}`;
    if (!a.exact) { const est = svgEl("tspan", { class: "est", dx: 5 }, v); est.textContent = "estimate"; }
    g.addEventListener("click", () => select(x.layer, x.head));
  });
  if (current) select(current.layer, current.head);
}
const exactCount = measured.filter((x) => x.ablation.exact).length;
if (measured.length) {
  segmented(byId("sort"), ["by layer", "by loss rise"], 0, (k) => { order = k ? "rise" : "layer"; drawBars(); });
  const windows = DATA.blockSize ? ` (${num(Math.round(DATA.ablationTokens / DATA.blockSize))} windows)` : "";
  byId("abl-note").innerHTML = `Each head's output replaced by ${DATA.ablation === "mean" ? "its mean over the sample" : "zeros"}, ` +
    `on ${num(DATA.ablationTokens)} predictions${windows} of the ${esc(DATA.ablationText || "text")}; loss with every head in place: ` +
    `<b>${DATA.baseLoss.toFixed(4)} nats</b> (${(DATA.baseLoss / Math.LN2).toFixed(3)} bits per ${UNIT}). ` +
    (exactCount === measured.length ? "Every head measured exactly." :
      `Solid bars: measured exactly (${exactCount}); hatched, pale bars: <span class="est">estimates</span> from one backward pass (${measured.length - exactCount}).`);
} else {
  byId("sort").parentElement.style.display = "none";
  byId("abl-note").textContent = "No ablation in this report (--ablation none): run `minigpt heads RUN` without it to measure what each head's removal costs.";
}
function redraw() { drawThumbs(); if (current) drawBig(); drawBars(); }
window.addEventListener("resize", () => { clearTimeout(redraw.t); redraw.t = setTimeout(redraw, 100); });

// ---- header, role counts, legend
byId("source").textContent = DATA.source;
byId("counts").textContent = `${L} layers \u00d7 ${NH} heads \u00b7 scores on ${DATA.text} (${DATA.windows} windows of ${DATA.context}) \u00b7 maps over ${HALF} random ${UNIT}s repeated twice` +
  (DATA.baseLoss != null ? ` \u00b7 loss ${DATA.baseLoss.toFixed(4)} nats with every head` : "");
const counts = {};
HEADS.forEach((x) => { counts[x.role] = (counts[x.role] || 0) + 1; });
byId("roles").innerHTML = Object.keys(ROLE_COLOURS).filter((r) => counts[r]).map((r) => `<span><i style="background:${ROLE_COLOURS[r]}"></i>${r} ${counts[r]}</span>`).join("");
const ceil = (p) => DATA.ceilings[p].toFixed(2);
const ROLE_TEXT = {
  previous: "reads the position just before",
  duplicate: "reads earlier copies of its own token",
  induction: "reads the token after an earlier copy of its own: the repeat's next token",
  first: "rests on position 0",
  local: `no clear pattern, but looks fewer than ${DATA.localDistance} positions back`,
  mixed: "no clear pattern",
};
byId("legend").innerHTML = `<h2>How to read it</h2>` +
  `<p>A score is the share of a head's attention on a pattern's targets: the previous ${UNIT}, earlier copies of the current one ` +
  `(duplicate), the ${UNIT} after an earlier copy of the last two (induction), position 0 (first). The numbers are measured on ${esc(DATA.text)}, ` +
  `averaged over the positions that have a target (${PATTERNS.map((p) => `${SHORT[p]} ${DATA.positions[p].toLocaleString("en")}`).join(", ")}): ` +
  `a perfect head scores 1, a uniform head (its weight spread evenly over the keys) ` +
  PATTERNS.map((p) => `${SHORT[p]} ${DATA.uniform[p].toFixed(2)}`).join(", ") + `. The bars show the evidence: how far a score is ` +
  `from a uniform head's toward a perfect head's.</p>` +
  `<p>The maps are over a probe: ${HALF} random ${UNIT}s (drawn as often as the text uses them), then the same ${HALF} again. A <b>previous-token</b> head is the line just ` +
  `below the diagonal; an <b>induction</b> head is the stripe in the lower left block, ${HALF - 1} positions below the diagonal ` +
  `(each query in the repeat reads the ${UNIT} after its earlier copy); a <b>duplicate</b> head, one column left of it. ` +
  `On the probe (TransformerLens' sum(A\u00b7P) / sum(A)) a perfect head scores previous ${ceil("previous")}, duplicate ${ceil("duplicate")}, induction ${ceil("induction")}, ` +
  `first ${ceil("first")}, a uniform one ` + PATTERNS.map((p) => `${SHORT[p]} ${UNIFORM[p].toFixed(2)}`).join(", ") + `.</p>` +
  `<p>Weight <span class="ramp" style="background:linear-gradient(to right, ${[0, 0.25, 0.5, 0.75, 1].map((v) => rgb(viridis(v), 1)).join(", ")})"></span> ` +
  `0 \u2192 1 (square-root scale).</p>` +
  `<dl>${Object.keys(ROLE_COLOURS).map((r) => `<dt>${roleTag(r)}</dt><dd>${ROLE_TEXT[r]}</dd>`).join("")}</dl>` +
  `<p style="color:var(--muted)">A role needs a pattern's evidence at ${Math.round(100 * DATA.roleMin)}% or more (from the text where it has ${DATA.textPositions} positions with a target, else the probe), ` +
  `${Math.round(100 * DATA.roleMargin)} points ahead of the next pattern.</p>`;
byId("note").textContent = "Click a head (in the grid or the ablation chart) for its pattern large and its numbers; hover the large map for each weight.";

drawBars();
// at first, the head with the clearest pattern
const first = HEADS.reduce((a, b) => (rel(b, strongest(b)) > rel(a, strongest(a)) ? b : a));
select(first.layer, first.head);
