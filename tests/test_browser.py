"""The pages in a real browser: headless Chromium (Debian's, driven by Playwright), offline. Hover a
character and check what lights up, and the numbers shown, against the model's own.

Needs /usr/bin/chromium (or MINIGPT_CHROMIUM=PATH); .ci/run installs it when missing. Locally:
apt-get install chromium, then uv run pytest tests/test_browser.py."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.helpers import make_text

BLOCK, STRIDE = 16, 8  # the tiny trained run's context, and its windows' step


@pytest.fixture(scope="module")
def model(trained_run: Path):
    import minigpt

    return minigpt.load(trained_run, device="cpu")


def open_page(pg, path: Path) -> None:
    pg.goto(path.as_uri())
    assert pg.errors == []
    assert all(url.startswith("file://") for url in pg.requests), pg.requests  # nothing from a CDN


def expected_row(model, ids: list[int], i: int, layer: int) -> tuple[int, torch.Tensor]:
    """Character i's attention at `layer`, computed here: its window starts at 0 while i < block,
    else where i falls in the window's second half (so it has at least half a window of context)."""
    start = 0 if i < BLOCK else ((i - BLOCK) // STRIDE + 1) * STRIDE
    maps = model.loaded.model.attention_maps(torch.tensor([ids[start : i + 1]]))  # (L, 1, nh, T, T)
    return start, maps[layer, 0, :, -1]  # (nh, keys start..i)


def lit(pg) -> set[int]:
    """The positions of the highlighted characters."""
    return set(pg.eval_on_selector_all("#text .t", "es => es.flatMap((e, i) => e.classList.contains('hl') ? [i] : [])"))


def test_attention_page_hover_shows_the_models_weights(page, model, tmp_path: Path) -> None:
    text = make_text(60, seed=3)  # four windows of 16
    ids = model.tokenizer.encode(text)
    path = model.show_attention(text).save(tmp_path / "attention.html")
    open_page(page, path)
    spans = page.locator("#text .t")
    assert spans.count() == 60
    i = 45  # in the window starting at 32
    spans.nth(i).hover()
    start, row = expected_row(model, ids, i, layer=0)
    quantized = (row * 255).round()  # the page keeps weights to 1/255
    assert lit(page) == {start + j for j in range(row.size(1)) if quantized[:, j].max() > 0}
    for h in range(2):  # the panel's largest weights per head, with their positions
        shown = page.eval_on_selector_all(
            f"#focus tr[data-head='{h}'] .k", "els => els.map(e => [+e.dataset.j, +e.querySelector('b').textContent])"
        )
        assert shown and shown[0][1] == pytest.approx(row[h].max().item(), abs=0.5 / 255 + 0.005)
        for j, value in shown:
            assert value == pytest.approx(row[h, j - start].item(), abs=0.5 / 255 + 0.005)
    assert "window 5 of 7 (characters 32\u201347)" in page.inner_text("#focus")

    spans.nth(i).click()  # pin it, then hover an earlier character: the tooltip has the exact weights
    spans.nth(i - 3).hover()
    tip = page.inner_text("#tip")
    assert f"#{i} looks at" in tip and f"#{i - 3}" in tip
    for h in range(2):
        value = float(page.inner_text(f"#tip tr[data-head='{h}'] td.num"))
        assert value == pytest.approx(row[h, i - 3 - start].item(), abs=0.0025)

    page.click("#layers button:text-is('1')")  # the other layer, one head: one colour, as strong as the weight
    page.click("#heads .chip[data-head='1']")
    _, row1 = expected_row(model, ids, i, layer=1)
    assert lit(page) == {start + j for j in range(row1.size(1)) if (row1[0, j] * 255).round() > 0}
    j = int(row1[0].argmax())
    colour = page.eval_on_selector(f"#text .t >> nth={start + j}", "e => getComputedStyle(e).backgroundColor")
    alpha = float(re.match(r"rgba\(78, 121, 167, ([\d.]+)\)", colour).group(1))
    assert alpha == pytest.approx((row1[0, j] * 255).round().item() / 255, abs=0.01)

    page.click("#direction button:text-is('what looks at it')")  # the reverse: who attends to character 40
    page.keyboard.press("Escape")
    spans.nth(40).hover()
    looking = set()
    for q in range(40, 60):
        s, r = expected_row(model, ids, q, layer=1)
        if s <= 40 and (r[0, 40 - s] * 255).round() > 0:
            looking.add(q)
    assert lit(page) == looking and looking
    page.screenshot(path=tmp_path / "attention.png")
    assert (tmp_path / "attention.png").stat().st_size > 20_000


def test_score_page_tooltip_has_the_models_probabilities(page, model, tmp_path: Path) -> None:
    text = make_text(40, seed=5)
    path = model.show_score(text).save(tmp_path / "score.html")
    open_page(page, path)
    ids = torch.tensor([model.tokenizer.encode(text)])
    logits, _ = model.loaded.model(ids[:, :BLOCK])  # the first window: positions 0..15 predict 1..16
    probs = F.softmax(logits[0].float(), dim=-1)
    bits = F.cross_entropy(logits[0], ids[0, 1 : BLOCK + 1], reduction="none") / math.log(2)
    header = page.inner_text(".summary")
    scores = model.score(text)
    assert f"{scores.bits_per_char:.3f}" in header and "over 39 characters" in header
    k = 9
    page.locator("#text .t").nth(k).hover()
    tip = page.inner_text("#tip")
    p = float(re.search(r"p = ([\d.e-]+)", tip).group(1))
    assert p == pytest.approx(probs[k - 1, ids[0, k]].item(), rel=0.01, abs=0.0006)
    assert float(re.search(r"([\d.]+) bits", tip).group(1)) == pytest.approx(bits[k - 1].item(), abs=0.006)
    guesses = page.eval_on_selector_all("#tip tr", "rs => rs.map(r => [r.cells[0].innerText, +r.cells[1].innerText])")
    top_p, top_i = probs[k - 1].topk(5)
    assert [g[0] for g in guesses] == [
        model.tokenizer.pieces([t])[0].replace(" ", "\u2423").replace("\n", "\u21b5") for t in top_i.tolist()
    ]
    assert [g[1] for g in guesses] == pytest.approx(top_p.tolist(), abs=0.0006)
    page.locator("#text .t").nth(0).hover()
    assert "not scored" in page.inner_text("#tip")
    coloured = page.eval_on_selector_all("#text .t", "es => es.map(e => [...e.classList].find(c => /^b\\d$/.test(c)))")
    assert coloured[1:] == [f"b{min(8, int(b))}" for b in scores.bits]  # one colour step per whole bit
    page.screenshot(path=tmp_path / "score.png")


def test_pages_run_inline_in_a_notebook_iframe(page, model) -> None:
    """What Jupyter shows: the `_repr_html_` iframe, whose page runs its own script."""
    inline = model.show_attention("KING:")._repr_html_() + model.show_score("KING: now")._repr_html_()
    page.set_content(f"<html><body>{inline}</body></html>")
    frames = page.locator("iframe")
    assert frames.count() == 2
    attention = page.frame_locator("iframe >> nth=0")
    assert "window 1 of 1" in attention.locator("#focus").inner_text(timeout=5000)
    assert "bits per character" in page.frame_locator("iframe >> nth=1").locator(".summary").inner_text()
    assert page.errors == []
