// One prediction, every step (docs/model.md): the forward pass that predicts the character after
// one position, stage by stage, with the tutorial's names, one-line formulas, this model's shapes and
// the numbers themselves. The numbers come from gpt.js's own forward pass, watched through its
// trace (no second copy of the model); only what a tutorial computes beside it (LayerNorm's mean and
// variance, every query's scores and softmax, the sampler's distributions) is computed here.

// the forward pass over one window `ids` (positions 0..T-1) watched: every number at the last
// position, and each position's queries (the keys and values are the cache's)
function traceWindow(model, ids) {
  const T = ids.length, C = model.C;
  const cache = model.newCache(false), q = new Float32Array(model.L * T * C), at = {};
  model.forward(cache, ids, true, (name, l, v, h) => {
    if (name === "qkv_rows") for (let t = 0; t < T; t++) q.set(v.subarray(t * 3 * C, t * 3 * C + C), (l * T + t) * C);
    else at[h === undefined ? `${name}.${l}` : `${name}.${l}.${h}`] = Float32Array.from(v);
  });
  return { T, at, q, k: cache.k, v: cache.v };
}

// mean, variance (biased, as LayerNorm) and the normalised vector of x
function normalised(x) {
  const n = x.length;
  let mean = 0;
  for (let i = 0; i < n; i++) mean += x[i];
  mean /= n;
  let v = 0;
  for (let i = 0; i < n; i++) v += (x[i] - mean) ** 2;
  v /= n;
  const inv = 1 / Math.sqrt(v + 1e-5), xhat = new Float32Array(n);
  for (let i = 0; i < n; i++) xhat[i] = (x[i] - mean) * inv;
  return { mean, variance: v, xhat };
}

// a diverging colour for v in [-1, 1]: blue (negative), white (0), red (positive)
function diverging(v) {
  const a = Math.max(-1, Math.min(1, v));
  const far = a < 0 ? [49, 99, 185] : [200, 55, 45], t = Math.sqrt(Math.abs(a));
  return [0, 1, 2].map((n) => Math.round(255 + (far[n] - 255) * t));
}
const MASKED = [217, 221, 228]; // a masked (future) cell's grey
const fmt = (x) => (x === -Infinity ? "-inf" : x.toFixed(5));

class Explainer {
  // data: the page's DATA (model, labels, code places); model: the GPT of gpt.js; root: the element
  constructor(data, model, root) {
    Object.assign(this, { data, model, root, cfg: data.model, labels: data.labels, sampler: new Sampler(model.V) });
    this.state = { layer: 0, head: 0, numbers: false, ids: null, pieces: null, offset: 0 };
    this.code = data.code; // [{stage, tutorial, name, file, line, lesson}]: the code's places, found when the page was built
  }

  // explain the prediction after ids[last] (ids: the window; pieces: how each shows; offset: the
  // first one's index in the text; settings: temperature, topK, topP, seed; next: the true next id or -1)
  show(ids, pieces, offset, settings, next) {
    const t0 = performance.now();
    Object.assign(this.state, { ids, pieces, offset, settings, next });
    this.trace = traceWindow(this.model, ids);
    this.traceMs = performance.now() - t0;
    this.draw();
  }

  // the limits: the options this page computes but does not draw step by step
  limits() {
    const c = this.cfg, out = [];
    if (c.qk_norm) out.push("qk_norm (queries and keys are shown after it)");
    if (c.value_embeds) out.push("value_embeds (values are shown with them added)");
    if (c.logit_softcap > 0) out.push("logit_softcap (logits are shown after it)");
    if (c.attn_only) out.push("attn_only (no feed-forward stage)");
    return out.length ? `Not shown step by step: ${out.join("; ")}. Every other stage is.` : "";
  }

