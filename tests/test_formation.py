"""Induction heads over training: the heads' scalars TensorBoard gets at each evaluation, and
`minigpt heads RUN --over-training` over a run's snapshots (table, JSON, chart, the no-snapshot error)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from minigpt.checkpoint import list_snapshots
from minigpt.cli.app import main

from .helpers import TINY, make_text

STEPS = [20, 40, 60]  # train.keep_every=20 over 60 steps; best.pt and last.pt are at step 60 too
HEADS = [f"L{layer}H{head}" for layer in range(2) for head in range(2)]


@pytest.fixture(scope="module")
def snapshot_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny run through the CLI: evaluated at steps 30 and 60, a snapshot every 20 steps."""
    folder = tmp_path_factory.mktemp("formation")
    data = folder / "text.txt"
    data.write_text(make_text(), encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINIGPT_CACHE_DIR", str(folder / "cache"))
    try:
        code = main(
            [
                "train",
                "--data",
                str(data),
                "--out",
                str(folder / "run"),
                *TINY,
                "train.max_steps=60",
                "train.eval_interval=30",
                "train.keep_every=20",
                "train.final_eval=false",
            ]
        )
    finally:
        mp.undo()
    assert code == 0
    return folder / "run"


def test_tensorboard_has_the_heads_scalars_at_each_evaluation(snapshot_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(snapshot_run))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    wanted = {"heads/icl_score"} | {f"heads/{p}/{h}" for p in ("induction", "previous") for h in HEADS}
    assert wanted <= tags, sorted(wanted - tags)
    for tag in wanted:
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [30, 60], tag
        assert all(math.isfinite(e.value) for e in events), tag
    for tag in wanted - {"heads/icl_score"}:
        assert all(0.0 <= e.value <= 1.0 for e in acc.Scalars(tag)), tag  # a share of the attention


def test_over_training_json_lists_the_snapshots_in_step_order(snapshot_run: Path, cli) -> None:
    r = cli("heads", snapshot_run, "--over-training", "--json")
    assert r.code == 0, r
    rows = [json.loads(line) for line in r.out.splitlines()]
    assert [row["step"] for row in rows] == STEPS
    assert rows[-1]["files"] == ["step_0000060.pt", "best.pt", "last.pt"]  # the same weights: scored once
    assert rows[0]["val_loss"] is None and math.isfinite(rows[-1]["val_loss"])  # evaluated at 60 only
    for row in rows:
        assert math.isfinite(row["icl_score"]) and math.isfinite(row["sample_loss"])
        assert len(row["heads"]) == len(HEADS)
        assert all(math.isfinite(h["induction"]) and math.isfinite(h["previous"]) for h in row["heads"])
        best = row["induction"]
        assert best["score"] == max(h["induction"] for h in row["heads"])
        assert {"layer", "head"} <= set(best)


def test_over_training_table_and_chart(snapshot_run: Path, cli, tmp_path: Path) -> None:
    chart = tmp_path / "formation.png"
    r = cli("heads", snapshot_run, "--over-training", "--png", chart)
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert "ICL score" in lines[0]
    rows = [line.split() for line in lines if line.split() and line.split()[0].isdigit()]
    assert [int(row[0]) for row in rows] == STEPS
    head = chart.read_bytes()
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) > 20_000  # a real PNG, not an empty canvas
    assert f"wrote {chart}" in r.err


def test_a_run_without_snapshots_is_one_error_line(snapshot_run: Path, cli, tmp_path: Path) -> None:
    run = tmp_path / "plain"
    run.mkdir()
    for name in ("best.pt", "last.pt", "config.yaml"):
        shutil.copy(snapshot_run / name, run / name)
    chart = tmp_path / "chart.png"
    r = cli("heads", run, "--over-training", "--png", chart)
    assert r.code == 2, r
    assert r.err.strip() == f"error: {run} has no snapshots to follow over training; train with train.keep_every=N"
    assert r.out == "" and not chart.exists()
    only = tmp_path / "one"  # a single snapshot and nothing else: fewer than two checkpoints
    only.mkdir()
    shutil.copy(list_snapshots(snapshot_run)[0], only / "step_0000020.pt")
    r = cli("heads", only, "--over-training", "--json")
    assert r.code == 2 and "has no snapshots to follow over training" in r.err, r
