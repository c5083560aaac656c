"""Runs that outlive a cluster's habits (issue 25, part B): several nodes, a run that diverges and
goes on at a lower rate, a final evaluation with a bound, and weights-only snapshots."""

from __future__ import annotations

import math
import shlex
from pathlib import Path

from minigpt.infer.checkpoint import load_checkpoint

from .conftest import TINY

QUIET = ["log.sample_length=0", "log.tensorboard=false", "train.final_eval=false"]


def error_line(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("error: "))


def test_a_diverged_run_goes_on_from_its_last_good_checkpoint_at_a_lower_rate(text_file: Path, tmp_path: Path,
                                                                              cli) -> None:  # fmt: skip
    out = tmp_path / "run"
    assert cli("train", "--data", text_file, "--out", out, *TINY, *QUIET, "train.max_steps=10",
               "train.eval_interval=10").code == 0  # fmt: skip
    # late in the run the rate is raised far too high (a resume may change it now): the loss goes NaN
    r = cli("train", "--out", out, "--resume", "train.max_steps=40", "log.interval=1", "optim.lr=100")
    assert r.code == 2, r
    assert "resuming with changed train.max_steps=40, optim.lr=100.0, log.interval=1" in r.err
    assert "note: the cosine schedule is re-planned over 40 steps (optim.lr 0.003 -> 100): the learning rate goes " \
           "from 0.0003 to 94.8 at step 10" in r.err  # fmt: skip
    line = error_line(r.err)
    assert "training diverged: the training loss became nan" in line and f"kept: {out / 'last.pt'}" in line, line
    command = line.split("with: ")[1].split(" (halve it again")[0]
    # this run's changes to the checkpoint's settings (max_steps) are kept; the whole schedule is halved
    lowered = "train.max_steps=40 log.interval=1 optim.lr=50 optim.min_lr=0.00015"
    assert command == f"minigpt train --out {out} --resume {lowered}"
    assert load_checkpoint(out / "last.pt")["step"] == 10  # nothing after the last good checkpoint was written

    # the command the message gives, as given: from step 10 at half the rate, on to the end, finite
    argv = shlex.split(command)[1:]
    r = cli(*argv)
    assert r.code == 0, r
    assert "resuming with changed train.max_steps=40, optim.lr=50.0, optim.min_lr=0.00015, log.interval=1" in r.err
    assert "re-planned over 40 steps (optim.lr 0.003 -> 50, optim.min_lr 0.0003 -> 0.00015)" in r.err
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt["step"] == 40 and math.isfinite(ckpt["val_loss"])
    assert ckpt["config"]["optim"]["lr"] == 50
