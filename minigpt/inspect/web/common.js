"use strict";
// Shared by minigpt's pages: the embedded data, the text as one element per token, the tooltip.
const DATA = JSON.parse(document.getElementById("minigpt-data").textContent);
const VISIBLE = { " ": "\u2423", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d" };

function visible(c) { return c === "" ? "\u00b7" : (VISIBLE[c] || c); }
function quoted(c) { return "\u2018" + visible(c) + "\u2019"; }
function esc(s) { return String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]); }
function num(x) { return x.toLocaleString("en-US"); }
function prob(p) { return p >= 0.01 ? p.toFixed(3) : p.toPrecision(2); }
function byId(id) { return document.getElementById(id); }

// One span per token; `span._i` is its position. A line break shows as a faint arrow, then breaks;
// a byte model's bytes before a character's last byte show as thin marks (they hold no character).
function buildText(container, pieces) {
  const frag = document.createDocumentFragment();
  const spans = new Array(pieces.length);
  for (let i = 0; i < pieces.length; i++) {
    const s = document.createElement("span");
    const c = pieces[i];
    s.className = "t";
    if (c === "\n") { s.textContent = "\u21b5\n"; s.className = "t nl"; }
    else if (c === "") s.className = "t cont";
    else s.textContent = c;
    s._i = i;
    spans[i] = s;
    frag.appendChild(s);
  }
  container.appendChild(frag);
  return spans;
}

// Where token i sits: "line L, column C" over the pieces, counted once.
function lineIndex(pieces) {
  const line = new Int32Array(pieces.length), col = new Int32Array(pieces.length);
  let l = 1, c = 1;
  for (let i = 0; i < pieces.length; i++) {
    line[i] = l; col[i] = c;
    if (pieces[i] === "\n") { l++; c = 1; } else if (pieces[i] !== "") c++;
  }
  return (i) => "line " + line[i] + ", col " + col[i];
}

const TIP = document.createElement("div");
TIP.className = "tip";
TIP.id = "tip";
document.body.appendChild(TIP);
function showTip(html, x, y) {
  TIP.innerHTML = html;
  TIP.style.display = "block";
  const w = TIP.offsetWidth, h = TIP.offsetHeight;
  const left = Math.min(x + 14, window.innerWidth - w - 6), top = y + 18 + h > window.innerHeight ? y - h - 10 : y + 18;
  TIP.style.left = Math.max(4, left) + "px";
  TIP.style.top = Math.max(4, top) + "px";
}
function hideTip() { TIP.style.display = "none"; }

function segmented(container, labels, selected, onPick) {
  container.innerHTML = "";
  const buttons = labels.map((label, k) => {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.addEventListener("click", () => { buttons.forEach((x, j) => x.classList.toggle("on", j === k)); onPick(k); });
    container.appendChild(b);
    return b;
  });
  buttons[selected].classList.add("on");
  return buttons;
}
