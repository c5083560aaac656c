// The playground. DATA (export/playground.py): run, source, step, valLoss, params, model (n_layer,
// n_head, n_embd, block_size, pos_emb, norm, bias, vocab_size, half_window), tokenizer ("char" or
// "byte"), chars, labels (how each id shows as a guess), startId, dtype, tensors, weights (base64).
const CFG = DATA.model, BLOCK = CFG.block_size, HALF = CFG.half_window, NL = CFG.n_layer, NH = CFG.n_head;
const MODEL = new GPT(CFG, decodeNumbers(base64Bytes(DATA.weights), DATA.dtype), DATA.tensors);
DATA.weights = null; // the numbers live in MODEL now: let the string go
const SAMPLER = new Sampler(CFG.vocab_size), LABELS = DATA.labels, TOP = 5;
const MAIN = MODEL.newCache(false), PROBE = MODEL.newCache(true); // generation and typing | clicked characters
const COLOURS = Array.from({ length: NH }, (_, h) => headColour(h));

// the tokenizer: characters (unknown ones dropped, and said so), or UTF-8 bytes shown once a
// character's last byte is out (as the terminal shows a byte model's text)
const CHAR_ID = DATA.chars ? new Map(DATA.chars.map((c, i) => [c, i])) : null;
function encode(text) {
  if (!CHAR_ID) return { ids: Array.from(new TextEncoder().encode(text)), skipped: [] };
  const ids = [], skipped = [];
  for (const c of text) {
    const id = CHAR_ID.get(c);
    if (id === undefined) { if (!skipped.includes(c)) skipped.push(c); } else ids.push(id);
  }
  return { ids, skipped };
}
function streamer() {
  if (CHAR_ID) return (id) => DATA.chars[id];
  const decoder = new TextDecoder("utf-8"), one = new Uint8Array(1);
  return (id) => { one[0] = id; return decoder.decode(one, { stream: true }); };
}

// the document: the prompt's ids, then the generated ones with the model's probability of each and
// its top guesses there. An empty prompt starts from startId, which the text does not show.
const doc = { ids: new Int32Array(0), n: 0, promptLen: 0, hidden: 0, pieces: [], spans: [],
  prob: new Float32Array(0), top: new Int32Array(0), topProb: new Float32Array(0) };
const textEl = byId("text"), promptEl = byId("prompt");
function startDocument(ids, hidden, capacity) {
  Object.assign(doc, { ids: new Int32Array(capacity), n: ids.length, promptLen: ids.length, hidden, pieces: [],
    spans: [], prob: new Float32Array(capacity), top: new Int32Array(capacity * TOP), topProb: new Float32Array(capacity * TOP) });
  doc.ids.set(ids);
  doc.stream = streamer();
  doc.pieces = ids.map((id) => doc.stream(id));
  if (hidden) doc.pieces[0] = "\n";
  clearSelection();
  textEl.textContent = "";
  appendSpans(0, ids.length);
}
function appendSpans(from, to) {
  const spans = buildText(textEl, doc.pieces.slice(from, to));
  for (let k = 0; k < spans.length; k++) {
    const i = from + k, s = spans[k];
    s._i = i;
    if (i < doc.promptLen) s.classList.add("prompt");
    else s.classList.add("gen", "b" + surpriseStep(-Math.log2(doc.prob[i])));
    doc.spans.push(s);
  }
}
function documentText() { return doc.pieces.slice(doc.hidden).join(""); }

// generation: infer/decode.generate_steps with one row, token by token, in slices of ~40 ms
// between which the page draws and reads the Stop button
const run = { active: false, stop: false, chars: 0, ms: 0, prefillMs: 0 };
const channel = new MessageChannel(), waiting = [];
channel.port1.onmessage = () => waiting.shift()();
const nextTask = () => new Promise((resolve) => { waiting.push(resolve); channel.port2.postMessage(0); });

function options() {
  const num = (id, fallback) => { const v = Number(byId(id).value); return Number.isFinite(v) ? v : fallback; };
  return { temperature: Math.max(0, num("temperature", 0.8)), topK: Math.max(0, Math.floor(num("topk", 0))),
    topP: Math.min(1, Math.max(0, num("topp", 1))), length: Math.max(1, Math.floor(num("length", 500))),
    seed: Math.floor(num("seed", 1337)) };
}

