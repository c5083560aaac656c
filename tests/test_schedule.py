from __future__ import annotations

import pytest

from minigpt.config import OptimConfig
from minigpt.schedule import lr_at


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
