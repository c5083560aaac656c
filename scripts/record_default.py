#!/usr/bin/env python3
"""Record the default run into docs/recorded/default/: the numbers every guide page quotes for it.

    uv run python scripts/record_default.py   # trains `minigpt train` (under a minute), samples, evaluates

It trains the built-in default into a temporary folder, exactly as the README's Quick start does, and
keeps what a reader is shown: the run's `config.yaml` and `results.json`, the last lines `train`
printed (`train_tail.txt`), the README's `sample` command and its output (`sample.txt`), `eval`'s
line (`eval.txt`), and the host it ran on (`host.json`: CPU model and flags, cores, torch).
tests/test_docs.py checks every page's headline numbers for the default against these files.

Re-record whenever the default changes (configs/default.yaml, the model, the loop, the optimizer):
run this on a quiet machine (nothing else training: the time is part of the record), commit
docs/recorded/default/, then fix whatever page tests/test_docs.py names.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "recorded" / "default"
TAIL_LINES = 12
# The README's sample command, word for word (after `minigpt sample RUN`).
SAMPLE_ARGS = ["--prompt", "ROMEO:", "--max-new-tokens", "200"]
# The CPU flags that decide the default's precision and attention form.
FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16")


def minigpt(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """One `minigpt` command, as a user runs it, its stdout and stderr kept apart; stops on a failure."""
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "100"}
    result = subprocess.run([sys.executable, "-m", "minigpt", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error: minigpt {' '.join(args)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return result


def without_machine_paths(text: str) -> str:
    """The text with this checkout's folder dropped, so the record names no machine's paths."""
    return text.replace(str(ROOT) + os.sep, "")


def host() -> dict:
    """The machine the run ran on: what a reader compares their own time against."""
    info = {"machine": platform.machine(), "system": platform.system(), "cpus": os.cpu_count()}
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        fields = dict(line.split(":", 1) for line in cpuinfo.read_text().splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        info["cpu"] = fields.get("model name", "")
        present = set(fields.get("flags", "").split())
        info["flags"] = [f for f in FLAGS if f in present]
    else:
        info["cpu"] = platform.processor()
        info["flags"] = []
    import torch

    info["torch"] = torch.__version__
    info["python"] = platform.python_version()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    info["commit"] = commit.stdout.strip()
    return info


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train = minigpt("train", "--out", "runs/default", cwd=work)
        printed = (train.stdout + train.stderr).rstrip().splitlines()
        run = work / "runs" / "default"
        sample = minigpt("sample", "runs/default", *SAMPLE_ARGS, cwd=work)
        evaluation = minigpt("eval", "runs/default", cwd=work)
        OUT.mkdir(parents=True, exist_ok=True)
        config = (run / "config.yaml").read_text(encoding="utf-8")
        (OUT / "config.yaml").write_text(without_machine_paths(config), encoding="utf-8")
        shutil.copy(run / "results.json", OUT / "results.json")
        (OUT / "train_tail.txt").write_text("\n".join(printed[-TAIL_LINES:]) + "\n", encoding="utf-8")
        command = "minigpt sample runs/default " + " ".join(
            f'"{a}"' if not a.startswith("-") and not a.isdigit() else a for a in SAMPLE_ARGS
        )
        (OUT / "sample.txt").write_text(f"$ {command}\n{sample.stdout.rstrip()}\n", encoding="utf-8")
        (OUT / "eval.txt").write_text(without_machine_paths(evaluation.stdout).strip() + "\n", encoding="utf-8")
    (OUT / "host.json").write_text(json.dumps(host(), indent=2) + "\n", encoding="utf-8")
    print(f"recorded the default run in {OUT.relative_to(ROOT)}:")
    done = [
        line for line in (OUT / "train_tail.txt").read_text(encoding="utf-8").splitlines() if line.startswith("done:")
    ]
    print(*done)


if __name__ == "__main__":
    main()