async function generate() {
  if (run.active) return "";
  clearTimeout(typing); // a pending update for the typed prompt is done now, before the prompt is read
  updateNext();
  const o = options(), { ids, skipped } = encode(promptEl.value), hidden = ids.length ? 0 : 1;
  startDocument(ids.length ? ids : [DATA.startId], hidden, Math.max(1, ids.length) + o.length);
  Object.assign(run, { active: true, stop: false, chars: 0, ms: 0 });
  setButtons();
  const t0 = performance.now(), random = seededRandom(o.seed), seq = doc.ids;
  let n = doc.n, made = 0;
  MODEL.sync(MAIN, seq.subarray(Math.max(0, n - BLOCK), n));
  run.prefillMs = performance.now() - t0;
  while (made < o.length && !run.stop) {
    const until = performance.now() + 40, from = n;
    while (made < o.length && performance.now() < until) {
      const tid = SAMPLER.pick(MAIN.logits, o.temperature, o.topK, o.topP, random);
      seq[n] = tid;
      doc.prob[n] = SAMPLER.probs[tid];
      for (let r = 0; r < TOP; r++) { doc.top[n * TOP + r] = SAMPLER.order[r]; doc.topProb[n * TOP + r] = SAMPLER.probs[SAMPLER.order[r]]; }
      doc.pieces.push(doc.stream(tid));
      n++; made++;
      if (made === o.length) break;
      if (MAIN.len >= BLOCK) MODEL.sync(MAIN, seq.subarray(n - HALF, n)); // full: slide to the last half window
      else MODEL.step(MAIN, tid, true);
    }
    doc.n = n;
    const following = textEl.scrollTop + textEl.clientHeight >= textEl.scrollHeight - 60; // at the end: stay there
    appendSpans(from, n);
    if (following) textEl.scrollTop = textEl.scrollHeight;
    Object.assign(run, { chars: made, ms: performance.now() - t0 });
    showStatus(skipped);
    await nextTask();
  }
  run.active = false;
  setButtons();
  showStatus(skipped);
  return documentText();
}

function showStatus(skipped) {
  const rate = run.ms > 0 ? Math.round((run.chars * 1000) / run.ms) : 0;
  const note = skipped.length ? ` · the prompt's ${skipped.map(quoted).join(" ")} ${skipped.length > 1 ? "are" : "is"} not in the vocabulary: skipped` : "";
  byId("status").textContent = `${num(run.chars)} characters in ${(run.ms / 1000).toFixed(2)} s (${num(rate)}/s)${run.active ? "\u2026" : ""}${note}`;
}
function setButtons() { byId("generate").disabled = run.active; byId("stop").disabled = !run.active; }
function stop() { run.stop = true; }

// the model's top 10 next characters after the prompt, updated as it is typed (the cache keeps
// the positions whose characters did not change, so a keystroke costs one position or a few)
const next = { text: null, rows: [] };
function updateNext() {
  if (promptEl.value === next.text) return;
  next.text = promptEl.value;
  const { ids } = encode(next.text), ctx = ids.length ? ids : [DATA.startId];
  MODEL.sync(MAIN, ctx.slice(-BLOCK));
  SAMPLER.rank(MAIN.logits);
  next.rows = Array.from(SAMPLER.order.subarray(0, Math.min(10, CFG.vocab_size)), (id) => ({ id, label: LABELS[id], p: SAMPLER.probs[id] }));
  byId("bars").innerHTML = next.rows.map((r) => `<div class="row"><span class="ch">${esc(r.label)}</span>` +
    `<span class="bar" style="width:${Math.max(1, Math.round(r.p * 180))}px"></span><span class="p">${prob(r.p)}</span></div>`).join("");
}
// a keystroke that changes many positions (a prompt past the context shifts them all) waits for a
// pause in the typing: on a big model each position costs tens of milliseconds
let typing = 0;
function positionsToRead(text) {
  const ids = encode(text).ids.slice(-BLOCK);
  let p = 0;
  while (p < MAIN.len && p < ids.length && MAIN.ids[p] === ids[p]) p++;
  return ids.length - p;
}
promptEl.addEventListener("input", () => {
  stop();
  clearTimeout(typing);
  const wait = positionsToRead(promptEl.value) > 16 ? 300 : 0;
  typing = setTimeout(() => { updateNext(); if (!run.active) newPromptDocument(); }, wait);
});
function newPromptDocument() {
  const { ids } = encode(promptEl.value);
  startDocument(ids.length ? ids : [DATA.startId], ids.length ? 0 : 1, Math.max(1, ids.length));
}

