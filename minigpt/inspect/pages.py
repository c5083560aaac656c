"""Self-contained HTML pages from plain numbers (no torch here): the page shell and the surprise view;
CSS and JavaScript (web/) inlined and data embedded as JSON, so a page opens from disk with no network."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minigpt.errors import UserError
from minigpt.io.atomic import atomic_open

if TYPE_CHECKING:
    from minigpt.data.tokenizer import Tokenizer
    from minigpt.infer.score import Scores

WEB = Path(__file__).with_name("web")
MAX_PAGE_CHARS = 50_000  # one element per character: beyond this a browser lays the text out slowly
MAX_PAGE_WEIGHTS = 32 * 2**20  # attention weights in one page (one byte each, ~43 MB of HTML at most)
TOP_GUESSES = 5
# the scripts a page runs besides common.js, heads.js (head colours, viridis, surprise steps) and its own
MORE_SCRIPTS = {"playground": ("gpt.js", "explain.js")}
MORE_STYLES = {"playground": ("explain.css",)}  # and the page's own CSS after page.css
VISIBLE = {" ": "\u2423", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}  # ␣ ↵ → ␍
UNIT_WORDS = {"char": "characters", "byte": "bytes"}  # a tokenizer's unit, counted in words


@dataclass
class HtmlPage:
    """One page: `save(path)` writes it; in Jupyter it displays itself inline."""

    html: str
    kind: str  # what the page shows: "attention", "score", "heads", ...
    summary: str  # one line: what the page shows
    height: int = 800  # pixels of the iframe a notebook shows it in (the explorer: text, panel and heat map)

    def save(self, path: str | Path) -> Path:
        """Write the page atomically: a failure leaves `path` as it was and no partial file."""
        out = Path(path)
        check_output(out, "")
        try:
            with atomic_open(out) as f:
                f.write(self.html.encode("utf-8"))
        except OSError as e:
            raise UserError(f"cannot write {out}: {e.strerror or e}; nothing was written") from None
        return out

    def _repr_html_(self) -> str:
        # an iframe keeps the page's CSS, ids and script apart from the notebook's and other outputs'
        return (
            f'<iframe srcdoc="{html.escape(self.html, quote=True)}" title="minigpt {self.kind}" '
            f'style="width:100%;height:{self.height}px;border:1px solid #ddd;border-radius:4px" '
            'sandbox="allow-scripts"></iframe>'
        )

    def __repr__(self) -> str:
        return f"<minigpt {self.kind} page: {self.summary}; .save('page.html') writes it>"


def check_output(out: Path | None, flag: str = "--html") -> None:
    """Refuse an output path (of option `flag`, if any) that cannot be written, before any work is done; None passes."""
    if out is None:
        return
    what = f"{flag} {out}" if flag else str(out)
    if out.is_dir():
        raise UserError(f"cannot write {what}: it is a folder; give a file name such as {out / 'page.html'}")
    if not out.parent.is_dir():
        raise UserError(f"cannot write {what}: the folder {out.parent} does not exist")


def check_length(n: int, limit: int, label: str, hint: str = "") -> None:
    if n > limit:
        raise UserError(f"{label} is {n:,} characters; a page holds at most {limit:,}{hint}")


def token_label(tok: Tokenizer, i: int) -> str:
    """A token as a guess is shown: the character, whitespace made visible (a byte model: ASCII, else hex)."""
    if tok.kind == "byte":
        return VISIBLE.get(chr(i), chr(i)) if 32 <= i < 127 or chr(i) in VISIBLE else f"0x{i:02X}"
    c = tok.pieces([i])[0]
    return VISIBLE.get(c, c)


def render(kind: str, title: str, data: dict) -> str:
    """One page: the shell web/page.html around web/<kind>.html, its CSS, scripts and `data` (JSON) inlined."""
    scripts = ("common.js", "heads.js", *MORE_SCRIPTS.get(kind, ()), f"{kind}.js")
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    parts = {
        "TITLE": html.escape(title),
        "STYLE": "".join(map(_read, ("page.css", f"{kind}.css", *MORE_STYLES.get(kind, ())))),
        "BODY": _read(f"{kind}.html"),
        "DATA": payload.replace("</", "<\\/"),  # the text itself may hold "</script>"
        "SCRIPT": "".join(map(_read, scripts)),
    }
    # one pass over the shell: what is put in (a title, the text) is never searched for more {{...}}
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: parts[m[1]], _read("page.html"))


def _read(name: str) -> str:
    return (WEB / name).read_text(encoding="utf-8")


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


def _snippet(pieces: list[str], n: int = 40) -> str:
    text = " ".join("".join(pieces[: n + 1]).split())
    return text[:n] + ("..." if len(text) > n else "")
