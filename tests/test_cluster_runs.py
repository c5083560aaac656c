"""Runs that outlive a cluster's habits (issue 25, part B): several nodes, a run that diverges and
goes on at a lower rate, a final evaluation with a bound, and weights-only snapshots."""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt.checkpoint import list_snapshots, load_checkpoint
from minigpt.config.files import load_config
from minigpt.config.schema import Config, config_from_dict
from minigpt.infer.evaluate import evaluate_ids
from minigpt.model import GPT
from minigpt.training.disk import snapshot_plan

from .helpers import TINY, make_text

ROOT = Path(__file__).resolve().parents[1]

QUIET = ["log.sample_length=0", "log.tensorboard=false", "train.final_eval=false"]
ADAMW = "optim.optimizer=adamw"  # where a test studies AdamW's behaviour (the default is Muon)


def error_line(err: str) -> str:
    return next(line for line in err.splitlines() if line.startswith("error: "))


def test_a_diverged_run_goes_on_from_its_last_good_checkpoint_at_a_lower_rate(
    text_file: Path, tmp_path: Path, cli
) -> None:
    out = tmp_path / "run"
    # AdamW: lr=100 below reaches every weight (Muon's matrices follow optim.muon_lr)
    first = cli(
        "train", "--data", text_file, "--out", out, *TINY, *QUIET, ADAMW, "train.max_steps=10", "train.eval_interval=10"
    )
    assert first.code == 0, first
    # late in the run the rate is raised far too high (a resume may change it now): the loss goes NaN
    # (at step 16 to 19 here), caught at the next log step, before any evaluation could save it
    r = cli(
        "train",
        "--out",
        out,
        "--resume",
        "train.max_steps=40",
        "train.eval_interval=40",
        "log.interval=1",
        "optim.lr=100",
    )
    assert r.code == 2, r
    assert "resuming with changed train.max_steps=40, train.eval_interval=40, optim.lr=100.0, log.interval=1" in r.err
    assert (
        "note: the cosine schedule is re-planned over 40 steps (optim.lr 0.003 -> 100): the learning rate goes "
        "from 0.0003 to 94.8 at step 10" in r.err
    )
    line = error_line(r.err)
    assert "training diverged: the training loss became nan" in line and f"kept: {out / 'last.pt'}" in line, line
    command = line.split("with: ")[1].split(" (halve it again")[0]
    # this run's changes to the checkpoint's settings (max_steps) are kept; the whole schedule is halved
    lowered = "train.max_steps=40 train.eval_interval=40 log.interval=1 optim.lr=50 optim.min_lr=0.00015"
    assert command == f"minigpt train --out {out} --resume {lowered}"
    assert load_checkpoint(out / "last.pt")["step"] == 10  # nothing after the last good checkpoint was written

    # the command the message gives, as given: from step 10 at half the rate, on to the end, finite
    r = cli(*shlex.split(command)[1:])
    assert "re-planned over 40 steps (optim.lr 0.003 -> 50, optim.min_lr 0.0003 -> 0.00015)" in r.err
    for _ in range(2):  # 50 trains on here; where it would not, the next message halves it again
        if r.code == 0:
            break
        r = cli(*shlex.split(error_line(r.err).split("with: ")[1].split(" (halve it again")[0])[1:])
    assert r.code == 0, r
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt["step"] == 40 and math.isfinite(ckpt["val_loss"])
    assert ckpt["config"]["optim"]["lr"] <= 50


