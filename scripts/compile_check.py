#!/usr/bin/env python3
"""Does torch.compile change what the model learns? Train one config three times and compare.

    uv run python scripts/compile_check.py --data data/tinyshakespeare.txt            # CPU, ~4 min
    PYTHONPATH=. python3 scripts/compile_check.py --data data/tinyshakespeare.txt --device cuda \\
        --config configs/shakespeare_char.yaml --steps 1000

Runs: eager with the config's seed, compiled with the same seed, and eager with the next seed.
Each is scored with `minigpt eval --json` (the whole validation split). The seed-to-seed gap of
the two eager runs is the noise; the check passes when the compiled run is within it of the eager
run with the same seed (or within --tolerance nats, whichever is larger, since two seeds can land
close by chance). Prints a table and one JSON line; exit 0 when it passes, 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import REPO, BenchError, child_env, last_json, minigpt, progress, run_timed  # noqa: E402


def train_and_eval(name: str, a: argparse.Namespace, overrides: list[str], tmp: Path, env: dict) -> dict:
    run_dir = tmp / name
    progress(f"{name}: minigpt train {a.config} {' '.join(overrides)}")
    proc = run_timed(
        minigpt("train", str(a.config), "--data", str(a.data), "--out", str(run_dir), "--device", a.device,
                f"train.max_steps={a.steps}", f"train.eval_interval={a.steps}", "log.attention_probe=", *overrides),
        env,
    )  # fmt: skip
    ev = last_json(run_timed(minigpt("eval", str(run_dir), "--json", "--device", a.device), env), "minigpt eval")
    return {"val_loss": float(ev["loss"]), "train_wall_s": round(proc.wall_s, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO / "data" / "tinyshakespeare.txt")
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "default.yaml")
    ap.add_argument("--steps", type=int, default=480, help="optimizer steps per run (default: the default config's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--tolerance", type=float, default=0.02, help="smallest gap (nats) counted as noise")
    a = ap.parse_args(argv)
    for what, path in (("--data", a.data), ("--config", a.config)):
        if not path.is_file():
            print(f"error: {what} {path} is not a file", file=sys.stderr)
            return 2
    seed = int(__import__("yaml").safe_load(a.config.read_text())["train"]["seed"])
    try:
        with tempfile.TemporaryDirectory(prefix="minigpt-compile-") as tmp:
            env = child_env(Path(tmp) / "cache")
            runs = {
                "eager": train_and_eval("eager", a, ["train.compile=false"], Path(tmp), env),
                "compiled": train_and_eval("compiled", a, ["train.compile=true"], Path(tmp), env),
                "eager_next_seed": train_and_eval(
                    "eager_next_seed", a, ["train.compile=false", f"train.seed={seed + 1}"], Path(tmp), env
                ),
            }
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    gap = abs(runs["compiled"]["val_loss"] - runs["eager"]["val_loss"])
    noise = abs(runs["eager_next_seed"]["val_loss"] - runs["eager"]["val_loss"])
    ok = gap <= max(noise, a.tolerance)
    for name, r in runs.items():
        print(f"{name:16s} val loss {r['val_loss']:.4f}   train wall {r['train_wall_s']:.1f} s")
    print(f"compiled - eager: {gap:.4f} nats; seed-to-seed noise {noise:.4f} (floor {a.tolerance}): "
          f"{'within noise' if ok else 'OUTSIDE noise'}")  # fmt: skip
    print(json.dumps({"runs": runs, "gap": gap, "noise": noise, "tolerance": a.tolerance, "within_noise": ok,
                      "steps": a.steps, "device": a.device, "config": str(a.config)}))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
