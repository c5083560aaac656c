// minigpt's GPT (minigpt/model.py) in plain JavaScript, with its sampler (minigpt/infer/decode.py).
// Typed arrays and loops, no libraries. Weights, activations, keys and values are float32
// (Float32Array); sums run in JavaScript numbers (float64) and are stored as float32. One token at a
// time through a KV cache: a prompt is read position by position, which gives the numbers a batched
// forward gives (up to the last bits of float32 sums).

function base64Bytes(b64) {
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(b64); // newer browsers: native
  const bin = atob(b64), n = bin.length, out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// little-endian float32 or float16 numbers -> one Float32Array
function decodeNumbers(bytes, dtype) {
  if (dtype === "float32") return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length >> 2);
  const table = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, f = h & 0x3ff;
    table[h] = e === 0 ? s * f * 2 ** -24 : e === 31 ? (f ? NaN : s * Infinity) : s * (1 + f / 1024) * 2 ** (e - 15);
  }
  const halves = new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.length >> 1), out = new Float32Array(halves.length);
  for (let i = 0; i < halves.length; i++) out[i] = table[halves[i]];
  return out;
}

// erf to 1.5e-7 (Abramowitz & Stegun 7.1.26): below float32's resolution of GELU's output
function erf(x) {
  const a = Math.abs(x), t = 1 / (1 + 0.3275911 * a);
  const y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-a * a);
  return x < 0 ? -y : y;
}
// GELU (exact, erf form, as F.gelu) from a table over [-10, 10] in steps of 1/2048, read with linear
// interpolation: 2.4e-8 from the erf form, and 5x faster than calling Math.exp for every unit
const GELU_R = 10, GELU_S = 2048, GELU = new Float64Array(2 * GELU_R * GELU_S + 2);
for (let i = 0; i < GELU.length; i++) { const x = i / GELU_S - GELU_R; GELU[i] = 0.5 * x * (1 + erf(x * Math.SQRT1_2)); }
function gelu(v) {
  if (v >= GELU_R) return v;
  if (v <= -GELU_R) return 0; // GELU(-10) is -8e-23
  const t = (v + GELU_R) * GELU_S, i = t | 0;
  return GELU[i] + (t - i) * (GELU[i + 1] - GELU[i]);
}

// out[o] = W[o, :] . x + b[o] for W (nOut, nIn) row-major, as nn.Linear stores it. Eight rows at
// a time: each x[i] is read once for eight products, and eight sums run side by side (3x faster
// in V8 than one row at a time, measured on the 6x384 model's matrices)
function matvec(W, b, x, out, nOut, nIn) {
  let o = 0;
  for (; o + 7 < nOut; o += 8) {
    const r0 = o * nIn, r1 = r0 + nIn, r2 = r1 + nIn, r3 = r2 + nIn, r4 = r3 + nIn, r5 = r4 + nIn, r6 = r5 + nIn, r7 = r6 + nIn;
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (let i = 0; i < nIn; i++) {
      const xi = x[i];
      s0 += W[r0 + i] * xi; s1 += W[r1 + i] * xi; s2 += W[r2 + i] * xi; s3 += W[r3 + i] * xi;
      s4 += W[r4 + i] * xi; s5 += W[r5 + i] * xi; s6 += W[r6 + i] * xi; s7 += W[r7 + i] * xi;
    }
    if (b !== null) {
      s0 += b[o]; s1 += b[o + 1]; s2 += b[o + 2]; s3 += b[o + 3]; s4 += b[o + 4]; s5 += b[o + 5]; s6 += b[o + 6]; s7 += b[o + 7];
    }
    out[o] = s0; out[o + 1] = s1; out[o + 2] = s2; out[o + 3] = s3; out[o + 4] = s4; out[o + 5] = s5; out[o + 6] = s6; out[o + 7] = s7;
  }
  for (; o < nOut; o++) {
    const r = o * nIn;
    let s = 0;
    for (let i = 0; i < nIn; i++) s += W[r + i] * x[i];
    out[o] = b === null ? s : s + b[o];
  }
}

function layerNorm(x, w, b, out, n) {
  let mean = 0;
  for (let i = 0; i < n; i++) mean += x[i];
  mean /= n;
  let v = 0;
  for (let i = 0; i < n; i++) { const d = x[i] - mean; v += d * d; }
  const inv = 1 / Math.sqrt(v / n + 1e-5);
  for (let i = 0; i < n; i++) out[i] = b === null ? (x[i] - mean) * inv * w[i] : (x[i] - mean) * inv * w[i] + b[i];
}