def test_snapshots_are_kept_small_and_every_command_reads_them(text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "runs" / "watch"
    r = cli(
        "train",
        "--data",
        text_file,
        "--out",
        out,
        *TINY,
        "train.max_steps=10",
        "train.eval_interval=10",
        "train.keep_every=4",
        "log.tensorboard=false",
        ADAMW,  # its state is twice the weights (below)
    )
    assert r.code == 0, r
    snaps = list_snapshots(out)
    assert [p.name for p in snaps] == ["step_0000004.pt", "step_0000008.pt"]
    assert not [p for p in out.iterdir() if p.name.startswith(".step_")]  # no temporary file left
    first = load_checkpoint(snaps[0])
    assert first["step"] == 4 and first["optimizer"] is None and first["rng"] is None
    assert (
        first["config"]["train"]["keep_every"] == 4
        and first["tokenizer"] == load_checkpoint(out / "last.pt")["tokenizer"]
    )
    plan = snapshot_plan(config_from_dict(first["config"], "test"), len(first["tokenizer"]["chars"]))
    assert plan.count == 2 and all(p.stat().st_size <= plan.each for p in snaps)
    assert plan.each < (out / "last.pt").stat().st_size / 2  # no optimizer state: AdamW's is 2x the weights
    assert snapshot_plan(config_from_dict(first["config"], "t").replace(**{"train.max_steps": 21}), 40, 8).count == 3

    # the model as it was at step 4, through every command that reads a model
    for args in (
        ["sample", "--max-new-tokens", "5"],
        ["eval"],
        ["score", "--text", "the king"],
        ["attention", "--text", "the king", "--html", tmp_path / "a.html"],
    ):
        r = cli(args[0], snaps[0], *args[1:])
        assert r.code == 0, (args, r)
    assert str(snaps[0]) in r.err
    r = cli("export", snaps[0], tmp_path / "hf")
    assert r.code == 0 and "from " + str(snaps[0]) in r.err, r
    row = json.loads(cli("runs", out.parent, "--json").out.splitlines()[0])
    assert row["run"] == "watch" and row["snapshots"] == 2
    assert cli("runs", out.parent).out.splitlines()[0].split()[8] == "snapshots"  # after "val est", "val full"

    # a resume may change keep_every, and keeps what was written
    assert cli("train", "--out", out, "--resume", "train.max_steps=12", "train.keep_every=6").code == 0
    assert [p.name for p in list_snapshots(out)] == ["step_0000004.pt", "step_0000008.pt", "step_0000012.pt"]
    last, snap = load_checkpoint(out / "last.pt")["model"], load_checkpoint(out / "step_0000012.pt")["model"]
    assert all(torch.equal(last[k], snap[k]) for k in last)


def test_the_final_evaluation_scores_a_spread_sample_past_its_bound(text_file: Path, tmp_path: Path, cli) -> None:
    # tiny Shakespeare's validation split (111,540 characters) stays exact under the default bound
    assert Config().train.final_eval_tokens >= 111_539
    out = tmp_path / "run"
    r = cli(
        "train",
        "--data",
        text_file,
        "--out",
        out,
        *TINY,
        "train.max_steps=4",
        "train.eval_interval=4",
        "log.tensorboard=false",
        "train.final_eval_tokens=500",
    )
    assert r.code == 0, r
    # 2,000 validation characters: 1,999 predictions, 124 windows of 16; 500 // 16 = 31 of them scored
    done = next(line for line in r.err.splitlines() if line.startswith("done: "))
    assert "on a spread sample of 496 of its 1,999 chars (train.final_eval_tokens;" in done, done
    results = json.loads((out / "results.json").read_text())
    assert results["val_tokens_scored"] == 496 and results["val_tokens"] == 1999
    row = json.loads(cli("runs", tmp_path, "--json").out)
    assert row["val_loss_full"] == results["val_loss_full"] and row["val_full_sampled"] is True
    assert row["best_val_loss_est"] == results["best_val_loss_est"]
    table = cli("runs", tmp_path).out.splitlines()
    assert table[1].split()[3].endswith("~") and table[-1].startswith("~: val full on a spread sample"), table

    # minigpt eval scores everything unless told otherwise; told, it scores the same sample
    whole = json.loads(cli("eval", out, "--json").out)
    assert whole["tokens"] == 1999 and "of_tokens" not in whole
    sample = json.loads(cli("eval", out, "--json", "--max-tokens", "500").out)
    assert sample["tokens"] == 496 and sample["of_tokens"] == 1999
    assert sample["loss"] == pytest.approx(results["val_loss_full"], rel=1e-6)
    assert sample["loss"] == pytest.approx(whole["loss"], rel=0.05)  # an estimate of the same number
    r = cli("eval", out, "--max-tokens", "500")
    assert "496 characters (a spread sample of 1,999, validation split of" in r.out, r

    # the other side of the bound (it may change on resume): every position, as minigpt eval scores it
    r = cli("train", "--out", out, "--resume", "train.final_eval_tokens=1999")
    assert r.code == 0, r
    done = next(line for line in r.err.splitlines() if line.startswith("done: "))
    assert "on the whole split" in done and "sample" not in done, done
    results = json.loads((out / "results.json").read_text())
    assert results["val_tokens_scored"] == results["val_tokens"] == 1999
    assert results["val_loss_full"] == pytest.approx(whole["loss"], rel=1e-6)
    assert json.loads(cli("runs", tmp_path, "--json").out)["val_full_sampled"] is False


def test_a_spread_sample_is_the_same_windows_the_whole_evaluation_reads() -> None:
    torch.manual_seed(0)
    model = GPT(
        Config().replace(**{"model.n_layer": 1, "model.n_embd": 16, "model.n_head": 2, "model.block_size": 8}).model, 11
    ).eval()
    ids = np.random.default_rng(0).integers(0, 11, 1001).astype(np.uint16)  # 1,000 predictions, 125 windows
    whole = evaluate_ids(model, ids)
    assert evaluate_ids(model, ids, None, 1000) == whole  # within the bound: every position
    assert evaluate_ids(model, ids, None, 0) == whole  # 0: no bound
    sample = evaluate_ids(model, ids, None, 80)  # 10 windows, every 12th or 13th of the 125
    starts = [(i * 125 // 10) * 8 for i in range(10)]
    by_hand = sum(evaluate_ids(model, ids[s : s + 9]).loss for s in starts) / 10
    assert (sample.tokens, sample.of_tokens, sample.sampled) == (80, 1000, True)
    assert sample.loss == pytest.approx(by_hand, rel=1e-6)
    assert evaluate_ids(model, ids, None, 80) == sample  # deterministic
    assert starts[-1] >= 896  # spread to the end of the split, not its head


def documented_two_node_command() -> str:
    """The multi-node command of docs/distributed.md."""
    page = (ROOT / "docs" / "distributed.md").read_text(encoding="utf-8")
    block = page.split("<!-- two-nodes:start")[1].split("<!-- two-nodes:end -->")[0]
    command = block.split("```bash\n")[1].split("\n```")[0].strip()
    return command


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # four torchrun processes, then three more: ~45 s on 2 shared cores
def test_two_nodes_train_one_run_like_two_processes_on_one(tmp_path: Path) -> None:
    """The documented command, run twice at once as two nodes of one machine (each with one CPU
    process, a c10d rendezvous on 127.0.0.1), equals a 2-process single-node run step for step."""
    command = documented_two_node_command()
    assert "--rdzv_endpoint=127.0.0.1:29500" in command and "--nnodes=2" in command
    # the only changes: a free port (29500 may be taken on a shared machine), and torchrun run as
    # the module it is, with this interpreter (its script need not be on PATH)
    argv = shlex.split(command.replace(":29500", f":{free_port()}"))
    assert argv[0] == "torchrun"
    argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tinyshakespeare.txt").write_text(make_text(), encoding="utf-8")
    (tmp_path / "configs").mkdir()
    shutil.copy(ROOT / "configs" / "two_nodes.yaml", tmp_path / "configs")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    nodes = [
        subprocess.Popen(
            argv,
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        for _ in range(2)
    ]
    logs = [node.communicate(timeout=240)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], logs
    assert sum("done: 12 steps" in log for log in logs) == 1  # rank 0, on whichever node, reports
    assert sum("2 processes (cpu, DDP)" in log for log in logs) == 1

    one_node = subprocess.run(
        [sys.executable, "-m", "minigpt", "train", "configs/two_nodes.yaml", "--out", "runs/one-node", "--nproc", "2"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert one_node.returncode == 0, one_node.stderr
    two, one = load_checkpoint(tmp_path / "runs/two-nodes/last.pt"), load_checkpoint(tmp_path / "runs/one-node/last.pt")
    assert two["step"] == one["step"] == 12
    for k in one["model"]:
        assert torch.allclose(two["model"][k], one["model"][k], atol=1e-6), k
    assert two["val_loss"] == pytest.approx(one["val_loss"], abs=1e-6)


def test_the_readme_and_docs_show_the_tested_two_node_command() -> None:
    command = documented_two_node_command()  # the same command in both (checked there)
    config = shlex.split(command)[shlex.split(command).index("train") + 1]
    assert load_config(ROOT / config).train.device == "cpu"


def test_the_lower_rate_command_halves_every_rate_and_reads_back() -> None:
    from minigpt.checkpoint import resume_command
    from minigpt.config.files import parse_override, value_text
    from minigpt.training.schedule import replanned_schedule_note
    from minigpt.training.trainer import lower_rate_command

    rates = {"optim.muon_lr": 0.02, "optim.warmup_steps": 50, "train.max_steps": 480}  # the defaults of 0.1.0
    muon = Config().replace(**{"optim.optimizer": "muon", "optim.grad_clip": 0.0, "optim.min_lr": 0.0, **rates})
    assert lower_rate_command(Path("runs/my run"), muon, Path("/no/such/last.pt")) == (
        "minigpt train --out 'runs/my run' --resume optim.lr=0.0015 optim.muon_lr=0.01 optim.grad_clip=1"
    )
    for key, value in [
        ("log.sample_prompt", "\nROMEO: "),
        ("train.max_time", None),
        ("log.tensorboard", False),
        ("train.max_steps", 40),
        ("optim.beta2", 0.95),
    ]:
        words = shlex.split(resume_command(Path("r"), f"{key}={value_text(value)}"))
        assert parse_override(words[-1]) == (key, value)
    lower = muon.replace(**{"optim.lr": 0.0015, "optim.muon_lr": 0.01})
    assert replanned_schedule_note(muon, lower, 100, ["optim.lr", "optim.muon_lr"]) == (
        "note: the cosine schedule is re-planned over 480 steps (optim.lr 0.003 -> 0.0015, optim.muon_lr 0.02 -> "
        "0.01): the learning rate goes from 0.0029 to 0.00145 at step 100 (Muon's from 0.0194 to 0.00967)"
    )