  draw() {
    const s = this.state, m = this.model;
    s.layer = Math.min(s.layer, m.L - 1);
    s.head = Math.min(s.head, m.nh - 1);
    this.root.classList.toggle("numbers", s.numbers);
    this.root.hidden = false;
    // the pickers are made once: a redraw (a setting's change event, fired as focus leaves it for a
    // picker) must not replace the button being clicked
    if (!this.pickers) {
      const redraw = (key) => (k) => { s[key] = k; this.draw(); };
      this.pickers = {
        layer: segmented(byId("ex-layers"), Array.from({ length: m.L }, (_, k) => String(k)), s.layer, redraw("layer")),
        head: segmented(byId("ex-heads"), Array.from({ length: m.nh }, (_, k) => String(k)), s.head, redraw("head")),
      };
      segmented(byId("ex-view"), ["grids", "numbers"], 0, (k) => { s.numbers = k === 1; this.root.classList.toggle("numbers", s.numbers); });
    }
    for (const key of ["layer", "head"]) this.pickers[key].forEach((b, k) => b.classList.toggle("on", k === s[key]));
    byId("ex-limits").textContent = this.limits();
    const stages = byId("ex-stages");
    stages.textContent = "";
    for (const stage of [this.ids(), this.embedding(), this.layerNorm(), this.head(), this.heads(), this.mlp(), this.output()]) {
      stages.appendChild(stage);
    }
    byId("ex-where").textContent = `predicting the character after ${this.rowOf(s.ids.length - 1)} ` +
      `(a window of ${s.ids.length} of ${this.cfg.block_size}): traced in ${this.traceMs.toFixed(0)} ms, ` +
      `the matrix products in ${this.model.kernel === null ? "JavaScript" : "WebAssembly SIMD"}`;
  }

  // one stage: its number, the tutorial's name, formula, shapes, code place and lesson, then figures
  stage(n, title, formula, shapes, figures, note = "") {
    const sec = document.createElement("section");
    sec.className = "stage";
    sec.dataset.stage = n;
    sec.id = `stage-${n}`;
    const code = this.code.filter((c) => c.stage === n).map((c) => `<div>${esc(c.tutorial)}: <span class="mono">${esc(c.file)}:${c.line}</span> ` +
      `${esc(c.name)} \u00b7 ${esc(c.lesson)}</div>`).join("");
    sec.innerHTML = `<h3><span class="n">${n}</span> ${esc(title)}</h3><div class="formula">${formula}</div>` +
      `<div class="shapes">${shapes}</div><div class="code">${code}</div>${note ? `<div class="limit">${note}</div>` : ""}`;
    const figs = document.createElement("div");
    figs.className = "figs";
    for (const f of figures) figs.appendChild(f);
    sec.appendChild(figs);
    return sec;
  }

