"""quality-check: does a speed option change what the model learns? One config trained three times."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.harness import (
    REPO,
    add_data_arg,
    child_env,
    last_json,
    minigpt,
    minigpt_train,
    missing_file,
    progress,
    run_timed,
    scratch,
)

OPTIONS = {  # each option as (off, on) overrides; the rest of the config is left as it is
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


def run(a: argparse.Namespace) -> int:
    """Does a speed option change what the model learns? One config trained three times.

    Runs: the option off with the config's seed, on with the same seed, and off with the next seed,
    each scored with `minigpt eval --json` (the whole validation split). The two "off" runs' gap is
    the noise; the check passes when "on" is within it of "off" (or within --tolerance nats,
    whichever is larger). Exit 0 when it passes, 1 when it does not. --compare compile takes about
    3 minutes on 2 cores; on a GPU: --device cuda --config configs/shakespeare_char.yaml."""
    if missing_file(("--data", a.data), ("--config", a.config)):
        return 2
    import yaml

    seed = int(yaml.safe_load(a.config.read_text())["train"]["seed"])
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
    verdict = "within noise" if ok else "OUTSIDE noise"
    print(f"on - off: {gap:.4f} nats; seed-to-seed noise {noise:.4f} (floor {a.tolerance}): {verdict}")
    summary = {"runs": runs, "gap": gap, "noise": noise, "tolerance": a.tolerance, "within_noise": ok}
    print(json.dumps({**summary, "compare": a.compare, "steps": a.steps, "device": a.device, "config": str(a.config)}))
    return 0 if ok else 1


def add_args(ap: argparse.ArgumentParser) -> None:
    add_data_arg(ap)
    ap.add_argument("--config", type=Path, default=REPO / "configs" / "default.yaml")
    ap.add_argument("--steps", type=int, default=480, help="optimizer steps per run (default: the default config's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compare", choices=sorted(OPTIONS), default="compile", help="the option to turn on and off")
    ap.add_argument("--tolerance", type=float, default=0.02, help="smallest gap (nats) counted as noise")
