#!/usr/bin/env python3
"""Does a speed option change what the model learns? Train one config three times and compare.

    uv run python scripts/quality_check.py --compare compile      # torch.compile vs eager, ~3 min on 2 cores
    uv run python scripts/quality_check.py --compare bf16         # bf16 autocast vs float32 (CPU or GPU)
    uv run python scripts/quality_check.py --compare bf16 --config configs/reference_cpu.yaml --steps 2000
    PYTHONPATH=. python3 scripts/quality_check.py --compare compile --device cuda \\
        --config configs/shakespeare_char.yaml --steps 1000

Runs: the option off with the config's seed, on with the same seed, and off with the next seed.
Each is scored with `minigpt eval --json` (the whole validation split). The seed-to-seed gap of
the two "off" runs is the noise; the check passes when the "on" run is within it of the "off" run
with the same seed (or within --tolerance nats, whichever is larger, since two seeds can land
close by chance). Prints a table and one JSON line; exit 0 when it passes, 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# this script's folder is first on sys.path when it runs, so the harness's helpers import by name
from bench import (
    DEFAULT_DATA,
    REPO,
    child_env,
    last_json,
    minigpt,
    minigpt_train,
    missing_file,
    progress,
    run_timed,
    scratch,
)

# each option as (off, on) overrides; the rest of the config is left as it is
OPTIONS = {
    "compile": ("train.compile=false", "train.compile=true"),
    "bf16": ("train.dtype=float32", "train.dtype=bfloat16"),
}


def train_and_eval(name: str, a: argparse.Namespace, overrides: list[str], tmp: Path, env: dict) -> dict:
    run_dir = tmp / name
    progress(f"{name}: minigpt train {a.config} {' '.join(overrides)}")
    args = [f"train.max_steps={a.steps}", f"train.eval_interval={a.steps}", "log.attention_probe=", *overrides]
    proc = run_timed(minigpt_train(a.data, run_dir, *args, config=a.config, device=a.device), env)
    ev = last_json(run_timed(minigpt("eval", str(run_dir), "--json", "--device", a.device), env), "minigpt eval")
    return {"val_loss": float(ev["loss"]), "train_wall_s": round(proc.wall_s, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "default.yaml")
    ap.add_argument("--steps", type=int, default=480, help="optimizer steps per run (default: the default config's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compare", choices=sorted(OPTIONS), default="compile", help="the option to turn on and off")
    ap.add_argument("--tolerance", type=float, default=0.02, help="smallest gap (nats) counted as noise")
    a = ap.parse_args(argv)
    if problem := missing_file(("--data", a.data), ("--config", a.config)):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    seed = int(__import__("yaml").safe_load(a.config.read_text())["train"]["seed"])
    with scratch("minigpt-quality-") as tmp:
        env = child_env(tmp / "cache")
        off, on = OPTIONS[a.compare]
        runs = {
            "off": train_and_eval("off", a, [off], tmp, env),
            "on": train_and_eval("on", a, [on], tmp, env),
            "off_next_seed": train_and_eval("off_next_seed", a, [off, f"train.seed={seed + 1}"], tmp, env),
        }
    gap = abs(runs["on"]["val_loss"] - runs["off"]["val_loss"])
    noise = abs(runs["off_next_seed"]["val_loss"] - runs["off"]["val_loss"])
    ok = gap <= max(noise, a.tolerance)
    for name, r in runs.items():
        setting = OPTIONS[a.compare][name.startswith("on")]
        print(f"{name:14s} {setting:22s} val loss {r['val_loss']:.4f}   train wall {r['train_wall_s']:.1f} s")
    print(
        f"on - off: {gap:.4f} nats; seed-to-seed noise {noise:.4f} (floor {a.tolerance}): "
        f"{'within noise' if ok else 'OUTSIDE noise'}"
    )
    summary = {"runs": runs, "gap": gap, "noise": noise, "tolerance": a.tolerance, "within_noise": ok}
    print(json.dumps({**summary, "compare": a.compare, "steps": a.steps, "device": a.device, "config": str(a.config)}))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
