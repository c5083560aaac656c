"""The structure docs/design.md promises: one-way imports and modules and functions of a readable size."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

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
    for training_side in ("minigpt.train.trainer", "minigpt.train.reporting", "minigpt.train.optim",
                          "minigpt.train.launch", "tensorboard", "typer"):  # fmt: skip
        assert training_side not in loaded, training_side
    assert not [m for m in loaded if m.startswith(("minigpt.train", "minigpt.cli"))]


def test_no_module_over_400_lines_and_no_function_over_60(capsys) -> None:
    spec = importlib.util.spec_from_file_location("code_shape", ROOT / "scripts" / "code_shape.py")
    code_shape = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(code_shape)
    assert code_shape.main(["--check"]) == 0, capsys.readouterr().out
