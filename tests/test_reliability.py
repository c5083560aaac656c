"""Interrupts, crashes, exact resume, safe loading and numerical faults, with real processes where
it matters (signals, kill -9) and tiny models so it stays fast."""

from __future__ import annotations

import os
import pickle
import random
import signal
import textwrap
import time
from pathlib import Path

import pytest
import torch

from minigpt.checkpoint import load_checkpoint, save_checkpoint
from minigpt.model import GPT
from minigpt.training import loop

from .helpers import TINY, Evil, spawn, wait_for_step

ROOT = Path(__file__).resolve().parents[1]
LONG = [*TINY, "train.max_steps=100000", "train.eval_interval=1000", "train.ckpt_interval=3", "log.interval=1"]


def weights_equal(a: Path, b: Path) -> bool:
    wa, wb = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_last_and_exits_with_the_signal_code(sig, code, text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = spawn("train", "--data", text_file, "--out", out, *LONG, cache=tmp_path / "cache")
    wait_for_step(out / "last.pt", 3, proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert f"minigpt train --out {out} --resume" in stderr
    assert "Traceback" not in stderr
    ckpt = load_checkpoint(out / "last.pt")
    assert f"stopped at step {ckpt['step']}" in stderr  # the saved state is the step it reports
    assert not list(out.glob(".*.tmp"))


def test_second_interrupt_exits_at_once(text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # every checkpoint write after the first takes 60 s: the first Ctrl-C's save is still writing when
    # the second lands, and only an exit at once ends the process within communicate's 30 s
    prelude = textwrap.dedent("""
        import time, minigpt.checkpoint as c
        _save, _calls = c.torch.save, []
        def slow_save(obj, f, *a, **k):
            _calls.append(f)
            if len(_calls) > 1:
                time.sleep(60.0)
            return _save(obj, f, *a, **k)
        c.torch.save = slow_save
    """)
    proc = spawn("train", "--data", text_file, "--out", out, *LONG, cache=tmp_path / "cache", prelude=prelude)
    wait_for_step(out / "last.pt", 3, proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stderr
    assert "exiting now" in stderr
    load_checkpoint(out / "last.pt")  # whatever was on disk is still a good checkpoint
    assert not list(out.glob(".*.tmp"))  # no temporary file left behind


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])  # bf16 autocast is the CPU default where native
def test_kill_9_then_resume_equals_the_uninterrupted_run(dtype: str, text_file: Path, tmp_path: Path, cli) -> None:
    # train.threads=1 in both processes: an automatic thread count follows the machine's load, and
    # a different count reduces in another order (what must match is the state a resume restores)
    args = [
        "--data",
        text_file,
        *TINY,
        "train.max_steps=40",
        "train.eval_interval=20",
        "train.ckpt_interval=3",
        "model.dropout=0.1",
        f"train.dtype={dtype}",
        "train.threads=1",
    ]
    assert cli("train", "--out", tmp_path / "whole", *args).code == 0
    out = tmp_path / "killed"
    proc = spawn("train", "--out", out, *args, cache=tmp_path / "cache")
    wait_for_step(out / "last.pt", 9, proc)
    proc.kill()  # SIGKILL: no handler runs
    proc.communicate()
    killed_at = load_checkpoint(out / "last.pt")["step"]
    assert 9 <= killed_at < 40
    r = cli("train", "--out", out, "--resume")
    assert r.code == 0, r
    assert f"from step {killed_at}" in r.err
    assert load_checkpoint(out / "last.pt")["step"] == 40
    assert weights_equal(tmp_path / "whole" / "last.pt", out / "last.pt")  # bit for bit
    assert weights_equal(tmp_path / "whole" / "best.pt", out / "best.pt")


def test_kill_9_in_the_middle_of_a_checkpoint_write(text_file: Path, tmp_path: Path, cli) -> None:
    """The third checkpoint write dies half-way: the second one stays in place, and resume works."""
    out = tmp_path / "run"
    prelude = textwrap.dedent("""
        import io, os, signal, minigpt.checkpoint as c
        _save = c.torch.save
        calls = [0]
        def dying_save(obj, f, *a, **k):
            calls[0] += 1
            if calls[0] < 3:
                return _save(obj, f, *a, **k)
            buf = io.BytesIO()
            _save(obj, buf)
            f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        c.torch.save = dying_save
    """)
    args = ["--data", text_file, *TINY, "train.max_steps=20", "train.eval_interval=100", "train.ckpt_interval=3"]
    proc = spawn("train", "--out", out, *args, cache=tmp_path / "cache", prelude=prelude)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert load_checkpoint(out / "last.pt")["step"] == 6  # the good checkpoint of the 2nd write
    r = cli("train", "--out", out, "--resume")
    assert r.code == 0, r
    assert load_checkpoint(out / "last.pt")["step"] == 20


def test_resume_refuses_changed_data(text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "run"
    assert cli("train", "--data", text_file, "--out", out, *TINY, "train.max_steps=5").code == 0
    before = (out / "last.pt").read_bytes()
    text_file.write_text(text_file.read_text()[::-1])
    r = cli("train", "--out", out, "--resume", "train.max_steps=10")
    assert r.code == 2 and "is not the text this run was trained on" in r.err
    assert (out / "last.pt").read_bytes() == before


def test_resume_allows_safe_keys_and_names_unsafe_ones(text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "run"
    assert cli("train", "--data", text_file, "--out", out, *TINY, "train.max_steps=5").code == 0
    r = cli("train", "--out", out, "--resume", "optim.lr=1e-2", "train.batch_size=4")
    assert r.code == 2
    assert "optim.lr" in r.err and "train.batch_size: 8 -> 4" in r.err
    r = cli("train", "--out", out, "--resume", "train.max_steps=8", "train.eval_interval=4", "log.interval=2")
    assert r.code == 0, r
    assert "resuming with changed" in r.err and "train.max_steps=8" in r.err


@pytest.mark.parametrize("how", ["torch.save", "pickle"])
def test_checkpoint_that_would_run_code_is_refused(how: str, tmp_path: Path, monkeypatch, cli) -> None:
    marker = tmp_path / "pwned"
    monkeypatch.setenv("EVIL_MARKER", str(marker))
    path = tmp_path / "evil.pt"
    payload = {"format": "minigpt-checkpoint", "version": 1, "model": Evil()}
    if how == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload))
    for command in (("sample", path), ("eval", path)):
        r = cli(*command)
        assert r.code == 2, r
        expected = "refusing to load" if how == "torch.save" else "not a PyTorch checkpoint file at all"
        assert r.err.startswith("error: ") and expected in r.err, r
    run = tmp_path / "run"
    run.mkdir()
    path.rename(run / "last.pt")
    r = cli("train", "--out", run, "--resume")
    assert r.code == 2 and "error: " in r.err
    assert not marker.exists()


def test_non_checkpoint_files(tmp_path: Path, cli) -> None:
    text = tmp_path / "notes.pt"
    text.write_text("hello")
    assert "not a PyTorch checkpoint file at all" in cli("sample", text).err
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.zeros(2)}, other)
    r = cli("eval", other)
    assert r.code == 2 and "is not a minigpt checkpoint" in r.err


