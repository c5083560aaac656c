"""train.target_loss and `minigpt train speedrun`: a run stops at the first estimate at or below the
target that the whole validation split confirms, and says how long it took (the done line,
results.json, TensorBoard); a run that misses it says by how much. Behaviour only, never time."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from minigpt.checkpoint import load_checkpoint
from minigpt.infer.evaluate import EvalResult
from minigpt.runtime.cores import cpu_model_and_flags
from minigpt.runtime.mfu import Host
from minigpt.training.callbacks import TargetLoss
from minigpt.training.progress import target_row, target_text
from minigpt.training.trainer import Trainer

from .helpers import TINY, launch, one_error_line

# what the losses depend on, pinned: float32, one thread, torch's attention kernel
PINNED = [*TINY, "train.dtype=float32", "train.threads=1", "train.attention=flash", "log.sample_length=0"]
ROW_HEADING = "time to target, a markdown table row (host | command | time to target | steps | final loss):"


def results(run: Path) -> dict:
    return json.loads((run / "results.json").read_text())


def scalars(run: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run))
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)]


def tensor_tags(run: Path) -> list[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run))
    acc.Reload()
    return acc.Tags()["tensors"]


def row_cells(err: str) -> list[str]:
    """The table row, the output's last line, after its heading."""
    lines = err.rstrip("\n").splitlines()
    assert lines[-2] == ROW_HEADING, err[-2000:]
    row = lines[-1]
    assert row.startswith("| ") and row.endswith(" |"), row
    return [cell.strip() for cell in row[2:-2].split(" | ")]


def test_speedrun_by_name_stops_at_a_loose_target_and_reports_the_time_to_it(
    text_file: Path, tmp_path: Path, cli, monkeypatch
) -> None:
    """The shipped speedrun, on a tiny model with a loose target: it stops at the first estimate at or
    below the target (the whole split confirming it), before train.max_steps, and every report agrees."""
    out = tmp_path / "run"
    args = ["train", "speedrun", "--data", str(text_file), "--out", str(out), *PINNED]
    args += ["train.target_loss=2.8", "train.eval_interval=5", "train.max_steps=300", "train.max_time=10m"]
    monkeypatch.setattr(sys, "argv", ["minigpt", *args])  # the command the row names
    monkeypatch.delenv("MINIGPT_COMMAND", raising=False)  # --nproc's, left by a test whose execv did not exec
    r = cli(*args)
    assert r.code == 0, r
    res = results(out)
    target = res["target"]
    step = target["step"]
    assert target["reached"] and target["loss"] == 2.8 and target["from_step"] == 0
    assert res["steps"] == step < 300 and res["stopped"].startswith(f"target reached at step {step}:")
    assert target["val_loss_full"] <= 2.8 and target["val_loss_est"] <= 2.8
    assert target["val_sampled"] is False  # 2,000 validation characters: under train.final_eval_tokens
    assert res["val_loss_full"] == target["val_loss_full"]  # the final evaluation is the check's score
    assert load_checkpoint(out / "best.pt")["step"] == step
    assert 0 < target["train_s"] <= target["process_s"]  # the process's time holds the training's
    assert target["host"]["device"] == "cpu" and target["host"]["name"] == cpu_model_and_flags()[0]
    # the estimate decided when to look: every earlier one was above the target
    estimates = scalars(out, "val/loss_est")
    assert estimates[-1][0] == step and estimates[-1][1] <= 2.8
    assert all(loss > 2.8 for _, loss in estimates[:-1]) and len(estimates) > 1
    [(tb_step, train_s)] = scalars(out, "target/train_seconds")
    assert tb_step == step and train_s == pytest.approx(target["train_s"], rel=1e-5)
    assert scalars(out, "target/process_seconds")[0][0] == step
    assert "target/host" in " ".join(tensor_tags(out))
    host = Host(**target["host"]).text()
    line = f"  target:      val {target['val_loss_full']:.4f} on the whole split, at or below 2.8, at step {step:,}:"
    assert line in r.err and f"since the command started on {host}" in r.err
    assert row_cells(r.err) == [
        host,
        "minigpt " + " ".join(args),
        f"{target['process_s']:.0f} s ({target['train_s']:.0f} s training)",
        f"{step:,}",
        f"{target['val_loss_full']:.4f}",
    ]
    assert f"loss {target['val_loss_full']:.4f} nats" in cli("eval", str(out)).out  # the check is minigpt eval's score
    # a job script's resume finds it finished; a lower target would train on
    r = cli("train", "--out", str(out), "--resume", "auto")
    assert r.code == 0 and f"is finished: it reached train.target_loss 2.8 (val {target['val_loss_full']:.4f}" in r.err


