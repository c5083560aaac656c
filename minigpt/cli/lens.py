"""`minigpt lens`: the command's options and terminal view (the lens itself: inspect/lens.py, docs/inside.md)."""

from __future__ import annotations

import json
import math
import shutil
import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from minigpt.cli.options import DeviceOpt, HtmlOpt, TargetArg, ThreadsOpt, UnknownOpt, inference_device, wants_colour
from minigpt.errors import UserError
from minigpt.inspect.pages import UNIT_WORDS, VISIBLE, check_output

if TYPE_CHECKING:
    from minigpt.inspect.lens import Lens

MAX_DETAIL = 32  # a text of at most this many tokens shows every position's top guesses; a longer one its last few
LONG_DETAIL = 8
LN2 = math.log(2)


def lens_cmd(
    target: TargetArg,
    text: Annotated[
        str | None, typer.Option("--text", help="The text to look at (its first block_size characters).")
    ] = None,
    file: Annotated[Path | None, typer.Option("--file", help="Look at this UTF-8 file instead.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object: per layer, each position's top 5 and loss (nats).")
    ] = False,
    html: HtmlOpt = None,
    at: Annotated[
        list[int] | None,
        typer.Option(
            "--at",
            metavar="POS",
            show_default=False,
            help="Show the top 5 at this position (0-based, -1 the last; repeatable).",
        ),
    ] = None,
    top: Annotated[
        bool,
        typer.Option(
            "--top",
            help="Also show each layer's top 5 guesses with their probabilities: at every position of a short "
            "text, the last few of a longer one.",
        ),
    ] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="No colours, even on a terminal.")] = False,
    unknown: UnknownOpt = "error",
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = 0,
) -> None:
    """The logit lens: what the model would predict if it stopped after each layer (the last is its output).

    Shows each layer's bits per character beside a uniform guess's, and its top guess after every
    character; --top or --at adds the top 5 guesses with their probabilities (docs/inside.md).
    """
    from minigpt.cli.pages import text_input
    from minigpt.infer.loading import load_model, source_line
    from minigpt.inspect.lens import lens_html, lens_of

    text, label = text_input(text, file)
    check_output(html)
    loaded = load_model(target, inference_device(device, threads))
    lens = lens_of(loaded, text, label, unknown)
    positions = detail_positions(len(lens.chars), at) if top or at else []
    if lens.dropped:
        print(
            f"note: the lens reads the first {len(lens.chars)} {UNIT_WORDS[lens.unit]} (block_size); "
            f"{lens.dropped:,} more not read",
            file=sys.stderr,
        )
    if html is not None:
        page = lens_html(lens, loaded.tokenizer, source_line(loaded))
        print(f"wrote {page.save(html)}: {page.summary} (from {loaded.path})", file=sys.stderr)
    if as_json:
        print(json.dumps(lens.to_dict(), ensure_ascii=False))
    elif html is None:
        colour = wants_colour(no_color)
        width = shutil.get_terminal_size((100, 24)).columns
        print(lens_terminal(lens, colour, source_line(loaded), positions, width, loaded.tokenizer.vocab_size))


def detail_positions(n: int, at: list[int] | None) -> list[int]:
    """Positions whose top 5 are shown: `--at` (negative: from the end), else all of a short text, else the last few."""
    if not at:
        return list(range(n)) if n <= MAX_DETAIL else list(range(n - LONG_DETAIL, n))
    for p in at:
        if not -n <= p < n:
            raise UserError(f"--at {p} is not a position of the text: it has {n} (0..{n - 1}, or -{n}..-1)")
    return sorted({p % n for p in at})


def _shown(c: str) -> str:
    return "\u00b7" if c == "" else VISIBLE.get(c, c)


def _paint(s: str, bits: float, colour: bool) -> str:
    """`s` on the surprise colour of `bits` (as `minigpt score`), white text; plain without colour."""
    from minigpt.cli.pages import paint

    return paint(s, bits) if colour else s