  // a figure: a value-coloured grid (rows x cols, row-major values; a single row wraps) with the
  // number on hover, and its numbers as text for the "numbers" view. name: what a test reads
  grid(name, caption, values, rows, cols, opt = {}) {
    const fig = document.createElement("figure");
    fig.className = "fig";
    const finite = Array.from(values).filter(Number.isFinite), scale = Math.max(1e-12, ...finite.map(Math.abs));
    // a long vector wraps into lines of at most 64, as even as they can be (65 is 33 + 32, not 64 + 1)
    const wrap = rows === 1 && cols > 64 ? Math.ceil(cols / Math.ceil(cols / 64)) : cols, lines = rows === 1 ? Math.ceil(cols / wrap) : rows;
    const cell = Math.max(3, Math.min(opt.cell || 18, Math.floor(520 / wrap), Math.floor(600 / lines)));
    // the characters beside the rows (and above the columns) when the cells are big enough to read them
    const ox = opt.rowText && cell >= 10 ? 22 : 0, oy = opt.colText && cell >= 10 ? 16 : 0;
    const canvas = document.createElement("canvas");
    canvas.width = ox + wrap * cell;
    canvas.height = oy + lines * cell;
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", `${caption}: ${rows} by ${cols} numbers (the numbers view lists them)`);
    const g = canvas.getContext("2d");
    g.font = `${Math.min(11, cell)}px ui-monospace, 'DejaVu Sans Mono', monospace`;
    g.textAlign = "center";
    g.textBaseline = "middle";
    g.fillStyle = "#5f6b7a";
    if (ox) for (let r = 0; r < rows; r++) g.fillText(opt.rowText[r], ox / 2, oy + (r + 0.5) * cell);
    if (oy) for (let c = 0; c < cols; c++) g.fillText(opt.colText[c], ox + (c + 0.5) * cell, oy / 2);
    // one pixel a cell, then scaled up without smoothing: a 256 x 256 grid is one image, not 65,536
    // rectangles each with its colour parsed from a string (a third of the time to explain a position)
    const img = new ImageData(wrap, lines), px = img.data;
    for (let i = 0; i < values.length; i++) {
      const r = rows === 1 ? Math.floor(i / wrap) : Math.floor(i / cols), c = rows === 1 ? i % wrap : i % cols, v = values[i];
      const k = v === -Infinity || (opt.future && c > r) ? MASKED : opt.positive ? viridis(v / scale) : diverging(v / scale);
      const at = 4 * (r * wrap + c);
      px[at] = k[0];
      px[at + 1] = k[1];
      px[at + 2] = k[2];
      px[at + 3] = 255;
    }
    const cells = document.createElement("canvas");
    cells.width = wrap;
    cells.height = lines;
    cells.getContext("2d").putImageData(img, 0, 0);
    g.imageSmoothingEnabled = false;
    g.drawImage(cells, ox, oy, wrap * cell, lines * cell);
    const rowLabel = opt.rowLabel || ((r) => (rows === 1 ? "" : `row ${r}`)), colLabel = opt.colLabel || ((c) => `channel ${c}`);
    canvas.onmousemove = (e) => {
      const b = canvas.getBoundingClientRect(), c = Math.floor((e.clientX - b.left - ox) / cell), r = Math.floor((e.clientY - b.top - oy) / cell);
      const i = rows === 1 ? r * wrap + c : r * cols + c;
      if (c < 0 || c >= wrap || r < 0 || r >= lines || i >= values.length) { hideTip(); return; }
      const row = rows === 1 ? 0 : r, col = rows === 1 ? i : c;
      showTip(`${esc(caption)}<br>${esc(rowLabel(row))} ${esc(colLabel(col))}: <b>${fmt(values[i])}</b>`, e.clientX, e.clientY);
    };
    canvas.onmouseleave = hideTip;
    const pre = document.createElement("pre");
    pre.className = "nums";
    pre.dataset.name = name;
    const lines2 = [];
    for (let r = 0; r < rows; r++) {
      const row = Array.from(values.subarray(r * cols, (r + 1) * cols), fmt).join(" ");
      lines2.push(rows > 1 ? `${rowLabel(r)}: ${row}` : row);
    }
    pre.textContent = lines2.join("\n");
    const dims = rows === 1 ? cols : `${rows} \u00d7 ${cols}`, range = opt.positive ? `0 to ${scale.toPrecision(3)}` : `\u00b1${scale.toPrecision(3)}`;
    fig.innerHTML = `<figcaption>${esc(caption)} <span class="dim">(${dims}; colours ${range})</span></figcaption>`;
    fig.append(canvas, pre);
    return fig;
  }

  scalar(name, caption, value) {
    const fig = document.createElement("figure");
    fig.className = "fig scalar";
    fig.innerHTML = `<figcaption>${esc(caption)}</figcaption><div class="val nums-always" data-name="${name}">${fmt(value)}</div>`;
    return fig;
  }

  rowOf(r) { // an empty prompt starts at a line break the text does not show: offset -1
    const p = this.state.offset + r;
    return `${quoted(this.state.pieces[r])} ${p < 0 ? "(the start)" : "#" + p}`;
  }
  at(name, l = this.state.layer, h) { return this.trace.at[h === undefined ? `${name}.${l}` : `${name}.${l}.${h}`]; }

  ids() {
    const s = this.state, T = s.ids.length;
    const fig = document.createElement("figure");
    fig.className = "fig";
    fig.innerHTML = `<figcaption>the window, one id a ${this.data.tokenizer === "byte" ? "byte" : "character"}</figcaption>` +
      `<div class="idrow">${s.ids.map((id, r) => `<span class="idc${r === T - 1 ? " last" : ""}"><span class="ch">${esc(visible(s.pieces[r]))}</span><span class="id">${id}</span></span>`).join("")}</div>` +
      `<pre class="nums" data-name="ids">${s.ids.join(" ")}</pre>`;
    const byte = this.data.tokenizer === "byte" ? "UTF-8 bytes: 256 ids, one a byte" : `${this.cfg.vocab_size} characters, sorted: id = its place`;
    return this.stage(1, "Characters to ids (tokenization)", "ids = [vocab.index(c) for c in text]",
      `T = ${T} positions (context ${this.cfg.block_size}); vocabulary V = ${this.cfg.vocab_size} (${byte})`, [fig]);
  }

