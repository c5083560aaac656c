"""Run directories written by minigpt 0.1.0 before the package moved into layers (tests/fixtures/v0_1_runs:
a tiny char model trained with Muon and a tiny byte model trained with AdamW, and what that release printed
for them in expected.json) still sample, evaluate and resume with today's code, to the same numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "v0_1_runs"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text(encoding="utf-8"))


@pytest.fixture(params=["char", "byte"])
def old_run(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    run = tmp_path / request.param
    shutil.copytree(FIXTURES / request.param, run)
    return run


def test_an_old_run_samples_the_same_text(cli, old_run: Path) -> None:
    res = cli("sample", old_run, "--max-new-tokens", "40", "--seed", "1", "--prompt", "ROMEO", "--device", "cpu")
    assert res.code == 0, res
    assert res.out == EXPECTED[old_run.name]["sample_seed_1_prompt_ROMEO_40"]


def test_an_old_run_evaluates_to_the_same_loss(cli, old_run: Path) -> None:
    res = cli("eval", old_run, "--data", FIXTURES / "tiny.txt", "--json", "--device", "cpu")
    assert res.code == 0, res
    assert json.loads(res.out)["loss"] == pytest.approx(EXPECTED[old_run.name]["eval_loss_on_tiny_txt"], rel=1e-5)


def test_an_old_run_resumes_with_its_optimizer(cli, old_run: Path) -> None:
    assert json.loads((old_run / "results.json").read_text())["steps"] == 6
    res = cli(
        "train",
        "--out",
        old_run,
        "--resume",
        "--data",
        FIXTURES / "tiny.txt",
        "train.max_steps=9",
        "train.device=cpu",
        f"data.cache_dir={old_run.parent / 'cache'}",
    )
    assert res.code == 0, res
    assert "resuming" in res.err
    assert json.loads((old_run / "results.json").read_text())["steps"] == 9
