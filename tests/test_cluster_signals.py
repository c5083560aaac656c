"""Preemption on a cluster (issue 25): real signals to real `minigpt train` processes in each phase
of a run (the step loop, an evaluation, a checkpoint save, the final evaluation), SIGUSR1 like
SIGTERM, `--resume auto` run again and again, and SIGTERM to torchrun or to one of its 2 gloo
workers. No hook slows anything down: each phase is made long with real settings (many eval
batches, a bigger model, a long validation split) and found from the log or the temporary file."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from minigpt.checkpoint import load_checkpoint

from .helpers import TINY, launch, make_text, spawn, wait_for_step

LONG = [
    *TINY,
    "train.max_steps=100000",
    "train.eval_interval=1000",
    "train.ckpt_interval=3",
    "log.interval=1",
    "log.sample_length=0",
]


class Lines:
    """A child's stderr, read line by line in a thread, so a test can wait for a phase's line."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.lines = proc, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"no {text!r} in: {''.join(self.lines)}")
            time.sleep(0.01)

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        code = self.proc.wait(timeout=timeout)
        self.thread.join(timeout=10)
        return code, "".join(self.lines)


def stopped_and_saved(err: str, out: Path) -> int:
    """The step a stopped run reports; last.pt holds exactly it and no temporary file is left."""
    assert "Traceback" not in err, err
    step = load_checkpoint(out / "last.pt")["step"]
    assert f"stopped at step {step}; saved {out / 'last.pt'}" in err, err
    assert not list(out.glob(".*.tmp"))
    return step


def test_sigusr1_saves_then_resume_auto_resumes_then_says_finished(text_file: Path, tmp_path: Path, cli) -> None:
    """The done-when of issue 25 item 3: one command three times: starts, resumes, says finished."""
    out, cache = tmp_path / "run", tmp_path / "cache"
    run = ["--data", text_file, "--out", out, "--resume", "auto", *LONG, "train.max_steps=150"]
    proc = spawn("train", *run, cache=cache)
    wait_for_step(out / "last.pt", 3, proc)
    proc.send_signal(signal.SIGUSR1)  # SLURM's --signal=USR1@120
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 138, err
    assert "starting a new run" in err and "SIGUSR1: finishing this step" in err
    step = stopped_and_saved(err, out)
    assert step < 150

    r = cli("train", *run)
    assert r.code == 0, r
    assert f"resuming {out} from step {step}" in r.err and load_checkpoint(out / "last.pt")["step"] == 150
    before = (out / "last.pt").stat().st_mtime_ns
    r = cli("train", *run)
    assert r.code == 0, r
    assert f"{out} is finished: it reached train.max_steps (150) at step 150; nothing to do" in r.err
    assert (out / "last.pt").stat().st_mtime_ns == before
    r = cli("train", *run[:-1], "train.max_steps=155")  # a longer run trains on
    assert r.code == 0 and load_checkpoint(out / "last.pt")["step"] == 155


