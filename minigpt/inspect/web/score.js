// The surprise view. DATA: source, unit, pieces, ids, bits (bits[k - 1] is token k's surprise,
// -log2 p; token 0 has nothing before it), topIds / topProbs (the model's likeliest tokens at each
// scored position), labels (id -> how a guess is shown), bitsPerChar, totalBits.
const PIECES = DATA.pieces, N = PIECES.length, UNIT = DATA.unit === "char" ? "character" : DATA.unit;
const textEl = byId("text"), spans = buildText(textEl, PIECES), where = lineIndex(PIECES);
const step = surpriseStep;

byId("source").textContent = DATA.source;
byId("bpc").innerHTML = `${DATA.bitsPerChar.toFixed(3)} <small>bits per ${UNIT}</small>`;
byId("counts").textContent = `over ${num(N - 1)} ${UNIT}s (${DATA.totalBits.toFixed(1)} bits in all; ` +
  `perplexity ${Math.pow(2, DATA.bitsPerChar).toFixed(2)})`;
byId("legend").innerHTML = "expected&nbsp;" +
  [0, 1, 2, 3, 4, 5, 6, 7, 8].map((b) => `<span class="box b${b}" title="${b}${b === 8 ? " or more" : ""} bits">${b}${b === 8 ? "+" : ""}</span>`).join("") +
  "&nbsp;surprising (bits)";
spans[0].classList.add("first");
for (let k = 1; k < N; k++) spans[k].classList.add("b" + step(DATA.bits[k - 1]));

function tipHtml(k) {
  const head = `<span class="ch">${esc(visible(PIECES[k]))}</span> #${k} · ${where(k)}`;
  if (k === 0) return `${head}<br>the first ${UNIT}: nothing before it to predict it from, so it is not scored`;
  const bits = DATA.bits[k - 1], p = Math.pow(2, -bits), ids = DATA.topIds[k - 1], probs = DATA.topProbs[k - 1];
  const rows = ids.map((id, n) => `<tr${id === DATA.ids[k] ? ' class="actual"' : ""}><td><span class="ch">${esc(DATA.labels[id])}</span></td>` +
    `<td class="num">${prob(probs[n])}</td><td><span class="bar" style="width:${Math.max(1, Math.round(probs[n] * 90))}px"></span></td></tr>`);
  const missing = ids.includes(DATA.ids[k]) ? "" : `<br>(the ${UNIT} that came is not among them)`;
  return `${head}<br><b>p = ${prob(p)}</b> · <b>${bits.toFixed(2)} bits</b>` +
    `<div style="margin-top:4px">the model's top ${ids.length} guesses here:</div><table>${rows.join("")}</table>${missing}`;
}
textEl.addEventListener("mouseover", (e) => { if (e.target._i !== undefined) showTip(tipHtml(e.target._i), e.clientX, e.clientY); });
textEl.addEventListener("mousemove", (e) => { if (e.target._i !== undefined && TIP.style.display === "block") showTip(TIP.innerHTML, e.clientX, e.clientY); });
textEl.addEventListener("mouseleave", hideTip);

// the most surprising characters, each a link to its place in the text
const worst = DATA.bits.map((b, k) => [k + 1, b]).sort((a, b) => b[1] - a[1]).slice(0, 10);
let flashed = null;
byId("worst").querySelector("ol").innerHTML = worst.map(([k, b]) =>
  `<li data-k="${k}"><span class="ch b${step(b)}">${esc(visible(PIECES[k]))}</span> #${k}: ${b.toFixed(2)} bits</li>`).join("");
byId("worst").addEventListener("click", (e) => {
  const li = e.target.closest("li");
  if (!li) return;
  const s = spans[Number(li.dataset.k)];
  if (flashed) flashed.classList.remove("flash");
  s.classList.add("flash");
  flashed = s;
  s.scrollIntoView({ block: "center" });
  const box = s.getBoundingClientRect();
  showTip(tipHtml(s._i), box.left, box.bottom - 12);
});
byId("note").innerHTML = `Each ${UNIT} is coloured by the model's surprise at it, in bits (\u2212log\u2082 of the probability it gave it), one step of colour per bit; ` +
  `hover one for its probability and the model's top guesses. The first ${UNIT} (underlined) is not scored. ` +
  `A text longer than the model's context is scored in windows that advance by half a window, so each ${UNIT} has at least half a window before it.`;
