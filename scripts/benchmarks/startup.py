"""startup: whole-process start-up and exit time of the command line, this working tree against a
git ref (children/module_count.py counts the modules `minigpt --help` imports)."""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from benchmarks.harness import (
    BARE_RUN,
    add_repeats_arg,
    child,
    machine_info,
    minigpt,
    minigpt_train,
    progress,
    run_timed,
    scratch,
    two_trees,
)

TINY = ["model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=16", "train.batch_size=8"]
TINY += ["train.max_steps=5", "train.eval_interval=5", "train.eval_steps=2", *BARE_RUN, "log.progress=off"]


def tiny_text(n_chars: int = 20_000) -> str:
    words = ["the", "king", "queen", "speak", "hear", "me", "now", "good", "lord", "what", "say", "you"]
    lines = [f"KING:\n{' '.join(words[(i * 7 + j) % len(words)] for j in range(6))}.\n" for i in range(n_chars // 30)]
    return "".join(lines)[:n_chars]


def measure_startup(before_ref: str, repeats: int) -> tuple[dict[str, dict[str, list[float]]], dict[str, int]]:
    """Seconds of each command for each tree, alternating, and the modules `minigpt --help` imports."""
    with scratch("bench_startup_") as tmp:
        trees = two_trees(before_ref, tmp, COLUMNS="100")
        for name, env in trees.items():
            where = run_timed(["-c", "import minigpt; print(minigpt.__file__)"], env, cwd=tmp).stdout.strip()
            progress(f"{name}: {where}")
        text = tmp / "text.txt"
        text.write_text(tiny_text(), encoding="utf-8")
        run_timed(minigpt_train(text, tmp / "run", *TINY), trees["after"], cwd=tmp)
        sample = ["sample", str(tmp / "run"), "--max-new-tokens", "1", "--device", "cpu"]
        commands = {"--help": ["--help"], "sample 1 char": sample, "--version": ["--version"]}
        times: dict[str, dict[str, list[float]]] = {c: {name: [] for name in trees} for c in commands}
        for i in range(repeats):
            for command, args in commands.items():
                for name in list(trees) if i % 2 == 0 else list(reversed(trees)):
                    times[command][name].append(run_timed(minigpt(*args), trees[name], cwd=tmp).wall_s)
        counts = {name: run_timed([child("module_count.py")], env, cwd=tmp) for name, env in trees.items()}
    return times, {name: int(proc.stderr.split()[-1]) for name, proc in counts.items()}


def run(a: argparse.Namespace) -> int:
    """Whole-process start-up and exit time of the command line, this working tree against a git ref.

    The "before" code is the tree of --before, unpacked with `git archive`; both run with this
    interpreter as `python -m minigpt ...`, alternating (A B B A ...) so drift hits both alike.
    Commands: `minigpt --help`, `minigpt sample RUN --max-new-tokens 1` (RUN: a tiny model trained
    first) and `minigpt --version`. Prints each one's medians and ratio, and the number of modules
    `minigpt --help` imports (noise-free)."""
    times, modules = measure_startup(a.before, a.repeats)
    print(f"\nwhole-process seconds, medians of {a.repeats} (before = {a.before}, after = working tree)")
    print(f"{'command':<16} {'before':>8} {'after':>8} {'after/before':>13}   (max - min: before, after)")
    result: dict[str, Any] = {"repeats": a.repeats, "before_ref": a.before}
    for command, by_tree in times.items():
        med = {name: statistics.median(ts) for name, ts in by_tree.items()}
        spread = {name: max(ts) - min(ts) for name, ts in by_tree.items()}
        ratio = med["after"] / med["before"]
        print(f"{command:<16} {med['before']:>8.3f} {med['after']:>8.3f} {ratio:>13.3f}   ", end="")
        print(f"({spread['before']:.3f}  {spread['after']:.3f})")
        result[command] = {n: round(v, 4) for n, v in med.items()}
        result[command] |= {f"spread_{n}": round(v, 4) for n, v in spread.items()}
    print(f"modules imported by `minigpt --help`: before {modules['before']}, after {modules['after']}")
    print(json.dumps({**result, "help_modules": modules, "machine": machine_info()}))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--before", default="HEAD", help="git ref of the code to compare against (default HEAD)")
    add_repeats_arg(ap, default=9)
