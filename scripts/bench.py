#!/usr/bin/env python3
"""minigpt's benchmarks, one subcommand each, each in its own file in scripts/benchmarks/ (their
shared harness in harness.py, the programs they run in a fresh interpreter in children/, their
pass/fail targets in targets.yaml). Every figure docs/gpu.md and docs/lab/benchmarks.md quote
as current comes from one of them, so each can be measured again:

    uv run python scripts/bench.py speed --repeats 3        # against ../shared/bench/reference_gpt.py
    uv run python scripts/bench.py speed --only budget big  # some parts: see `speed --help`
    uv run python scripts/bench.py peak         # this machine's matrix-multiply peak: print it beside any speed
    uv run python scripts/bench.py data         # large corpora: peak RSS, encoding MB/s, time to the first step
    uv run python scripts/bench.py memory       # the memory preflight's estimate against the measured peak
    uv run python scripts/bench.py share        # two trainings, or a sampler and a training, on one machine
    uv run python scripts/bench.py playground   # the playground page's speed in headless Chromium
    uv run python scripts/bench.py startup      # whole-process start-up: this tree against a git ref
    uv run python scripts/bench.py tricks       # the kept speed tricks, each on and off
    uv run python scripts/bench.py loop         # the training loop's speed: this tree against a git ref
    uv run python scripts/bench.py sample       # decoding and `minigpt sample`: this tree against b94c9da
    uv run python scripts/bench.py quality-check --compare bf16  # does an option change the loss?

Each subcommand prints its table or lines and then one JSON line with every number and the
machine. Run it with nothing else on the machine: two processes on two cores distort every figure.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
from types import ModuleType

from benchmarks.harness import BenchError  # the package beside this file: Python puts a script's folder on the path

BENCHMARKS = (
    "speed",
    "peak",
    "data",
    "memory",
    "share",
    "playground",
    "startup",
    "tricks",
    "loop",
    "sample",
    "quality-check",
)


def benchmark(name: str) -> ModuleType:
    """scripts/benchmarks/NAME.py (- as _): its add_args(parser) and run(args) -> exit status."""
    return importlib.import_module(f"benchmarks.{name.replace('-', '_')}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in BENCHMARKS:
        module = benchmark(name)
        doc = inspect.cleandoc(module.run.__doc__ or "")
        p = sub.add_parser(
            name, help=doc.splitlines()[0], description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
        )
        module.add_args(p)
        p.set_defaults(func=module.run)
    a = ap.parse_args(argv)
    if getattr(a, "repeats", 1) < 1:
        ap.error(f"--repeats must be >= 1, got {a.repeats}")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    try:
        return a.func(a)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
