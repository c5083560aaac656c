"""memory: the memory preflight's estimate beside the memory training really takes, on the CPU
(the measuring child is children/memory.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness import (
    add_data_arg,
    child,
    child_env,
    last_json,
    machine_info,
    run_timed,
    targets,
    yes_no,
)

MEMORY_CONFIGS = [
    "train.batch_size=64",
    "train.batch_size=256",
    "model.n_layer=6 model.n_head=6 model.n_embd=384 model.block_size=256 train.batch_size=32",
    "model.n_embd=512 model.n_head=8 model.block_size=256 train.batch_size=32 train.dtype=float32",
    "model.n_layer=4 model.n_embd=256 model.block_size=512 train.batch_size=16 model.dropout=0.2",
]


def measure_memory(data: Path, overrides: list[str]) -> dict[str, float]:
    """What three training steps add to a child's resident memory (its peak less what it held once
    the trainer was built), beside `minigpt.training.preflight`'s estimate less the weights."""
    result = last_json(run_timed([child("memory.py"), str(data), *overrides], child_env()), "the measuring child")
    result["ratio"] = result["estimated"] / result["measured"]
    return result


def run(a: argparse.Namespace) -> int:
    """The memory preflight's estimate beside the memory training really takes, on the CPU.

    Its target, estimate over measured, is in targets.yaml (tests/test_slow.py holds it there)."""
    low, high = targets()["memory"]["ratio"]
    rows = []
    for config in a.configs or MEMORY_CONFIGS:
        r = measure_memory(a.data, config.split())
        rows.append({"config": config, **r})
        print(
            f"{r['measured'] / 2**20:8.0f} MB measured  {r['estimated'] / 2**20:8.0f} MB estimated  "
            f"ratio {r['ratio']:.2f} ({yes_no(low <= r['ratio'] <= high)})  {config}",
            flush=True,
        )
    print(json.dumps({"configs": rows, "machine": machine_info()}))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "configs",
        nargs="*",
        metavar="CONFIG",
        help="space-separated overrides of one config, quoted (default: five built-in ones)",
    )
    add_data_arg(ap)