class GPT {
  // cfg: n_layer, n_head, n_embd, block_size, pos_emb, norm, bias, vocab_size and the model options
  // (attn_only, qk_norm, mlp_act, value_embeds, logit_softcap); tensors: {name: [offset, shape]}
  constructor(cfg, numbers, tensors) {
    const C = cfg.n_embd, L = cfg.n_layer, B = cfg.block_size;
    Object.assign(this, { cfg, C, L, B, V: cfg.vocab_size, nh: cfg.n_head, hs: C / cfg.n_head, pre: cfg.norm === "pre",
      relu2: cfg.mlp_act === "relu2" });
    const t = (name) => {
      const e = tensors[name];
      return e ? numbers.subarray(e[0], e[0] + e[1].reduce((a, b) => a * b, 1)) : null;
    };
    this.wte = t("wte.weight");
    this.wpe = cfg.pos_emb === "learned" ? t("wpe.weight") : null;
    this.layers = [];
    for (let l = 0; l < L; l++) {
      const p = `blocks.${l}.`;
      this.layers.push({
        ln1w: t(p + "ln_1.weight"), ln1b: t(p + "ln_1.bias"), ln2w: t(p + "ln_2.weight"), ln2b: t(p + "ln_2.bias"),
        qkvW: t(p + "attn.c_attn.weight"), qkvB: t(p + "attn.c_attn.bias"),
        projW: t(p + "attn.c_proj.weight"), projB: t(p + "attn.c_proj.bias"),
        fcW: t(p + "mlp.c_fc.weight"), fcB: t(p + "mlp.c_fc.bias"), fc2W: t(p + "mlp.c_proj.weight"), fc2B: t(p + "mlp.c_proj.bias"),
        ve: cfg.value_embeds ? t(`value_embeds.${l}.weight`) : null, veMix: cfg.value_embeds ? t(p + "attn.ve_mix")[0] : 0,
      });
    }
    this.lnfW = t("ln_f.weight");
    this.lnfB = t("ln_f.bias");
    if (cfg.pos_emb === "sinusoidal") this.posTable = sinusoidalTable(B, C);
    if (cfg.pos_emb === "rope") [this.cos, this.sin] = ropeTables(B, this.hs);
    // working buffers, allocated once: no allocation per token
    this.x = new Float32Array(C); this.h = new Float32Array(C); this.y = new Float32Array(C);
    this.qkv = new Float32Array(3 * C); this.att = new Float32Array(C); this.ff = new Float32Array(4 * C);
    this.scores = new Float32Array(B); this.acc = new Float64Array(this.hs); this.rot = new Float32Array(this.hs);
  }

  // a KV cache of block_size positions; ids[i] is the token at position i, len the positions filled,
  // logits those after the last step that asked for them. `attention`, when kept, receives that
  // step's weights: (layer, head, key) with a stride of block_size keys, keys 0..len-1 filled
  newCache(withAttention) {
    const n = this.L * this.B * this.C;
    return { k: new Float32Array(n), v: new Float32Array(n), ids: new Int32Array(this.B), len: 0,
      logits: new Float32Array(this.V), attention: withAttention ? new Float32Array(this.L * this.nh * this.B) : null };
  }

  // rotate channel pairs (i, i + hs/2) of each head of v (offset o, n channels) to position pos
  rope(v, o, n, pos) {
    const hs = this.hs, half = hs / 2, cos = this.cos, sin = this.sin, r = this.rot, base = pos * hs;
    for (let s = o; s < o + n; s += hs) {
      for (let i = 0; i < hs; i++) r[i] = v[s + i];
      for (let i = 0; i < hs; i++) v[s + i] = r[i] * cos[base + i] + r[i < half ? i + half : i - half] * sin[base + i];
    }
  }

  // model.qk_norm: each head's query and key (the first 2C numbers of v) scaled to RMS 1
  qkNorm(v) {
    const hs = this.hs, eps = this.cfg.qk_norm_eps;
    for (let s = 0; s < 2 * this.C; s += hs) {
      let ss = 0;
      for (let i = 0; i < hs; i++) ss += v[s + i] * v[s + i];
      const inv = 1 / Math.sqrt(ss / hs + eps);
      for (let i = 0; i < hs; i++) v[s + i] *= inv;
    }
  }

