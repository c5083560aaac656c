// The attention explorer. DATA: source, pieces, block, stride, layers, heads (the ones kept),
// nLayer, nHead (the model's), weights: base64 bytes (weight x 255) of each window's lower
// triangle, in the order layer, head, window, row, column (attention.py: WindowedAttention).
const PIECES = DATA.pieces, N = PIECES.length, B = DATA.block, S = DATA.stride;
const L = DATA.layers.length, H = DATA.heads.length;
const W = (() => {
  const bin = atob(DATA.weights), out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
})();
// Windows of B characters start every S; character i is shown from the window where it has the
// most context: the first one for i < B, else the one whose second half it falls in.
const NWIN = N <= B ? 1 : Math.floor((N - 1 - B) / S) + 2;
const winStart = (w) => w * S;
const winLen = (w) => Math.min(B, N - w * S);
const owner = (i) => (i < B ? 0 : Math.floor((i - B) / S) + 1);
const WIN_OFF = [0];
for (let w = 0; w < NWIN; w++) WIN_OFF.push(WIN_OFF[w] + (winLen(w) * (winLen(w) + 1)) / 2);
const TOTAL = WIN_OFF[NWIN];
if (W.length !== L * H * TOTAL) throw new Error("attention data of the wrong size");
const weightAt = (li, hi, w, r, c) => W[(li * H + hi) * TOTAL + WIN_OFF[w] + (r * (r + 1)) / 2 + c] / 255;
// the weight query i gives key j, in the window i is shown from (0 outside it)
function weight(li, hi, i, j) {
  const s = winStart(owner(i));
  return j < s || j > i ? 0 : weightAt(li, hi, owner(i), i - s, j - s);
}
function keysOf(i) { const out = []; for (let j = winStart(owner(i)); j <= i; j++) out.push(j); return out; }
function queriesOf(j) {
  const out = [];
  for (let i = j; i < Math.min(N, j + B); i++) if (winStart(owner(i)) <= j) out.push(i);
  return out;
}

const COLOURS = DATA.heads.map(headColour);

const state = { layer: 0, on: DATA.heads.map(() => true), gridHead: 0, dir: "to", gain: 1,
  focus: Math.min(N - 1, B - 1), pinned: false };
const textEl = byId("text"), spans = buildText(textEl, PIECES), where = lineIndex(PIECES);
const heads = () => DATA.heads.map((_, k) => k).filter((k) => state.on[k]);
const label = (i) => `${quoted(PIECES[i])} <span class="pos">#${i}</span>`;

// the text: each highlighted character's background holds one band per shown head, each as
// strong as that head's weight (times the contrast)
let painted = [];
function background(hs, vals) { return headBands(hs.map((h) => COLOURS[h]), vals, state.gain); }
function pairWeights(other) { // each shown head's weight between the focus and `other`, in the current direction
  const f = state.focus;
  return heads().map((h) => (state.dir === "to" ? weight(state.layer, h, f, other) : weight(state.layer, h, other, f)));
}
function paint() {
  for (const i of painted) { spans[i].style.background = ""; spans[i].classList.remove("hl"); }
  painted = [];
  const hs = heads();
  if (!hs.length) return;
  for (const j of state.dir === "to" ? keysOf(state.focus) : queriesOf(state.focus)) {
    const vals = pairWeights(j);
    if (vals.every((v) => v === 0)) continue;
    spans[j].style.background = background(hs, vals);
    spans[j].classList.add("hl");
    painted.push(j);
  }
}

let winRange = [0, 0], queryEl = null;
function markFocus() {
  if (queryEl) queryEl.classList.remove("q");
  queryEl = spans[state.focus];
  queryEl.classList.add("q");
  const w = owner(state.focus), range = [winStart(w), winStart(w) + winLen(w)];
  if (range[0] !== winRange[0] || range[1] !== winRange[1]) {
    for (let i = winRange[0]; i < winRange[1]; i++) spans[i].classList.remove("win");
    if (NWIN > 1) for (let i = range[0]; i < range[1]; i++) spans[i].classList.add("win");
    winRange = range;
  }
  textEl.classList.toggle("pinned", state.pinned);
}