  embedding() {
    const m = this.model, s = this.state, T = s.ids.length, p = T - 1, id = s.ids[p], C = m.C, kind = this.cfg.pos_emb;
    const tok = m.wte.subarray(id * C, (id + 1) * C), figs = [this.grid("tok", `token embedding wte[${id}] (${quoted(s.pieces[p])})`, tok, 1, C)];
    let formula = "x = wte[id] + wpe[t]", note = "";
    if (kind === "learned") figs.push(this.grid("pos", `learned position wpe[${p}]`, m.wpe.subarray(p * C, (p + 1) * C), 1, C));
    if (kind === "sinusoidal") {
      formula = "x = wte[id] + 0.02\u221a2 \u00b7 PE[t], &nbsp; PE[t, 2i] = sin(t / 10000<sup>2i/C</sup>), PE[t, 2i+1] = cos(t / 10000<sup>2i/C</sup>)";
      figs.push(this.grid("pos", `sinusoidal position 0.02\u221a2 \u00b7 PE[${p}]`, m.posTable.subarray(p * C, (p + 1) * C), 1, C));
    }
    if (kind === "rope") {
      const hs = m.hs, angles = new Float32Array(hs / 2);
      for (let i = 0; i < hs / 2; i++) angles[i] = Math.fround(p * Math.fround(10000 ** Math.fround(-Math.fround(2 * i) / hs)));
      formula = "x = wte[id]; &nbsp; rotary: q and k of position t turned by angles \u03b8<sub>i</sub> = t \u00b7 10000<sup>\u22122i/hs</sup> (stage 4)";
      figs.push(this.grid("rope_angles", `rotary angles of position ${p} (radians, one per channel pair i, i + hs/2)`, angles, 1, hs / 2, { colLabel: (i) => `pair ${i}` }));
      const pair = { colLabel: (i) => `pair ${i}` };
      figs.push(this.grid("rope_cos", "cos \u03b8", angles.map(Math.cos), 1, hs / 2, pair), this.grid("rope_sin", "sin \u03b8", angles.map(Math.sin), 1, hs / 2, pair));
      note = "rotary positions add nothing to the stream: they rotate each head's queries and keys inside attention";
    }
    figs.push(this.grid("embed", "the stream entering block 0", this.at("embed", -1), 1, C));
    const shapes = `wte (V, C) = (${this.cfg.vocab_size}, ${C}); one row (C,) = (${C},)` + (kind === "learned" ? `; wpe (context, C) = (${this.cfg.block_size}, ${C})` : "");
    return this.stage(2, `Token embedding and ${kind === "rope" ? "rotary" : kind} positions`, formula, shapes, figs, note);
  }

  lnFigures(prefix, x, gain, bias, out, input = "its input x") {
    const C = this.model.C, { mean, variance, xhat } = normalised(x);
    const figs = [this.grid(`${prefix}.x`, input, x, 1, C), this.scalar(`${prefix}.mean`, "mean \u03bc", mean),
      this.scalar(`${prefix}.var`, "variance \u03c3\u00b2", variance), this.grid(`${prefix}.xhat`, "(x \u2212 \u03bc) / \u221a(\u03c3\u00b2 + 1e-5)", xhat, 1, C),
      this.grid(`${prefix}.gain`, "gain \u03b3 (weight)", gain, 1, C)];
    if (bias) figs.push(this.grid(`${prefix}.bias`, "bias \u03b2", bias, 1, C));
    figs.push(this.grid(`${prefix}.out`, "its output", out, 1, C));
    return figs;
  }

