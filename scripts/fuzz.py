#!/usr/bin/env python3
"""Fuzzing every reader a user's bytes reach, with hypothesis: mutated YAML configs and KEY=VALUE
overrides, text files (char and byte), JSON Lines, JSON, CSV/TSV, Parquet, `datasets` folders,
checkpoints (cut, bit-flipped, odd dict shapes, pickled objects), prompts, prompt files and stop
strings for `sample`, and `--text` for `score`, `attention` and `lens` (`heads --data`).

The property, for every input: the command exits 0, or exits 2 with exactly one `error:` line
and no traceback; no file outside its output folder and the cache changes; the existing run it
reads is intact. Commands run in this process through `minigpt.cli.app.main` (what `minigpt`
runs), with the data commands as `train --dry-run` (every input read and checked, nothing
trained or written).

    uv run python scripts/fuzz.py --minutes 5          # the long profile: counts per reader
    uv run python scripts/fuzz.py --minutes 1 --only jsonl csv

tests/test_fuzz.py runs the same readers for a few seconds, derandomized.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, Phase, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the fuzzing package beside this file

from fuzzing.harness import BASE_TEXT, TINY, Broken, Reader, run_case, run_cli, write  # noqa: E402
from fuzzing.readers import readers  # noqa: E402


def fuzz_settings(examples: int, derandomize: bool) -> settings:
    """No example database (it would write .hypothesis/ into the tree), no deadline (a command
    may take a second), no shrinking in the long profile (more inputs in the time)."""
    phases = [Phase.explicit, Phase.generate, Phase.shrink] if derandomize else [Phase.explicit, Phase.generate]
    return settings(
        max_examples=examples,
        derandomize=derandomize,
        database=None,
        deadline=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


def fuzz_reader(reader: Reader, run: Path, scratch: Path, examples: int, derandomize: bool) -> None:
    """`examples` inputs through `reader`; raises the first `Broken` hypothesis found."""

    @fuzz_settings(examples, derandomize)
    @given(reader.strategy)
    def one(value: Any) -> None:
        run_case(reader, value, run, scratch)

    one()


# ============================================================================ the long profile


def train_run(folder: Path) -> Path:
    """A tiny trained run (last.pt, best.pt) for the readers that load one."""
    corpus = write(folder / "corpus.txt", BASE_TEXT.encode())
    out = folder / "run"
    args = ["train", "--data", str(corpus), "--out", str(out), *TINY, "train.max_steps=20", "train.eval_interval=10"]
    outcome = run_cli(args, folder)
    if outcome.code != 0:
        raise SystemExit(f"could not train the run the fuzzer reads:\n{outcome.err[-2000:]}{outcome.crash or ''}")
    return out


def long_profile(minutes: float, only: list[str], batch: int) -> dict[str, Reader]:
    found = readers()
    chosen = [found[n] for n in only] if only else list(found.values())
    deadline = time.monotonic() + minutes * 60
    with tempfile.TemporaryDirectory(prefix="minigpt-fuzz-") as tmp, mock.patch.dict(os.environ):
        root = Path(tmp)
        os.environ["MINIGPT_CACHE_DIR"] = str(root / "cache")  # the fuzzer's own; the environment is restored after
        run = train_run(root)
        scratch = root / "scratch"
        scratch.mkdir()
        while time.monotonic() < deadline:
            for reader in chosen:
                if time.monotonic() >= deadline:
                    break
                try:
                    fuzz_reader(reader, run, scratch, batch, derandomize=False)
                except Exception as e:  # Broken, or the fuzzer's own mistake: counted, and fuzzing goes on
                    if not isinstance(e, Broken):
                        e = Broken(f"fuzzer {type(e).__name__}", traceback.format_exc()[-2000:])
                    if e.kind not in reader.failures:
                        reader.failures[e.kind] = str(e)
                        print(f"[{reader.name}] {str(e)[:3000]}\n", file=sys.stderr)
    return {r.name: r for r in chosen}


def report(found: dict[str, Reader]) -> dict[str, Any]:
    print(f"{'reader':<18} {'inputs':>7} {'failures':>8}")
    for r in found.values():
        print(
            f"{r.name:<18} {r.tried:>7} {len(r.failures):>8}" + (f"  ({'; '.join(r.failures)})" if r.failures else "")
        )
    total = sum(r.tried for r in found.values())
    kinds = sum(len(r.failures) for r in found.values())
    print(f"{'total':<18} {total:>7} {kinds:>8}")
    summary = {r.name: {"inputs": r.tried, "failures": sorted(r.failures)} for r in found.values()}
    print(json.dumps({"fuzz": summary, "inputs": total, "failures": kinds}))
    return summary


def cli(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0, help="how long to fuzz (default 5)")
    ap.add_argument("--only", nargs="*", default=[], help=f"some readers: {', '.join(readers())}")
    ap.add_argument("--batch", type=int, default=10, help="inputs per reader before the next reader's turn")
    a = ap.parse_args(argv)
    unknown = [n for n in a.only if n not in readers()]
    if unknown:
        ap.error(f"unknown readers {unknown}; choose from {', '.join(readers())}")
    found = long_profile(a.minutes, a.only, a.batch)
    report(found)
    return 1 if any(r.failures for r in found.values()) else 0


if __name__ == "__main__":
    sys.exit(cli())
