"""startup: whole-process start-up and exit time of the command line, this working tree against a
git ref (children/module_count.py counts the modules `minigpt --help` imports)."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    BARE_RUN,
    REPO,
    BenchError,
    Proc,
    add_repeats_arg,
    child,
    child_env,
    machine_info,
    minigpt,
    minigpt_train,
    progress,
    run_timed,
)

TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "model.block_size=16",
    "train.batch_size=8",
    "train.max_steps=5",
    "train.eval_interval=5",
    "train.eval_steps=2",
    *BARE_RUN,
    "log.progress=off",
]


def cli_module(code: Path) -> str:
    """The module with `main` in the tree at `code`: minigpt/cli/app.py since the move into
    subpackages (6fc6243), minigpt/cli.py before it."""
    return "minigpt.cli.app" if (code / "minigpt" / "cli" / "app.py").is_file() else "minigpt.cli"


def unpack(ref: str, dest: Path) -> Path:
    """The tree of `ref` (its minigpt package is all that is used) in `dest`."""
    import tarfile
    from io import BytesIO

    archive = subprocess.run(["git", "archive", ref, "minigpt"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def tiny_text(n_chars: int = 20_000) -> str:
    words = ["the", "king", "queen", "speak", "hear", "me", "now", "good", "lord", "what", "say", "you"]
    lines = [f"KING:\n{' '.join(words[(i * 7 + j) % len(words)] for j in range(6))}.\n" for i in range(n_chars // 30)]
    return "".join(lines)[:n_chars]


def measure_startup(before_ref: str, repeats: int) -> tuple[dict[str, dict[str, list[float]]], dict[str, int]]:
    """Seconds of each command for each variant, alternating, and the modules `minigpt --help` imports."""
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"before": unpack(before_ref, tmp / "before"), "after": REPO}
        # only its own copy on PYTHONPATH; run from the temporary folder, since the current directory
        # comes first on sys.path and the repository's would import its minigpt whatever PYTHONPATH says
        drop = [k for k in os.environ if k.startswith("_MINIGPT")]
        variants = {
            name: child_env(tmp / "cache", drop=drop, PYTHONPATH=str(code), COLUMNS="100")
            for name, code in trees.items()
        }

        def in_tmp(args: list[str], env: dict[str, str], check: bool = True) -> Proc:
            return run_timed(args, env, cwd=tmp, check=check)

        for name, env in variants.items():
            progress(f"{name}: {in_tmp(['-c', 'import minigpt; print(minigpt.__file__)'], env).stdout.strip()}")
        text = tmp / "text.txt"
        text.write_text(tiny_text(), encoding="utf-8")
        run_dir = tmp / "run"
        in_tmp(minigpt_train(text, run_dir, *TINY), variants["after"])

        commands = {
            "--help": ["--help"],
            "sample 1 char": ["sample", str(run_dir), "--max-new-tokens", "1", "--device", "cpu"],
        }
        if in_tmp(minigpt("--version"), variants["after"], check=False).returncode == 0:
            commands["--version"] = ["--version"]
        times: dict[str, dict[str, list[float]]] = {c: {v: [] for v in variants} for c in commands}
        for i in range(repeats):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for command, args in commands.items():
                for name in order:
                    if command == "--version" and name == "before":
                        continue  # the old code may not have it
                    times[command][name].append(in_tmp(minigpt(*args), variants[name]).wall_s)
        counts = {
            name: in_tmp([child("module_count.py"), cli_module(trees[name])], env) for name, env in variants.items()
        }
    return times, {name: int(proc.stderr.split()[-1]) for name, proc in counts.items()}


def run(a: argparse.Namespace) -> int:
    """Whole-process start-up and exit time of the command line, this working tree against a git ref.

    The "before" code is the tree of --before, unpacked with `git archive`; both run with this
    interpreter as `python -m minigpt ...`, alternating (A B B A ...) so drift hits both alike.
    Commands: `minigpt --help`, `minigpt sample RUN --max-new-tokens 1` (RUN: a tiny model trained
    first) and `minigpt --version`. Prints each one's medians and ratio, and the number of modules
    `minigpt --help` imports (noise-free)."""
    try:
        times, modules = measure_startup(a.before, a.repeats)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"\nwhole-process seconds, medians of {a.repeats} (before = {a.before}, after = working tree)")
    print(f"{'command':<16} {'before':>8} {'after':>8} {'after/before':>13}   (max - min: before, after)")
    result: dict[str, Any] = {"repeats": a.repeats, "before_ref": a.before}
    for command, by_variant in times.items():
        med = {n: statistics.median(ts) if ts else float("nan") for n, ts in by_variant.items()}
        ratio = med["after"] / med["before"] if by_variant["before"] else float("nan")
        spread = "  ".join(f"{max(ts) - min(ts):.3f}" if ts else "-" for ts in by_variant.values())
        print(f"{command:<16} {med['before']:>8.3f} {med['after']:>8.3f} {ratio:>13.3f}   ({spread})")
        result[command] = {n: (round(med[n], 4) if ts else None) for n, ts in by_variant.items()} | {
            f"spread_{n}": round(max(ts) - min(ts), 4) for n, ts in by_variant.items() if ts
        }
    print(f"modules imported by `minigpt --help`: before {modules['before']}, after {modules['after']}")
    print(json.dumps({**result, "help_modules": modules, "machine": machine_info()}))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--before", default="HEAD", help="git ref of the code to compare against (default HEAD)")
    add_repeats_arg(ap, default=9)