// hovering a generated character: its probability and the model's top guesses there
function tipHtml(i) {
  const head = `<span class="ch">${esc(visible(doc.pieces[i]))}</span> #${i - doc.hidden}`;
  if (i < doc.hidden) return `${head}<br>the start: an empty prompt begins at a line break`;
  if (i < doc.promptLen) return `${head} · prompt<br>click to see what it attends to`;
  const p = doc.prob[i], rows = [];
  for (let r = 0; r < Math.min(TOP, CFG.vocab_size); r++) {
    const id = doc.top[i * TOP + r], q = doc.topProb[i * TOP + r];
    rows.push(`<tr${id === doc.ids[i] ? ' class="actual"' : ""}><td><span class="ch">${esc(LABELS[id])}</span></td>` +
      `<td class="num">${prob(q)}</td><td><span class="bar" style="width:${Math.max(1, Math.round(q * 90))}px"></span></td></tr>`);
  }
  return `${head}<br><b>p = ${prob(p)}</b> · <b>${(-Math.log2(p)).toFixed(2)} bits</b>` +
    `<div style="margin-top:4px">the model's top ${rows.length} guesses here (as drawn: after the temperature, top-k and top-p; ` +
    `Explain shows them before and after):</div><table>${rows.join("")}</table>`;
}
textEl.addEventListener("mouseover", (e) => { if (e.target._i !== undefined) showTip(tipHtml(e.target._i), e.clientX, e.clientY); });
textEl.addEventListener("mouseleave", hideTip);
textEl.addEventListener("click", (e) => { if (e.target._i !== undefined) { hideTip(); select(e.target._i); } });

