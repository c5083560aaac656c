#!/usr/bin/env python3
"""Our Muon (minigpt/train/optim.py) against torch.optim.Muon on the four-minute recipe.

Each run is a whole `minigpt train configs/cpu_4min.yaml` process of --steps steps (the step-based
schedule, no final evaluation), so start-up (torch._dynamo's import for torch's optimizer) counts.
The two alternate, --repeats times each. Printed per optimizer, medians: the whole process, the
mean step, and the optimizer's own step (timed around `optimizer.step()` in the child).

    uv run python scripts/bench_muon.py --repeats 5 --steps 300

torch.optim.Muon takes 2-D parameters and orthogonalizes each as one matrix, so attention's fused
q/k/v weight is one (3C, C) matrix there, where ours treats it as three square ones; its
learning-rate adjustment ("original") is ours, sqrt(max(1, rows / cols)); weight decay 0 as ours.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import torch
import minigpt.train.trainer as trainer_mod
from minigpt.train import optim as optim_mod

variant, out, steps, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
spent = []

class TorchMuonAdamW:
    '''torch.optim.Muon on the block matrices, our AdamW on the rest (the same split as ours).'''
    def __init__(self, muon_params, adam, lr, lr_scale, momentum, ns_dtype=None):  # torch: always bf16
        self.adam = adam
        self.muon = torch.optim.Muon([p for _, p in muon_params], lr=lr * lr_scale, weight_decay=0.0,
                                     momentum=momentum, nesterov=True, adjust_lr_fn="original")
        self.muon.param_groups[0]["lr_scale"] = lr_scale
    @property
    def param_groups(self):
        return [*self.muon.param_groups, *self.adam.param_groups]
    def zero_grad(self, set_to_none=True):
        self.muon.zero_grad(set_to_none)
        self.adam.zero_grad(set_to_none)
    def step(self):
        self.muon.step()
        self.adam.step()
    def state_dict(self):
        return {"muon": self.muon.state_dict(), "adam": self.adam.state_dict()}

if variant == "torch":
    optim_mod.MuonAdamW = TorchMuonAdamW

real_build = optim_mod.build_optimizer
def timed_build(*a, **k):
    opt = real_build(*a, **k)
    step = opt.step
    def timed_step():
        t = time.perf_counter()
        step()
        spent.append(time.perf_counter() - t)
    opt.step = timed_step
    return opt
trainer_mod.build_optimizer = timed_build

from minigpt.cli.app import main
code = main(["train", "configs/cpu_4min.yaml", "--out", out, f"train.max_steps={steps}", "optim.schedule_by=steps",
             "train.max_time=null", "train.final_eval=false", f"train.eval_interval={steps}", "train.eval_steps=2",
             "log.tensorboard=false", "log.progress=off", "log.sample_length=0", f"train.seed={seed}"])
res = json.load(open(f"{out}/results.json"))
print(json.dumps({"code": code, "steps": res["steps"], "wall_s": res["wall_s"],
                  "opt_ms": 1000 * statistics.median(spent[5:]) if len(spent) > 5 else None}), file=sys.stderr)
""".replace("import json, sys, time", "import json, statistics, sys, time")


def one(variant: str, steps: int, seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-c", CHILD, variant, f"{tmp}/run", str(steps), str(seed)],
                           cwd=REPO, capture_output=True, text=True)  # fmt: skip
        whole = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{variant} run failed:\n{r.stderr[-3000:]}")
    rec = json.loads(r.stderr.strip().splitlines()[-1])
    return {**rec, "process_s": whole, "step_ms": 1000 * rec["wall_s"] / rec["steps"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"ours": [], "torch": []}
    for i in range(args.repeats):
        for variant in runs:
            rec = one(variant, args.steps, 1337)
            runs[variant].append(rec)
            print(f"{variant:<6} run {i + 1}: process {rec['process_s']:.2f} s, step {rec['step_ms']:.2f} ms, "
                  f"optimizer step {rec['opt_ms']:.2f} ms", flush=True)  # fmt: skip
    print(f"\nmedians of {args.repeats} ({args.steps} steps of configs/cpu_4min.yaml each):")
    med = {}
    for variant, recs in runs.items():
        med[variant] = {k: statistics.median(r[k] for r in recs) for k in ("process_s", "step_ms", "opt_ms")}
        m = med[variant]
        print(f"  {variant:<6} process {m['process_s']:.2f} s   step {m['step_ms']:.2f} ms   "
              f"optimizer step {m['opt_ms']:.2f} ms")  # fmt: skip
    print(f"  torch / ours: process {med['torch']['process_s'] / med['ours']['process_s']:.3f}x, "
          f"step {med['torch']['step_ms'] / med['ours']['step_ms']:.3f}x, "
          f"optimizer step {med['torch']['opt_ms'] / med['ours']['opt_ms']:.3f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
