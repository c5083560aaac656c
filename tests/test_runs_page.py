"""`minigpt runs DIR --html PAGE`: the page of a folder with two tiny runs of a sweep (TensorBoard
events) and one run without event files (results.json), opened offline in real Chromium (the
`browser` and `page` fixtures of conftest.py): its curves drawn against step and wall time, the
table sorted by a clicked column, a clicked run's config, and the keys that differ marked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from minigpt.cli.runs_table import differing_keys, finite

from .helpers import TINY, one_error_line

VIEWPORT = (1200, 860)
SHORT = [*TINY, "log.progress=off", "train.max_steps=20", "train.eval_interval=5"]
NAMES = ["lr/lr=1e-3", "lr/lr=1e-2"]


@pytest.fixture
def runs(tmp_path: Path, text_file: Path, cli) -> Path:
    root = tmp_path / "runs"
    r = cli("sweep", *SHORT, f"data.path={text_file}", "optim.lr=1e-3,1e-2", "--out", root / "lr")
    assert r.code == 0, r
    r = cli("train", *SHORT, "--data", text_file, "--out", root / "plain", "log.tensorboard=false")
    assert r.code == 0, r
    assert not list((root / "plain").glob("events.out.tfevents.*"))
    return root


def test_the_runs_page_offline_curves_sorting_config_and_differences(page, runs: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "runs.html"
    r = cli("runs", runs, "--html", out)
    assert r.code == 0, r
    assert r.err.strip() == f"wrote {out}: 3 runs, 2 with a val loss curve; 3 config keys differ"
    fetched: list[str] = []

    def only_the_file(route) -> None:
        fetched.append(route.request.url)
        route.continue_() if route.request.url == out.as_uri() else route.abort()

    page.route("**/*", only_the_file)
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.goto(out.as_uri())
    assert fetched == [out.as_uri()] and page.requests == [out.as_uri()]  # nothing from anywhere else
    assert page.errors == [] and console == []

    # the curves: one per run with events (4 evaluations each), a dot for the run without
    assert page.locator("#chart path.curve").count() == 2
    shown = page.locator("#chart g.run").evaluate_all("gs => gs.map(g => g.dataset.run)")
    assert sorted(shown) == sorted([*NAMES, "plain"])
    by_step = page.get_attribute(f"#chart path.curve[data-run='{NAMES[0]}']", "d")
    assert by_step.count("L") == 3
    page.click("#xaxis button:has-text('wall time')")
    assert "wall time" in page.text_content("#x-title")
    assert page.get_attribute(f"#chart path.curve[data-run='{NAMES[0]}']", "d") != by_step

    # the keys that differ: columns and config rows marked
    marked = {"optim.lr", "log.tensorboard", "log.hparam_keys"}  # the plain run logs no events, sets no HParams keys
    assert set(page.locator("#table th.diff").evaluate_all("ths => ths.map(t => t.dataset.col)")) == marked

    def order() -> list[str]:
        return page.locator("#table tbody tr").evaluate_all("rows => rows.map(r => r.dataset.run)")

    losses = {}
    for name in [*NAMES, "plain"]:
        losses[name] = json.loads((runs / name / "results.json").read_text())["val_loss_full"]
    best_first = sorted(losses, key=losses.get)
    assert order() == best_first  # sorted by val loss at first
    page.click("#table th[data-col='loss']")  # again: the other way
    assert order() == best_first[::-1]
    page.click("#table th[data-col='optim.lr']")
    by_lr = order()
    assert by_lr == ["lr/lr=1e-3", "plain", "lr/lr=1e-2"]  # 0.001, the default 0.003, 0.01

    # a clicked run shows its config, the differing keys marked
    page.click("#table tr[data-run='lr/lr=1e-2']")
    assert page.inner_text("#config-title").strip() == "lr/lr=1e-2"
    assert page.inner_text("#config-keys tr[data-key='optim.lr'] td.v") == "0.01"
    assert set(page.locator("#config-keys tr.diff").evaluate_all("rows => rows.map(r => r.dataset.key)")) == marked
    assert page.locator("#table tr.row.on").get_attribute("data-run") == "lr/lr=1e-2"
    assert page.locator("#chart g.run.on").get_attribute("data-run") == "lr/lr=1e-2"
    page.click("#chart g.run[data-run='plain'] circle")  # the run without events: results.json's point
    assert page.inner_text("#config-title").strip() == "plain"
    page.screenshot(path=tmp_path / "runs_page.png", full_page=True)


def test_page_data_helpers_and_a_folder_without_runs(tmp_path: Path, cli) -> None:
    configs = [{"a": 1, "b": [1, 2], "c": 0.1}, {"a": 1, "b": [1, 3], "d": None}]
    assert differing_keys(configs) == ["b", "c", "d"]
    assert finite({"x": [float("inf"), 1.5], "y": float("nan")}) == {"x": [None, 1.5], "y": None}
    (tmp_path / "empty").mkdir()
    assert "no runs under" in one_error_line(cli("runs", tmp_path / "empty", "--html", tmp_path / "p.html"))
    assert "the folder" in one_error_line(cli("runs", tmp_path / "empty", "--html", tmp_path / "no" / "p.html"))