@pytest.mark.parametrize("damage", ["cut in half", "cut near the end", "garbled header", "zip noise", "empty"])
def test_a_damaged_checkpoint_is_one_short_line_naming_it(damage: str, trained_run: Path, tmp_path: Path, cli):
    """Not torch's zip reader's two sentences ("PytorchStreamReader failed reading zip archive ...
    internal miniz error ..."): the file and a short reason, exit 2, for every command that reads it."""
    from .helpers import one_error_line

    whole = (trained_run / "last.pt").read_bytes()
    noise = random.Random(0).randbytes(4000)
    damaged = {
        "cut in half": whole[: len(whole) // 2],
        "cut near the end": whole[:-100],
        "garbled header": whole[:200] + noise[:60] + whole[260:],  # inside data.pkl, the archive's first record
        "zip noise": b"PK\x03\x04" + noise,
        "empty": b"",
    }[damage]
    run = tmp_path / "run"
    run.mkdir()
    ckpt = run / "last.pt"
    ckpt.write_bytes(damaged)
    for command in (["sample", ckpt], ["eval", ckpt], ["sample", run], ["train", "--out", run, "--resume"]):
        line = one_error_line(cli(*command))
        assert line.startswith(f"error: {ckpt} is damaged or truncated (") and line.endswith(")"), (command, line)
        assert "PytorchStreamReader" not in line and "miniz" not in line and len(line) < 90 + len(str(ckpt)), line
    assert ckpt.read_bytes() == damaged  # left as it was, for the user to look at


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(text_file: Path, tmp_path: Path, cli, monkeypatch):
    out = tmp_path / "run"
    calls = [0]
    real_forward = GPT.forward

    def exploding_forward(self, idx, targets=None, cache=None):
        logits, loss = real_forward(self, idx, targets, cache)
        if targets is not None and self.training:
            calls[0] += 1
            if calls[0] > 12:
                loss = loss * float("nan")
        return logits, loss

    monkeypatch.setattr(GPT, "forward", exploding_forward)
    r = cli(
        "train",
        "--data",
        text_file,
        "--out",
        out,
        *TINY,
        "train.max_steps=50",
        "train.eval_interval=10",
        "log.interval=7",
    )
    assert r.code == 2, r
    line = [ln for ln in r.err.splitlines() if ln.startswith("error: ")][0]
    assert "training diverged" in line and "at step 14" in line and "optim.lr" in line
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt["step"] == 10  # the eval before the fault; nothing after it was written
    assert all(torch.isfinite(t).all() for t in ckpt["model"].values())


def test_full_disk_while_checkpointing_is_a_clear_error(text_file: Path, tmp_path: Path, cli, monkeypatch) -> None:
    import minigpt.checkpoint as checkpoint_mod

    out = tmp_path / "run"
    calls = [0]

    def full_disk(payload, path):
        calls[0] += 1
        if calls[0] > 1:
            raise OSError(28, "No space left on device")
        save_checkpoint(payload, path)

    monkeypatch.setattr(checkpoint_mod, "save_checkpoint", full_disk)
    r = cli(
        "train",
        "--data",
        text_file,
        "--out",
        out,
        *TINY,
        "train.max_steps=20",
        "train.eval_interval=5",
        "log.sample_length=0",
    )
    assert r.code == 74  # a failed write (docs/distributed.md)
    # the second write (best.pt at step 5) fails: last.pt of step 5 is kept
    assert "best.pt: the disk is full" in r.err and "no best.pt was written" in r.err and "Traceback" not in r.err
    assert load_checkpoint(out / "last.pt")["step"] == 5


def test_environment_mistakes(text_file: Path, tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    r = cli("train", "--data", text_file, "--out", tmp_path / "r", *TINY, "--device", "cuda")
    assert r.code == 2 and "CUDA is not available" in r.err
    assert not (tmp_path / "r").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = cli("train", "--data", text_file, "--out", blocker / "run", *TINY)
    assert r.code == 2 and "cannot write to the run directory" in r.err
    assert blocker.read_text() == "x"


def test_bad_data_through_the_cli_leaves_no_run_directory(tmp_path: Path, cli) -> None:
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 ".encode("latin-1") * 100)
    r = cli("train", "--data", bad, "--out", tmp_path / "r", *TINY)
    assert r.code == 2 and "not UTF-8" in r.err and "offset 3" in r.err
    assert not (tmp_path / "r").exists()


def test_interrupt_never_saves_a_diverged_model(text_file: Path, tmp_path: Path, cli, monkeypatch) -> None:
    """Ctrl-C right after the loss went NaN (before any log noticed): stop with the error, keep last.pt."""
    out = tmp_path / "run"
    args = ["--data", text_file, "--out", out, *TINY, "train.max_steps=40", "train.eval_interval=10", "log.interval=30"]
    real_forward, real_step = GPT.forward, loop.train_step

    def forward(self, idx, targets=None, cache=None):
        logits, loss = real_forward(self, idx, targets, cache)
        if targets is not None and self.training and self.poisoned:
            loss = loss * float("nan")
        return logits, loss

    def train_step(self):
        GPT.poisoned = self.state.step >= 12
        if self.state.step == 13:
            os.kill(os.getpid(), signal.SIGINT)
        return real_step(self)

    monkeypatch.setattr(GPT, "forward", forward)
    monkeypatch.setattr(GPT, "poisoned", False, raising=False)
    monkeypatch.setattr(loop, "train_step", train_step)
    r = cli("train", *args)
    assert r.code == 2 and "training diverged" in r.err, r
    assert load_checkpoint(out / "last.pt")["step"] == 10


def test_checkpoints_get_ordinary_file_permissions(trained_run: Path) -> None:
    umask = os.umask(0)
    os.umask(umask)
    for name in ("last.pt", "best.pt"):
        assert (trained_run / name).stat().st_mode & 0o777 == 0o666 & ~umask
