"""The benchmark harness's bookkeeping (no benchmark runs here): how a curve is read at a time,
which number stands at the budget's end, which parts `speed --only` selects, and that every
subcommand parses its options."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench.py"
_spec = importlib.util.spec_from_file_location("bench", SCRIPT)
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench"] = bench  # its dataclasses look their module up there
_spec.loader.exec_module(bench)


def test_a_curve_is_read_at_its_latest_evaluation_before_the_time() -> None:
    curve = [[0, 3.5, 4.2], [250, 14.0, 2.4], [500, 25.0, 2.1]]
    assert bench.loss_at(curve, 3.0) is None  # nothing evaluated yet
    assert bench.loss_at(curve, 14.0) == 2.4
    assert bench.loss_at(curve, 24.9) == 2.4  # not the next one, not an interpolation
    assert bench.loss_at(curve, 60.0) == 2.1


def test_the_budget_point_is_the_whole_split_score_and_earlier_points_the_curves() -> None:
    def pair(final_m: float, final_r: float) -> dict:
        return {
            "minigpt_wall_s": 238.0,
            "minigpt_steps": 3400,
            "minigpt_val_loss": final_m,
            "minigpt_curve": [[250, 20.0, 1.9], [500, 31.0, 1.7], [3400, 238.0, final_m]],
            "reference_wall_s": 240.0,
            "reference_steps": 5000,
            "reference_val_loss": final_r,
            "reference_curve": [[0, 4.0, 4.2], [250, 29.0, 2.5], [5000, 239.0, final_r]],
        }

    s = bench.summarize_budget([pair(1.48, 1.66), pair(1.50, 1.64), pair(1.49, 1.65)])
    assert s["at_seconds"]["30"] == {"minigpt": 1.9, "reference": 2.5}
    assert s["at_seconds"]["240"] == {"minigpt": pytest.approx(1.49), "reference": pytest.approx(1.65)}
    assert s["gap"] == pytest.approx(0.16)
    assert "| 30 s | 1.9000 | 2.5000 | yes |" in bench.budget_table(s)
    rows = {r.metric: r for r in bench.table_rows({"budget": s})}
    assert rows["cpu_4min.yaml val loss at 240 s (whole split)"].met == "yes"  # 1.49 <= 1.50 and below the reference


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (["speed"], set(bench.SPEED_PARTS)),
        (["speed", "--only", "budget", "big"], {"budget", "big"}),
        (["speed", "--only", "batch-sampling", "--repeats", "3"], {"batch-sampling"}),
    ],
)
def test_speed_only_picks_the_parts(args: list[str], parts: set[str]) -> None:
    a = bench.parse_args(args)
    assert a.func is bench.cmd_speed and set(a.only) == parts


@pytest.mark.parametrize("command", list(bench.COMMANDS))
def test_every_subcommand_parses_its_defaults_and_rejects_no_repeats(command: str) -> None:
    a = bench.parse_args([command])
    assert a.func is bench.COMMANDS[command][1]
    if hasattr(a, "repeats"):
        with pytest.raises(SystemExit):
            bench.parse_args([command, "--repeats", "0"])


def test_a_speed_ratio_is_met_only_at_its_target() -> None:
    series = {
        "minigpt_tokens_per_s": bench.Series([30.0, 33.0, 45.0]),
        "reference_tokens_per_s": bench.Series([20.0, 22.0, 21.0]),
    }
    s = bench.summarize_speedup(series, "tokens_per_s", 1.5)
    assert s["ratio"] == pytest.approx(33.0 / 21.0) and s["met"]  # medians over medians
    assert not bench.summarize_speedup(series, "tokens_per_s", 1.6)["met"]
