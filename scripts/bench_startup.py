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
from io import BytesIO
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import BARE_RUN, REPO, BenchError, Proc, child_env, minigpt, minigpt_train, run_timed  # noqa: E402

TINY = ["model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=16", "train.batch_size=8",
        "train.max_steps=5", "train.eval_interval=5", "train.eval_steps=2", *BARE_RUN, "log.progress=off"]  # fmt: skip
# `minigpt --help` in-process, then how many modules it imported (printed to stderr)
MODULE_COUNT = "import sys\nfrom {cli} import main\nmain(['--help'])\nprint(len(sys.modules), file=sys.stderr)"


def module_count_code(code: Path) -> str:
    """MODULE_COUNT for the tree at `code`: `main` is in minigpt/cli/app.py since the move into
    subpackages (6fc6243), in minigpt/cli.py before it."""
    new_layout = (code / "minigpt" / "cli" / "app.py").is_file()
    return MODULE_COUNT.format(cli="minigpt.cli.app" if new_layout else "minigpt.cli")


def unpack(ref: str, dest: Path) -> Path:
    """The tree of `ref` (its minigpt package is all that is used) in `dest`."""
    archive = subprocess.run(["git", "archive", ref, "minigpt"], cwd=REPO, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(dest, filter="data")
    return dest


def env_for(code: Path, cache: Path) -> dict[str, str]:
    """The child environment with only `code` on PYTHONPATH (its minigpt, whatever PYTHONPATH says here)."""
    drop = [k for k in os.environ if k.startswith("_MINIGPT")]
    return child_env(cache, drop=drop, PYTHONPATH=str(code), COLUMNS="100", BENCH_CWD=str(cache.parent))


def run(args: list[str], env: dict[str, str], check: bool = True) -> Proc:
    """`python ARGS` from the temporary folder (the current directory comes first on sys.path, so
    running from the repository would import its minigpt whatever PYTHONPATH says)."""
    return run_timed(args, env, cwd=Path(env["BENCH_CWD"]), check=check)


def make_text(n_chars: int = 20_000) -> str:
    words = ["the", "king", "queen", "speak", "hear", "me", "now", "good", "lord", "what", "say", "you"]
    lines = [f"KING:\n{' '.join(words[(i * 7 + j) % len(words)] for j in range(6))}.\n" for i in range(n_chars // 30)]
    return "".join(lines)[:n_chars]


def measure(before_ref: str, repeats: int) -> tuple[dict[str, dict[str, list[float]]], dict[str, int]]:
    """Seconds of each command for each variant, alternating, and the modules `minigpt --help` imports."""
    with tempfile.TemporaryDirectory(prefix="bench_startup_") as tmp_name:
        tmp = Path(tmp_name)
        trees = {"before": unpack(before_ref, tmp / "before"), "after": REPO}
        variants = {name: env_for(code, tmp / "cache") for name, code in trees.items()}
        for name, env in variants.items():
            where = run(["-c", "import minigpt; print(minigpt.__file__)"], env).stdout.strip()
            print(f"{name}: {where}", file=sys.stderr)
        text = tmp / "text.txt"
        text.write_text(make_text(), encoding="utf-8")
        run_dir = tmp / "run"
        run(minigpt_train(text, run_dir, *TINY), variants["after"])

        commands = {
            "--help": ["--help"],
            "sample 1 char": ["sample", str(run_dir), "--max-new-tokens", "1", "--device", "cpu"],
        }
        if run(minigpt("--version"), variants["after"], check=False).returncode == 0:
            commands["--version"] = ["--version"]
        times: dict[str, dict[str, list[float]]] = {c: {v: [] for v in variants} for c in commands}
        for i in range(repeats):
            order = list(variants) if i % 2 == 0 else list(reversed(variants))
            for command, args in commands.items():
                for name in order:
                    if command == "--version" and name == "before":
                        continue  # the old code may not have it
                    times[command][name].append(run(minigpt(*args), variants[name]).wall_s)
        counts = {name: run(["-c", module_count_code(trees[name])], env) for name, env in variants.items()}
    return times, {name: int(proc.stderr.split()[-1]) for name, proc in counts.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="HEAD", help="git ref of the code to compare against (default HEAD)")
    parser.add_argument("--repeats", type=int, default=9, help="runs of each command per variant (default 9)")
    opts = parser.parse_args(argv)
    try:
        times, modules = measure(opts.before, opts.repeats)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

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
