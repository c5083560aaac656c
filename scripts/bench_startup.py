#!/usr/bin/env python3
"""Whole-process start-up and exit time of the command line, this checkout against a git ref.

The "before" code is the tree of REF (default HEAD), unpacked with `git archive` into a temporary
folder; the "after" code is this working tree. Both run with the same interpreter, as
`python -m minigpt ...` with PYTHONPATH pointing at their copy. The two alternate (A B B A ...),
so drift on a shared machine hits both alike. For each command it prints the median wall time of
each and their ratio, and the number of modules `minigpt --help` imports (noise-free).

    uv run python scripts/bench_startup.py                     # HEAD against the working tree
    uv run python scripts/bench_startup.py --before 4a65ca8 --repeats 15

Commands timed: `minigpt --help`, `minigpt sample RUN --max-new-tokens 1` (RUN: a tiny model
trained here first, with the "after" code) and, where the "after" code has it, `minigpt --version`.
Run it with nothing else busy: two processes on two cores distort every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TINY = ["model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=16", "train.batch_size=8",
        "train.max_steps=5", "train.eval_interval=5", "train.eval_steps=2", "train.final_eval=false",
        "log.sample_length=0", "log.attention_probe=", "log.tensorboard=false", "log.progress=off"]  # fmt: skip
MODULE_COUNT = "import sys\nfrom minigpt.cli.app import main\nmain(['--help'])\nprint(len(sys.modules), file=sys.stderr)"


def unpack(ref: str, dest: Path) -> Path:
    """The tree of `ref` (its minigpt package is all that is used) in `dest`."""
    archive = subprocess.run(["git", "archive", ref, "minigpt"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def env_for(code: Path, cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("_MINIGPT")}
    env.update(
        {"PYTHONPATH": str(code), "MINIGPT_CACHE_DIR": str(cache), "COLUMNS": "100", "BENCH_CWD": str(cache.parent)}
    )
    return env


def run(args: list[str], env: dict[str, str], check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    """`python ARGS` from the temporary folder (the current directory comes first on sys.path, so
    running from the repository would import its minigpt whatever PYTHONPATH says)."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, cwd=env["BENCH_CWD"])
    seconds = time.perf_counter() - t0
    if check and proc.returncode != 0:
        raise SystemExit(f"{args} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return seconds, proc


def make_text(n_chars: int = 20_000) -> str:
    words = ["the", "king", "queen", "speak", "hear", "me", "now", "good", "lord", "what", "say", "you"]
    lines = [f"KING:\n{' '.join(words[(i * 7 + j) % len(words)] for j in range(6))}.\n" for i in range(n_chars // 30)]
    return "".join(lines)[:n_chars]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="HEAD", help="git ref of the code to compare against (default HEAD)")
    parser.add_argument("--repeats", type=int, default=9, help="runs of each command per variant (default 9)")
    opts = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp_name:
        tmp = Path(tmp_name)
        before = unpack(opts.before, tmp / "before")
        variants = {"before": env_for(before, tmp / "cache"), "after": env_for(REPO, tmp / "cache")}
        for name, env in variants.items():
            where = run(["-c", "import minigpt; print(minigpt.__file__)"], env)[1].stdout.strip()
            print(f"{name}: {where}", file=sys.stderr)
        text = tmp / "text.txt"
        text.write_text(make_text(), encoding="utf-8")
        run_dir = tmp / "run"
        run(["-m", "minigpt", "train", "--data", str(text), "--out", str(run_dir), "--device", "cpu", *TINY],
            variants["after"])  # fmt: skip

        commands = {
            "--help": ["--help"],
            "sample 1 char": ["sample", str(run_dir), "--max-new-tokens", "1", "--device", "cpu"],
        }
        has_version = run(["-m", "minigpt", "--version"], variants["after"], check=False)[1].returncode == 0
        if has_version:
            commands["--version"] = ["--version"]
        times: dict[str, dict[str, list[float]]] = {c: {v: [] for v in variants} for c in commands}
        for i in range(opts.repeats):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for command, args in commands.items():
                for name in order:
                    if command == "--version" and name == "before":
                        continue  # the old code may not have it
                    times[command][name].append(run(["-m", "minigpt", *args], variants[name])[0])
        modules = {n: int(run(["-c", MODULE_COUNT], env)[1].stderr.split()[-1]) for n, env in variants.items()}

    print(f"\nwhole-process seconds, medians of {opts.repeats} (before = {opts.before}, after = working tree)")
    print(f"{'command':<16} {'before':>8} {'after':>8} {'after/before':>13}   (max - min: before, after)")
    result: dict[str, object] = {"repeats": opts.repeats, "before_ref": opts.before}
    for command, by_variant in times.items():
        med = {n: statistics.median(ts) if ts else float("nan") for n, ts in by_variant.items()}
        ratio = med["after"] / med["before"] if by_variant["before"] else float("nan")
        spread = "  ".join(f"{max(ts) - min(ts):.3f}" if ts else "-" for ts in by_variant.values())
        print(f"{command:<16} {med['before']:>8.3f} {med['after']:>8.3f} {ratio:>13.3f}   ({spread})")
        result[command] = {n: (round(med[n], 4) if ts else None) for n, ts in by_variant.items()} | {
            f"spread_{n}": round(max(ts) - min(ts), 4) for n, ts in by_variant.items() if ts
        }
    print(f"modules imported by `minigpt --help`: before {modules['before']}, after {modules['after']}")
    result["help_modules"] = modules
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