// clicking a character: every layer's and head's attention from it to the characters before it,
// read as `minigpt attention` reads a text: the window of block_size characters where it has the
// most context (the first window for the first block_size, then windows every half block)
const ATTENTION_HINT = byId("attn").innerHTML;
const sel = { index: -1, start: 0, keys: 0, weights: null, layer: 0 };
const windowStart = (i) => (i < BLOCK ? 0 : (Math.floor((i - BLOCK) / HALF) + 1) * HALF);
const weightOf = (l, h, j) => sel.weights[(l * NH + h) * sel.keys + j - sel.start];
function select(i) {
  if (i < 0 || i >= doc.n) return;
  const s = windowStart(i), keys = i - s + 1;
  MODEL.sync(PROBE, doc.ids.subarray(s, i + 1));
  const w = new Float32Array(NL * NH * keys);
  for (let r = 0; r < NL * NH; r++) w.set(PROBE.attention.subarray(r * BLOCK, r * BLOCK + keys), r * keys);
  if (sel.index >= 0 && doc.spans[sel.index]) doc.spans[sel.index].classList.remove("sel");
  Object.assign(sel, { index: i, start: s, keys, weights: w });
  doc.spans[i].classList.add("sel");
  drawAttention();
}
let painted = [];
function clearSelection() {
  for (const j of painted) if (doc.spans[j]) doc.spans[j].style.background = "";
  painted = [];
  if (sel.index >= 0 && doc.spans[sel.index]) doc.spans[sel.index].classList.remove("sel");
  Object.assign(sel, { index: -1, weights: null });
  byId("attn").innerHTML = ATTENTION_HINT;
}
const label = (j) => `${esc(quoted(doc.pieces[j]))}<span class="pos">${j < doc.hidden ? " (the start)" : "#" + (j - doc.hidden)}</span>`;
function drawAttention() {
  for (const j of painted) doc.spans[j].style.background = "";
  painted = [];
  const i = sel.index, l = sel.layer;
  for (let j = sel.start; j <= i; j++) { // the text: one band per head, as strong as its weight (the explorer's drawing)
    doc.spans[j].style.background = headBands(COLOURS, COLOURS.map((_, h) => weightOf(l, h, j)), 1);
    painted.push(j);
  }
  const rows = COLOURS.map((c, h) => {
    const ranked = [];
    for (let j = sel.start; j <= i; j++) if (weightOf(l, h, j) >= 0.005) ranked.push([j, weightOf(l, h, j)]);
    ranked.sort((a, b) => b[1] - a[1] || a[0] - b[0]);
    const cells = ranked.slice(0, 4).map(([j, v]) => `<span class="k">${label(j)} <b>${v.toFixed(2)}</b></span>`);
    return `<tr><td><span class="chip"><span class="sw" style="background:${rgb(c, 1)}"></span>${h}</span></td><td>${cells.join("")}</td></tr>`;
  });
  const panel = byId("attn");
  panel.innerHTML = `<h2>Attention of</h2><div class="who">${label(i)}</div>` +
    (i < doc.hidden ? `<div class="where">the first position: it sees only itself</div>` :
    `<div class="where">sees ${sel.start < doc.hidden ? "the start and " : ""}characters #${Math.max(0, sel.start - doc.hidden)}\u2013#${i - doc.hidden} (${sel.keys} of a context of ${BLOCK})</div>`) +
    `<div class="group"><span class="label">Layer</span><span class="seg" id="layers"></span></div>` +
    `<div class="where">layer ${l}: what it looks at (the largest weights per head)</div><table>${rows.join("")}</table>` +
    `<canvas id="strips"></canvas><div class="where">every layer (rows of heads) over the characters it sees (columns); click a row for its layer</div>`;
  segmented(byId("layers"), Array.from({ length: NL }, (_, k) => String(k)), l, (k) => { sel.layer = k; drawAttention(); });
  drawStrips();
}
// all layers and heads at once: one row per (layer, head), one column per key, in viridis
const LABEL_W = 38, ROW_H = 11;
function drawStrips() {
  const canvas = byId("strips"), K = sel.keys, width = 300, cell = (width - LABEL_W) / K;
  canvas.width = width; canvas.height = NL * NH * ROW_H + NL - 1;
  canvas.style.height = canvas.height + "px";
  const g = canvas.getContext("2d");
  g.font = "9px sans-serif"; g.textBaseline = "middle";
  for (let l = 0; l < NL; l++) for (let h = 0; h < NH; h++) {
    const y = (l * NH + h) * ROW_H + l;
    g.fillStyle = l === sel.layer ? "#1d2330" : "#8a94a3";
    g.fillText(`L${l} h${h}`, 2, y + ROW_H / 2);
    g.fillStyle = rgb(COLOURS[h], 1); g.fillRect(LABEL_W - 5, y + 1, 3, ROW_H - 2);
    for (let j = 0; j < K; j++) {
      const c = viridis(sel.weights[(l * NH + h) * K + j]);
      g.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`;
      g.fillRect(LABEL_W + j * cell, y, Math.max(1, cell), ROW_H - 1);
    }
  }
  const at = (e) => {
    const box = canvas.getBoundingClientRect(), x = e.clientX - box.left, y = e.clientY - box.top;
    const r = Math.floor(y / (ROW_H + 1 / NH)), l = Math.floor(r / NH), h = r % NH, j = Math.floor((x - LABEL_W) / cell);
    return l >= 0 && l < NL ? { l, h, j: x >= LABEL_W && j < K ? j : -1 } : null;
  };
  canvas.onmousemove = (e) => {
    const p = at(e);
    if (!p || p.j < 0) { hideTip(); return; }
    const k = sel.start + p.j;
    showTip(`${label(sel.index)} looks at ${label(k)}<br>layer ${p.l}, head ${p.h}: ${sel.weights[(p.l * NH + p.h) * K + p.j].toFixed(4)}`, e.clientX, e.clientY);
  };
  canvas.onmouseleave = hideTip;
  canvas.onclick = (e) => { const p = at(e); if (p) { sel.layer = p.l; drawAttention(); } };
}

// the explanation of one prediction (explain.js): the forward pass at the selected character (else
// the last), in the window the attention panel shows, with the sampler's settings
const EXPLAINER = new Explainer(DATA, MODEL, byId("explain"));
function explain(i = sel.index >= 0 ? sel.index : doc.n - 1) {
  if (i < 0 || i >= doc.n) return;
  if (sel.index !== i) select(i);
  const s = windowStart(i), next = i + 1 < doc.n ? doc.ids[i + 1] : -1;
  EXPLAINER.show(Array.from(doc.ids.subarray(s, i + 1)), doc.pieces.slice(s, i + 1), s - doc.hidden, options(), next);
}
const explaining = () => !byId("explain").hidden;
byId("explainbtn").addEventListener("click", () => { explain(); byId("explain").scrollIntoView({ block: "start" }); });
byId("ex-prev").addEventListener("click", () => explain(Math.max(0, sel.index - 1)));
byId("ex-next").addEventListener("click", () => explain(Math.min(doc.n - 1, sel.index + 1)));
byId("ex-close").addEventListener("click", () => { byId("explain").hidden = true; textEl.focus(); });
promptEl.addEventListener("input", () => { // the explanation is of the text as it was: say so
  if (explaining()) byId("ex-where").textContent = "the prompt changed: press Explain (or E in the text) to explain the new text";
});
for (const id of ["temperature", "topk", "topp", "seed"]) {
  byId(id).addEventListener("change", () => { if (explaining()) { EXPLAINER.state.settings = options(); EXPLAINER.draw(); } });
}

// the keyboard: Ctrl+Enter generates, Esc stops (or lets go of the character), and in the text
// the arrows move the clicked character (left, right) and change the layer (up, down), E explains it
promptEl.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); generate(); }
});
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape") { if (run.active) stop(); else { clearSelection(); } return; }
  if (e.target !== textEl || !doc.n) return;
  const moves = { ArrowLeft: -1, ArrowRight: 1 };
  if (e.key in moves) {
    select(Math.max(0, Math.min(doc.n - 1, (sel.index < 0 ? doc.n : sel.index) + moves[e.key])));
    if (explaining()) explain();
  }
  else if (e.key === "Home") select(0);
  else if (e.key === "End") select(doc.n - 1);
  else if (e.key === "e" || e.key === "E") explain();
  else if ((e.key === "ArrowUp" || e.key === "ArrowDown") && sel.index >= 0) {
    sel.layer = (sel.layer + (e.key === "ArrowUp" ? NL - 1 : 1)) % NL;
    drawAttention();
    if (explaining()) { EXPLAINER.state.layer = sel.layer; EXPLAINER.draw(); } // one layer for both views
  } else return;
  e.preventDefault();
  if (sel.index >= 0) doc.spans[sel.index].scrollIntoView({ block: "nearest" });
});
byId("generate").addEventListener("click", () => generate());
byId("stop").addEventListener("click", stop);

// the header, the legend, the note
const shape = `${NL} layers \u00d7 ${NH} heads \u00d7 ${CFG.n_embd}, context ${BLOCK}, ${CFG.pos_emb} positions, ` +
  `${CFG.norm}-LN${CFG.bias ? ", biases" : ""}, ${DATA.tokenizer === "byte" ? "bytes" : `${CFG.vocab_size} characters`}`;
byId("run").textContent = DATA.run;
byId("source").textContent = `step ${num(DATA.step)}` + (DATA.valLoss === null ? "" : ` \u00b7 val est ${DATA.valLoss.toFixed(4)} (its fixed batches)`) +
  ` \u00b7 ${shape} \u00b7 ${(DATA.params / 1e6).toFixed(2)}M parameters in ${DATA.dtype} \u00b7 ${DATA.source}`;
byId("legend").innerHTML = "generated characters: expected&nbsp;" +
  [0, 1, 2, 3, 4, 5, 6, 7, 8].map((b) => `<span class="box b${b}" title="${b}${b === 8 ? " or more" : ""} bits">${b}${b === 8 ? "+" : ""}</span>`).join("") +
  "&nbsp;surprising (bits)";
byId("note").innerHTML = `The model runs in this page, offline: its weights are in the file and a JavaScript copy of minigpt's GPT ` +
  `reads them (${DATA.tokenizer === "byte" ? "a byte model: a character shows once its UTF-8 bytes are complete" : "one character per step"}). ` +
  `Generation follows <span class="mono">minigpt sample</span>: a KV cache, and past the context of ${BLOCK} the window slides to its last ${HALF} characters; ` +
  `temperature 0 is greedy, top-k 0 and top-p 1 keep every character, and a seed gives the same text again (in this page; its random numbers are not torch's). ` +
  `Each generated character is coloured by the probability the model gave it, one step per bit; hover it for the model's top guesses. ` +
  `<kbd>Ctrl</kbd>+<kbd>Enter</kbd> generates, <kbd>Esc</kbd> stops; in the text, <kbd>\u2190</kbd> <kbd>\u2192</kbd> move the character whose attention is shown, ` +
  `<kbd>\u2191</kbd> <kbd>\u2193</kbd> change the layer, <kbd>E</kbd> explains the prediction there, step by step ` +
  `(the text is the box under the prompt: click a character there, or Tab to it).`;

// for tests and scripts: the model's logits over a text, the document, the selection
window.playground = {
  ready: true, model: MODEL, run, sel, next, encode, generate, stop, select, explain, explainer: EXPLAINER,
  text: documentText,
  ids: () => Array.from(doc.ids.subarray(doc.hidden, doc.n)),
  hidden: () => doc.hidden,
  logits(text) { // every position's logits (T x V, flat) over the text's first block_size tokens
    const ids = encode(text).ids.slice(0, BLOCK), out = [];
    PROBE.len = 0;
    for (const id of ids) { MODEL.step(PROBE, id, true); out.push(...PROBE.logits); }
    return out;
  },
  attention: () => (sel.weights ? { index: sel.index - doc.hidden, start: sel.start - doc.hidden, keys: sel.keys, weights: Array.from(sel.weights) } : null),
};
newPromptDocument();
updateNext();
if (DATA.explain) { // `minigpt explain`: the page opens on its text and position
  promptEl.value = DATA.explain.text;
  updateNext();
  newPromptDocument();
  explain(DATA.explain.at + doc.hidden);
  byId("explain").scrollIntoView({ block: "start" }); // the page opens on what it was made for
}