function focusPanel() {
  const f = state.focus, w = owner(f), s = winStart(w);
  const title = state.dir === "to" ? "looks at" : "is looked at by";
  let html = `<h2>Character ${state.pinned ? "(pinned)" : ""}</h2><div class="who">${label(f)}</div>` +
    `<div class="where">${where(f)} · window ${w + 1} of ${NWIN} (characters ${s}\u2013${s + winLen(w) - 1}) · sees ${f - s} before it</div>` +
    `<div class="where">layer ${DATA.layers[state.layer]}: ${title} (the largest weights per head)</div><table>`;
  const others = state.dir === "to" ? keysOf(f) : queriesOf(f);
  for (const h of heads()) {
    const ranked = others.map((j) => [j, state.dir === "to" ? weight(state.layer, h, f, j) : weight(state.layer, h, j, f)])
      .filter(([, v]) => v >= 0.005).sort((a, b) => b[1] - a[1] || a[0] - b[0]).slice(0, 4);
    const cells = ranked.map(([j, v]) => `<span class="k" data-j="${j}">${esc(quoted(PIECES[j]))}#${j} <b>${v.toFixed(2)}</b></span>`);
    html += `<tr data-head="${DATA.heads[h]}"><td class="h"><span class="chip"><span class="sw" style="background:${rgb(COLOURS[h], 1)}"></span>${DATA.heads[h]}</span></td><td>${cells.join("")}</td></tr>`;
  }
  byId("focus").innerHTML = html + "</table>" + (heads().length ? "" : "<div class='where'>no head shown</div>");
}

// the heat map: the focused character's window, one head, rows = queries, columns = keys
const grid = byId("grid"), gctx = grid.getContext("2d"), SIDE = 240;
let gridKey = "";
function drawGrid() {
  const w = owner(state.focus), T = winLen(w), hi = state.gridHead, key = [w, state.layer, hi, state.gain].join();
  if (key !== gridKey) {
    gridKey = key;
    grid.width = T; grid.height = T;
    const img = gctx.createImageData(T, T);
    for (let r = 0; r < T; r++) for (let c = 0; c < T; c++) {
      const p = (r * T + c) * 4, col = c > r ? [238, 240, 244] : viridis(weightAt(state.layer, hi, w, r, c) * state.gain);
      img.data[p] = col[0]; img.data[p + 1] = col[1]; img.data[p + 2] = col[2]; img.data[p + 3] = 255;
    }
    gctx.putImageData(img, 0, 0);
    byId("gridcaption").innerHTML = `layer ${DATA.layers[state.layer]}, head ${DATA.heads[hi]} · window ${w + 1} of ${NWIN}: ` +
      `characters ${winStart(w)}\u2013${winStart(w) + T - 1}. Row: a character; column: what it looks at. ` +
      `The grey upper triangle is the future, masked.`;
  }
  mark("rowmark", state.focus - winStart(w), null, T);
}
function mark(id, row, col, T) {
  const el = byId(id), cell = SIDE / T;
  if (row === null && col === null) { el.style.display = "none"; return; }
  el.style.display = "block";
  el.style.left = (col === null ? 0 : col * cell) + "px"; el.style.width = (col === null ? SIDE : cell) + 2 + "px";
  el.style.top = (row === null ? 0 : row * cell) + "px"; el.style.height = (row === null ? SIDE : cell) + 2 + "px";
}

function refresh() { markFocus(); paint(); focusPanel(); drawGrid(); }
function setFocus(i, pinned) {
  state.focus = Math.max(0, Math.min(N - 1, i));
  if (pinned !== undefined) state.pinned = pinned;
  refresh();
}

function pairTip(j, x, y) {
  const f = state.focus, [q, k] = state.dir === "to" ? [f, j] : [j, f], vals = pairWeights(j);
  const rows = heads().map((h, n) => `<tr data-head="${DATA.heads[h]}"><td>head ${DATA.heads[h]}</td><td class="num">${vals[n].toFixed(3)}</td>` +
    `<td><span class="bar" style="width:${Math.max(1, Math.round(vals[n] * 80))}px;background:${rgb(COLOURS[h], 1)}"></span></td></tr>`);
  showTip(`<span class="ch">${esc(visible(PIECES[q]))}</span> #${q} looks at <span class="ch">${esc(visible(PIECES[k]))}</span> #${k}` +
    ` · layer ${DATA.layers[state.layer]}<table>${rows.join("")}</table>`, x, y);
}