def test_an_unreachable_target_ends_the_budget_and_says_by_how_much_and_a_resume_may_set_one(
    text_file: Path, tmp_path: Path, cli
) -> None:
    out = tmp_path / "run"
    base = ["train", "--data", str(text_file), "--out", str(out), *PINNED, "train.eval_interval=10"]
    r = cli(*base, "train.max_steps=20", "train.target_loss=0.01")
    assert r.code == 0, r
    res = results(out)
    target, full = res["target"], res["val_loss_full"]
    assert res["steps"] == 20 and res["stopped"] == "max_steps"
    assert not target["reached"] and "step" not in target
    assert target["best_of"] == "whole split" and target["best"] == full  # the final evaluation's
    assert target["missed_by"] == pytest.approx(full - 0.01) and target["ended"] == "max_steps"
    said = f"  target:      0.01 not reached: the best whole-split loss, {full:.4f}, is {full - 0.01:.4f} above it"
    assert said in r.err
    cells = row_cells(r.err)
    assert cells[2].startswith("not reached in ") and cells[2].endswith(f" s (+{full - 0.01:.4f})")
    assert cells[3:] == ["20", f"{full:.4f}"]
    [(step, missed)] = scalars(out, "target/missed_by")
    assert step == 20 and missed == pytest.approx(full - 0.01, rel=1e-5)
    # on resume the target may change: a loose one stops the resumed run, its times counted from step 20
    r = cli("train", "--out", str(out), "--resume", "train.max_steps=300", "train.target_loss=2.8")
    assert r.code == 0, r
    target = results(out)["target"]
    assert target["reached"] and target["from_step"] == 20 and 20 < target["step"] < 300
    assert "s of training (resumed at step 20), " in r.err


def test_an_estimate_the_whole_split_does_not_confirm_lets_training_go_on(
    text_file: Path, tmp_path: Path, cli, monkeypatch
) -> None:
    """The first whole-split check says the loss is above the target (patched): the run goes on
    past that step and stops at a later estimate that the real check confirms (a spread sample of
    the split here, past train.final_eval_tokens, as the final evaluation would score it)."""
    checked: list[int] = []
    real = Trainer.score_now

    def first_one_fails(trainer: Trainer) -> EvalResult:
        checked.append(trainer.state.step)
        result = real(trainer)
        return EvalResult(3.1, result.tokens, result.unit) if len(checked) == 1 else result

    monkeypatch.setattr(Trainer, "score_now", first_one_fails)
    out = tmp_path / "run"
    r = cli("train", "--data", text_file, "--out", out, *PINNED, "train.eval_interval=5", "train.max_steps=300",
            "train.target_loss=2.8", "train.final_eval_tokens=500")  # fmt: skip
    assert r.code == 0, r
    target = results(out)["target"]
    assert target["val_sampled"] and "on a spread sample of the split (train.final_eval_tokens), at or below" in r.err
    assert len(checked) >= 2 and target["reached"] and target["step"] == checked[-1] > checked[0]
    assert f"step {checked[0]}: val est " in r.err
    assert "is at or below train.target_loss 2.8, the whole split's 3.1000 is not: training goes on" in r.err
    estimates = dict(scalars(out, "val/loss_est"))
    assert estimates[checked[0]] <= 2.8  # the estimate had reached it, and the run went on
    assert load_checkpoint(out / "last.pt")["step"] == target["step"]


def test_what_a_missed_target_reports_without_a_whole_split_score_or_with_one_below_it() -> None:
    stop = TargetLoss(1.0)
    missed = stop.summary(None, 1.3, None)  # no check, no final evaluation: the best estimate
    assert (missed["best_of"], missed["ended"]) == ("estimate", "max_steps")
    assert missed["missed_by"] == pytest.approx(0.3) and not missed["reached"]
    assert target_text(missed) == "1 not reached: the best estimate, 1.3000, is 0.3000 above it (max_steps)"
    stop.best_full = 1.2  # a check found 1.2; the final evaluation (of best.pt, never checked) 0.99
    below = stop.summary(EvalResult(0.99, 100), 1.01, "stopped at step 9: train.max_time (1m) reached")
    assert below["best"] == 0.99 and below["missed_by"] == pytest.approx(-0.01)
    assert target_text(below).startswith("1 reached only by the final evaluation (0.9900): no estimate was at or")
    result = SimpleNamespace(target=below, wall_seconds=60.2, step=9, full=EvalResult(0.99, 100), best_val_loss=1.01)
    cells = row_cells(f"{ROW_HEADING}\n{target_row(result)}")
    assert cells[0] == "?" and cells[2:] == ["at most 60 s (the final evaluation)", "9", "0.9900"]  # no host: no run
    assert TargetLoss(0).summary(None, 1.0, None) is None  # 0: off


def test_a_negative_target_is_refused_naming_the_key(text_file: Path, cli) -> None:
    line = one_error_line(cli("train", "--data", text_file, "train.target_loss=-1", "--dry-run"))
    assert "train.target_loss must be a finite number >= 0, got -1.0" in line


@pytest.mark.slow  # a torchrun launch (10-20 s); .ci/run runs it
def test_two_processes_stop_together_at_the_target(text_file: Path, tmp_path: Path) -> None:
    """Under --nproc 2 rank 0 scores the whole split and every rank gets its result: both stop at the
    same step (a rank that went on would wait at the next meeting: the job would not end), and the
    row names the command typed, not the workers'."""
    out = tmp_path / "run"
    proc = launch("--data", text_file, "--out", out, *PINNED, "model.dropout=0.0", "train.eval_interval=5",
                  "train.max_steps=300", "train.target_loss=2.8", cache=tmp_path / "cache")  # fmt: skip
    _, err = proc.communicate_result
    assert proc.returncode == 0, err[-3000:]
    target = results(out)["target"]
    assert target["reached"] and results(out)["steps"] == target["step"] < 300
    assert load_checkpoint(out / "last.pt")["step"] == target["step"]
    assert row_cells(err)[1].startswith("minigpt train --nproc 2 --data ")
    assert math.isfinite(target["val_loss_full"]) and target["val_loss_full"] <= 2.8
