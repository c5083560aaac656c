"""`minigpt heads --html`: the page of a tiny random model's heads, opened offline in real Chromium
(the `browser` and `page` fixtures of conftest.py: Debian's /usr/bin/chromium; under CI a missing
browser fails, it does not skip). Clicking a head shows its numbers, hovering its map its weights."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest

from minigpt.inspect import heads as hp
from minigpt.inspect.heads import HeadsReport, analyze_heads

from .helpers import tiny_model

VOCAB = 20
LABELS = [chr(ord("a") + i) for i in range(VOCAB)]


def tiny_report(ablation: str = "mean") -> HeadsReport:
    """A random 2-layer, 2-head model's report: one head's ablation measured exactly, three estimated."""
    model = tiny_model(VOCAB, 0)
    ids = np.random.default_rng(0).integers(0, VOCAB, size=600).astype(np.int64)
    return analyze_heads(model, ids=ids, ablation=ablation, exact=1, meta={"source": "a tiny random model"})


@pytest.fixture(scope="module")
def report() -> HeadsReport:
    return tiny_report()


def open_page(pg, path: Path) -> list[str]:
    """Opens the page; returns the console's errors (script errors land in pg.errors)."""
    console: list[str] = []
    pg.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    pg.goto(path.as_uri())
    assert pg.errors == []
    assert all(url.startswith("file://") for url in pg.requests), pg.requests  # nothing from a CDN
    return console


def test_heads_page_grid_detail_and_ablation_bars(page, report: HeadsReport, tmp_path: Path) -> None:
    path = hp.heads_page(report, [LABELS[i] for i in report.tokens]).save(tmp_path / "heads.html")
    console = open_page(page, path)
    assert page.locator("#grid .cell").count() == 2 * 2
    bars = page.locator("#bars .abl-bar")
    assert bars.count() == 2 * 2
    assert page.locator("#bars .abl-bar[data-exact='false']").count() == 3
    assert page.locator("#bars tspan.est").all_text_contents() == ["estimate"] * 3

    page.click(".cell[data-layer='1'][data-head='0']")  # the detail: this head's numbers
    assert page.inner_text("#detail-title").lower() == "layer 1, head 0"
    assert page.locator(".cell.on").count() == 1
    assert page.get_attribute(".cell.on", "data-layer") == "1" and page.get_attribute(".cell.on", "data-head") == "0"
    head = report.head(1, 0)
    cells = "rs => rs.slice(1).map(r => [...r.cells].map(c => c.innerText))"
    rows = page.eval_on_selector_all("#detail-body table tr", cells)
    assert [r[0] for r in rows] == ["previous", "duplicate", "induction", "first"]
    for name, row in zip(["previous", "duplicate", "induction", "first"], rows, strict=True):
        assert float(row[1]) == pytest.approx(head.scores[name], abs=0.0005)  # on the text
        assert float(row[2]) == pytest.approx(report.uniform[name], abs=0.0005)
        assert float(row[3]) == pytest.approx(head.probe[name], abs=0.0005)
        assert float(row[4]) == pytest.approx(report.ceilings[name], abs=0.0005)
    detail = page.inner_text("#detail-body")
    assert f"{head.ablation['loss_delta']:+.4f}".replace("-", "\u2212") in detail
    assert head.role in page.inner_text("#detail-role")

    big = page.locator("#big").bounding_box()  # hover the large map: a weight of the report's pattern
    T = len(report.tokens)
    cell = (big["width"] - 20 - 4) / T
    q, k = 12, 5
    page.mouse.move(big["x"] + 20 + (k + 0.5) * cell, big["y"] + 20 + (q + 0.5) * cell)
    tip = page.inner_text("#tip")
    assert f"query #{q}" in tip and f"key #{k}" in tip
    weight = float(re.search(r"weight ([\d.]+)", tip).group(1))
    assert weight == pytest.approx(report.patterns[1][0][q][k], abs=0.5 / 255 + 0.0005)

    bars.nth(3).click()  # by layer: the last bar is layer 1, head 1
    assert page.inner_text("#detail-title").lower() == "layer 1, head 1"
    page.click("#sort button:text-is('by loss rise')")
    shown = page.eval_on_selector_all("#bars .abl-bar", "bs => bs.map(b => [+b.dataset.layer, +b.dataset.head])")
    expected = sorted(report.heads, key=lambda h: -h.ablation["loss_delta"])
    assert shown == [[h.layer, h.head] for h in expected]
    page.screenshot(path=tmp_path / "heads.png", full_page=True)
    assert (tmp_path / "heads.png").stat().st_size > 20_000
    assert console == [] and page.errors == []


