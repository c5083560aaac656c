"""`minigpt sweep`: a grid of tiny runs, stopped by a real SIGTERM in its third run and run again
(the finished runs untouched, the stopped one resumed, the last one trained once); the mistakes
refused before any run; --random's draw; and `minigpt runs` of the sweep's folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from minigpt.checkpoint import Checkpoint
from minigpt.training.sweep import RunBudget, Sweep, split_values, value_labels

from .helpers import TINY, make_text, one_error_line

ROOT = Path(__file__).resolve().parents[1]
BASE = [a for a in TINY if not a.startswith("model.n_layer=")] + ["log.progress=off"]
GRID = ["model.n_layer=1,2", "optim.lr=1e-3,3e-3"]
NAMES = ["n_layer=1,lr=1e-3", "n_layer=1,lr=3e-3", "n_layer=2,lr=1e-3", "n_layer=2,lr=3e-3"]


def loss_column(table: str) -> list[float]:
    header, *rows = table.strip().splitlines()
    at = header.split().index("full") - 2  # "val est" and "val full": two columns of two words each
    return [float(row.split()[at].rstrip("~")) for row in rows]


def files_of(run: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(run.iterdir()) if p.is_file()}


@pytest.mark.slow  # four short runs and a stop (6 s on 2 cores): CI runs it in its slow step
def test_a_sweep_stopped_in_its_third_run_goes_on_where_it_stopped(tmp_path: Path, cli) -> None:
    text = tmp_path / "text.txt"
    text.write_text(make_text(), encoding="utf-8")
    out = tmp_path / "grid"
    args = ["sweep", *BASE, f"data.path={text}", "train.max_steps=40", "train.eval_interval=10", *GRID, "--out", out]
    third = out / NAMES[2]
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(
            [sys.executable, "-m", "minigpt", *map(str, args)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        deadline = time.monotonic() + 120
        while not (third / "last.pt").exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the third run's first evaluation (step 10) saved last.pt: it is training
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 143, (tmp_path / "first.log").read_text()
    said = (tmp_path / "first.log").read_text()
    assert f"sweep {out} stopped in run 3 of 4 ({third}); 2 run(s) done" in said, said
    stopped_at = Checkpoint.load(third / "last.pt").step
    assert 10 <= stopped_at < 40 and not (third / "results.json").exists()
    assert not (out / NAMES[3]).exists()  # the fourth never started
    before = {name: files_of(out / name) for name in NAMES[:2]}
    assert all("results.json" in files for files in before.values())

    again = cli(*args)  # the same command (in this process: it saves a second start-up of torch)
    assert again.code == 0, again
    for name in NAMES[:2]:  # skipped: not a file of theirs was written again
        assert f"{out / name} is finished: it reached train.max_steps (40) at step 40; skipping it" in again.err
        assert files_of(out / name) == before[name]
    assert f"resuming {third} from step {stopped_at} " in again.err  # resumed, not restarted
    assert again.err.count("resuming ") == 1
    for name in NAMES:
        assert json.loads((out / name / "results.json").read_text())["steps"] == 40
    lines = again.out.strip().splitlines()
    assert lines[0].split()[:3] == ["run", "n_layer", "lr"] and len(lines) == 5
    losses = loss_column(again.out)
    assert losses == sorted(losses)
    notes = {line.split()[0]: " ".join(line.split()[8:]) for line in lines[1:]}
    assert notes == {NAMES[0]: "finished before", NAMES[1]: "finished before", NAMES[2]: "resumed", NAMES[3]: "trained"}
    hparams = Checkpoint.load(out / NAMES[3] / "last.pt").config["log"]["hparam_keys"]
    assert hparams == ["model.n_layer", "optim.lr"]


def test_mistakes_are_one_line_before_any_run(tmp_path: Path, text_file: Path, cli) -> None:
    out = tmp_path / "grid"
    base = [*BASE, f"data.path={text_file}", "--out", out]
    cases = {
        ("model.n_layers=1,2",): "unknown key 'model.n_layers' (did you mean 'model.n_layer'?)",
        ("model.n_layer=1,two",): "model.n_layer must be a whole number",
        ("model.n_layer=1,2", "optim.lr=1e-3,0.001"): "optim.lr lists the same value twice (1e-3 and 0.001)",
        ("model.n_layer=1,,2",): "has an empty value",
        ("model.n_layer=2",): "nothing to sweep",
        ("model.n_layer=1,2", "model.n_layer=3,4"): "model.n_layer is given twice",
        # each value is valid alone; one point's whole config is not
        ("model.n_layer=1,2", "model.n_head=2,3"): "sweep point n_layer=1,n_head=3: command line: model.n_embd (32) "
        "must be divisible by model.n_head (3)",
    }
    for grid, problem in cases.items():
        args = [a for a in base if not str(a).startswith("model.n_head=")]  # one case varies it
        line = one_error_line(cli("sweep", *args, *grid))
        assert problem in line, line
        assert not out.exists(), grid
    assert "--max-total-time must be a duration" in one_error_line(cli("sweep", *base, *GRID, "--max-total-time", "1x"))
    assert "the grid has only 4 points" in one_error_line(cli("sweep", *base, *GRID, "--random", "5"))
    assert not out.exists()


def test_top_level_commas_separate_values() -> None:
    assert split_values("1e-3,3e-3") == ["1e-3", "3e-3"]
    assert split_values("[a.txt,b.txt],c.txt") == ["[a.txt,b.txt]", "c.txt"]
    assert split_values("books/{a,b}.txt,c.txt") == ["books/{a,b}.txt", "c.txt"]
    assert split_values('"ROMEO:, JULIET:",KING:') == ['"ROMEO:, JULIET:"', "KING:"]
    assert split_values("Juliet's,Romeo") == ["Juliet's", "Romeo"]  # a quote inside a value quotes nothing
    labels = value_labels(["data/a b.txt", "data/a_b.txt", "x" * 40])
    assert labels["data/a b.txt"] != labels["data/a_b.txt"] and labels["data/a b.txt"].startswith("data_a_b.txt-")
    assert len(labels["x" * 40]) == 24


def test_random_draws_distinct_points_the_same_way_each_time(tmp_path: Path, text_file: Path, cli) -> None:
    grid = {"model.n_layer": ["1", "2", "3"], "optim.lr": ["1e-3", "3e-3"], "model.n_embd": ["32", "48"]}
    every = [p.name for p in Sweep(tmp_path, None, {}, grid).points()]
    drawn = [p.name for p in Sweep(tmp_path, None, {}, grid, random=5, seed=7).points()]
    assert len(every) == 12 and len(set(drawn)) == 5 and set(drawn) <= set(every)
    assert drawn == [p.name for p in Sweep(tmp_path, None, {}, grid, random=5, seed=7).points()]
    assert drawn == [name for name in every if name in drawn]  # in grid order
    assert drawn != [p.name for p in Sweep(tmp_path, None, {}, grid, random=5, seed=8).points()]

    out = tmp_path / "grid"
    args = [*BASE, f"data.path={text_file}", "train.max_steps=6", "train.eval_interval=3", *GRID, "--out", out]
    r = cli("sweep", *args, "--random", "2", "--seed", "1")
    assert r.code == 0, r
    small = {"model.n_layer": ["1", "2"], "optim.lr": ["1e-3", "3e-3"]}
    chosen = [p.name for p in Sweep(out, None, {}, small, random=2, seed=1).points()]
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(chosen)
    listed = cli("runs", out)
    assert listed.code == 0, listed
    header, *rows = listed.out.strip().splitlines()
    assert header.split() == ["run", "n_layer", "lr", "steps", "val", "est", "val", "full", "params", "wall"]
    assert sorted(row.split()[0] for row in rows) == sorted(chosen) and len(rows) == 2
    losses = loss_column(listed.out)
    assert losses == sorted(losses)
    objects = [json.loads(line) for line in cli("runs", out, "--json").out.splitlines()]
    assert [o["val_loss_full"] for o in objects] == sorted(o["val_loss_full"] for o in objects)
    assert set(objects[0]["values"]) == {"model.n_layer", "optim.lr"} and objects[0]["steps"] == 6

    # the whole grid now, with no time for a run: the two drawn are finished, the others not started
    r = cli("sweep", *args, "--max-total-time", "1s")
    assert r.code == 0, r
    notes = [" ".join(row.split()[8:]) for row in r.out.strip().splitlines()[1:]]
    assert notes == ["finished before"] * 2 + ["not run: --max-total-time ran out"] * 2, r.out
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == sorted(chosen)

    line = one_error_line(cli("sweep", *args[:-4], "model.n_layer=1,3", "optim.lr=1e-3,3e-3", "--out", out))
    assert f"{out} holds another sweep (grid model.n_layer 1,2 there, 1,3 here)" in line


def test_the_budget_stops_a_run_as_sigusr1_does_and_only_while_it_runs() -> None:
    seen: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: seen.append(signum))
    try:
        with RunBudget(0.05) as budget:
            time.sleep(0.3)
        assert budget.ran_out and seen == [signal.SIGUSR1]
        with RunBudget(0.05) as budget:
            budget.active = False  # the run ended: its stop is no longer the budget's to make
            time.sleep(0.3)
        assert not budget.ran_out and seen == [signal.SIGUSR1]
        with RunBudget(None) as budget:
            pass
        assert not budget.ran_out
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_a_diverged_run_is_an_outcome_and_the_sweep_goes_on(tmp_path: Path, text_file: Path, cli) -> None:
    out = tmp_path / "rates"
    grid = ["optim.lr=100,1e-3", "model.n_layer=1"]
    base = [a for a in BASE if not a.startswith("log.interval=")] + ["log.interval=1"]  # NaN caught at once
    r = cli(
        "sweep", *base, f"data.path={text_file}", "train.max_steps=30", "optim.optimizer=adamw", *grid, "--out", out
    )
    assert r.code == 0, r.err
    assert "error: training diverged" in r.err  # said, and then the next run trains
    assert (out / "lr=1e-3" / "results.json").exists() and not (out / "lr=100" / "results.json").exists()
    assert "diverged" in r.out
