from __future__ import annotations

import pytest

from minigpt.config.schema import OptimConfig
from minigpt.training.loop import lr_at, train_step


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_warmup_then_decay_to_min_lr(schedule: str) -> None:
    cfg = OptimConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, schedule=schedule)
    assert lr_at(0, cfg, 100) == pytest.approx(1e-3 / 11)  # small but not zero
    assert lr_at(10, cfg, 100) == pytest.approx(1e-3)  # end of warm-up: peak
    assert lr_at(99, cfg, 100) == pytest.approx(1e-4)  # last step: the floor
    assert lr_at(500, cfg, 100) == pytest.approx(1e-4)  # past the end (a longer resumed run)
    values = [lr_at(s, cfg, 100) for s in range(100)]
    assert all(b > a for a, b in zip(values[:10], values[1:11]))  # rising during warm-up
    assert all(b <= a for a, b in zip(values[10:], values[11:]))  # then never rising


def test_cosine_midpoint_and_linear_midpoint() -> None:
    cos = OptimConfig(lr=1.0, min_lr=0.0, warmup_steps=0, schedule="cosine")
    lin = OptimConfig(lr=1.0, min_lr=0.0, warmup_steps=0, schedule="linear")
    assert lr_at(50, cos, 101) == pytest.approx(0.5)
    assert lr_at(25, lin, 101) == pytest.approx(0.75)
    assert lr_at(25, cos, 101) == pytest.approx(0.5 * (1 + 2**-0.5))


def test_constant_after_warmup() -> None:
    cfg = OptimConfig(lr=1e-3, min_lr=1e-4, warmup_steps=5, schedule="constant")
    assert [lr_at(s, cfg, 50) for s in (5, 20, 49)] == [1e-3, 1e-3, 1e-3]


def test_no_warmup_starts_at_peak() -> None:
    cfg = OptimConfig(lr=2e-3, min_lr=1e-4, warmup_steps=0)
    assert lr_at(0, cfg, 10) == pytest.approx(2e-3)


def test_progress_drives_the_decay_and_warmup_still_counts_steps() -> None:
    cfg = OptimConfig(lr=1.0, min_lr=0.1, warmup_steps=10, schedule="linear", schedule_by="time")
    assert lr_at(4, cfg, 100, progress=0.9) == pytest.approx(5 / 11)  # warm-up ignores the clock
    assert lr_at(50, cfg, 100, progress=0.0) == pytest.approx(1.0)
    assert lr_at(50, cfg, 100, progress=0.5) == pytest.approx(0.55)
    assert lr_at(12, cfg, 100, progress=1.3) == pytest.approx(0.1)  # past the budget: the floor


def test_time_schedule_needs_max_time(text_file, tmp_path, cli) -> None:
    from .helpers import one_error_line

    line = one_error_line(cli("train", "--data", text_file, "--out", tmp_path / "r", "optim.schedule_by=time"))
    assert "optim.schedule_by time needs train.max_time" in line and "train.max_time=4m" in line
    assert not (tmp_path / "r").exists()


def test_a_time_budget_ends_its_decay_and_scores_the_last_weights(text_file, tmp_path, cli) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from minigpt.checkpoint import Checkpoint

    from .helpers import TINY

    out = tmp_path / "r"
    r = cli(
        "train",
        "--data",
        text_file,
        "--out",
        out,
        *TINY,
        "log.sample_length=0",
        "log.interval=1",
        "optim.schedule_by=time",
        "train.max_time=3s",
        "train.max_steps=1000000",
        "train.eval_interval=100000",
        "optim.lr=1e-2",
        "optim.min_lr=1e-4",
        "log.progress=lines",
        "log.progress_seconds=0.5",
    )
    assert r.code == 0, r
    progress = [ln for ln in r.err.splitlines() if "% of the time) |" in ln]  # not "step 40/1000000 (0%)"
    assert progress and all("ETA 0:00:0" in ln for ln in progress), r.err
    last = Checkpoint.load(out / "last.pt")
    # the decay's progress at the last step: one step short of the end (a step on a loaded machine
    # can take a tenth of this 3 s budget), never the 0 or 0.5 of a decay that ran over max_steps
    assert 10 < last.step < 1_000_000 and last.time_progress > 0.9
    assert last.val_loss is not None  # evaluated at the stop, not only saved
    acc = EventAccumulator(str(out), size_guidance={"scalars": 0})
    acc.Reload()
    lrs = [e.value for e in sorted(acc.Scalars("lr"), key=lambda e: e.step)]
    after_warmup = lrs[5:]
    assert after_warmup[0] > 0.9e-2 and after_warmup[-1] < 0.05e-2  # from the peak down to near the floor
    assert all(b <= a + 1e-12 for a, b in zip(after_warmup, after_warmup[1:]))


def test_a_resumed_time_budget_continues_its_decay_from_where_it_stopped(text_file, tmp_path) -> None:
    import time

    from .helpers import make_trainer

    trainer = make_trainer(
        text_file,
        tmp_path / "r",
        "optim.schedule_by=time",
        "train.max_time=1h",
        "optim.warmup_steps=0",
        "optim.lr=1e-2",
        "optim.min_lr=0",
    )
    now = time.perf_counter()
    trainer.time_budget = (now, 0.5, now + 3600)  # resumed half way down, an hour left
    stats = train_step(trainer)
    assert 0.5 <= trainer.state.time_progress < 0.501
    assert stats.lr == pytest.approx(0.5e-2, rel=1e-2)  # the cosine's midpoint, not its start
    saved = trainer.state.state_dict()
    assert saved["time_progress"] == trainer.state.time_progress  # goes into the checkpoint
