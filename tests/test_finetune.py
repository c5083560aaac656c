"""Fine-tuning (--init-from), early stopping, the time budget, results.json and `minigpt runs`."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
import yaml

from minigpt.checkpoint import load_checkpoint
from minigpt.data.tokenizer import CharTokenizer
from minigpt.training import loop
from minigpt.training.launch import starting_vocabulary, starting_weights

from .helpers import TINY, make_text, one_error_line

SHORT = [*TINY, "log.sample_length=0"]


@pytest.fixture
def other_text(tmp_path: Path) -> Path:
    """Text B: the same kind of lines as the trained run's text A, drawn with another seed."""
    path = tmp_path / "b.txt"
    path.write_text(make_text(6000, seed=3), encoding="utf-8")
    return path


def first_val_loss(run: Path) -> float:
    return load_checkpoint(run / "last.pt")["val_loss"]


def test_fine_tuning_starts_from_the_trained_weights(trained_run: Path, other_text: Path, tmp_path: Path, cli):
    args = ["--data", other_text, *SHORT, "train.max_steps=1", "train.eval_interval=1"]
    r = cli("train", "--init-from", trained_run, "--out", tmp_path / "ft", *args)
    assert r.code == 0, r
    assert "starting from" in r.err
    assert cli("train", "--out", tmp_path / "fresh", *args).code == 0
    # one step in, the fine-tuned model already knows the text; a fresh one is near ln(vocab)
    assert first_val_loss(tmp_path / "ft") < first_val_loss(tmp_path / "fresh") - 0.8
    saved = yaml.safe_load((tmp_path / "ft" / "config.yaml").read_text())
    source = str((trained_run / "best.pt").resolve())
    assert saved["train"]["init_from"] == source
    ckpt = load_checkpoint(tmp_path / "ft" / "last.pt")
    assert ckpt["init_from"]["path"] == source and ckpt["init_from"]["step"] == 60
    assert ckpt["step"] == 1  # a new run: its own steps, optimizer and schedule
    r = cli("sample", tmp_path / "ft", "--prompt", "KING:", "--max-new-tokens", "30")
    assert r.code == 0 and r.out.startswith("KING:") and len(r.out) >= 35


def test_new_characters_are_an_error_or_new_rows(trained_run: Path, tmp_path: Path, cli) -> None:
    text = tmp_path / "new.txt"
    text.write_text(make_text(5000, seed=4) + "~{§}\n" * 40, encoding="utf-8")
    out = tmp_path / "ft"
    args = ["--init-from", trained_run, "--data", text, "--out", out, *SHORT, "train.max_steps=2"]
    line = one_error_line(cli("train", *args))
    assert "4 character(s) the model in" in line and "'{', '}', '~', '§'" in line and "data.new_chars=add" in line
    assert not out.exists()
    r = cli("train", *args, "data.new_chars=add")
    assert r.code == 0, r
    old = load_checkpoint(trained_run / "best.pt")["tokenizer"]["chars"]
    new = load_checkpoint(out / "last.pt")["tokenizer"]["chars"]
    assert new[: len(old)] == old and sorted(new[len(old) :]) == ["{", "}", "~", "§"]  # old ids kept
    r = cli("sample", out, "--prompt", "~{§", "--max-new-tokens", "5")
    assert r.code == 0 and r.out.startswith("~{§")
    assert json.loads(cli("eval", out, "--json").out)["tokens"] > 0  # its validation split maps into the model


def test_added_rows_are_fresh_and_old_rows_are_copied() -> None:
    start = CharTokenizer(["a", "b", "c"])
    corpus = CharTokenizer(["a", "c", "x", "y"])
    with pytest.raises(Exception, match="'x', 'y'"):
        starting_vocabulary(start, corpus, "error", Path("old.pt"), Path("text.txt"))
    grown = starting_vocabulary(start, corpus, "add", Path("old.pt"), Path("text.txt"))
    assert grown.chars == ["a", "b", "c", "x", "y"]
    old = {"wte.weight": torch.randn(3, 4), "lm_head.weight": torch.randn(3, 4), "ln.weight": torch.randn(4)}
    old["lm_head.weight"] = old["wte.weight"]
    fresh = {"wte.weight": torch.randn(5, 4), "ln.weight": torch.randn(4)}
    fresh["lm_head.weight"] = fresh["wte.weight"]
    merged = starting_weights(fresh, old)
    assert torch.equal(merged["wte.weight"][:3], old["wte.weight"])  # what the model knew, unchanged
    assert torch.equal(merged["wte.weight"][3:], fresh["wte.weight"][3:])  # new rows: the fresh init
    assert torch.equal(merged["ln.weight"], old["ln.weight"])


