"""The Trainer driven directly, without the command line: steps, state, and exact continuation."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import torch

from minigpt.checkpoint import LAST, Checkpoint
from minigpt.training.loop import train_step

from .helpers import make_trainer, weights

CPU = torch.device("cpu")


def test_state_dict_into_a_new_trainer_continues_exactly(text_file: Path, tmp_path: Path) -> None:
    first = make_trainer(text_file, tmp_path / "a")
    losses = [train_step(first).loss.item() for _ in range(3)]
    assert first.state.step == 3 and first.state.tokens_seen == 3 * 8 * 16
    snapshot = copy.deepcopy(first.state_dict())  # the live tensors change with the next steps
    ahead = [train_step(first).loss.item() for _ in range(2)]
    expected = weights(first)

    second = make_trainer(text_file, tmp_path / "b")
    second.load_state_dict(snapshot)
    assert second.state.step == 3
    again = [train_step(second).loss.item() for _ in range(2)]
    assert again == ahead
    got = weights(second)
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert second.evaluate() == first.evaluate()

    # without the state, the same two steps do something else (the test can tell the difference)
    fresh = make_trainer(text_file, tmp_path / "c")
    assert [train_step(fresh).loss.item() for _ in range(2)] != ahead
    assert all(math.isfinite(x) for x in losses + ahead)


def test_save_writes_a_checkpoint_that_resumes(text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    trainer = make_trainer(text_file, out)
    for _ in range(4):
        train_step(trainer)
    trainer.save(LAST)
    ckpt = Checkpoint.load(out / LAST)
    ckpt.check_resumable(out / LAST)
    assert ckpt.step == 4 and ckpt.tokenizer == trainer.tok.to_dict()
    expected = train_step(trainer).loss.item()  # before another trainer re-seeds torch's global RNG
    resumed = make_trainer(text_file, tmp_path / "other")
    resumed.load_state_dict(ckpt.to_dict())
    assert train_step(resumed).loss.item() == expected


def test_train_runs_to_max_steps_and_keeps_the_best(text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    trainer = make_trainer(text_file, out, "train.max_steps=12", "train.eval_interval=6", "log.tensorboard=false")
    result = trainer.train()
    assert result.step == trainer.state.step == 12
    assert result.best_val_loss == trainer.state.best_val_loss <= result.val_loss
    assert {p.name for p in out.iterdir()} == {"last.pt", "best.pt", "results.json"}
    assert Checkpoint.load(out / "best.pt").val_loss == result.best_val_loss


def test_a_step_the_gradient_scaler_skips_keeps_its_snapshot(text_file: Path, tmp_path: Path) -> None:
    """fp16: an overflowing gradient is a step the GradScaler skips (the weights unchanged), not a
    broken model; train.keep_every keeps its snapshot. (A scale of inf overflows every step.)"""
    from minigpt.checkpoint import list_snapshots

    trainer = make_trainer(text_file, tmp_path / "run", "train.max_steps=2", "train.keep_every=1")
    trainer.step.scaler = torch.amp.GradScaler("cpu", init_scale=math.inf)
    before = weights(trainer)
    result = trainer.train()
    assert math.isnan(train_step(trainer).grad_norm) and result.step == 2
    assert all(torch.equal(before[k], v) for k, v in weights(trainer).items())  # every step skipped
    assert [p.name for p in list_snapshots(tmp_path / "run")] == ["step_0000001.pt", "step_0000002.pt"]