  layerNorm() {
    const l = this.state.layer, P = this.model.layers[l], pre = this.model.pre;
    const x = pre ? this.at("in") : this.at("mid");
    const from = l === 0 ? "the stream entering block 0 (stage 2)" : `the stream after block ${l - 1}`;
    const input = pre ? `its input x: ${from}` : `its input x: ${from} + attention (stage 5)`;
    const notes = [pre ? "" : "post-LN (the original Transformer): this LayerNorm comes after attention's residual add (stage 5); its input is x + attn(x)",
      P.ln1b ? "" : "no bias \u03b2 is drawn: this model has model.bias false, so \u03b2 = 0"];
    const note = notes.filter(Boolean).join("; ");
    return this.stage(3, `LayerNorm (${pre ? "pre" : "post"}-LN), block ${l}'s ln_1`,
      "LN(x) = \u03b3 \u00b7 (x \u2212 \u03bc) / \u221a(\u03c3\u00b2 + \u03b5) + \u03b2, &nbsp; \u03bc and \u03c3\u00b2 over the C channels",
      `x (C,) = (${this.model.C},); \u03b3${P.ln1b ? ", \u03b2" : ""} (C,); \u03b5 = 1e-5`, this.lnFigures("ln", x, P.ln1w, P.ln1b, this.at("ln1"), input), note);
  }

  // every query's scores against every key of head h, the future masked
  scoreMatrix(l, h) {
    const { T, q, k } = this.trace, m = this.model, hs = m.hs, C = m.C, B = m.B, scale = 1 / Math.sqrt(hs);
    const scores = new Float32Array(T * T), weights = new Float32Array(T * T);
    for (let i = 0; i < T; i++) {
      let max = -Infinity;
      for (let j = 0; j < T; j++) {
        if (j > i) { scores[i * T + j] = -Infinity; continue; }
        let s = 0;
        for (let d = 0; d < hs; d++) s += q[(l * T + i) * C + h * hs + d] * k[(l * B + j) * C + h * hs + d];
        scores[i * T + j] = s * scale;
        max = Math.max(max, s * scale);
      }
      let sum = 0;
      for (let j = 0; j <= i; j++) sum += Math.exp(scores[i * T + j] - max);
      for (let j = 0; j <= i; j++) weights[i * T + j] = Math.exp(scores[i * T + j] - max) / sum;
    }
    return { scores, weights };
  }

  headPart(src, l, h, offset) { // (T, hs) of the keys' or values' cache, or the queries
    const { T } = this.trace, m = this.model, hs = m.hs, out = new Float32Array(T * hs);
    for (let t = 0; t < T; t++) {
      const base = src === this.trace.q ? (l * T + t) * m.C : (l * m.B + t) * m.C;
      out.set(src.subarray(base + h * hs + offset, base + h * hs + offset + hs), t * hs);
    }
    return out;
  }

  head() {
    const s = this.state, l = s.layer, h = s.head, m = this.model, T = this.trace.T, hs = m.hs;
    const chars = s.pieces.map(visible), rows = { rowLabel: (r) => this.rowOf(r), rowText: chars, cell: 11 }; // q, k, v side by side
    const keys = { rowLabel: (r) => `query ${this.rowOf(r)}`, colLabel: (j) => `key ${this.rowOf(j)}`, rowText: chars, colText: chars };
    const { scores, weights } = this.scoreMatrix(l, h);
    const figs = [
      this.grid("q", "queries q (every position)", this.headPart(this.trace.q, l, h, 0), T, hs, { ...rows, colLabel: (d) => `dim ${d}` }),
      this.grid("k", "keys k", this.headPart(this.trace.k, l, h, 0), T, hs, { ...rows, colLabel: (d) => `dim ${d}` }),
      this.grid("v", "values v", this.headPart(this.trace.v, l, h, 0), T, hs, { ...rows, colLabel: (d) => `dim ${d}` }),
      this.grid("scores", "scores q\u00b7k/\u221ahs, the future masked (grey: \u2212\u221e)", scores, T, T, keys),
      this.grid("weights", "softmax: the attention weights (each row sums to 1; the future gets 0)", weights, T, T, { ...keys, positive: true, future: true }),
      this.grid("head_out", `the weighted sum of the values for ${this.rowOf(T - 1)}`, this.at("heads").subarray(h * hs, (h + 1) * hs), 1, hs, { colLabel: (d) => `dim ${d}` }),
    ];
    const notes = [];
    if (this.cfg.pos_emb === "rope") {
      notes.push("q and k are shown after the rotation of their position (the angles of stage 2)");
      const raw = this.at("c_attn").subarray(h * hs, (h + 1) * hs); // before qk_norm and the rotation
      figs.splice(3, 0, this.grid("q_raw", `the query of ${this.rowOf(T - 1)} before its rotation (x W_q)`, raw, 1, hs, { colLabel: (d) => `dim ${d}` }));
    }
    if (this.cfg.qk_norm) notes.push("model.qk_norm: q and k are shown after their RMS norm; the norm itself is not drawn");
    if (this.cfg.value_embeds) notes.push("model.value_embeds: v includes the block's value embedding of each character; it is not drawn apart");
    return this.stage(4, `One head: queries, keys, values, scores, mask, softmax (block ${l}, head ${h})`,
      "q, k, v = split(x W<sub>qkv</sub>); &nbsp; scores = q k<sup>T</sup> / \u221ahs, masked where key > query; &nbsp; w = softmax(scores); &nbsp; out = w v",
      `x (T, C) = (${T}, ${m.C}) \u2192 q, k, v (T, hs) = (${T}, ${hs}) per head, ${m.nh} heads; scores (T, T) = (${T}, ${T}); the last row is this prediction's query`, figs, notes.join("; "));
  }