def test_fine_tuning_mistakes(trained_run: Path, other_text: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "ft"
    base = ["--data", other_text, "--out", out, *SHORT, "train.max_steps=2"]
    assert "does not exist" in one_error_line(cli("train", "--init-from", tmp_path / "nope", *base))
    trunc = tmp_path / "trunc.pt"
    trunc.write_bytes((trained_run / "best.pt").read_bytes()[:4000])
    assert "is damaged or truncated" in one_error_line(cli("train", "--init-from", trunc, *base))
    line = one_error_line(cli("train", "--init-from", trained_run, *base, "model.n_layer=3"))
    assert "model differs in model.n_layer: 2 there, 3 here" in line
    line = one_error_line(cli("train", "--init-from", trained_run, "--resume", "--out", trained_run))
    assert "give only one of them" in line
    before = (trained_run / "last.pt").read_bytes()
    line = one_error_line(cli("train", "--init-from", trained_run, "--data", other_text, "--out", trained_run))
    assert "already holds a run" in line and (trained_run / "last.pt").read_bytes() == before
    assert "train.patience must be >= 0" in one_error_line(cli("train", *base, "train.patience=-1"))
    line = one_error_line(cli("train", *base, "train.max_time=soon"))
    assert "train.max_time must be a duration such as 90 (seconds), 90s, 10m or 1.5h, got 'soon'" in line
    assert not out.exists()


def test_code_carrying_checkpoint_is_refused_for_init_from(tmp_path: Path, other_text: Path, monkeypatch, cli):
    from .helpers import Evil

    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    evil = tmp_path / "evil.pt"
    torch.save({"format": "minigpt-checkpoint", "version": 1, "model": Evil()}, evil)
    line = one_error_line(cli("train", "--init-from", evil, "--data", other_text, "--out", tmp_path / "r", *SHORT))
    assert "refusing to load" in line and not marker.exists() and not (tmp_path / "r").exists()


# a fixed thread count: the whole and the resumed run compare bit for bit
PATIENT = [
    *SHORT,
    "train.max_steps=50",
    "train.eval_interval=5",
    "train.patience=2",
    "train.min_delta=10",
    "train.threads=1",
]


def test_patience_stops_at_the_expected_eval_also_after_a_resume(text_file: Path, tmp_path: Path, cli, monkeypatch):
    # min_delta 10: only the first evaluation (against no best at all) counts as an improvement,
    # so evaluations 2 and 3 (steps 10 and 15) use up a patience of 2
    r = cli("train", "--data", text_file, "--out", tmp_path / "whole", *PATIENT)
    assert r.code == 0, r
    assert "early stop at step 15: 2 evaluations without an improvement of more than 10 (min_delta) " in r.err
    whole = load_checkpoint(tmp_path / "whole" / "last.pt")
    assert whole["step"] == 15 and whole["best_step"] in (5, 10, 15) and whole["evals_since_best"] == 2
    results = json.loads((tmp_path / "whole" / "results.json").read_text())
    assert results["steps"] == 15 and results["stopped"].startswith("early stop")

    real_step = loop.train_step

    def interrupted(self):
        if self.state.step == 12:
            os.kill(os.getpid(), signal.SIGINT)
        return real_step(self)

    monkeypatch.setattr(loop, "train_step", interrupted)
    assert cli("train", "--data", text_file, "--out", tmp_path / "split", *PATIENT).code == 130
    monkeypatch.setattr(loop, "train_step", real_step)
    assert load_checkpoint(tmp_path / "split" / "last.pt")["step"] == 13
    r = cli("train", "--out", tmp_path / "split", "--resume")
    assert r.code == 0 and "early stop at step 15" in r.err, r
    split = load_checkpoint(tmp_path / "split" / "last.pt")
    assert split["step"] == 15 and all(torch.equal(whole["model"][k], split["model"][k]) for k in whole["model"])


def test_max_time_stops_cleanly(text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "r"
    r = cli(
        "train",
        "--data",
        text_file,
        "--out",
        out,
        *SHORT,
        "train.max_steps=1000000",
        "train.eval_interval=100000",
        "train.max_time=2s",
    )
    assert r.code == 0, r
    step = load_checkpoint(out / "last.pt")["step"]
    assert 0 < step < 1_000_000
    assert f"stopped at step {step}: train.max_time (2s) reached" in r.err
    assert json.loads((out / "results.json").read_text())["steps"] == step


def test_max_time_counts_from_the_commands_start(text_file: Path, tmp_path: Path) -> None:
    """The budget covers the command's start-up (torch's import, reading the data): a command that
    began 60 s ago with train.max_time=1m stops after its first step, and its wall time counts those 60 s."""
    import time

    from minigpt.training.launch import start_run
    from minigpt.training.plan import Resume

    out = tmp_path / "r"
    overrides = [
        ("data.path", str(text_file)),
        *(tuple(o.split("=", 1)) for o in SHORT),
        ("train.max_steps", "1000000"),
        ("train.max_time", "1m"),
    ]
    result = start_run(None, overrides, out, Resume.NO, started=time.perf_counter() - 60)
    assert result is not None and result.stopped is not None and "train.max_time" in result.stopped
    results = json.loads((out / "results.json").read_text())
    assert results["steps"] == 1 and results["wall_s"] >= 60


def test_results_json_matches_minigpt_eval(trained_run: Path, cli) -> None:
    results = json.loads((trained_run / "results.json").read_text())
    assert set(results) >= {"steps", "wall_s", "tokens", "best_step", "val_loss_full", "val_bpc_full", "tokens_per_s"}
    evaluated = json.loads(cli("eval", trained_run, "--json").out)
    assert results["val_loss_full"] == pytest.approx(evaluated["loss"], abs=1e-6)
    assert results["val_bpc_full"] == pytest.approx(evaluated["bpc"], abs=1e-6)
    assert results["steps"] == 60 and results["tokens"] == 60 * 8 * 16 and results["best_step"] in (30, 60)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(trained_run))
    acc.Reload()
    assert acc.Scalars("val/loss_full")[-1].value == pytest.approx(evaluated["loss"], rel=1e-5)


def test_runs_lists_each_run(trained_run: Path, other_text: Path, tmp_path: Path, cli) -> None:
    root = tmp_path / "runs"
    assert (
        cli(
            "train",
            "--init-from",
            trained_run,
            "--data",
            other_text,
            "--out",
            root / "ft",
            *SHORT,
            "train.max_steps=2",
            "train.final_eval=false",
        ).code
        == 0
    )
    (root / "broken").mkdir()
    (root / "broken" / "last.pt").write_text("not a checkpoint")
    r = cli("runs", root)
    assert r.code == 0, r
    lines = r.out.splitlines()
    assert lines[0].split() == [
        "run",
        "steps",
        "val",
        "est",
        "val",
        "full",
        "params",
        "wall",
        "snapshots",
        "started",
        "from",
    ]
    assert lines[1].startswith("broken") and "unreadable" in lines[1]
    assert lines[2].split()[:2] == ["ft", "2"] and lines[2].endswith(str((trained_run / "best.pt").resolve()))
    rows = [json.loads(line) for line in cli("runs", root, "--json").out.splitlines()]
    ft = rows[1]
    assert ft["steps"] == 2 and ft["val_loss_full"] is None and ft["params"] > 10_000
    listed = json.loads(cli("runs", trained_run.parent, "--json").out.splitlines()[0])
    assert listed["run"] == "run" and listed["val_loss_full"] is not None and listed["val_full_sampled"] is False
    assert "not a directory of runs" in one_error_line(cli("runs", tmp_path / "nothing"))
