"""Sharing a machine: the run lock, thread counts, damaged caches, and logs that are files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt.checkpoint import load_checkpoint
from minigpt.config.schema import DataConfig
from minigpt.data import encoding as corpus_cache
from minigpt.data.corpus import load_corpus
from minigpt.errors import UserError
from minigpt.runtime import device as runtime

from .helpers import TINY, make_trainer

ROOT = Path(__file__).resolve().parents[1]


def test_a_second_training_is_refused_while_the_first_runs_and_welcome_after_kill_9(
    text_file: Path, tmp_path: Path, cli
) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MINIGPT_CACHE_DIR": str(tmp_path / "cache")}
    out = tmp_path / "run"
    long = [*TINY, "train.max_steps=1000000", "train.eval_interval=100000", "train.ckpt_interval=5"]
    cmd = [sys.executable, "-m", "minigpt", "train", "--data", str(text_file), "--out", str(out), *long]
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "last.pt").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.communicate()
            time.sleep(0.1)
        config_before = (out / "config.yaml").read_bytes()
        # a second process (this one: flock locks belong to open files, so it counts as another)
        second = cli("train", "--out", out, "--resume")
        assert second.code == 2
        assert second.err.strip() == (
            f"error: {out} is in use by another minigpt training (pid {first.pid}); wait for it to end, or train "
            "into another --out"
        )
        assert (out / "config.yaml").read_bytes() == config_before
        # reading a run that is training works: the last complete checkpoint
        sample = cli("sample", out, "--max-new-tokens", "5")
        assert sample.code == 0 and len(sample.out) >= 5, sample
    finally:
        first.send_signal(signal.SIGKILL)  # the kernel releases the lock with the process
        first.communicate()
    step = load_checkpoint(out / "last.pt")["step"]
    again = cli("train", "--out", out, "--resume", f"train.max_steps={step + 2}")
    assert again.code == 0, again
    assert load_checkpoint(out / "last.pt")["step"] == step + 2


def test_threads_follow_the_request_the_environment_and_the_cpu_affinity(monkeypatch) -> None:
    before = torch.get_num_threads()
    try:
        assert runtime.configure_threads(1) == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
        assert runtime.configure_threads(0) == 1  # a set OMP_NUM_THREADS (torchrun sets 1) is kept
        monkeypatch.delenv("OMP_NUM_THREADS")
        assert runtime.configure_threads(0) == 3  # the cores this process may use, not the machine's
        assert runtime.configure_threads(0, busy=1.2) == 2  # inference leaves a busy core to its owner
        assert runtime.configure_threads(0, busy=0.3) == 3 and runtime.configure_threads(0, busy=5.0) == 1
        assert runtime.configure_threads(2, busy=2.0) == 2  # an explicit --threads wins
    finally:
        torch.set_num_threads(before)


def _spin(seconds: float) -> subprocess.Popen:
    """A child that keeps one core busy for `seconds` (of wall clock)."""
    code = f"import time\nt = time.time()\nwhile time.time() - t < {seconds}: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def _cpu_seconds_of(child: subprocess.Popen) -> float:
    """The CPU time the child used, from the kernel's own account of it (wait4)."""
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0  # reaped here: Popen must not wait for it again
    return usage.ru_utime + usage.ru_stime


TICK = 0.15  # of a core: /proc/stat and os.times count in clock ticks (1/100 s) over about a second


@pytest.mark.alone  # under pytest-xdist, the other worker's test would count as load (which the bounds allow)
def test_the_load_of_other_processes_is_measured_without_our_own() -> None:
    """Bounds that hold whatever else runs on the machine (another training, the other test worker):
    the load measured counts at least what the child spent (the kernel's account of its CPU time),
    and leaves out ours: with it, a busy machine would show all its cores."""
    from minigpt.runtime.cores import CoreLoad, allowed_cores

    load = CoreLoad()
    start, own = time.monotonic(), os.times()
    spin = _spin(1.5)
    try:
        end = time.monotonic() + 1.2
        while time.monotonic() < end:  # this process keeps a core busy too: that must not count
            pass
        others = load.others()
        seconds = time.monotonic() - start
        own_rate = (sum(os.times()[:2]) - sum(own[:2])) / seconds
    finally:
        child = _cpu_seconds_of(spin) / 1.5  # its share of a core over its life (it outlives the window)
    assert others is not None
    assert others >= 0.8 * child - TICK, (others, child)  # the child counts (what it had of a core, about)
    assert others <= allowed_cores() - own_rate + TICK, (others, own_rate)  # we do not (the more we had, the tighter)
    assert CoreLoad().others() is None  # too short an interval to say


