// minigpt's GPT (minigpt/model.py) in plain JavaScript, with its sampler (minigpt/infer/decode.py).
// Typed arrays and loops, no libraries. Weights, activations, keys and values are float32
// (Float32Array); sums run in JavaScript numbers (float64) and are stored as float32, except a window's
// big matrix products, which run in WebAssembly SIMD where the browser has it (float32 sums: MATMUL_WASM
// below). A KV cache: a
// prompt goes through in one forward of all its positions, layer by layer, generation one token at a
// time; both give the numbers a batched forward gives (up to the last bits of float32 sums).

function base64Bytes(b64) {
  if (typeof Uint8Array.fromBase64 === "function") return Uint8Array.fromBase64(b64); // newer browsers: native
  const bin = atob(b64), n = bin.length, out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// The matmul below in WebAssembly SIMD, four times as many sums an instruction: minigpt/inspect/web/
// matmul.wat, assembled by scripts/wasm_kernel.py. A window's forward is almost all matrix products, and
// this is what brings explaining one position of a 6 x 384 model under a second. null where the browser
// has no WebAssembly SIMD: the JavaScript loops run, with the same numbers to float32's last bits
const MATMUL_WASM = "AGFzbQEAAAABEgJgAXsBfWAJf39/f39/f39/AAIPAQNlbnYGbWVtb3J5AgABAwMCAAEHCgEGbWF0bXVsAAEK4wcCGQAgAP0fACAA/R8BkiAA/R8CIAD9HwOSkgvGBwMNfwR9C3sgCEECdCEMIAdBAnQhDUEAIQkCQANAIAkgB08NASAAIAkgDGxqIQ4gDiAMaiEPIA8gDGohECAQIAxqIRFDAAAAACEWQwAAAAAhF0MAAAAAIRhDAAAAACEZIAIEQCABIAlBAnRq/QAEACEiICL9HwAhFiAi/R8BIRcgIv0fAiEYICL9HwMhGQsgBSEKAkADQCAKQQFqIAZPDQEgAyAKIAxsaiESIBIgDGohE/0MAAAAAAAAAAAAAAAAAAAAACEa/QwAAAAAAAAAAAAAAAAAAAAAIRv9DAAAAAAAAAAAAAAAAAAAAAAhHP0MAAAAAAAAAAAAAAAAAAAAACEd/QwAAAAAAAAAAAAAAAAAAAAAIR79DAAAAAAAAAAAAAAAAAAAAAAhH/0MAAAAAAAAAAAAAAAAAAAAACEg/QwAAAAAAAAAAAAAAAAAAAAAISFBACELAkADQCALIAxPDQEgEiALav0ABAAhIiATIAtq/QAEACEjIA4gC2r9AAQAISQgGiAkICL95gH95AEhGiAeICQgI/3mAf3kASEeIA8gC2r9AAQAISQgGyAkICL95gH95AEhGyAfICQgI/3mAf3kASEfIBAgC2r9AAQAISQgHCAkICL95gH95AEhHCAgICQgI/3mAf3kASEgIBEgC2r9AAQAISQgHSAkICL95gH95AEhHSAhICQgI/3mAf3kASEhIAtBEGohCwwACwsgBCAKIA1sIAlBAnRqaiEUIBQgDWohFSAUIBoQACAWkjgCACAUIBsQACAXkjgCBCAUIBwQACAYkjgCCCAUIB0QACAZkjgCDCAVIB4QACAWkjgCACAVIB8QACAXkjgCBCAVICAQACAYkjgCCCAVICEQACAZkjgCDCAKQQJqIQoMAAsLIAogBkkEQCADIAogDGxqIRL9DAAAAAAAAAAAAAAAAAAAAAAhGv0MAAAAAAAAAAAAAAAAAAAAACEb/QwAAAAAAAAAAAAAAAAAAAAAIRz9DAAAAAAAAAAAAAAAAAAAAAAhHUEAIQsCQANAIAsgDE8NASASIAtq/QAEACEiIBogDiALav0ABAAgIv3mAf3kASEaIBsgDyALav0ABAAgIv3mAf3kASEbIBwgECALav0ABAAgIv3mAf3kASEcIB0gESALav0ABAAgIv3mAf3kASEdIAtBEGohCwwACwsgBCAKIA1sIAlBAnRqaiEUIBQgGhAAIBaSOAIAIBQgGxAAIBeSOAIEIBQgHBAAIBiSOAIIIBQgHRAAIBmSOAIMCyAJQQRqIQkMAAsLCwD3AQRuYW1lAQYBAANzdW0CoQECAAEAAXYBJQABVwEBYgIHaGFzQmlhcwMBWAQDb3V0BQJ0MAYCdDEHBG5PdXQIA25JbgkBbwoBdAsBaQwDcm93DQZvdXRSb3cOAncwDwJ3MRACdzIRAnczEgJ4YRMCeGIUAm9hFQJvYhYCYjAXAmIxGAJiMhkCYjMaAmEwGwJhMRwCYTIdAmEzHgJjMB8CYzEgAmMyIQJjMyIBdSMBdiQBdwNEAQEIAAhyb3dzRG9uZQEEcm93cwMJcGFpcnNEb25lBAVwYWlycwUHc3VtRG9uZQYEc3VtNAgIdGFpbERvbmUJBHRhaWw=";
const MATMUL_MODULE = (() => {
  try {
    return new WebAssembly.Module(base64Bytes(MATMUL_WASM));
  } catch (e) {
    return null;
  }
})();

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

// out[oo + o] = W[o, :] . x[xo..] + b[o] for W (nOut, nIn) row-major, as nn.Linear stores it. Eight
// rows at a time: each x[i] is read once for eight products, and eight sums run side by side (3x
// faster in V8 than one row at a time, measured on the 6x384 model's matrices)
function matvec(W, b, x, out, nOut, nIn, xo = 0, oo = 0) {
  let o = 0;
  for (; o + 7 < nOut; o += 8) {
    const r0 = o * nIn, r1 = r0 + nIn, r2 = r1 + nIn, r3 = r2 + nIn, r4 = r3 + nIn, r5 = r4 + nIn, r6 = r5 + nIn, r7 = r6 + nIn;
    let s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    for (let i = 0; i < nIn; i++) {
      const xi = x[xo + i];
      s0 += W[r0 + i] * xi; s1 += W[r1 + i] * xi; s2 += W[r2 + i] * xi; s3 += W[r3 + i] * xi;
      s4 += W[r4 + i] * xi; s5 += W[r5 + i] * xi; s6 += W[r6 + i] * xi; s7 += W[r7 + i] * xi;
    }
    if (b !== null) {
      s0 += b[o]; s1 += b[o + 1]; s2 += b[o + 2]; s3 += b[o + 3]; s4 += b[o + 4]; s5 += b[o + 5]; s6 += b[o + 6]; s7 += b[o + 7];
    }
    const q = oo + o;
    out[q] = s0; out[q + 1] = s1; out[q + 2] = s2; out[q + 3] = s3; out[q + 4] = s4; out[q + 5] = s5; out[q + 6] = s6; out[q + 7] = s7;
  }
  for (; o < nOut; o++) {
    const r = o * nIn;
    let s = 0;
    for (let i = 0; i < nIn; i++) s += W[r + i] * x[xo + i];
    out[oo + o] = b === null ? s : s + b[o];
  }
}

// rows t0..t1-1 of out (T, nOut) = X (T, nIn) W^T + b: matvec's sums in matvec's order (the same
// numbers), four rows of W by two positions at a time, so each row of W is read from memory once
// for all the positions, not once a position (a window's forward is compute-bound, not memory-bound)
function matmul(W, b, X, out, t0, t1, nOut, nIn) {
  if (t1 - t0 === 1) return matvec(W, b, X, out, nOut, nIn, t0 * nIn, t0 * nOut);
  let o = 0;
  for (; o + 3 < nOut; o += 4) {
    const r0 = o * nIn, r1 = r0 + nIn, r2 = r1 + nIn, r3 = r2 + nIn;
    const b0 = b === null ? 0 : b[o], b1 = b === null ? 0 : b[o + 1], b2 = b === null ? 0 : b[o + 2], b3 = b === null ? 0 : b[o + 3];
    let t = t0;
    for (; t + 1 < t1; t += 2) {
      const xa = t * nIn, xb = xa + nIn;
      let a0 = 0, a1 = 0, a2 = 0, a3 = 0, c0 = 0, c1 = 0, c2 = 0, c3 = 0;
      for (let i = 0; i < nIn; i++) {
        const u = X[xa + i], v = X[xb + i];
        let w = W[r0 + i];
        a0 += w * u; c0 += w * v;
        w = W[r1 + i];
        a1 += w * u; c1 += w * v;
        w = W[r2 + i];
        a2 += w * u; c2 += w * v;
        w = W[r3 + i];
        a3 += w * u; c3 += w * v;
      }
      const oa = t * nOut + o, ob = oa + nOut;
      out[oa] = a0 + b0; out[oa + 1] = a1 + b1; out[oa + 2] = a2 + b2; out[oa + 3] = a3 + b3;
      out[ob] = c0 + b0; out[ob + 1] = c1 + b1; out[ob + 2] = c2 + b2; out[ob + 3] = c3 + b3;
    }
    if (t < t1) {
      const xa = t * nIn;
      let a0 = 0, a1 = 0, a2 = 0, a3 = 0;
      for (let i = 0; i < nIn; i++) {
        const u = X[xa + i];
        a0 += W[r0 + i] * u; a1 += W[r1 + i] * u; a2 += W[r2 + i] * u; a3 += W[r3 + i] * u;
      }
      const oa = t * nOut + o;
      out[oa] = a0 + b0; out[oa + 1] = a1 + b1; out[oa + 2] = a2 + b2; out[oa + 3] = a3 + b3;
    }
  }
  for (; o < nOut; o++) {
    const r = o * nIn;
    for (let t = t0; t < t1; t++) {
      let s = 0;
      for (let i = 0; i < nIn; i++) s += W[r + i] * X[t * nIn + i];
      out[t * nOut + o] = b === null ? s : s + b[o];
    }
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
    // with the WebAssembly kernel, the weights (a copy of `numbers`) and forward's buffers live in its
    // memory, where it reads them
    const heap = this.kernelMemory(numbers.length + 11 * B * C);
    let at = 0;
    const take = (n) => (heap ? heap.subarray(at, (at += n)) : new Float32Array(n));
    if (heap) {
      heap.set(numbers);
      numbers = take(numbers.length);
    }
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
    // working buffers of block_size positions, allocated once: no allocation per token
    this.x = take(B * C); this.h = take(B * C); this.y = take(B * C);
    this.qkv = take(B * 3 * C); this.att = take(B * C); this.ff = take(B * 4 * C);
    this.scores = new Float32Array(B); this.acc = new Float64Array(this.hs); this.rot = new Float32Array(this.hs);
    this.one = new Int32Array(1);
  }

  // a Float32Array of n numbers over a WebAssembly memory, with this.kernel the matmul instance that
  // reads it; null (and no kernel) without WebAssembly SIMD or where the memory cannot be had
  kernelMemory(n) {
    this.kernel = null;
    if (MATMUL_MODULE === null) return null;
    try {
      const memory = new WebAssembly.Memory({ initial: Math.ceil((4 * n) / 65536) });
      this.kernel = new WebAssembly.Instance(MATMUL_MODULE, { env: { memory } }).exports.matmul;
      this.memory = memory;
      return new Float32Array(memory.buffer, 0, n);
    } catch (e) {
      return null; // a memory too large for this browser: the JavaScript loops
    }
  }

  // matmul over rows t0..t1-1, in the WebAssembly kernel where it runs, the shapes are multiples of 4
  // and every array is in its memory (a single position goes to matvec, as matmul sends it)
  mm(W, b, X, out, t0, t1, nOut, nIn) {
    const mem = this.kernel === null ? null : this.memory.buffer;
    const inMemory = mem !== null && W.buffer === mem && X.buffer === mem && out.buffer === mem && (b === null || b.buffer === mem);
    if (inMemory && t1 - t0 > 1 && nOut % 4 === 0 && nIn % 4 === 0) {
      this.kernel(W.byteOffset, b === null ? 0 : b.byteOffset, b === null ? 0 : 1, X.byteOffset, out.byteOffset, t0, t1, nOut, nIn);
    } else {
      matmul(W, b, X, out, t0, t1, nOut, nIn);
    }
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

  // model.qk_norm: each head's query and key (the 2C numbers of v from offset o) scaled to RMS 1
  qkNorm(v, o) {
    const hs = this.hs, eps = this.cfg.qk_norm_eps;
    for (let s = o; s < o + 2 * this.C; s += hs) {
      let ss = 0;
      for (let i = 0; i < hs; i++) ss += v[s + i] * v[s + i];
      const inv = 1 / Math.sqrt(ss / hs + eps);
      for (let i = 0; i < hs; i++) v[s + i] *= inv;
    }
  }

  // one head's attention of the query at `pos` (row t of this.qkv) over keys 0..pos of layer l,
  // into row t of this.att
  attendHead(cache, l, hd, pos, t, record, trace) {
    const { C, B, hs, qkv, scores, acc, att } = this;
    const qo = t * 3 * C + hd * hs, ho = hd * hs, scale = 1 / Math.sqrt(hs), K = cache.k, Vc = cache.v;
    let max = -Infinity;
    for (let j = 0; j <= pos; j++) {
      const kb = (l * B + j) * C + ho;
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
      const w = scores[j] / sum, vb = (l * B + j) * C + ho;
      scores[j] = w;
      for (let d = 0; d < hs; d++) acc[d] += w * Vc[vb + d];
    }
    if (trace) trace("weights", l, scores.subarray(0, pos + 1), hd);
    for (let d = 0; d < hs; d++) att[t * C + ho + d] = acc[d];
    if (record) record.set(scores.subarray(0, pos + 1), (l * this.nh + hd) * B);
  }

  // LayerNorm of rows t0..t1-1 of x (T, C) into out (in place when out is x)
  norm(x, w, b, out, t0, t1) {
    const C = this.C;
    for (let t = t0; t < t1; t++) layerNorm(x.subarray(t * C, (t + 1) * C), w, b, out.subarray(t * C, (t + 1) * C), C);
  }

  // the next position: token `id` at position cache.len, its keys and values cached; with
  // wantLogits, the logits of the token after it in cache.logits (forward of one token)
  step(cache, id, wantLogits, trace = null) {
    this.one[0] = id;
    this.forward(cache, this.one, wantLogits, trace);
  }

  // the next ids.length positions (a prompt, a window: a "prefill"), from cache.len on, layer by
  // layer: each weight matrix is read once for all of them (matmul), not once a position, and the
  // numbers are step's, position by position. With wantLogits, the logits after the last id in
  // cache.logits. `trace`, when given, is called trace(name, layer, values, head) at each stage with
  // a view of the last position's numbers there (explain.js copies what it keeps), and once a layer
  // as trace("qkv_rows", layer, values) with every new position's q, k, v (n, 3C): the one forward
  // pass, watched, not a second copy of it
  forward(cache, ids, wantLogits, trace = null) {
    const { C, B, x, h } = this, n = ids.length, p0 = cache.len;
    if (p0 + n > B) throw new Error(`position ${p0 + n - 1} is past block_size ${B}`);
    for (let t = 0; t < n; t++) {
      const e = ids[t] * C, pos = p0 + t, r = t * C;
      for (let c = 0; c < C; c++) x[r + c] = this.wte[e + c];
      if (this.wpe) for (let c = 0; c < C; c++) x[r + c] += this.wpe[pos * C + c];
      if (this.posTable) for (let c = 0; c < C; c++) x[r + c] += this.posTable[pos * C + c];
    }
    const last = x.subarray((n - 1) * C, n * C), lastH = h.subarray((n - 1) * C, n * C);
    if (trace) trace("embed", -1, last);
    for (let l = 0; l < this.L; l++) this.block(cache, l, ids, wantLogits ? cache.attention : null, trace);
    cache.ids.set(ids, p0);
    cache.len = p0 + n;
    if (!wantLogits) return;
    if (trace && this.pre) trace("ln_f_in", -1, last);
    if (this.pre) layerNorm(last, this.lnfW, this.lnfB, lastH, C);
    if (trace) trace("ln_f", -1, this.pre ? lastH : last);
    matvec(this.wte, null, this.pre ? lastH : last, cache.logits, this.V, C); // the head is tied to the embedding
    const cap = this.cfg.logit_softcap, lg = cache.logits;
    if (cap > 0) for (let i = 0; i < this.V; i++) lg[i] = cap * Math.tanh(lg[i] / cap); // model.logit_softcap
    if (trace) trace("logits", -1, lg);
  }

  // block l over forward's positions (rows 0..n-1 of the buffers, positions cache.len on); trace and
  // record see the last one. In the last block only the last position goes past its keys and values:
  // nothing reads the others' outputs
  block(cache, l, ids, record, trace) {
    const { C, B, x, h, y, qkv, att, ff, pre } = this, P = this.layers[l], n = ids.length, p0 = cache.len, z = n - 1;
    const row = (a, w) => a.subarray(z * w, n * w); // the last position's numbers
    const t0 = l === this.L - 1 ? z : 0;
    if (trace) trace("in", l, row(x, C));
    if (pre) this.norm(x, P.ln1w, P.ln1b, h, 0, n);
    if (trace && pre) trace("ln1", l, row(h, C));
    this.mm(P.qkvW, P.qkvB, pre ? h : x, qkv, 0, n, 3 * C, C);
    if (trace) trace("c_attn", l, row(qkv, 3 * C));
    for (let t = 0; t < n; t++) {
      const o = t * 3 * C, base = (l * B + p0 + t) * C;
      if (this.cfg.qk_norm) this.qkNorm(qkv, o);
      if (this.cos) this.rope(qkv, o, 2 * C, p0 + t);
      if (P.ve) for (let c = 0, e = ids[t] * C; c < C; c++) qkv[o + 2 * C + c] += P.veMix * P.ve[e + c]; // model.value_embeds
      cache.k.set(qkv.subarray(o + C, o + 2 * C), base);
      cache.v.set(qkv.subarray(o + 2 * C, o + 3 * C), base);
    }
    if (trace) trace("qkv", l, row(qkv, 3 * C));
    if (trace) trace("qkv_rows", l, qkv.subarray(0, n * 3 * C));
    for (let t = t0; t < n; t++) {
      for (let hd = 0; hd < this.nh; hd++) this.attendHead(cache, l, hd, p0 + t, t, t === z ? record : null, t === z ? trace : null);
    }
    if (trace) trace("heads", l, row(att, C));
    this.mm(P.projW, P.projB, att, y, t0, n, C, C);
    if (trace) trace("attn_out", l, row(y, C));
    for (let i = t0 * C; i < n * C; i++) x[i] += y[i];
    if (trace) trace("mid", l, row(x, C));
    if (!pre) this.norm(x, P.ln1w, P.ln1b, x, t0, n);
    if (trace && !pre) trace("ln1", l, row(x, C));
    if (this.cfg.attn_only) return; // model.attn_only: no ln_2, no MLP
    if (pre) this.norm(x, P.ln2w, P.ln2b, h, t0, n);
    if (trace && pre) trace("ln2", l, row(h, C));
    this.mm(P.fcW, P.fcB, pre ? h : x, ff, t0, n, 4 * C, C);
    if (trace) trace("c_fc", l, row(ff, 4 * C));
    if (this.relu2) for (let i = t0 * 4 * C; i < n * 4 * C; i++) { const r = ff[i] > 0 ? ff[i] : 0; ff[i] = r * r; }
    else for (let i = t0 * 4 * C; i < n * 4 * C; i++) ff[i] = gelu(ff[i]);
    if (trace) trace("act", l, row(ff, 4 * C));
    this.mm(P.fc2W, P.fc2B, ff, y, t0, n, C, 4 * C);
    if (trace) trace("mlp_out", l, row(y, C));
    for (let i = t0 * C; i < n * C; i++) x[i] += y[i];
    if (trace) trace("out", l, row(x, C));
    if (!pre) this.norm(x, P.ln2w, P.ln2b, x, t0, n);
    if (trace && !pre) trace("ln2", l, row(x, C));
  }

  // make the cache hold ids[0..n) (n at most block_size) and its logits those after the last one.
  // Positions the cache already holds for the same leading ids are kept (causal: they cannot change);
  // the rest go through one forward
  sync(cache, ids, n = ids.length) {
    let p = 0;
    while (p < cache.len && p < n && cache.ids[p] === ids[p]) p++;
    cache.len = Math.min(p, n - 1);
    this.forward(cache, ids.subarray ? ids.subarray(cache.len, n) : ids.slice(cache.len, n), true);
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