  // one head's attention of the query at `pos` over keys 0..pos of layer l
  attendHead(cache, l, hd, pos, record, trace) {
    const { C, B, hs, qkv, scores, acc, att } = this;
    const qo = hd * hs, scale = 1 / Math.sqrt(hs), K = cache.k, Vc = cache.v;
    let max = -Infinity;
    for (let j = 0; j <= pos; j++) {
      const kb = (l * B + j) * C + qo;
      let s = 0;
      for (let d = 0; d < hs; d++) s += qkv[qo + d] * K[kb + d];
      s *= scale;
      scores[j] = s;
      if (s > max) max = s;
    }
    if (trace) trace("scores", l, scores.subarray(0, pos + 1), hd);
    let sum = 0;
    for (let j = 0; j <= pos; j++) { const e = Math.exp(scores[j] - max); scores[j] = e; sum += e; }
    acc.fill(0);
    for (let j = 0; j <= pos; j++) {
      const w = scores[j] / sum, vb = (l * B + j) * C + qo;
      scores[j] = w;
      for (let d = 0; d < hs; d++) acc[d] += w * Vc[vb + d];
    }
    if (trace) trace("weights", l, scores.subarray(0, pos + 1), hd);
    for (let d = 0; d < hs; d++) att[qo + d] = acc[d];
    if (record) record.set(scores.subarray(0, pos + 1), (l * this.nh + hd) * B);
  }

  // the next position: token `id` at position cache.len, its keys and values cached; with
  // wantLogits, the logits of the token after it in cache.logits. `trace`, when given, is called
  // trace(name, layer, values, head) at each stage with a view of the numbers there (explain.js
  // copies what it keeps): the one forward pass, watched, not a second copy of it
  step(cache, id, wantLogits, trace = null) {
    const { C, B, x, h, y, qkv, att, ff } = this, pos = cache.len;
    if (pos >= B) throw new Error(`position ${pos} is past block_size ${B}`);
    const e = id * C;
    for (let c = 0; c < C; c++) x[c] = this.wte[e + c];
    if (this.wpe) for (let c = 0; c < C; c++) x[c] += this.wpe[pos * C + c];
    if (this.posTable) for (let c = 0; c < C; c++) x[c] += this.posTable[pos * C + c];
    if (trace) trace("embed", -1, x);
    const record = wantLogits ? cache.attention : null;
    for (let l = 0; l < this.L; l++) {
      const P = this.layers[l];
      if (trace) trace("in", l, x);
      if (this.pre) layerNorm(x, P.ln1w, P.ln1b, h, C);
      if (trace && this.pre) trace("ln1", l, h);
      matvec(P.qkvW, P.qkvB, this.pre ? h : x, qkv, 3 * C, C);
      if (trace) trace("c_attn", l, qkv);
      if (this.cfg.qk_norm) this.qkNorm(qkv);
      if (this.cos) this.rope(qkv, 0, 2 * C, pos);
      if (P.ve) for (let c = 0; c < C; c++) qkv[2 * C + c] += P.veMix * P.ve[e + c]; // model.value_embeds
      if (trace) trace("qkv", l, qkv);
      const base = (l * B + pos) * C;
      for (let c = 0; c < C; c++) { cache.k[base + c] = qkv[C + c]; cache.v[base + c] = qkv[2 * C + c]; }
      for (let hd = 0; hd < this.nh; hd++) this.attendHead(cache, l, hd, pos, record, trace);
      if (trace) trace("heads", l, att);
      matvec(P.projW, P.projB, att, y, C, C);
      if (trace) trace("attn_out", l, y);
      for (let c = 0; c < C; c++) x[c] += y[c];
      if (trace) trace("mid", l, x);
      if (!this.pre) layerNorm(x, P.ln1w, P.ln1b, x, C);
      if (trace && !this.pre) trace("ln1", l, x);
      if (this.cfg.attn_only) continue; // model.attn_only: no ln_2, no MLP
      if (this.pre) layerNorm(x, P.ln2w, P.ln2b, h, C);
      if (trace && this.pre) trace("ln2", l, h);
      matvec(P.fcW, P.fcB, this.pre ? h : x, ff, 4 * C, C);
      if (trace) trace("c_fc", l, ff);
      if (this.relu2) for (let i = 0; i < 4 * C; i++) { const r = ff[i] > 0 ? ff[i] : 0; ff[i] = r * r; }
      else for (let i = 0; i < 4 * C; i++) ff[i] = gelu(ff[i]);
      if (trace) trace("act", l, ff);
      matvec(P.fc2W, P.fc2B, ff, y, C, 4 * C);
      if (trace) trace("mlp_out", l, y);
      for (let c = 0; c < C; c++) x[c] += y[c];
      if (trace) trace("out", l, x);
      if (!this.pre) layerNorm(x, P.ln2w, P.ln2b, x, C);
      if (trace && !this.pre) trace("ln2", l, x);
    }
    cache.ids[pos] = id;
    cache.len = pos + 1;
    if (!wantLogits) return;
    if (this.pre) layerNorm(x, this.lnfW, this.lnfB, h, C);
    if (trace) trace("ln_f", -1, this.pre ? h : x);
    matvec(this.wte, null, this.pre ? h : x, cache.logits, this.V, C); // the head is tied to the embedding
    const cap = this.cfg.logit_softcap, lg = cache.logits;
    if (cap > 0) for (let i = 0; i < this.V; i++) lg[i] = cap * Math.tanh(lg[i] / cap); // model.logit_softcap
    if (trace) trace("logits", -1, lg);
  }

