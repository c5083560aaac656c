#!/usr/bin/env python3
"""The memory preflight's estimate beside the memory training really takes, on the CPU.

For each config it starts a child process that builds the trainer, notes its resident memory,
runs three training steps and reads its peak resident memory (ru_maxrss). The difference is what
training added on top of the loaded program and data; the estimate of `minigpt.train.preflight` for the
same config (minus the weights, which are resident before the steps) should be within 30% of it.

    uv run python scripts/bench_memory.py                 # the built-in configs
    uv run python scripts/bench_memory.py "train.batch_size=256" "model.n_layer=6 model.n_embd=384"
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import DEFAULT_DATA, BenchError, child_env, last_json, run_timed  # noqa: E402

CONFIGS = [
    "train.batch_size=64",
    "train.batch_size=256",
    "model.n_layer=6 model.n_head=6 model.n_embd=384 model.block_size=256 train.batch_size=32",
    "model.n_embd=512 model.n_head=8 model.block_size=256 train.batch_size=32 train.dtype=float32",
    "model.n_layer=4 model.n_embd=256 model.block_size=512 train.batch_size=16 model.dropout=0.2",
]
CHILD = r"""
import json, resource, sys, tempfile
from pathlib import Path
import torch
from minigpt.config.files import load_config
from minigpt.data.corpus import load_corpus
from minigpt.model import parameter_count
from minigpt.runtime.memory import process_rss
from minigpt.train.preflight import estimate
from minigpt.runtime.device import configure_threads, resolve_dtype
from minigpt.train.trainer import Trainer

cfg = load_config(None, [f"data.path={sys.argv[1]}", "train.device=cpu", "log.tensorboard=false", *sys.argv[2:]])
configure_threads(cfg.train.threads)
corpus = load_corpus(cfg.data, cfg.model.block_size)
dtype = resolve_dtype(cfg.train.dtype, torch.device("cpu"))
trainer = Trainer(cfg, corpus, corpus.tokenizer, torch.device("cpu"), dtype, Path(tempfile.mkdtemp()))
before = process_rss()
for _ in range(3):
    trainer.train_step()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
n_params = parameter_count(cfg.model, corpus.tokenizer.vocab_size)
micro = cfg.train.batch_size // cfg.train.grad_accum_steps
est = estimate(cfg, corpus.tokenizer.vocab_size, n_params, dtype).total(micro) - 4 * n_params
print(json.dumps({"measured": peak - before, "estimated": est}))
"""


def measure(data: Path, overrides: list[str]) -> dict[str, float]:
    result = last_json(run_timed(["-c", CHILD, str(data), *overrides], child_env()), "the measuring child")
    result["ratio"] = result["estimated"] / result["measured"]
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="*", metavar="CONFIG",
                    help="space-separated overrides of one config, quoted (default: the built-in configs)")  # fmt: skip
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="text file to train on")
    a = ap.parse_args(argv)
    rows = []
    for config in a.configs or CONFIGS:
        try:
            r = measure(a.data, config.split())
        except BenchError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        rows.append({"config": config, **r})
        print(f"{r['measured'] / 2**20:8.0f} MB measured  {r['estimated'] / 2**20:8.0f} MB estimated  "
              f"ratio {r['ratio']:.2f}  {config}", flush=True)  # fmt: skip
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
