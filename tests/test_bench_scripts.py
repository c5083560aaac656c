"""The benchmark harness's bookkeeping (no benchmark runs here): how a curve is read at a time,
which number stands at the budget's end, which parts `speed --only` selects, that every
subcommand parses its options, and that the targets are data the report reads."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load(name: str, path: Path, package: bool = False) -> ModuleType:
    """`name` from `path` as an import would load it (a package's submodules found under its folder),
    without putting scripts/ on sys.path."""
    where = [str(path.parent)] if package else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=where)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


load("screenshots", SCRIPTS / "screenshots.py")  # scripts/ modules a benchmark imports, as a script finds them
load("benchmarks", SCRIPTS / "benchmarks" / "__init__.py", package=True)
bench = load("bench", SCRIPTS / "bench.py")
speed = importlib.import_module("benchmarks.speed")
speed_budget = importlib.import_module("benchmarks.speed_budget")
speed_report = importlib.import_module("benchmarks.speed_report")


def test_a_curve_is_read_at_its_latest_evaluation_before_the_time() -> None:
    curve = [[0, 3.5, 4.2], [250, 14.0, 2.4], [500, 25.0, 2.1]]
    assert speed_budget.loss_at(curve, 3.0) is None  # nothing evaluated yet
    assert speed_budget.loss_at(curve, 14.0) == 2.4
    assert speed_budget.loss_at(curve, 24.9) == 2.4  # not the next one, not an interpolation
    assert speed_budget.loss_at(curve, 60.0) == 2.1


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

    s = speed_budget.summarize_budget([pair(1.48, 1.66), pair(1.50, 1.64), pair(1.49, 1.65)])
    assert s["at_seconds"]["30"] == {"minigpt": 1.9, "reference": 2.5}
    assert s["at_seconds"]["240"] == {"minigpt": pytest.approx(1.49), "reference": pytest.approx(1.65)}
    assert s["gap"] == pytest.approx(0.16)
    assert "| 30 s | 1.9000 | 2.5000 | yes |" in speed_budget.budget_table(s)
    rows = {r.metric: r for r in speed_report.table_rows({"budget": s})}
    assert rows["cpu_4min.yaml val loss at 240 s (whole split)"].met == "yes"  # 1.49 <= 1.50 and below the reference


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (["speed"], set(speed.SPEED_PARTS)),
        (["speed", "--only", "budget", "big"], {"budget", "big"}),
        (["speed", "--only", "batch-sampling", "--repeats", "3"], {"batch-sampling"}),
    ],
)
def test_speed_only_picks_the_parts(args: list[str], parts: set[str]) -> None:
    a = bench.parse_args(args)
    assert a.func is speed.run and set(a.only) == parts


@pytest.mark.parametrize("command", bench.BENCHMARKS)
def test_every_subcommand_parses_its_defaults_and_rejects_no_repeats(command: str) -> None:
    a = bench.parse_args([command])
    assert a.func is bench.benchmark(command).run
    if hasattr(a, "repeats"):
        with pytest.raises(SystemExit):
            bench.parse_args([command, "--repeats", "0"])


def test_a_speed_ratio_is_met_only_at_its_target() -> None:
    series = {
        "minigpt_tokens_per_s": speed_report.Series([30.0, 33.0, 45.0]),
        "reference_tokens_per_s": speed_report.Series([20.0, 22.0, 21.0]),
    }
    s = speed_report.summarize_speedup(series, "tokens_per_s", 1.5)
    assert s["ratio"] == pytest.approx(33.0 / 21.0) and s["met"]  # medians over medians
    assert not speed_report.summarize_speedup(series, "tokens_per_s", 1.6)["met"]


def test_the_report_reads_its_targets_from_targets_yaml(monkeypatch) -> None:
    assert set(speed.SPEED_PARTS) <= set(speed_report.TARGETS)  # every part has its targets as data
    runs = [
        {
            "minigpt_wall_s": 238.0,
            "minigpt_steps": 3400,
            "minigpt_val_loss": 1.49,
            "minigpt_curve": [[3400, 238.0, 1.49]],
            "reference_wall_s": 240.0,
            "reference_steps": 5000,
            "reference_val_loss": 1.65,
            "reference_curve": [[5000, 239.0, 1.65]],
        }
    ]
    final = "cpu_4min.yaml val loss at 240 s (whole split)"
    summary = speed_budget.summarize_budget(runs)
    assert {r.metric: r for r in speed_report.table_rows({"budget": summary})}[final].met == "yes"
    monkeypatch.setitem(speed_report.TARGETS["budget"], "val_loss", 1.45)
    row = {r.metric: r for r in speed_report.table_rows({"budget": summary})}[final]
    assert (row.target, row.met) == ("<= 1.45", "NO")


def test_no_benchmark_file_is_over_500_lines() -> None:
    files = [SCRIPTS / "bench.py", *(SCRIPTS / "benchmarks").rglob("*.py")]
    long = {str(p.relative_to(SCRIPTS)): n for p in files if (n := len(p.read_text().splitlines())) > 500}
    assert not long, f"split these into a benchmark's own modules: {long}"