def test_heads_page_without_ablation_or_labels(page, tmp_path: Path) -> None:
    """One argument, as `minigpt heads --html` calls it; --ablation none leaves the chart empty, with a note."""
    report = tiny_report(ablation="none")
    page_ = hp.heads_page(report)
    assert page_.summary == "4 heads (2 layers x 2): " + page_.summary.split(": ", 1)[1]
    assert page_.summary.endswith("; no ablation")
    console = open_page(page, page_.save(tmp_path / "heads.html"))
    assert page.locator("#grid .cell").count() == 4
    assert page.locator("#bars .abl-bar").count() == 0
    assert "No ablation" in page.inner_text("#abl-note")
    assert page.inner_text("#seq") == ""  # no labels: no sequence to show
    page.click(".cell[data-layer='0'][data-head='1']")
    assert page.inner_text("#detail-title").lower() == "layer 0, head 1"
    assert console == [] and page.errors == []


def test_long_sequences_are_max_pooled(page, report: HeadsReport, tmp_path: Path, monkeypatch) -> None:
    """Past MAX_SIDE positions, each pixel keeps the largest weight of its block: a one-position stripe stays."""
    monkeypatch.setattr(hp, "MAX_SIDE", 6)
    pool, w = hp.pooled_patterns(report.patterns, 16)
    assert pool == 3 and w.shape == (4, 6, 6)
    full = np.asarray(report.patterns, dtype=np.float32).reshape(4, 16, 16)
    assert w[3, 2, 1] == round(float(full[3, 6:9, 3:6].max()) * 255)
    assert w[3, 5, 5] == round(float(full[3, 15, 15]) * 255)  # the last block: one position
    built = hp.heads_page(report)
    data = re.search(r'id="minigpt-data">(.*?)</script>', built.html, re.S).group(1)
    assert '"pool":3' in data and '"side":6' in data
    assert base64.b64decode(re.search(r'"weights":"([^"]+)"', data).group(1)) == w.tobytes()
    console = open_page(page, built.save(tmp_path / "heads.html"))
    assert not page.is_visible("#guides-label")  # outlines need one pixel per position
    assert console == [] and page.errors == []


def test_labels_must_match_the_sequence(report: HeadsReport) -> None:
    with pytest.raises(ValueError, match="labels has 3 entries"):
        hp.heads_page(report, ["a", "b", "c"])


# every head cell, with its role badge, scores and map, inside the grid's panel and the window
CUT_OFF = """() => {
  const inside = (a, b) =>
    a.left >= b.left - 0.5 && a.right <= b.right + 0.5 && a.top >= b.top - 0.5 && a.bottom <= b.bottom + 0.5;
  const width = document.documentElement.clientWidth;
  const grid = document.getElementById("grid").closest(".panel").getBoundingClientRect();
  const cut = [...document.querySelectorAll("#grid .cell")].filter((c) => {
    const box = c.getBoundingClientRect();
    const parts = [...c.querySelectorAll(".role, .s, canvas")].map((e) => e.getBoundingClientRect());
    return !inside(box, grid) || box.right > width || !parts.every((p) => inside(p, box));
  }).map((c) => `L${c.dataset.layer} H${c.dataset.head}`);
  const right = (s) => document.querySelector(s).getBoundingClientRect().right;
  const wide = ["#big", "#bars", "#detail-body table"].filter((s) => right(s) > width);
  return { cut, wide, scroll: document.documentElement.scrollWidth - width };
}"""


@pytest.mark.parametrize("width", [1366, 390])
def test_no_head_column_is_cut_off_on_a_laptop_or_a_phone(page, tmp_path: Path, width: int) -> None:
    """Eight heads a layer at 1,366 px and on a phone: every cell whole, none past the window's edge
    (they wrap onto more lines instead), and the page does not scroll sideways."""
    model = tiny_model(VOCAB, 0, n_head=8)
    ids = np.random.default_rng(0).integers(0, VOCAB, size=200).astype(np.int64)
    report = analyze_heads(model, ids=ids, ablation="none", meta={"source": "a tiny random model"})
    page.set_viewport_size({"width": width, "height": 900})
    console = open_page(page, hp.heads_page(report).save(tmp_path / "heads.html"))
    assert page.locator("#grid .cell").count() == 2 * 8
    assert page.evaluate(CUT_OFF) == {"cut": [], "wide": [], "scroll": 0}
    assert console == [] and page.errors == []
