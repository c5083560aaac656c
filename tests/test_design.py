"""The structure docs/design.md promises: one-way imports and modules and functions of a readable size."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_using_a_model_does_not_load_the_training_side() -> None:
    code = (
        "import sys, minigpt.infer.loading, minigpt.inspect.attention, minigpt.runtime.device\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('minigpt', 'tqdm', 'typer', 'tensorboard')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    loaded = set(eval(out))
    assert "minigpt.infer.loading" in loaded  # the probe itself worked
    # (tqdm itself cannot be told apart: `import torch` loads it, through torch.hub)
    for training_side in (
        "minigpt.training.trainer",
        "minigpt.training.tensorboard",
        "minigpt.training.progress",
        "minigpt.training.optim",
        "minigpt.training.launch",
        "tensorboard",
        "typer",
    ):
        assert training_side not in loaded, training_side
    assert not [m for m in loaded if m.startswith(("minigpt.training", "minigpt.cli"))]


def test_nproc_becomes_torchrun_without_importing_torch(tmp_path) -> None:
    """`minigpt train --nproc N` checks the config and then execs torchrun: importing torch first
    only made every launch ~3 s slower (the workers import it anyway)."""
    code = (
        "import os, sys\n"
        "def execv(path, argv):\n"
        "    print('torch' in sys.modules, argv[1:5])\n"
        "    sys.exit(0)\n"
        "os.execv = execv\n"
        "from minigpt.cli.app import main\n"
        "main(sys.argv[1:])\n"
    )
    args = ["train", "--nproc", "2", "--out", str(tmp_path / "run"), "train.batch_size=4", "train.device=cpu"]
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the request file the workers would read
    run = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, env=env)
    assert run.returncode == 0, run.stderr
    [request] = tmp_path.glob("minigpt-train-*.json")
    launched = f"False ['-m', 'minigpt.runtime.torchrun', '--remove={request}', '--standalone']"
    assert run.stdout.strip() == launched, run.stdout


def test_every_function_design_md_names_exists_where_it_says() -> None:
    """docs/design.md walks two commands through the code by name: each `name()` it cites is
    defined in the module named just before it (`minigpt/cli/train.py` `train_cmd()`), else
    somewhere in the package; `Class.method()` is a method of that class."""
    package = {p: p.read_text(encoding="utf-8") for p in (ROOT / "minigpt").rglob("*.py")}
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    cited = re.findall(r"(?:`((?:minigpt/)?[\w/]+\.py)` )?`([\w.]+)\(\)`", text)
    assert len(cited) > 40
    wrong = []
    for module, name in cited:
        if name == "read":  # a file object's read(), not minigpt's
            continue
        where = ROOT / (module if module.startswith("minigpt/") else f"minigpt/{module}") if module else None
        sources = [package[where]] if where in package else [] if where else list(package.values())
        parts = name.removeprefix("minigpt.").split(".")  # minigpt.train(): the package's own
        patterns = [rf"^\s*(def|class) {re.escape(part)}\b" for part in parts]
        if not any(all(re.search(p, src, re.M) for p in patterns) for src in sources):
            wrong.append(f"{module} {name}()".strip())
    assert not wrong, wrong


def test_imports_point_down_and_no_function_is_over_80_lines(capsys) -> None:
    """scripts/code_shape.py --check: the layer order, no cycle, and no function body over
    MAX_FUNCTION_LINES (modules have no line cap)."""
    assert _code_shape().main(["--check"]) == 0, capsys.readouterr().out


def _code_shape():
    spec = importlib.util.spec_from_file_location("code_shape", ROOT / "scripts" / "code_shape.py")
    code_shape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code_shape)
    return code_shape


def _broken_copy(tmp_path: Path, module: str, code: str) -> Path:
    package = tmp_path / "minigpt"
    shutil.copytree(ROOT / "minigpt", package, ignore=shutil.ignore_patterns("__pycache__", "web"))
    path = package / module
    path.write_text(path.read_text(encoding="utf-8") + "\n" + code, encoding="utf-8")
    return package


@pytest.mark.parametrize(
    "module, code, problem",
    [
        (
            "data/tokenizer.py",
            "def f():\n    from minigpt.training.trainer import Trainer\n",
            "minigpt.data.tokenizer imports minigpt.training.trainer: data may not import training",
        ),
        (
            "model.py",
            "from minigpt.data import corpus\n",
            "minigpt.model imports minigpt.data.corpus: model may not import data",
        ),
        (
            "infer/decode.py",
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from minigpt.infer.sample import Request\n",
            "import cycle: minigpt.infer.decode <-> minigpt.infer.sample",
        ),
        ("infer/score.py", "import typer\n", "minigpt.infer.score imports typer: only cli may"),
        ("infer/score.py", "def f():\n" + "    pass\n" * 81, "minigpt/infer/score.py: f is 81 lines (limit 80)"),
    ],
)
def test_code_shape_fails_on_a_wrong_import_a_cycle_or_a_long_function(tmp_path, capsys, module, code, problem) -> None:
    code_shape = _code_shape()
    assert code_shape.main(["--check", "--package", str(_broken_copy(tmp_path, module, code))]) == 1
    out = capsys.readouterr().out
    assert problem in out, out
    assert "layers, each importing only those below it" in out  # the diagram it checked


@pytest.mark.parametrize("command", [["format", "--check"], ["check"]])
def test_the_code_is_ruff_formatted_and_lint_clean(command: list[str]) -> None:
    """CI's ruff gate: `ruff format --check` and `ruff check` over the package, tests and scripts."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "minigpt", "tests", "scripts"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
