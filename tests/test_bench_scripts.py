"""The benchmark scripts' bookkeeping (no benchmark runs here): how a curve is read at a time,
which number stands at the budget's end, and which parts --only and --skip-* select."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import bench  # noqa: E402
import bench_budget  # noqa: E402

sys.path.pop(0)


def test_a_curve_is_read_at_its_latest_evaluation_before_the_time() -> None:
    curve = [[0, 3.5, 4.2], [250, 14.0, 2.4], [500, 25.0, 2.1]]
    assert bench_budget.loss_at(curve, 3.0) is None  # nothing evaluated yet
    assert bench_budget.loss_at(curve, 14.0) == 2.4
    assert bench_budget.loss_at(curve, 24.9) == 2.4  # not the next one, not an interpolation
    assert bench_budget.loss_at(curve, 60.0) == 2.1


def test_the_budget_point_is_the_whole_split_score_and_earlier_points_the_curves() -> None:
    def pair(final_m: float, final_r: float) -> dict:
        return {"minigpt_wall_s": 238.0, "minigpt_steps": 3400, "minigpt_val_loss": final_m,
                "minigpt_curve": [[250, 20.0, 1.9], [500, 31.0, 1.7], [3400, 238.0, final_m]],
                "reference_wall_s": 240.0, "reference_steps": 5000, "reference_val_loss": final_r,
                "reference_curve": [[0, 4.0, 4.2], [250, 29.0, 2.5], [5000, 239.0, final_r]]}  # fmt: skip

    s = bench_budget.summarize([pair(1.48, 1.66), pair(1.50, 1.64), pair(1.49, 1.65)])
    assert s["at_seconds"]["30"] == {"minigpt": 1.9, "reference": 2.5}
    assert s["at_seconds"]["240"] == {"minigpt": pytest.approx(1.49), "reference": pytest.approx(1.65)}
    assert s["gap"] == pytest.approx(0.16)
    assert "| 30 s | 1.9000 | 2.5000 | yes |" in bench_budget.table(s)


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        ([], set(bench.PARTS)),
        (["--only", "budget", "big"], {"budget", "big"}),
        (["--skip-train"], {"batch-sampling", "sampling"}),
        (["--only-batch-sampling"], {"batch-sampling"}),
    ],
)
def test_only_and_skip_pick_the_parts(args: list[str], parts: set[str]) -> None:
    assert bench.parse_args(args).parts == parts