textEl.addEventListener("mouseover", (e) => {
  const i = e.target._i;
  if (i === undefined) return;
  if (!state.pinned) { hideTip(); if (i !== state.focus) setFocus(i); }
  else pairTip(i, e.clientX, e.clientY);
  const w = owner(state.focus), c = i - winStart(w);
  mark("colmark", null, c >= 0 && c < winLen(w) && state.dir === "to" ? c : null, winLen(w));
});
textEl.addEventListener("mouseleave", () => { hideTip(); mark("colmark", null, null, 1); });
textEl.addEventListener("click", (e) => {
  const i = e.target._i;
  if (i === undefined) return;
  setFocus(i, !(state.pinned && i === state.focus));
  hideTip();
});
grid.addEventListener("mousemove", (e) => {
  const w = owner(state.focus), T = winLen(w), box = grid.getBoundingClientRect();
  const r = Math.floor(((e.clientY - box.top) / box.height) * T), c = Math.floor(((e.clientX - box.left) / box.width) * T);
  if (r < 0 || c < 0 || r >= T || c >= T) return;
  const s = winStart(w), v = c > r ? null : weightAt(state.layer, state.gridHead, w, r, c);
  showTip(`<span class="ch">${esc(visible(PIECES[s + r]))}</span> #${s + r} \u2192 <span class="ch">${esc(visible(PIECES[s + c]))}</span> #${s + c}<br>` +
    (v === null ? "masked: the future" : `head ${DATA.heads[state.gridHead]}: ${v.toFixed(3)} (in window ${w + 1})`), e.clientX, e.clientY);
  mark("colmark", null, c, T);
});
grid.addEventListener("mouseleave", () => { hideTip(); mark("colmark", null, null, 1); });
grid.addEventListener("click", (e) => {
  const w = owner(state.focus), T = winLen(w), box = grid.getBoundingClientRect();
  const r = Math.floor(((e.clientY - box.top) / box.height) * T);
  if (r >= 0 && r < T && owner(winStart(w) + r) === w) setFocus(winStart(w) + r, true);
});
document.addEventListener("keydown", (e) => {
  if (e.target.tagName === "SELECT") return;
  const moves = { ArrowLeft: -1, ArrowRight: 1 };
  if (e.key in moves) {
    setFocus(state.focus + moves[e.key], true);
    spans[state.focus].scrollIntoView({ block: "nearest" });
  } else if (e.key === "Escape") setFocus(state.focus, false);
  else if ((e.key === "ArrowUp" || e.key === "ArrowDown") && L > 1) {
    layerButtons[(state.layer + (e.key === "ArrowUp" ? L - 1 : 1)) % L].click();
  } else return;
  e.preventDefault();
});

// controls
byId("source").textContent = DATA.source;
const layerButtons = segmented(byId("layers"), DATA.layers.map(String), 0, (k) => { state.layer = k; refresh(); });
const chips = DATA.heads.map((h, k) => {
  const chip = document.createElement("span");
  chip.className = "chip";
  chip.dataset.head = h;
  chip.title = "show or hide head " + h;
  chip.innerHTML = `<span class="sw" style="background:${rgb(COLOURS[k], 1)}"></span>head ${h}`;
  chip.addEventListener("click", () => { state.on[k] = !state.on[k]; chip.classList.toggle("off", !state.on[k]); refresh(); });
  byId("heads").appendChild(chip);
  return chip;
});
function setAll(on) { state.on = state.on.map(() => on); chips.forEach((c) => c.classList.toggle("off", !on)); refresh(); }
byId("all").addEventListener("click", () => setAll(true));
byId("none").addEventListener("click", () => setAll(false));
segmented(byId("direction"), ["what it looks at", "what looks at it"], 0, (k) => { state.dir = k ? "from" : "to"; refresh(); });
segmented(byId("contrast"), ["\u00d71", "\u00d72", "\u00d74"], 0, (k) => { state.gain = [1, 2, 4][k]; refresh(); });
const select = byId("gridhead");
DATA.heads.forEach((h, k) => { const o = document.createElement("option"); o.value = k; o.textContent = "head " + h; select.appendChild(o); });
select.addEventListener("change", () => { state.gridHead = Number(select.value); refresh(); });

byId("note").innerHTML = (NWIN === 1
  ? `The text (${num(N)} characters) fits in one window of the model's context (${B}): each character sees all the characters before it. `
  : `The text is ${num(N)} characters, longer than the model's context of ${B}, so it is read in ${NWIN} windows of ${B} that start every ${S} characters ` +
    `(as <span class="mono">minigpt score</span> reads a long text). Each character is shown from the window where it has the most context: ` +
    `between ${B - S} and ${B - 1} characters before it (all of them in the first window). The focused character's window is underlined and is the one in the heat map. `) +
  `Hover a character to see what it attends to, one colour per head, as strong as the weight; click to pin it, then hover the others for the exact weights. ` +
  `<kbd>\u2190</kbd> <kbd>\u2192</kbd> move the pinned character, <kbd>\u2191</kbd> <kbd>\u2193</kbd> change the layer, <kbd>Esc</kbd> unpins. ` +
  `Weights are stored to 1/255; ${L < DATA.nLayer || H < DATA.nHead ? `this page holds ${L} of ${DATA.nLayer} layers and ${H} of ${DATA.nHead} heads.` : `all ${L} layers and ${H} heads are here.`}`;
window.explorer = { state, weight, owner, setFocus };
refresh();
