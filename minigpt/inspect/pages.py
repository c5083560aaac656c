"""Self-contained HTML pages for looking inside a model: the attention explorer and the surprise view.

Each page is one file: its CSS and JavaScript (minigpt/inspect/web/) are inlined and its data embedded as
JSON, so it opens from disk with no network (nothing is fetched from a CDN). In a Jupyter notebook
the same page is shown in an iframe (`HtmlPage._repr_html_`), which keeps its styles and script
apart from the notebook's own. No torch here: the pages are built from plain numbers.
"""

from __future__ import annotations

import base64
import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minigpt.errors import UserError
from minigpt.io.textfiles import read_text

if TYPE_CHECKING:
    from minigpt.data.tokenizer import Tokenizer
    from minigpt.infer.loading import Loaded, Scores
    from minigpt.inspect.attention import WindowedAttention

WEB = Path(__file__).with_name("web")
MAX_PAGE_CHARS = 50_000  # one element per character: beyond this a browser lays the text out slowly
MAX_PAGE_WEIGHTS = 32 * 2**20  # attention weights in one page (one byte each, ~43 MB of HTML at most)
TOP_GUESSES = 5
VISIBLE = {" ": "\u2423", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}  # ␣ ↵ → ␍


@dataclass
class HtmlPage:
    """One page: `save(path)` writes it; in Jupyter it displays itself inline."""

    html: str
    kind: str  # "attention" or "score"
    summary: str  # one line: what the page shows
    height: int = 800  # pixels of the iframe a notebook shows it in (the explorer: text, panel and heat map)

    def save(self, path: str | Path) -> Path:
        return write_html(self.html, Path(path))

    def _repr_html_(self) -> str:
        # an iframe keeps the page's CSS, ids and script apart from the notebook's and other outputs'
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" title="minigpt {self.kind}" '
            f'style="width:100%;height:{self.height}px;border:1px solid #ddd;border-radius:4px" '
            'sandbox="allow-scripts"></iframe>'
        )

    def __repr__(self) -> str:
        return f"<minigpt {self.kind} page: {self.summary}; .save('page.html') writes it>"


def check_output(out: Path, flag: str = "--html") -> None:
    """Refuse an output path that cannot be written, before any work is done."""
    if out.is_dir():
        raise UserError(f"cannot write {flag} {out}: it is a folder; give a file name such as {out / 'page.html'}")
    if not out.parent.is_dir():
        raise UserError(f"cannot write {flag} {out}: the folder {out.parent} does not exist")


def write_html(page: str, out: Path) -> Path:
    check_output(out)
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror}") from None
    return out


def check_length(n: int, limit: int, what: str, hint: str = "") -> None:
    if n > limit:
        raise UserError(f"{what} is {n:,} characters; a page holds at most {limit:,}{hint}")


def token_label(tok: Tokenizer, i: int) -> str:
    """A token as a guess is shown: the character (whitespace made visible), or for a byte model
    the character of an ASCII byte and the hex value of any other."""
    if tok.kind == "byte":
        return VISIBLE.get(chr(i), chr(i)) if 32 <= i < 127 or chr(i) in VISIBLE else f"0x{i:02X}"
    c = tok.pieces([i])[0]
    return VISIBLE.get(c, c)


def text_input(text: str | None, file: Path | None) -> tuple[str, str]:
    """The text of `--text TEXT` or `--file FILE` (exactly one), and how errors name it."""
    if (text is None) == (file is None):
        raise UserError("give exactly one of --text TEXT or --file FILE")
    if file is not None:
        return read_text(file, "--file"), f"--file {file}"
    return text, "--text"


def checked_text(tok: Tokenizer, text: str, what: str, unknown: str = "error") -> str:
    """`text` when the model can read it: not empty, and every character one it saw in training;
    with unknown='skip' the others are dropped (the tokenizer's rule, as for `minigpt sample`)."""
    if not text:
        raise UserError(f"{what} is empty; give some text to look at")
    kept = tok.decode(tok.encode_checked(text, what, unknown))
    if not kept:
        raise UserError(f"{what} has no character the model saw in training")
    return kept


def render(kind: str, title: str, data: dict) -> str:
    """The page `web/<kind>.html` with the shared CSS and script, the page's script and `data` inlined."""
    template = (WEB / f"{kind}.html").read_text(encoding="utf-8")
    script = (WEB / "common.js").read_text(encoding="utf-8") + (WEB / f"{kind}.js").read_text(encoding="utf-8")
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    payload = payload.replace("</", "<\\/")  # the text itself may hold "</script>"
    parts = {
        "{{TITLE}}": html.escape(title),
        "{{STYLE}}": (WEB / "page.css").read_text(encoding="utf-8"),
        "{{SCRIPT}}": script,
        "{{DATA}}": payload,
    }
    for key, value in parts.items():
        template = template.replace(key, value, 1)
    return template