def test_no_command_changes_the_openmp_wait_policy() -> None:
    """Training keeps libgomp's spinning threads (fast alone) and shares cores by the thread count it
    starts with instead; a user's OMP_WAIT_POLICY is left as it is."""
    code = (  # the commands one after the other in one process: each one's effect shows after it
        "import os, sys\n"
        "from minigpt.cli.app import main\n"
        "for command in sys.argv[1:]:\n"
        "    main([command, '--help'])\n"
        "    print('after', command, os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["PYTHONPATH"] = str(ROOT)

    def policies(*commands: str, **extra: str) -> dict[str, list[str]]:
        run = subprocess.run(
            [sys.executable, "-c", code, *commands], env={**env, **extra}, capture_output=True, text=True, check=True
        )
        after = [line.split()[1:] for line in run.stdout.splitlines() if line.startswith("after ")]
        assert [a[0] for a in after] == list(commands), run.stdout
        return {a[0]: a[1:] for a in after}

    unset = policies("train", "sample")
    assert unset["train"] == ["None", "False"]
    assert unset["sample"] == ["None", "False"]
    assert policies("train", OMP_WAIT_POLICY="PASSIVE")["train"] == ["PASSIVE", "False"]


STEPS_OF_FREED_TENSORS = """
import ctypes, resource, sys
from minigpt.runtime.memory import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
size = 8 << 20
def step():  # a step's activations: 16 blocks of 8 MiB written, then freed together
    blocks = [libc.malloc(size) for _ in range(16)]
    for b in blocks:
        ctypes.memset(b, 1, size)
    for b in reversed(blocks):
        libc.free(b)
for _ in range(3):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.slow  # a training measured page by page (6 s on 2 cores): CI runs it in its slow step
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's allocator; a no-op elsewhere")
def test_a_cpu_training_reuses_the_pages_its_last_step_freed() -> None:
    """glibc gives large freed blocks back to the kernel, so each step's activations fault in as new
    zeroed pages; keep_freed_memory (called for every CPU training) keeps them. Page faults, not time.
    The blocks come from libc's malloc itself: torch's small allocations between them would decide,
    by where they land, whether glibc trims at all, and the default case would vary run to run."""

    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", STEPS_OF_FREED_TENSORS, mode], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return int(out.stdout)

    pages = 5 * 16 * (8 << 20) // 4096  # what five such steps touch
    assert faults("default") > pages // 4  # the workload does fault without it
    assert faults("keep") < pages // 100


def test_a_damaged_cache_entry_is_re_encoded(text_file: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    cache = tmp_path / "cache"
    cfg = DataConfig(path=str(text_file), cache_dir=str(cache))
    first = load_corpus(cfg, 16)
    good, vocab = np.array(first.ids), first.tokenizer.vocab_size
    (entry,) = cache.glob("*.bin")
    damaged = good.copy()
    damaged[100] = 250  # past the vocabulary (as an overwritten entry would be)
    entry.write_bytes(damaged.tobytes())
    capsys.readouterr()
    corpus = load_corpus(cfg, 16)
    err = capsys.readouterr().err
    assert "warning: the encoding cache entry" in err and f"holds id 250 for a vocabulary of {vocab}" in err
    assert np.array_equal(np.asarray(corpus.ids), good)  # the right ids, from the text
    assert np.array_equal(np.fromfile(entry, dtype=np.uint8), good)  # repaired on disk
    assert load_corpus(cfg, 16) is not None
    assert "warning" not in capsys.readouterr().err  # and trusted again

    # a damaged entry that cannot be rewritten: a clear error saying what to delete
    entry.write_bytes(damaged[:-5].tobytes())

    def read_only(path, **_):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(corpus_cache.atomic, "atomic_open", read_only)
    with pytest.raises(UserError, match=r"damaged and cannot be rewritten \(Permission denied\); delete .*\.bin"):
        load_corpus(cfg, 16)


def test_a_log_file_gets_plain_lines_not_a_bar(text_file: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MINIGPT_CACHE_DIR": str(tmp_path / "cache")}
    log = tmp_path / "train.log"
    with log.open("w") as f:
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "minigpt",
                "train",
                "--data",
                str(text_file),
                "--out",
                str(tmp_path / "run"),
                *TINY,
                "train.max_steps=30",
                "train.eval_interval=15",
                "log.progress_seconds=0.000000001",  # a line at every log step, however fast the steps
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=f,
        )
    assert r.returncode == 0
    text = log.read_text()
    assert "\r" not in text and "it/s" not in text  # no bar fragments
    lines = text.splitlines()
    progress = [ln for ln in lines if ln.startswith("step ") and "tokens/s" in ln]
    assert [ln.split()[1] for ln in progress] == ["5/30", "10/30", "15/30", "20/30", "25/30", "30/30"]
    assert (
        progress[-1].startswith("step 30/30 (100%) | loss ")
        and "| lr " in progress[-1]
        and "ETA 0:00:00" in progress[-1]
    )
    assert any(ln.startswith("step 15: val est") for ln in lines) and any(
        ln.startswith("done: 30 steps") for ln in lines
    )


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["model.pos_emb=learned", "model.bias=true"],
        ["model.norm=post", "model.n_layer=1", "model.n_embd=64"],
        ["model.attn_only=true"],
        ["model.attn_only=true", "model.norm=post", "model.bias=true"],
    ],
)
def test_parameter_count_from_the_config_matches_the_model(overrides: list[str]) -> None:
    from minigpt.config.files import load_config
    from minigpt.model import GPT, parameter_count

    cfg = load_config(None, overrides)
    assert parameter_count(cfg.model, 65) == sum(p.numel() for p in GPT(cfg.model, 65).parameters())


def test_preflight_refuses_an_impossible_batch_and_names_a_grad_accum_that_fits(text_file, tmp_path, cli) -> None:
    from minigpt.config.files import load_config
    from minigpt.runtime.memory import available_bytes
    from minigpt.training.preflight import check

    huge = ["model.n_layer=2", "model.n_embd=1024", "model.n_head=8", "model.block_size=1024", "train.batch_size=4096"]
    out = tmp_path / "r"
    r = cli("train", "--data", text_file, "--out", out, "train.device=cpu", *huge)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r
    line = r.err.strip()
    assert line.startswith("error: train.batch_size=4096 in micro-batches of 4096") and "is MemAvailable" in line
    assert not out.exists()
    accum = int(line.split("train.grad_accum_steps=")[1].split()[0])
    assert 4096 % accum == 0 and accum > 1
    cpu = torch.device("cpu")
    fixed = load_config(None, [*huge, f"train.grad_accum_steps={accum}"])
    assert check(fixed, 65, cpu, torch.bfloat16) is None  # the suggestion fits
    assert check(load_config(None), 65, cpu, torch.bfloat16) is None  # and the default run passes
    assert available_bytes(cpu)[0] > 0


OUT_OF_MEMORY = {  # what a GPU raises, and what MPS raises in torch releases: a plain RuntimeError
    "cuda": lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    "mps": lambda: RuntimeError("MPS backend out of memory (MPS allocated: 17.1 GB, other allocations: 1.2 GB)"),
}


@pytest.mark.parametrize("kind", sorted(OUT_OF_MEMORY))
def test_out_of_memory_during_a_step_is_one_line_and_keeps_last_pt(text_file, tmp_path, cli, monkeypatch, kind) -> None:
    from minigpt.model import GPT

    out = tmp_path / "r"
    args = ["--data", text_file, "--out", out, *TINY, "train.max_steps=20", "train.eval_interval=5"]
    real, calls = GPT.forward, [0]

    def forward(self, idx, targets=None, cache=None):
        if targets is not None and self.training:
            calls[0] += 1
            if calls[0] == 8:
                raise OUT_OF_MEMORY[kind]()
        return real(self, idx, targets, cache)

    monkeypatch.setattr(GPT, "forward", forward)
    r = cli("train", *args)
    assert r.code == 2 and "Traceback" not in r.err, r
    line = [ln for ln in r.err.splitlines() if ln.startswith("error: ")][0]
    assert "out of memory on cpu at step 7 with micro-batches of 8" in line and "train.grad_accum_steps=2" in line
    assert load_checkpoint(out / "last.pt")["step"] == 5


@pytest.mark.parametrize("smallest", [2, 0])
def test_the_final_evaluation_out_of_memory_scores_in_smaller_batches_and_results_json_is_written(
    text_file, tmp_path, monkeypatch, capsys, smallest
) -> None:
    """The final evaluation runs after training, beside the optimizer's state: out of memory (MPS's
    error here) it scores again in batches half as large, saying so, and gives the same loss; where
    not even one window fits (`smallest` 0), results.json is still written, without the full loss."""
    from minigpt.model import GPT

    trainer = make_trainer(text_file, tmp_path / "run", "train.max_steps=4")
    real = GPT.forward

    def forward(self, idx, targets=None, cache=None):
        if self is not trainer.model and idx.size(0) > smallest:  # the final evaluation's copy of the model
            raise OUT_OF_MEMORY["mps"]()
        return real(self, idx, targets, cache)

    monkeypatch.setattr(GPT, "forward", forward)
    result = trainer.train()
    err = capsys.readouterr().err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert "evaluation: out of memory on cpu in batches of 8 windows; again in 4" in err
    if smallest:
        assert "in batches of 4 windows; again in 2" in err and "again in 1" not in err
        monkeypatch.setattr(GPT, "forward", real)
        again = trainer.final_eval()  # the same weights, in batches of 8
        assert result.full is not None and results["val_loss_full"] == pytest.approx(again.loss, rel=1e-6)
    else:
        assert "final evaluation: out of memory on cpu in one window; later: minigpt eval " in err
        assert result.full is None and results["val_loss_full"] is None and results["steps"] == 4