  // make the cache hold ids[0..n) (n at most block_size) and its logits those after the last one.
  // Positions the cache already holds for the same leading ids are kept (causal: they cannot change).
  sync(cache, ids, n = ids.length) {
    let p = 0;
    while (p < cache.len && p < n && cache.ids[p] === ids[p]) p++;
    cache.len = Math.min(p, n - 1);
    for (let i = cache.len; i < n; i++) this.step(cache, ids[i], i === n - 1);
  }
}

// model.sinusoidal_table, scaled by 0.02 sqrt 2 as GPT.__init__ does; float32 at each step
function sinusoidalTable(P, C) {
  const f = Math.fround, out = new Float32Array(P * C), scale = f(0.02 * Math.sqrt(2));
  for (let k = 0; 2 * k < C; k++) {
    const freq = f(Math.exp(f(f(2 * k) * f(-Math.log(10000) / C))));
    for (let p = 0; p < P; p++) {
      const a = f(p * freq);
      out[p * C + 2 * k] = f(Math.sin(a)) * scale;
      if (2 * k + 1 < C) out[p * C + 2 * k + 1] = f(Math.cos(a)) * scale;
    }
  }
  return out;
}

// model.rope_tables: [cos, cos] and [-sin, sin] over the two halves of a head, per position
function ropeTables(P, hs) {
  const f = Math.fround, half = hs / 2, cos = new Float32Array(P * hs), sin = new Float32Array(P * hs);
  for (let i = 0; i < half; i++) {
    const inv = f(10000 ** f(-f(2 * i) / hs));
    for (let p = 0; p < P; p++) {
      const a = f(p * inv), c = f(Math.cos(a)), s = f(Math.sin(a));
      cos[p * hs + i] = c; cos[p * hs + half + i] = c;
      sin[p * hs + i] = -s; sin[p * hs + half + i] = s;
    }
  }
  return [cos, sin];
}

// a seeded generator of numbers in [0, 1) (mulberry32): the same seed gives the same draws
function seededRandom(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// infer/decode.next_token_probs and sample_next_token over one row of logits. After pick():
// order[0..V) ranks the ids by logit (ties: the lower id first, as argmax), probs[id] is the
// model's own probability of id (softmax at temperature 1), whatever was sampled.
class Sampler {
  constructor(V) {
    this.V = V;
    this.order = new Int32Array(V); this.probs = new Float32Array(V); this.keep = new Float64Array(V);
    this.byLogit = null;
    this.sum = 0;
  }

  rank(logits) {
    const order = this.order, V = this.V;
    for (let i = 0; i < V; i++) order[i] = i;
    order.sort((a, b) => logits[b] - logits[a] || a - b);
    const max = logits[order[0]];
    let sum = 0;
    for (let i = 0; i < V; i++) { const e = Math.exp(logits[i] - max); this.probs[i] = e; sum += e; }
    for (let i = 0; i < V; i++) this.probs[i] /= sum;
  }

  // temperature 0: argmax; else the draw from filter()'s kept ranks
  pick(logits, temperature, topK, topP, random) {
    if (temperature === 0) {
      this.rank(logits);
      return this.order[0];
    }
    const n = this.filter(logits, temperature, topK, topP), keep = this.keep, order = this.order;
    let u = random() * this.sum;
    for (let r = 0; r < n; r++) { u -= keep[r]; if (u < 0) return order[r]; }
    return order[n - 1];
  }

  // temperature (> 0), then top-k (exactly k kept), then top-p (a token is dropped when those ranked
  // before it already reach top_p; the first always stays): the kept ranks 0..n-1 (returned), their
  // weights keep[r] and their sum this.sum (keep[r] / sum is rank r's probability)
  filter(logits, temperature, topK, topP) {
    this.rank(logits);
    const order = this.order, keep = this.keep, V = this.V;
    const max = logits[order[0]], k = topK > 0 && topK < V ? topK : V;
    let sum = 0;
    for (let r = 0; r < k; r++) { const e = Math.exp(Math.fround((logits[order[r]] - max) / temperature)); keep[r] = e; sum += e; }
    let n = k;
    if (topP < 1) {
      let before = 0;
      for (let r = 0; r < k; r++) {
        if (before >= topP) { n = r; break; }
        before += keep[r] / sum;
      }
      sum = 0;
      for (let r = 0; r < n; r++) sum += keep[r];
    }
    this.sum = sum;
    return n;
  }
}