  heads() {
    const s = this.state, l = s.layer, m = this.model, T = this.trace.T, C = m.C, pre = m.pre;
    const all = new Float32Array(m.nh * T);
    for (let h = 0; h < m.nh; h++) all.set(this.at("weights", l, h), h * T);
    const figs = [
      this.grid("heads_weights", `every head's weights for ${this.rowOf(T - 1)}`, all, m.nh, T, { positive: true, rowLabel: (h) => `head ${h}`, colLabel: (j) => `key ${this.rowOf(j)}`, rowText: Array.from({ length: m.nh }, (_, h) => `h${h}`), colText: s.pieces.map(visible) }),
      this.grid("merged", "the heads side by side (merged: head 0's dims, then head 1's...)", this.at("heads"), 1, C),
      this.grid("attn_out", "the output projection W_O (attn.c_proj)", this.at("attn_out"), 1, C),
      this.grid("resid_before", "the stream before the block", this.at("in"), 1, C),
      this.grid("resid_after", pre ? "the stream after: before + attention" : "before + attention (then LayerNorm ln_1, stage 3)", this.at("mid"), 1, C),
    ];
    if (!pre) figs.push(this.grid("resid_norm", "the stream after ln_1", this.at("ln1"), 1, C));
    return this.stage(5, `Multi-head: merge, output projection, residual add (block ${l})`,
      pre ? "y = concat(head<sub>0</sub>, \u2026, head<sub>nh\u22121</sub>) W<sub>O</sub>; &nbsp; x \u2190 x + y" : "y = concat(heads) W<sub>O</sub>; &nbsp; x \u2190 LN(x + y)",
      `${m.nh} heads \u00d7 (hs,) = (${m.hs},) \u2192 (C,) = (${C},); W<sub>O</sub> (C, C) = (${C}, ${C})`, figs);
  }