def attention_html(att: WindowedAttention, n_layer: int, n_head: int, source: str) -> HtmlPage:
    """The attention explorer for `att`: weights stored as bytes (weight x 255, rounded), each
    window's lower triangle, in the order layer, head, window, row, column."""
    import torch

    tris = []
    for m in att.maps:  # (L', nh', T, T), each window made bytes at once: a quarter of the memory
        rows, cols = torch.tril_indices(m.size(-1), m.size(-1))
        tris.append((m[:, :, rows, cols] * 255).round().clamp(0, 255).to(torch.uint8))
    weights = torch.cat(tris, dim=-1)  # (L', nh', cells)
    data = {
        "source": source,
        "pieces": att.pieces,
        "block": att.block,
        "stride": att.stride,
        "layers": att.layers,
        "heads": att.heads,
        "nLayer": n_layer,
        "nHead": n_head,
        "weights": base64.b64encode(weights.numpy().tobytes()).decode("ascii"),
    }
    n = len(att.pieces)
    title = f"attention: {_snippet(att.pieces)}"
    summary = f"{n:,} characters, {len(att.layers)} layer(s) x {len(att.heads)} head(s), {len(att.maps)} window(s)"
    return HtmlPage(render("attention", title, data), "attention", summary)


def score_html(scores: Scores, tok: Tokenizer, source: str) -> HtmlPage:
    """The text coloured by surprise, with each character's probability, bits and top guesses."""
    if not scores.top_ids:
        raise ValueError("score_html needs scores with top guesses: score_text(loaded, text, top=5)")
    seen = sorted({i for row in scores.top_ids for i in row} | set(scores.ids))
    data = {
        "source": source,
        "unit": scores.unit,
        "pieces": scores.text,
        "ids": scores.ids,
        "bits": [round(b, 4) for b in scores.bits],
        "topIds": scores.top_ids,
        "topProbs": [[round(p, 5) for p in row] for row in scores.top_probs],
        "labels": {i: token_label(tok, i) for i in seen},
        "bitsPerChar": scores.bits_per_char,
        "totalBits": sum(scores.bits),
    }
    unit = "character" if scores.unit == "char" else scores.unit
    summary = f"{scores.bits_per_char:.3f} bits per {unit} over {len(scores.bits):,} {unit}s"
    return HtmlPage(render("score", f"surprise: {_snippet(scores.text)}", data), "score", summary, height=520)


def score_page(loaded: Loaded, text: str, what: str = "--text", unknown: str = "error") -> HtmlPage:
    """The surprise page of `text`: `score_text` with the top guesses, as `minigpt score` computes it."""
    from minigpt.infer.loading import score_text

    text = checked_text(loaded.tokenizer, text, what, unknown)
    check_length(len(text), MAX_PAGE_CHARS, what)
    scores = score_text(loaded, text, top=TOP_GUESSES)
    return score_html(scores, loaded.tokenizer, source_line(loaded))


SURPRISE_RAMP = [22, 28, 64, 100, 136, 172, 166, 160, 124]  # ANSI 256 colours, dark green .. dark red


def score_terminal(scores: Scores, colour: bool, source: str) -> str:
    """`minigpt score`'s text: the characters on backgrounds from green (expected) to red
    (surprising), one step per whole bit and white text on all, or plain columns (position,
    character, bits); then the bits per character."""
    if colour:
        shown = [scores.text[0]]
        for c, b in zip(scores.text[1:], scores.bits):
            code = SURPRISE_RAMP[min(len(SURPRISE_RAMP) - 1, int(b))]
            mark = "\u21b5" if c == "\n" else c  # a line break shows as a coloured arrow, then breaks
            shown.append(f"\x1b[48;5;{code}m\x1b[97m{mark}\x1b[0m" + ("\n" if c == "\n" else ""))
        lines = ["".join(shown)]
    else:
        pairs = enumerate(zip(scores.text[1:], scores.bits), start=1)
        lines = ["pos\tchar\tbits", *(f"{i}\t{c!r}\t{b:.3f}" for i, (c, b) in pairs)]
    total = f"{sum(scores.bits):,.1f} bits in all; {source}"
    unit = "characters" if scores.unit == "char" else "bytes"
    summary = f"{scores.bits_per_char:.4f} bits/{scores.unit} over {len(scores.bits):,} {unit} ({total})"
    return "\n".join([*lines, summary])


def source_line(loaded: Loaded) -> str:
    """Which model a page shows: its checkpoint, step and validation loss."""
    ckpt = loaded.checkpoint
    val = f", val loss {ckpt.val_loss:.4f}" if isinstance(ckpt.val_loss, float) else ""
    cfg = loaded.config.model
    shape = f"{cfg.n_layer} layers x {cfg.n_head} heads, context {cfg.block_size}, pos_emb {cfg.pos_emb}"
    return f"{loaded.path} (step {ckpt.step}{val}; {shape})"


def _snippet(pieces: list[str], n: int = 40) -> str:
    text = " ".join("".join(pieces[: n + 1]).split())
    return text[:n] + ("..." if len(text) > n else "")
