// Shared by the attention explorer and the playground: one colour per head, the viridis ramp of
// the heat maps, and a character's background as one band per shown head, as strong as its weight.
const PALETTE = [[78, 121, 167], [242, 142, 43], [225, 87, 89], [89, 161, 79], [176, 122, 161],
  [118, 183, 178], [237, 201, 72], [255, 157, 167], [156, 117, 95], [186, 176, 172]];
function hueRgb(h) { // more heads than the palette: evenly spread hues
  const f = (n) => { const k = (n + h / 30) % 12; return Math.round(255 * (0.5 - 0.35 * Math.max(-1, Math.min(k - 3, 9 - k, 1)))); };
  return [f(0), f(8), f(4)];
}
function headColour(h) { return h < PALETTE.length ? PALETTE[h] : hueRgb((h * 137.5) % 360); }
const rgb = (c, a) => `rgba(${c[0]},${c[1]},${c[2]},${a.toFixed(3)})`;
const VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137],
  [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
function viridis(v) {
  const x = Math.max(0, Math.min(1, v)) * (VIRIDIS.length - 1), k = Math.min(VIRIDIS.length - 2, Math.floor(x)), f = x - k;
  return VIRIDIS[k].map((a, n) => Math.round(a + (VIRIDIS[k + 1][n] - a) * f));
}
// colours: one [r, g, b] per band; vals: each band's weight; gain: the contrast
function headBands(colours, vals, gain) {
  const alpha = (v) => Math.min(1, v * gain);
  if (colours.length === 1) return rgb(colours[0], alpha(vals[0]));
  const n = colours.length;
  const stops = colours.map((c, k) => `${rgb(c, alpha(vals[k]))} ${(100 * k) / n}% ${(100 * (k + 1)) / n}%`);
  return `linear-gradient(to bottom, ${stops.join(", ")})`;
}
// the surprise colours (page.css .b0 .. .b8): one step per whole bit of -log2 p, as `minigpt score`
const surpriseStep = (bits) => Math.min(8, Math.floor(bits));