  geluCurve(pre, post) {
    const fig = document.createElement("figure"), W = 300, H = 170, relu2 = this.model.relu2;
    fig.className = "fig";
    const canvas = document.createElement("canvas");
    canvas.className = "curve";
    canvas.width = W; canvas.height = H;
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", `the ${relu2 ? "relu squared" : "GELU"} curve with this position's ${pre.length} values on it`);
    const g = canvas.getContext("2d"), lo = Math.min(-3, ...pre), hi = Math.max(3, ...pre);
    const f = (x) => (relu2 ? Math.max(0, x) ** 2 : gelu(x)), top = Math.max(f(hi), f(lo), 1), bottom = Math.min(-0.3, ...post);
    const X = (x) => ((x - lo) / (hi - lo)) * (W - 20) + 10, Y = (y) => H - 10 - ((y - bottom) / (top - bottom)) * (H - 20);
    g.strokeStyle = "#c7cfdb"; g.beginPath(); g.moveTo(X(lo), Y(0)); g.lineTo(X(hi), Y(0)); g.moveTo(X(0), Y(bottom)); g.lineTo(X(0), Y(top)); g.stroke();
    g.strokeStyle = "#2f6fdf"; g.lineWidth = 2; g.beginPath();
    for (let i = 0; i <= 200; i++) { const x = lo + ((hi - lo) * i) / 200; if (i) g.lineTo(X(x), Y(f(x))); else g.moveTo(X(x), Y(f(x))); }
    g.stroke();
    g.fillStyle = "#687385"; g.font = "10px sans-serif"; // the axes' ends: h along, the activation up
    g.fillText(`h = ${lo.toFixed(1)}`, X(lo), Y(0) + 11); g.fillText(hi.toFixed(1), X(hi) - 18, Y(0) + 11); g.fillText(top.toFixed(1), X(0) + 3, Y(top) + 9);
    g.fillStyle = "rgba(200,55,45,.55)";
    for (let i = 0; i < pre.length; i++) { g.beginPath(); g.arc(X(pre[i]), Y(post[i]), 2.2, 0, 7); g.fill(); }
    fig.innerHTML = `<figcaption>${relu2 ? "relu(h)\u00b2" : "GELU(h) = h \u03a6(h)"}, with this position's ${pre.length} values on it</figcaption>`;
    fig.appendChild(canvas);
    return fig;
  }

  mlp() {
    const s = this.state, l = s.layer, m = this.model, C = m.C, pre = m.pre;
    if (this.cfg.attn_only) {
      return this.stage(6, "Feed-forward layer", "(none)", "", [], "model.attn_only: this model's blocks have no feed-forward layer");
    }
    const P = m.layers[l], act = m.relu2 ? "relu\u00b2" : "GELU", b = P.fcB ? " + b" : "";
    const figs = [
      this.grid("mlp_in", pre ? "its input: ln_2 of the stream" : "its input: the stream after ln_1", pre ? this.at("ln2") : this.at("ln1"), 1, C),
      this.grid("up", "up-projection h = x W_1 (mlp.c_fc)", this.at("c_fc"), 1, 4 * C),
      this.geluCurve(this.at("c_fc"), this.at("act")),
      this.grid("gelu", `${act}(h)`, this.at("act"), 1, 4 * C),
      this.grid("down", "down-projection W_2 (mlp.c_proj)", this.at("mlp_out"), 1, C),
      this.grid("mlp_after", pre ? "the stream after: x + MLP(LN(x))" : "x + MLP(x) (then LayerNorm ln_2)", this.at("out"), 1, C),
    ];
    if (!pre) figs.push(this.grid("mlp_norm", "the stream after ln_2", this.at("ln2"), 1, C));
    const note = m.relu2 ? "model.mlp_act relu2: relu(h)\u00b2 instead of GELU" : "";
    return this.stage(6, `Feed-forward layer (block ${l})`,
      pre ? `x \u2190 x + ${act}(LN(x) W<sub>1</sub>${b}) W<sub>2</sub>${b}` : `x \u2190 LN(x + ${act}(x W<sub>1</sub>${b}) W<sub>2</sub>${b})`,
      `(C,) = (${C},) \u2192 (4C,) = (${4 * C},) \u2192 (C,); W<sub>1</sub> (C, 4C) = (${C}, ${4 * C}), W<sub>2</sub> (4C, C) = (${4 * C}, ${C}) ` +
      `(PyTorch stores each transposed: c_fc.weight is (${4 * C}, ${C}))${P.fcB ? ", with biases" : ""}`, figs, note);
  }

