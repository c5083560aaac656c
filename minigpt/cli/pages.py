"""What `minigpt score` and `minigpt attention` do around the pages: the text they read (--text or
--file), the files they write, and the coloured text score prints on a terminal."""

from __future__ import annotations

from pathlib import Path

from minigpt.config.schema import DataConfig
from minigpt.data.records import RecordRules, file_format, joined_text
from minigpt.data.tokenizer import checked_text
from minigpt.errors import UserError
from minigpt.infer.loading import LoadedModel, source_line
from minigpt.infer.score import Scores
from minigpt.inspect.attention import attention_page, write_attention_png
from minigpt.inspect.pages import UNIT_WORDS, check_output
from minigpt.io.textfiles import check_regular, read_text

SURPRISE_RAMP = [22, 28, 64, 100, 136, 172, 166, 160, 124]  # ANSI 256 colours, dark green .. dark red


def text_input(text: str | None, file: Path | None, data: DataConfig | None = None) -> tuple[str, str]:
    """The text of `--text TEXT` or `--file FILE` (exactly one), and how errors name it; a record
    file gives its documents joined as in training, by the run's data config `data`."""
    if (text is None) == (file is None):
        raise UserError("give exactly one of --text TEXT or --file FILE")
    if file is None:
        return text, "--text"
    fmt = file_format(str(file), "auto")
    if fmt is None:
        return read_text(file, "--file"), f"--file {file}"
    check_regular(file, "--file")
    if not file.is_file():
        raise UserError(f"--file {file} does not exist or is not a file")
    data = data or DataConfig()
    return joined_text(str(file), fmt, RecordRules.of(data), data.doc_separator), f"--file {file}"


def write_attention_files(
    loaded: LoadedModel,
    text: str,
    label: str,
    out: Path | None,
    html: Path | None,
    layer: int | None = None,
    head: int | None = None,
    unknown: str = "error",
) -> list[str]:
    """`minigpt attention`: the picture (`out`, the first block_size characters) and/or the page (`html`,
    the whole text), every output checked before any work; returns one line per file written."""
    if out is None and html is None:
        raise UserError("give --out PICTURE.png, --html PAGE.html or both")
    check_output(out, "--out")
    check_output(html)
    text = checked_text(loaded.tokenizer, text, label, unknown)
    done = []
    if html is not None:
        page = attention_page(loaded.model, loaded.tokenizer, text, source_line(loaded), layer, head, label)
        done.append(f"wrote {page.save(html)}: {page.summary}")
    if out is not None:
        block = loaded.config.model.block_size
        if len(loaded.tokenizer.encode(text)) > block:
            done.append(f"note: the picture shows the first {block} characters (block_size)")
        done.append(f"wrote {write_attention_png(loaded.model, loaded.tokenizer, text, out, layer, head)}")
    return done


def paint(s: str, bits: float) -> str:
    """`s` in white on the surprise colour of `bits`: one step of the ramp per whole bit."""
    return f"\x1b[48;5;{SURPRISE_RAMP[min(len(SURPRISE_RAMP) - 1, int(bits))]}m\x1b[97m{s}\x1b[0m"


def score_terminal(scores: Scores, colour: bool, source: str) -> str:
    """`minigpt score`'s text: the characters on green (expected) to red (surprising) backgrounds, one step
    per bit, or plain columns (position, character, bits); then the bits per character."""
    if colour:
        shown = [scores.text[0]]
        for c, b in zip(scores.text[1:], scores.bits):
            mark = "\u21b5" if c == "\n" else c  # a line break shows as a coloured arrow, then breaks
            shown.append(paint(mark, b) + ("\n" if c == "\n" else ""))
        last = len(SURPRISE_RAMP) - 1  # the colours' key: one swatch per bit of surprise, 0 to 8 and more
        swatches = "".join(paint(f" {i}{'+' if i == last else ''} ", i) for i in range(last + 1))
        legend = "bits of surprise at a character (green expected, red surprising; the first is not scored)"
        lines = ["".join(shown), f"colours: {swatches} {legend}"]
    else:
        pairs = enumerate(zip(scores.text[1:], scores.bits), start=1)
        lines = ["pos\tchar\tbits", *(f"{i}\t{c!r}\t{b:.3f}" for i, (c, b) in pairs)]
    total = f"{sum(scores.bits):,.1f} bits in all; {source}"
    unit = UNIT_WORDS[scores.unit]
    summary = f"{scores.bits_per_char:.4f} bits/{scores.unit} over {len(scores.bits):,} {unit} ({total})"
    return "\n".join([*lines, summary])
