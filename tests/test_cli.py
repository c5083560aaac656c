"""The command line end to end: train a tiny model, sample, evaluate, read the TensorBoard tags."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from minigpt.checkpoint import load_checkpoint
from minigpt.config.schema import DataConfig
from minigpt.data.corpus import load_corpus
from minigpt.training import loop

from .helpers import TINY, make_text, one_error_line

ROOT = Path(__file__).resolve().parents[1]
SCALAR_TAGS = {"train/loss", "val/loss_est", "val/bpc_est", "lr", "grad_norm", "tokens_per_sec"}


def event_tags(run: Path) -> dict[str, list[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run))
    acc.Reload()
    return acc.Tags()


def test_train_writes_the_run_directory(trained_run: Path) -> None:
    names = {p.name for p in trained_run.iterdir()}
    assert {"config.yaml", "last.pt", "best.pt"} <= names
    assert any(n.startswith("events.out.tfevents") for n in names)
    resolved = yaml.safe_load((trained_run / "config.yaml").read_text())
    assert resolved["model"]["n_embd"] == 32 and resolved["train"]["max_steps"] == 60  # overrides applied
    ckpt = load_checkpoint(trained_run / "last.pt")
    assert ckpt["step"] == 60 and ckpt["tokens_seen"] == 60 * 8 * 16
    assert math.isfinite(ckpt["val_loss"]) and ckpt["best_val_loss"] <= ckpt["val_loss"]


def test_tensorboard_tags(trained_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = event_tags(trained_run)
    assert SCALAR_TAGS <= set(tags["scalars"])
    assert any(t.startswith("sample") for t in tags["tensors"])  # the text sample
    acc = EventAccumulator(str(trained_run))
    acc.Reload()
    assert [e.step for e in acc.Scalars("val/loss_est")] == [30, 60]
    losses = [e.value for e in acc.Scalars("train/loss")]
    assert losses[-1] < losses[0]  # it learned something
    val = acc.Scalars("val/loss_est")[-1].value
    assert acc.Scalars("val/bpc_est")[-1].value == pytest.approx(val / math.log(2), rel=1e-5)


def test_training_learns_the_text(trained_run: Path) -> None:
    ckpt = load_checkpoint(trained_run / "best.pt")
    vocab = len(ckpt["tokenizer"]["chars"])
    assert ckpt["best_val_loss"] < 0.75 * math.log(vocab)


def test_sample_stdout_carries_only_the_samples(trained_run: Path, cli) -> None:
    r = cli("sample", trained_run, "--prompt", "KING:", "--max-new-tokens", "50", "--num-samples", "2")
    assert r.code == 0, r
    parts = r.out.split("\n\n---\n")
    assert len(parts) == 2
    for part in parts:
        assert part.startswith("KING:")
        assert len(part.rstrip("\n")) >= len("KING:") + 45  # 50 new characters (some may be newlines)
    assert "sampling from" in r.err and "sampling from" not in r.out


def test_sample_seed_reproducible_and_greedy(trained_run: Path, cli) -> None:
    args = ("sample", trained_run, "--max-new-tokens", "80")
    a, b, c = cli(*args, "--seed", "1"), cli(*args, "--seed", "1"), cli(*args, "--seed", "2")
    assert a.out == b.out and a.out != c.out
    g1, g2 = cli(*args, "--temperature", "0", "--seed", "1"), cli(*args, "--temperature", "0", "--seed", "9")
    assert g1.out == g2.out  # greedy ignores the seed
    k = cli(*args, "--top-k", "1", "--seed", "3")
    assert k.out == g1.out  # top-1 sampling is greedy


def test_sample_past_block_size(trained_run: Path, cli) -> None:
    r = cli("sample", trained_run, "--max-new-tokens", "200", "--prompt", "KING:\n")
    assert r.code == 0 and len(r.out) >= 200
    tiny = cli("sample", trained_run, "--max-new-tokens", "50", "--temperature", "1e-45")
    assert tiny.code == 0 and tiny.out == cli("sample", trained_run, "--max-new-tokens", "50", "--temperature", "0").out


def test_eval_json_scores_the_whole_val_split(trained_run: Path, cli) -> None:
    r = cli("eval", trained_run, "--json")
    assert r.code == 0, r
    result = json.loads(r.out)
    assert set(result) == {"loss", "bpc", "perplexity", "tokens", "unit"} and result["unit"] == "char"
    ckpt = load_checkpoint(trained_run / "best.pt")
    corpus = load_corpus(DataConfig(path=ckpt["data"]["path"]), 16)
    assert result["tokens"] == len(corpus.val) - 1
    assert result["bpc"] == pytest.approx(result["loss"] / math.log(2))
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]))
    assert abs(result["loss"] - ckpt["val_loss"]) < 0.15  # fixed val batches estimate the same thing
    human = cli("eval", trained_run)
    assert f"{result['loss']:.4f} nats" in human.out


def test_eval_on_another_file(trained_run: Path, tmp_path: Path, cli) -> None:
    other = tmp_path / "other.txt"
    other.write_text(make_text(3000, seed=9))
    result = json.loads(cli("eval", trained_run, "--data", other, "--json").out)
    assert result["tokens"] == 2999
    bad = tmp_path / "bad.txt"
    bad.write_text("ZZZ{}")
    r = cli("eval", trained_run, "--data", bad)
    assert r.code == 2 and "never saw" in r.err


def test_user_mistakes_get_one_line_and_exit_2(trained_run: Path, text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "r"
    assert "did you mean 'model.n_layer'" in one_error_line(
        cli("train", "--data", text_file, "--out", out, "model.n_layers=2")
    )
    assert "does not exist" in one_error_line(cli("train", "--data", tmp_path / "nope.txt", "--out", out))
    assert "must be >= 0" in one_error_line(cli("sample", trained_run, "--max-new-tokens", "-1"))
    assert "finite number >= 0" in one_error_line(cli("sample", trained_run, "--temperature", "-0.5"))
    assert "--top-p must be in (0, 1]" in one_error_line(cli("sample", trained_run, "--top-p", "0"))
    assert "--top-k must be >= 1" in one_error_line(cli("sample", trained_run, "--top-k", "0"))
    line = one_error_line(cli("sample", trained_run, "--prompt", "KING~@"))
    assert "'~', '@'" in line and "--unknown skip" in line
    assert "does not exist" in one_error_line(cli("sample", tmp_path / "missing"))
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no checkpoint" in one_error_line(cli("eval", empty))
    trunc = tmp_path / "trunc.pt"
    trunc.write_bytes((trained_run / "best.pt").read_bytes()[:5000])
    assert "is damaged or truncated" in one_error_line(cli("sample", trunc))
    assert "No such option" in one_error_line(cli("train", "--bogus"))
    assert "unknown device 'foo'" in one_error_line(cli("sample", trained_run, "--device", "foo"))
    assert "unknown device 'foo'" in one_error_line(cli("eval", trained_run, "--device", "foo"))
    assert "--seed must be in" in one_error_line(cli("sample", trained_run, "--seed", str(2**70)))
    assert "train.seed must be in" in one_error_line(cli("train", "--data", text_file, "--out", out, "train.seed=-1"))
    assert "finite number" in one_error_line(cli("sample", trained_run, "--temperature", "nan"))
    assert "at most one CONFIG" in one_error_line(cli("train", "a.yaml", "b.yaml"))
    assert not out.exists() or not any(out.glob("*.pt"))


def test_unknown_prompt_chars_can_be_skipped(trained_run: Path, cli) -> None:
    r = cli("sample", trained_run, "--prompt", "KING~", "--unknown", "skip", "--max-new-tokens", "5")
    assert r.code == 0 and r.out.startswith("KING") and "~" not in r.out


def test_new_run_refuses_to_overwrite_an_existing_run(trained_run: Path, text_file: Path, cli) -> None:
    before = (trained_run / "last.pt").read_bytes()
    line = one_error_line(cli("train", "--data", text_file, "--out", trained_run, *TINY, "train.max_steps=5"))
    assert "--resume" in line
    assert (trained_run / "last.pt").read_bytes() == before


def test_interrupt_then_resume_is_bit_exact(text_file: Path, tmp_path: Path, cli, monkeypatch) -> None:
    """SIGINT mid-run saves last.pt and exits 130; --resume ends with the same weights as a run left alone."""
    # one thread, fixed: an automatic count follows the machine's load, and a different count
    # reduces in another order (what must match here is the state a resume restores)
    args = [
        "--data",
        text_file,
        *TINY,
        "train.max_steps=30",
        "train.eval_interval=10",
        "model.dropout=0.1",
        "train.threads=1",
        "train.dtype=float32",  # two runs: auto could measure bf16 differently for each on a busy machine
    ]
    assert cli("train", "--out", tmp_path / "whole", *args).code == 0

    real_step = loop.train_step

    def step_with_interrupt(self):
        if self.state.step == 14:
            os.kill(os.getpid(), signal.SIGINT)  # lands mid-step: the step finishes, then training stops
        return real_step(self)

    monkeypatch.setattr(loop, "train_step", step_with_interrupt)
    r = cli("train", "--out", tmp_path / "split", *args)
    assert r.code == 130, r
    assert "--resume" in r.err
    assert load_checkpoint(tmp_path / "split" / "last.pt")["step"] == 15
    monkeypatch.setattr(loop, "train_step", real_step)
    r = cli("train", "--out", tmp_path / "split", "--resume")
    assert r.code == 0, r
    a = load_checkpoint(tmp_path / "whole" / "last.pt")
    b = load_checkpoint(tmp_path / "split" / "last.pt")
    assert a["step"] == b["step"] == 30
    for key, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][key]), key


def test_resume_refuses_a_changed_model(trained_run: Path, cli) -> None:
    line = one_error_line(cli("train", "--out", trained_run, "--resume", "model.n_layer=3"))
    assert "model.n_layer: 2 -> 3" in line


def test_resume_can_extend_a_finished_run(text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "r"
    assert (
        cli("train", "--data", text_file, "--out", out, *TINY, "train.max_steps=10", "train.eval_interval=5").code == 0
    )
    record, weights = (out / "results.json").read_bytes(), (out / "last.pt").read_bytes()
    r = cli("train", "--out", out, "--resume")  # a finished run stays as it finished
    assert r.code == 0 and f"{out} is finished: it reached train.max_steps (10) at step 10; nothing to do" in r.err
    assert (out / "results.json").read_bytes() == record and (out / "last.pt").read_bytes() == weights
    r = cli("train", "--out", out, "--resume", "train.max_steps=20")
    assert r.code == 0, r
    assert load_checkpoint(out / "last.pt")["step"] == 20
    assert "resuming" in r.err and "schedule is re-planned over 20 steps" in r.err
    whole, first = json.loads((out / "results.json").read_text()), json.loads(record)
    assert whole["steps"] == 20 and whole["tokens"] == 2 * first["tokens"]
    assert whole["wall_s"] > first["wall_s"]  # the whole run's time, not the last command's alone
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out))
    acc.Reload()
    assert [e.step for e in acc.Scalars("val/loss_est")] == [5, 10, 15, 20]  # the resume step's events survive


def test_a_run_out_of_time_goes_on_only_with_a_larger_budget(text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "r"
    args = [*TINY, "train.max_steps=100000", "train.eval_interval=50", "log.sample_length=0"]
    assert cli("train", "--data", text_file, "--out", out, *args, "train.max_time=2s").code == 0
    first = json.loads(record := (out / "results.json").read_bytes())
    assert "train.max_time" in first["stopped"], first
    r = cli("train", "--out", out, "--resume")
    assert r.code == 0 and "is finished: its time budget, train.max_time 2s, ran out" in r.err, r
    assert (out / "results.json").read_bytes() == record
    r = cli("train", "--out", out, "--resume", "train.max_time=4s")
    assert r.code == 0, r
    whole = json.loads((out / "results.json").read_text())
    assert whole["steps"] > first["steps"] and whole["wall_s"] > first["wall_s"]


def test_a_run_resumes_and_evaluates_from_another_directory(text_file: Path, tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.chdir(text_file.parent)
    assert cli("train", "--data", text_file.name, "--out", "run", *TINY, "train.max_steps=5").code == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    run = text_file.parent / "run"
    assert cli("eval", run, "--json").code == 0
    assert cli("train", "--out", run, "--resume", "train.max_steps=8").code == 0
    copy = tmp_path / "copy.txt"
    copy.write_bytes(text_file.read_bytes())  # the same text at another path: fine (checked by SHA-256)
    r = cli("train", "--out", run, "--resume", "--data", copy, "train.max_steps=10")
    assert r.code == 0, r
    assert load_checkpoint(run / "last.pt")["step"] == 10


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    help_ = subprocess.run(
        [sys.executable, "-m", "minigpt", "train", "--help"], capture_output=True, text=True, env=env
    )
    assert help_.returncode == 0 and "--resume" in help_.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  n_head: 3\n")
    r = subprocess.run(
        [sys.executable, "-m", "minigpt", "train", str(bad), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert r.stderr.strip() == f"error: {bad}: model.n_embd (128) must be divisible by model.n_head (3)"
    bare = subprocess.run([sys.executable, "-m", "minigpt"], capture_output=True, text=True, env=env)
    assert bare.returncode == 0 and "train" in bare.stdout  # the help, not an error


def test_sample_into_a_closed_pipe_exits_quietly(trained_run: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = f"{sys.executable} -m minigpt sample {trained_run} --max-new-tokens 100000 | head -c 20"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout) == 20 and "Traceback" not in r.stderr and "BrokenPipe" not in r.stderr