  output() {
    const s = this.state, m = this.model, C = m.C, V = m.V, o = s.settings, sp = this.sampler;
    const logits = this.at("logits", -1), lab = { colLabel: (i) => `id ${i} ${quoted(this.labels[i])}` };
    const byRank = (n) => { const out = new Float32Array(V); for (let r = 0; r < n; r++) out[sp.order[r]] = sp.keep[r] / sp.sum; return out; };
    const t = Math.max(o.temperature, 1e-6), soft = byRank(sp.filter(logits, t, 0, 1)), kept = byRank(sp.filter(logits, t, o.topK, o.topP));
    const figs = [], last = m.L - 1, l = s.layer;
    const between = l === last ? "" : ` (after block ${l}, shown above, block${last - l > 1 ? `s ${l + 1} to ${last}` : ` ${last}`} worked on the stream the same way: choose ${last - l > 1 ? "them" : "it"} with Layer)`;
    if (m.pre) figs.push(...this.lnFigures("lnf", this.at("ln_f_in", -1), m.lnfW, m.lnfB, this.at("ln_f", -1), `its input x: block ${last}'s output stream${between}`).slice(0, -1));
    figs.push(this.grid("ln_f", m.pre ? "its output ln_f(x), the final LayerNorm" : `block ${last}'s output stream (post-LN: no ln_f)${between}`, this.at("ln_f", -1), 1, C));
    figs.push(this.grid("logits", "logits = ln_f(x) \u00b7 wte\u1d40 (the tied head: one dot product per character's embedding row)", logits, 1, V, lab));
    figs.push(this.grid("probs_t", `softmax(logits / ${o.temperature === 0 ? "\u2192 0" : o.temperature})`, soft, 1, V, { ...lab, positive: true }));
    figs.push(this.grid("probs_kept", `after top-k ${o.topK || "(all)"} and top-p ${o.topP}, renormalised`, kept, 1, V, { ...lab, positive: true }));
    const plain = byRank(sp.filter(logits, 1, 0, 1)); // the model's own probabilities: temperature 1, no cuts
    const choice = o.temperature === 0 ? sp.order[0] : sp.pick(logits, o.temperature, o.topK, o.topP, seededRandom(o.seed));
    sp.filter(logits, t, o.topK, o.topP);
    const top = document.createElement("figure");
    top.className = "fig";
    const rows = [];
    for (let r = 0; r < Math.min(10, V); r++) {
      const id = sp.order[r], p = kept[id];
      rows.push(`<tr${id === choice ? ' class="chosen"' : ""}><td><span class="ch">${esc(this.labels[id])}</span></td><td class="num">${logits[id].toFixed(3)}</td>` +
        `<td class="num">${prob(soft[id])}</td><td class="num">${p > 0 ? prob(p) : "cut"}</td><td><span class="bar" style="width:${Math.max(1, Math.round(p * 120))}px"></span></td></tr>`);
    }
    const how = o.temperature === 0 ? "temperature 0: the largest logit (greedy)" : `drawn with seed ${o.seed} (this page's random numbers, not torch's)`;
    const truth = s.next >= 0 ? ` \u00b7 the text has ${quoted(this.labels[s.next])} next (p = ${prob(kept[s.next])} as drawn here; ${prob(plain[s.next])} at temperature 1, as minigpt score and the Next character panel count it)` : "";
    top.innerHTML = `<figcaption>the ten most likely (logit, softmax at the temperature, after the cuts)</figcaption>` +
      `<table class="top"><tr><th></th><th>logit</th><th>p<sub>T</sub></th><th>kept</th><th></th></tr>${rows.join("")}</table>` +
      `<div class="choice">chosen: <span class="ch" id="ex-choice" data-id="${choice}">${esc(this.labels[choice])}</span> <span class="dim">${how}${truth}</span></div>`;
    figs.push(top);
    const notes = [];
    if (this.cfg.logit_softcap > 0) notes.push(`model.logit_softcap: the logits shown are after ${this.cfg.logit_softcap}\u00b7tanh(logit / ${this.cfg.logit_softcap})`);
    return this.stage(7, "Final LayerNorm, logits, softmax with temperature, top-k, top-p, the chosen character",
      "logits = LN<sub>f</sub>(x) wte<sup>T</sup>; &nbsp; p = softmax(logits / T); &nbsp; keep the top k, then the smallest set reaching top-p; &nbsp; draw",
      `x (C,) = (${C},) \u00b7 wte<sup>T</sup> (C, V) = (${C}, ${V}) \u2192 logits (V,) = (${V},)`, figs, notes.join("; "));
  }
}