def lens_terminal(
    lens: Lens, colour: bool, source: str, positions: list[int], width: int = 100, vocab: int | None = None
) -> str:
    """The lens on a terminal: each layer's bits per character (beside a uniform guess over the
    `vocab` ids, and why a layer can do worse); each layer's top guess after every character, under
    the character that came; the top 5 at `positions` (none: how to see them)."""
    names = [*lens.layers[:-1], f"{lens.layers[-1]} = output"]
    pad = max(len(n) for n in names) + 2
    units = UNIT_WORDS[lens.unit]
    lines = [f"logit lens over {len(lens.chars):,} {units}: {source}", "", f"{'layer':<{pad}}bits/{lens.unit}"]
    lines += [f"{n:<{pad}}{b:>9.3f}" for n, b in zip(names, lens.bits_per_char)]
    if vocab:  # the uniform guess's row under the layers', and why a layer above it is no mistake
        uniform = math.log2(vocab)
        lines.append(f"{'uniform guess':<{pad}}{uniform:>9.3f}  (1 in {vocab}: a model that knows nothing)")
        worse = [name for name, b in zip(lens.layers, lens.bits_per_char) if b > uniform]
        if worse:
            why = (
                f"{' and '.join(worse)} {'scores' if len(worse) == 1 else 'score'} worse than uniform: the output "
                "head is the embedding matrix (tied), so a stream still close to the embeddings guesses the "
                "character it is on, confidently; the blocks move it toward the next one (docs/inside.md)"
            )
            lines += textwrap.wrap(why, 100)
    painted = " (on its surprise at the character that came)" if colour else ""
    lines += ["", f"each layer's top guess after each character, in line with the character that came{painted}"]
    lines += _grid(lens, names, pad, colour, max(8, width - pad))
    if not positions:
        return "\n".join([*lines, "", "each layer's top 5 guesses: --top (each position), --at POS, --json or --html"])
    lines += ["", "top 5 guesses at each position; [x] is the character that came"]
    if len(positions) < len(lens.chars):
        lines[-1] += (
            f" (positions {_ranges(positions)} of 0..{len(lens.chars) - 1}; --at POS for others, "
            "--json or --html for all)"
        )
    for i in positions:
        lines += _detail(lens, names, pad, colour, i)
    return "\n".join(lines)


def _grid(lens: Lens, names: list[str], pad: int, colour: bool, width: int) -> list[str]:
    """Rows aligned by position, `width` columns at a time: the text, what came next, then each
    layer's top guess (on its surprise at what came, with colour)."""
    n = len(lens.chars)
    came = [_shown(c) for c in lens.chars[1:]] + ["\u2026"]  # … : what comes after the text is not known
    out = []
    for start in range(0, n, width):
        end = min(n, start + width)
        out += [
            "",
            f"{'text':<{pad}}" + "".join(_shown(c) for c in lens.chars[start:end]),
            f"{'came':<{pad}}" + "".join(came[start:end]),
        ]
        for layer, name in enumerate(names):
            cells = []
            for i in range(start, end):
                guess = _shown(lens.top_chars[layer][i][0])[:1]  # a byte model's 0xNN shows as its 0
                cells.append(_paint(guess, lens.loss[layer][i] / LN2, colour) if i < n - 1 else guess)
            out.append(f"{name:<{pad}}" + "".join(cells))
    return out[1:]


def _detail(lens: Lens, names: list[str], pad: int, colour: bool, i: int) -> list[str]:
    """Position i: the character, what came after it, and each layer's surprise and top 5."""
    last = i == len(lens.chars) - 1
    came = "what comes after the text" if last else repr(lens.chars[i + 1])
    out = [f"#{i} {lens.chars[i]!r} -> {came}"]
    for layer, name in enumerate(names):
        bits = " " * 11 if last else _paint(f"{lens.loss[layer][i] / LN2:6.2f} bits", lens.loss[layer][i] / LN2, colour)
        guesses = []
        for c, p, tid in zip(lens.top_chars[layer][i], lens.top_probs[layer][i], lens.top_ids[layer][i]):
            g = f"{_shown(c)} {p:.3f}"
            if not last and tid == lens.ids[i + 1]:
                g = f"\x1b[1m[{g}]\x1b[0m" if colour else f"[{g}]"
            else:
                g = f" {g} "
            guesses.append(g)
        out.append((f"  {name:<{pad}}{bits}  " + " ".join(guesses)).rstrip())
    return out


def _ranges(positions: list[int]) -> str:
    """1, 2, 3, 7 -> '1-3, 7'."""
    parts, start = [], None
    for k, p in enumerate(positions):
        if start is None:
            start = p
        if k + 1 == len(positions) or positions[k + 1] != p + 1:
            parts.append(str(start) if start == p else f"{start}-{p}")
            start = None
    return ", ".join(parts)
