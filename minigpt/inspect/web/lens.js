// The logit lens. DATA: source, unit, norm, dropped, pieces, ids, layers (names; the last is the
// model's output), bits[l][k - 1] (layer l's surprise at token k, -log2 p), bitsPerChar[l],
// topIds[l][i] / topProbs[l][i] (layer l's likeliest tokens after token i; i = N - 1: after the
// text), labels (id -> how a guess is shown).
const PIECES = DATA.pieces, N = PIECES.length, L = DATA.layers.length, UNIT = DATA.unit === "char" ? "character" : DATA.unit;
const where = lineIndex(PIECES), rowsEl = byId("rows");

byId("source").textContent = DATA.source;
const best = Math.max(...DATA.bitsPerChar);
byId("counts").textContent = `${num(N)} ${UNIT}s, ${L} layers: ${DATA.bitsPerChar[0].toFixed(3)} bits per ${UNIT} ` +
  `from the embeddings, ${DATA.bitsPerChar[L - 1].toFixed(3)} at the output` +
  (DATA.dropped ? ` (the first ${num(N)} ${UNIT}s, the model's context; ${num(DATA.dropped)} more not read)` : "");
byId("legend").innerHTML = "expected&nbsp;" +
  [0, 1, 2, 3, 4, 5, 6, 7, 8].map((b) => `<span class="box b${b}" title="${b}${b === 8 ? " or more" : ""} bits">${b}${b === 8 ? "+" : ""}</span>`).join("") +
  "&nbsp;surprising (bits)";

// one row per layer: its name and bits per character, then the text coloured by its surprise,
// then a last cell for what it guesses comes after the text
const rows = DATA.layers.map((name, l) => {
  const label = document.createElement("div");
  label.className = "name" + (l === L - 1 ? " out" : "");
  label.innerHTML = `<b>${esc(name)}</b><span class="bpc">${DATA.bitsPerChar[l].toFixed(3)} bits/${DATA.unit}</span>` +
    (l === L - 1 ? `<span class="out-tag">= the model's output</span>` : "") +
    `<div class="meter"><span style="width:${(100 * DATA.bitsPerChar[l] / best).toFixed(1)}%"></span></div>`;
  const text = document.createElement("div");
  text.className = "text lens";
  text.dataset.layer = l;
  const spans = buildText(text, PIECES);
  spans[0].classList.add("first");
  for (let k = 1; k < N; k++) spans[k].classList.add("b" + surpriseStep(DATA.bits[l][k - 1]));
  const next = document.createElement("span");
  next.className = "t next";
  next.textContent = "\u2026";
  next._i = N;
  text.appendChild(next);
  spans.push(next);
  rowsEl.append(label, text);
  return spans;
});

function guessTable(l, k) { // layer l's guesses for token k (made after token k - 1)
  const ids = DATA.topIds[l][k - 1], probs = DATA.topProbs[l][k - 1];
  return "<table>" + ids.map((id, n) => `<tr${k < N && id === DATA.ids[k] ? ' class="actual"' : ""}><td><span class="ch">${esc(DATA.labels[id])}</span></td>` +
    `<td class="num">${prob(probs[n])}</td><td><span class="bar" style="width:${Math.max(1, Math.round(probs[n] * 90))}px"></span></td></tr>`).join("") + "</table>";
}
function tipHtml(l, k) {
  const layer = `<b>${esc(DATA.layers[l])}</b>`;
  if (k === N) return `${layer}: what comes after the text?<br>${guessTable(l, k)}`;
  const head = `<span class="ch">${esc(visible(PIECES[k]))}</span> #${k} · ${where(k)} · ${layer}`;
  if (k === 0) return `${head}<br>the first ${UNIT}: nothing before it to predict it from, so it is not scored`;
  const bits = DATA.bits[l][k - 1];
  const missing = DATA.topIds[l][k - 1].includes(DATA.ids[k]) ? "" : `<br>(the ${UNIT} that came is not among them)`;
  return `${head}<br><b>p = ${prob(Math.pow(2, -bits))}</b> · <b>${bits.toFixed(2)} bits</b>` +
    `<div style="margin-top:4px">this layer's top ${DATA.topIds[l][k - 1].length} guesses here:</div>${guessTable(l, k)}${missing}`;
}
function layerOf(e) { const row = e.target.closest(".text.lens"); return row ? Number(row.dataset.layer) : -1; }
rowsEl.addEventListener("mouseover", (e) => { if (e.target._i !== undefined) showTip(tipHtml(layerOf(e), e.target._i), e.clientX, e.clientY); });
rowsEl.addEventListener("mousemove", (e) => { if (e.target._i !== undefined && TIP.style.display === "block") showTip(TIP.innerHTML, e.clientX, e.clientY); });
rowsEl.addEventListener("mouseleave", hideTip);

// the side panel: every layer's guesses at one position, pinned by a click (at first: after the text)
let pinned = -1;
function pin(k) {
  if (pinned >= 0) rows.forEach((spans) => spans[pinned].classList.remove("pin"));
  pinned = k;
  rows.forEach((spans) => spans[k].classList.add("pin"));
  const what = k === N ? `after the text: what comes next?` :
    `<span class="ch">${esc(visible(PIECES[k]))}</span> #${k} · ${where(k)}`;
  const body = k === 0 ? `<div>the first ${UNIT} is not predicted: nothing comes before it</div>` : DATA.layers.map((name, l) => {
    const ids = DATA.topIds[l][k - 1], probs = DATA.topProbs[l][k - 1];
    const bits = k < N ? `<span class="b${surpriseStep(DATA.bits[l][k - 1])}">${DATA.bits[l][k - 1].toFixed(2)} bits</span>` : "";
    const chips = ids.map((id, n) => `<span class="g${k < N && id === DATA.ids[k] ? " actual" : ""}">${esc(DATA.labels[id])} ${prob(probs[n])}</span>`);
    return `<div class="layer" data-layer="${l}"><div class="head"><b>${esc(name)}</b>${bits}</div><div class="guesses">${chips.join("")}</div></div>`;
  }).join("");
  byId("focus-body").innerHTML = `<div class="pos">${what}</div>${body}`;
}
rowsEl.addEventListener("click", (e) => { if (e.target._i !== undefined) pin(e.target._i); });
pin(N);

const normNote = DATA.norm === "post" ? ` This model is post-norm: it has no final LayerNorm, each block already ends in one, so the lens reads the stream as each block leaves it (and the embeddings unnormalised).` : "";
byId("note").innerHTML = `The logit lens: the model's own head (final LayerNorm, unembedding) applied to the residual stream after each block, ` +
  `so each row shows what the model would predict if it stopped there; the last row is the model's real output. ` +
  `Each ${UNIT} is coloured by that layer's surprise at it, one step of colour per bit; hover one for that layer's top guesses, ` +
  `click one for every layer's (green: the ${UNIT} that came). The first ${UNIT} (underlined) is not scored; the dashed \u2026 is what comes after the text.` + normNote;
