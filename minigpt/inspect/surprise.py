"""The surprise page of a text: its per-character scores with the model's top guesses (`minigpt
score --html`, `Model.show_score`)."""

from __future__ import annotations

from minigpt.data.tokenizer import checked_text
from minigpt.infer.loading import LoadedModel, source_line
from minigpt.infer.score import score_text
from minigpt.inspect.pages import MAX_PAGE_CHARS, TOP_GUESSES, HtmlPage, check_length, score_html


def score_page(loaded: LoadedModel, text: str, label: str = "--text", unknown: str = "error") -> HtmlPage:
    """The surprise page of `text`: `score_text` with the top guesses, as `minigpt score` computes it."""
    text = checked_text(loaded.tokenizer, text, label, unknown)
    check_length(len(text), MAX_PAGE_CHARS, label)
    return score_html(score_text(loaded, text, top=TOP_GUESSES), loaded.tokenizer, source_line(loaded))