def test_resume_auto_knows_an_early_stop(text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "run"
    args = [
        "--data",
        text_file,
        "--out",
        out,
        "--resume",
        "auto",
        *TINY,
        "train.max_steps=200",
        "train.eval_interval=2",
        "train.patience=1",
        "train.min_delta=10",
        "log.sample_length=0",
    ]
    r = cli("train", *args)
    assert r.code == 0 and "early stop at step 4" in r.err, r
    r = cli("train", *args)
    assert r.code == 0 and "is finished: it stopped early (train.patience 1" in r.err, r


@pytest.mark.slow  # ~15 s: evaluations made long on purpose
def test_signal_during_an_evaluation(text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        *LONG,
        "train.eval_interval=5",
        "log.interval=5",
        "train.eval_steps=1500",
        "log.progress=lines",
        "log.progress_seconds=0.001",
    ]
    lines = Lines(spawn("train", "--data", text_file, "--out", out, *args, cache=tmp_path / "cache"))
    lines.wait_for("step 10/")  # the progress line just before the evaluation of step 10
    lines.proc.send_signal(signal.SIGTERM)
    code, err = lines.finish()
    assert code == 143, err
    assert stopped_and_saved(err, out) == 10
    assert err.index("SIGTERM: finishing") < err.index("step 10: val est")  # it came during the evaluation


@pytest.mark.slow  # ~20 s: a 7M-parameter model, so that a checkpoint takes long enough to write
def test_signal_during_a_checkpoint_save(text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    big = ["model.n_layer=4", "model.n_head=4", "model.n_embd=384", "train.batch_size=2"]
    proc = spawn("train", "--data", text_file, "--out", out, *LONG, *big, cache=tmp_path / "cache")
    deadline = time.monotonic() + 120
    while not list(out.glob(".last.pt.*.tmp")):  # a save in progress
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    stopped_and_saved(err, out)


@pytest.mark.slow  # ~30 s: a validation split long enough to be interrupted while it is scored
def test_signal_during_the_final_evaluation_then_resume_auto(tmp_path: Path, cli) -> None:
    text = tmp_path / "long.txt"
    text.write_text(make_text(1_500_000), encoding="utf-8")
    out, cache = tmp_path / "run", tmp_path / "cache"
    args = [
        "--data",
        text,
        "--out",
        out,
        "--resume",
        "auto",
        *TINY,
        "train.max_steps=10",
        "train.eval_interval=5",
        "data.val_fraction=0.9",
        "log.sample_length=0",
        "train.final_eval_tokens=0",
    ]
    lines = Lines(spawn("train", *args, cache=cache))
    lines.wait_for("final evaluation: the whole validation split")
    time.sleep(0.3)
    lines.proc.send_signal(signal.SIGTERM)
    code, err = lines.finish()
    assert code == 143, err
    assert "stopped during the final evaluation; training ended at step 10" in err and "Traceback" not in err
    assert load_checkpoint(out / "last.pt")["step"] == 10 and not (out / "results.json").exists()
    os.environ["MINIGPT_CACHE_DIR"] = str(cache)  # the encoded text of the first process (monkeypatched back)
    r = cli("train", *args)
    assert r.code == 0 and "on the whole split" in r.err and (out / "results.json").exists(), r
    r = cli("train", *args)
    assert r.code == 0 and "is finished" in r.err, r


@pytest.mark.slow  # three torchrun launches of 2 gloo processes (~1.5 minutes on 2 cores)
def test_sigterm_to_torchrun_or_to_one_worker_stops_every_rank_at_one_step(text_file: Path, tmp_path: Path) -> None:
    out, cache = tmp_path / "ddp", tmp_path / "cache"
    args = ["--data", text_file, "--out", out, "--resume", "auto", *LONG, "train.max_steps=400"]
    for target in ("launcher", "worker", "usr1 to the launcher"):
        proc = launch(*args, cache=cache, wait=False)
        start = load_checkpoint(out / "last.pt")["step"] if (out / "last.pt").exists() else 0
        wait_for_step(out / "last.pt", start + 3, proc, timeout=180)
        if target == "worker":
            workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
            os.kill(int(workers[-1]), signal.SIGTERM)  # one of the two workers
        else:
            proc.send_signal(signal.SIGUSR1 if target.startswith("usr1") else signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == (138 if target.startswith("usr1") else 143), (target, err)
        assert err.count("stopped at step") == 1 and "ChildFailedError" not in err, err  # rank 0 saved once
        stopped_and_saved(err, out)
    proc = launch(*args[:-1], "train.max_steps=" + str(load_checkpoint(out / "last.pt")["step"] + 3), cache=cache)
    assert proc.returncode == 0, proc.communicate_result[1]


def test_resume_auto_repeats_a_fine_tuning_command(trained_run: Path, text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "tuned"
    args = [
        "--data",
        text_file,
        "--out",
        out,
        "--resume",
        "auto",
        "--init-from",
        trained_run,
        "train.max_steps=4",
        "train.eval_interval=2",
        "log.sample_length=0",
    ]
    assert cli("train", *args).code == 0
    r = cli("train", *args)
    assert r.code == 0 and "is finished" in r.err, r
    r = cli("train", *args[:-2], "train.max_steps=6", "train.eval_interval=2")
    assert r.code == 0 and "resuming" in r.err and load_checkpoint(out / "last.pt")["step"] == 6, r
