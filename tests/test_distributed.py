"""DDP through torchrun on the CPU (gloo): two real processes, checked against one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from minigpt.checkpoint import load_checkpoint
from minigpt.training.plan import Resume, read_request

from .helpers import TINY, launch

ROOT = Path(__file__).resolve().parents[1]
# float32: one process and two must agree to float32 rounding, which bf16 autocast (the CPU default
# where the CPU has native bf16) does not give when the batch is split differently
RUN = [*TINY, "train.max_steps=12", "train.eval_interval=6", "model.dropout=0.0", "train.dtype=float32"]


def assert_close(a: Path, b: Path, atol: float = 1e-5) -> None:
    wa, wb = load_checkpoint(a)["model"], load_checkpoint(b)["model"]
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.allclose(wa[k], wb[k], atol=atol), (k, (wa[k] - wb[k]).abs().max())


@pytest.mark.slow  # two torchrun launches (20 s on 2 cores): CI runs it in its slow step
def test_two_processes_match_one_and_checkpoints_move_between_them(text_file: Path, tmp_path: Path, cli) -> None:
    ddp, single = tmp_path / "ddp", tmp_path / "single"
    proc = launch("--data", text_file, "--out", ddp, *RUN, cache=tmp_path / "cache")
    _, err = proc.communicate_result
    assert proc.returncode == 0, err
    # rank 0 alone wrote the run: one event file, one progress report
    names = sorted(p.name for p in ddp.iterdir())
    expected = [".lock", "best.pt", "config.yaml", "last.pt", "results.json"]
    projector = [n for n in names if n.isdigit() or n == "projector_config.pbtxt"]  # rank 0's embeddings
    assert [n for n in names if not n.startswith("events") and n not in projector] == expected
    assert "projector_config.pbtxt" in projector and len(projector) > 1
    assert sum(n.startswith("events.out.tfevents") for n in names) == 1
    assert err.count("data: ") == 1 and err.count("step 12: val est") == 1
    assert "2 processes (cpu, DDP)" in err
    assert not list((tmp_path / "cache" / "tmp").glob("minigpt-train-*"))  # the request file is gone

    # the same global batch in one process, in the same data order: the same run
    assert cli("train", "--data", text_file, "--out", single, *RUN).code == 0
    a, b = load_checkpoint(ddp / "last.pt"), load_checkpoint(single / "last.pt")
    assert a["step"] == b["step"] == 12
    assert a["val_loss"] == pytest.approx(b["val_loss"], abs=1e-5)
    assert_close(ddp / "last.pt", single / "last.pt")

    # a DDP checkpoint samples and resumes in one process ...
    r = cli("sample", ddp, "--max-new-tokens", "30", "--temperature", "0")
    assert r.code == 0 and len(r.out) >= 30
    assert cli("train", "--out", ddp, "--resume", "train.max_steps=16").code == 0
    # ... and a single-process checkpoint resumes under DDP
    proc = launch("--out", single, "--resume", "train.max_steps=16", cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.communicate_result[1]
    assert load_checkpoint(single / "last.pt")["step"] == load_checkpoint(ddp / "last.pt")["step"] == 16
    assert_close(ddp / "last.pt", single / "last.pt")


def test_batch_that_does_not_split_is_refused_before_launch(text_file: Path, tmp_path: Path, cli) -> None:
    r = cli("train", "--nproc", "2", "--data", text_file, "--out", tmp_path / "r", *TINY, "train.batch_size=5")
    assert r.code == 2
    assert r.err.strip() == (
        "error: train.batch_size (5) must be divisible by train.grad_accum_steps (1) x --nproc (2); change one of them"
    )


def test_nproc_hands_every_flag_on_and_neither_dry_runs_nor_drops_auto(
    text_file: Path, tmp_path: Path, cli, monkeypatch
) -> None:
    """--dry-run --nproc 2 launches nothing and writes nothing; --auto --nproc 2 is refused in one
    line (it sizes a run for one process), never dropped; the workers get every override."""
    launched: list[list[str]] = []

    def execv(path, argv):
        launched.append(argv)
        raise SystemExit(0)

    monkeypatch.setattr(os, "execv", execv)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the request file goes
    out = tmp_path / "r"
    r = cli("train", "--nproc", "2", "--dry-run", "--data", text_file, "--out", out, *TINY, "model.n_layer=3")
    assert r.code == 0, r
    assert "n_layer: 3" in r.out and not launched and not out.exists()
    r = cli("train", "--nproc", "2", "--auto", "--data", text_file, "--out", out, *TINY, "train.max_time=1m")
    assert r.code == 2 and not launched and not out.exists(), r
    assert r.err.strip() == (
        "error: --auto sizes a run for one process; with --nproc, set the model's keys (or leave out --nproc)"
    )
    assert list(tmp_path.iterdir()) == [text_file]  # no request file either
    with pytest.raises(SystemExit):
        cli("train", "--nproc", "2", "--data", text_file, "--device", "cpu", "--out", out, "model.n_layer=3")
    assert len(launched) == 1
    [request] = tmp_path.glob("minigpt-train-*.json")
    argv = launched[0][launched[0].index("minigpt.runtime.torchrun") + 1 :]
    assert argv[0] == f"--remove={request}"  # the launcher removes it when the workers end
    assert argv[argv.index("minigpt") + 1 :] == ["train", f"--request={request}"]
    items = ["model.n_layer=3", ("data.path", str(text_file)), ("train.device", "cpu")]
    assert read_request(request) == (None, items, out, Resume.NO)
    request.write_text('{"overrides": [["data.path"]], "config": null, "out": null, "resume": "no"}')
    for given in (tmp_path / "missing.json", request):  # a user who found the hidden option (the fuzzer did)
        r = cli("train", f"--request={given}")
        assert r.code == 2 and r.err.startswith(f"error: --request {given}: ") and len(r.err.splitlines()) == 1, r


@pytest.mark.slow  # two more torchrun launches (~1 minute on 2 cores): `uv run pytest -m slow`
def test_interrupt_and_a_failing_rank_stop_the_whole_job(text_file: Path, tmp_path: Path) -> None:
    # rank 1 fails at its 40th forward pass; everything must stop, nothing may hang
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1' and os.environ.get('FAIL_RANK_1'):\n"
        "    import minigpt.model as m\n"
        "    real, calls = m.GPT.forward, [0]\n"
        "    def forward(self, *a, **k):\n"
        "        calls[0] += 1\n"
        "        if calls[0] == 40:\n"
        "            raise RuntimeError('simulated failure on rank 1')\n"
        "        return real(self, *a, **k)\n"
        "    m.GPT.forward = forward\n"
    )
    long = [*TINY, "train.max_steps=100000", "train.eval_interval=1000", "train.ckpt_interval=5", "log.interval=1"]

    out = tmp_path / "interrupted"
    proc = launch("--data", text_file, "--out", out, *long, cache=tmp_path / "cache", wait=False)
    deadline = time.monotonic() + 120
    while not (out / "last.pt").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in a terminal reaches the whole process group
    _, err = proc.communicate(timeout=90)
    assert proc.returncode != 0
    assert "Resume with: minigpt train --out" in err
    step = load_checkpoint(out / "last.pt")["step"]
    assert f"stopped at step {step}" in err

    os.environ["FAIL_RANK_1"] = "1"
    try:
        failing = tmp_path / "failing"
        t0 = time.monotonic()
        proc = launch("--data", text_file, "--out", failing, *long, cache=tmp_path / "cache", extra_path=hook)
    finally:
        del os.environ["FAIL_RANK_1"]
    assert proc.returncode != 0
    assert "simulated failure on rank 1" in proc.communicate_result[1]
    assert time.monotonic() - t0 < 200
    load_checkpoint(failing / "last.pt")  # what rank 0 saved before the failure is intact


def torchrun_script(tmp_path: Path, text: Path, body: str, timeout: float = 60) -> subprocess.CompletedProcess:
    """`body` (after `import minigpt`, with `OVERRIDES`, a run of `text`, and `RANK`) run by two gloo
    processes through torchrun, its run in tmp_path / "run"; killed, and the test failed, past `timeout`."""
    script = tmp_path / "train.py"
    overrides = [*RUN, "log.interval=5", f"data.path={text}"]
    script.write_text(
        f"import os\nimport sys\nimport time\n\nimport minigpt\n\nOVERRIDES = {overrides!r}\n"
        f"RANK = int(os.environ['RANK'])\nOUT = sys.argv[1]\n\n{body}"
        # torch's DDP keeps gloo's threads alive past destroy_process_group, and the interpreter's
        # teardown then aborts now and then (SIGABRT, "terminate called without an active exception")
        "sys.stdout.flush()\nos._exit(0)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MINIGPT_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.Popen(
        [*cmd, str(tmp_path / "run")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and both workers
        out, err = proc.communicate()
        pytest.fail(f"the two processes were still running after {timeout} s: {err[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


# rank 0 writes its checkpoints a second late: a rank that reads one before it exists finds nothing
SLOW_SAVE = """
import minigpt.checkpoint

real_save = minigpt.checkpoint.Checkpoint.save
def slow_save(self, path):
    time.sleep(1)
    real_save(self, path)
minigpt.checkpoint.Checkpoint.save = slow_save
"""


@pytest.mark.slow  # a torchrun launch (10-20 s); .ci/run runs it
def test_a_callback_that_fails_on_one_rank_stops_every_rank_with_last_pt_saved(text_file: Path, tmp_path: Path) -> None:
    """minigpt.train() under torchrun (two gloo processes), a user's callback raising on rank 1 only:
    the ranks agree at the next sync point, rank 0 saves last.pt, and the line names the callback
    and the rank; nothing waits for the process group's timeout."""
    body = (
        "class Boom(minigpt.Callback):\n"
        "    def on_step_end(self, trainer, stats):\n"
        "        if trainer.dist.rank == 1 and trainer.state.step == 3:\n"
        "            raise RuntimeError('boom on rank 1')\n\n"
        "minigpt.train(None, OVERRIDES, out=OUT, callbacks=[Boom()])\n"
    )
    proc = torchrun_script(tmp_path, text_file, body, timeout=150)
    assert proc.returncode != 0
    assert "callback Boom failed in on_step_end at step 3 on rank 1: boom on rank 1; saved" in proc.stderr, proc.stderr
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == 5  # saved where the ranks met


@pytest.mark.slow  # a torchrun launch (10-20 s); .ci/run runs it
def test_stop_on_one_rank_stops_every_rank_and_on_save_finds_the_file(text_file: Path, tmp_path: Path) -> None:
    """trainer.stop() called on rank 1 alone: the ranks agree at the next sync point (step 5, a log
    step), where the weights are scored and rank 0 saves last.pt; every rank's on_save reads the file
    it is told of, though rank 0 writes it slowly; the job ends, without an error, well within 60 s."""
    body = SLOW_SAVE + (
        "from minigpt.checkpoint import load_checkpoint\n\n"
        "class StopOnRank1(minigpt.Callback):\n"
        "    def on_step_end(self, trainer, stats):\n"
        "        if RANK == 1 and trainer.state.step == 3:\n"
        "            trainer.stop('rank 1 has seen enough')\n\n"
        "    def on_save(self, trainer, paths):\n"
        "        steps = [load_checkpoint(p)['step'] for p in paths]\n"
        "        print(f'rank {RANK} read {[p.name for p in paths]} of steps {steps}', flush=True)\n\n"
        "run = minigpt.train(None, OVERRIDES, out=OUT, callbacks=[StopOnRank1()])\n"
        "print(f'rank {RANK} returned at step {run.result.step}: {run.result.stopped}', flush=True)\n"
    )
    proc = torchrun_script(tmp_path, text_file, body)
    assert proc.returncode == 0, proc.stderr
    assert load_checkpoint(tmp_path / "run" / "last.pt")["step"] == 5
    for rank in (0, 1):
        assert f"rank {rank} read ['last.pt', 'best.pt'] of steps [5, 5]" in proc.stdout, proc.stdout
    assert "rank 1 returned at step 5: rank 1 has seen enough" in proc.stdout
    assert "rank 0 returned at step 5: stopped at step 5: another process asked to stop" in proc.stdout
    assert proc.stdout.count(" read ") == 2  # the one save, at the step the ranks agreed on


@pytest.mark.slow  # a torchrun launch (10-20 s); .ci/run runs it
def test_train_returns_on_every_rank_after_the_final_save(text_file: Path, tmp_path: Path) -> None:
    """minigpt.train() under torchrun, a run whose only save is its last step (written slowly by
    rank 0): every rank returns after it, rank 0 with the model, rank 1 with none (the default)."""
    body = SLOW_SAVE + (
        "from minigpt.checkpoint import load_checkpoint\n\n"
        "run = minigpt.train(None, [*OVERRIDES, 'train.eval_interval=1000'], out=OUT)\n"
        "step = load_checkpoint(run.path / 'last.pt')['step']\n"
        "print(f'rank {RANK}: step {run.result.step}, last.pt at step {step}, model {run.model is not None}')\n"
    )
    proc = torchrun_script(tmp_path, text_file, body)
    assert proc.returncode == 0, proc.stderr
    assert "rank 0: step 12, last.pt at step 12, model True" in proc.stdout, proc.stdout
    assert "rank 1: step 12, last.pt at step 12, model False" in proc.stdout, proc.stdout


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_dry_run_with_nproc_checks_the_memory_of_each_process(
    device: str, text_file: Path, tmp_path: Path, cli, monkeypatch
) -> None:
    """--dry-run --nproc 4 sizes each process's micro-batch (a quarter of the batch): on four GPUs
    of their own, a batch that one would not hold fits; four CPU processes share one machine's memory,
    so a batch that one process holds may not fit four times over."""
    from minigpt.config.files import load_config
    from minigpt.model import parameter_count
    from minigpt.training import preflight

    run = [*TINY, "train.batch_size=4096", "train.dtype=float32", f"data.path={text_file}"]
    vocab = len(set(text_file.read_text(encoding="utf-8")))
    cfg = load_config(None, run)
    est = preflight.estimate(cfg, vocab, parameter_count(cfg.model, vocab), torch.float32)
    whole, quarter = est.total(4096), est.total(1024)
    available = {"cuda": (whole + quarter) / 2, "cpu": (whole + 4 * quarter) / 2}[device] / 0.9
    assert quarter < 0.9 * available < whole if device == "cuda" else whole < 0.9 * available < 4 * quarter
    monkeypatch.setattr(preflight, "available_bytes", lambda d: (int(available), "free here"))
    if device == "cuda":  # four GPUs, as far as the dry run asks
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    r = cli("train", "--nproc", "4", "--dry-run", "--device", device, "--out", tmp_path / "r", *run)
    if device == "cuda":
        assert r.code == 0 and "batch_size: 4096" in r.out, r
    else:
        assert r.code == 2 and r.err.startswith("error: train.batch_size=4096 in micro-batches of 1024 "), r
        assert "train.grad_accum_steps=" in r.err and len(r.err.splitlines()) == 1


def test_the_time_advice_for_nproc_times_one_process_share_of_the_batch(monkeypatch) -> None:
    """train.max_time's step count under --nproc 4: a quarter of the batch on each GPU; on a CPU,
    whose cores the four processes share, the whole batch on all of them."""
    from minigpt.config.files import load_config
    from minigpt.training import autosize

    timed: list[int] = []
    monkeypatch.setattr(autosize, "time_steps", lambda model, vocab, rows, *rest: timed.append(rows) or 0.01)
    cfg = load_config(None, [*TINY, "train.batch_size=64", "train.max_time=1m"])
    for device in ("cuda", "cpu"):
        assert autosize.budget_steps(cfg, 65, torch.device(device), torch.float32, time.perf_counter(), 4) > 1000
    assert timed == [16, 64]


def test_dry_run_with_nproc_checks_the_layout_of_the_launched_processes(text_file: Path, tmp_path: Path, cli) -> None:
    """--dry-run --nproc 2 refuses what the two processes would refuse (a time schedule: each rank its clock)."""
    args = ["--data", text_file, "--out", tmp_path / "r", *TINY, "optim.schedule_by=time", "train.max_time=1m"]
    r = cli("train", "--nproc", "2", "--dry-run", *args)
    assert r.code == 2 and r.err.startswith("error: optim.schedule_by time trains on one process"), r
    assert cli("train", "--dry-run", *args).code == 0  # one process may


def test_the_launcher_tells_each_ranks_error_once() -> None:
    """{rank: (exit code, message)} of the failed workers: rank 0 printed its own; the others' lines
    name their ranks, the same message once; a planned exit without a message still says so."""
    from minigpt.runtime.torchrun import failure_lines

    no_file = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"  # torch's, without one
    assert failure_lines({0: (2, "no room"), 1: (2, "no room")}) == []
    assert failure_lines({1: (2, "LOCAL_RANK 1 but 1 GPU"), 2: (2, "LOCAL_RANK 1 but 1 GPU"), 3: (143, "")}) == [
        "error: ranks 1, 2: LOCAL_RANK 1 but 1 GPU"
    ]
    assert failure_lines({0: (2, "a"), 1: (74, "b"), 2: (2, no_file)}) == [
        "error: rank 1: b",
        "error: rank 2: exited with code 2",
    ]


def hook(tmp_path: Path, body: str) -> Path:
    """A folder whose sitecustomize.py runs `body` in every process of a launch (torchrun's and each worker)."""
    folder = tmp_path / "hook"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text("import os\n\n" + body)
    return folder


@pytest.mark.slow  # a torchrun launch (10-20 s); .ci/run runs it
def test_a_user_error_on_rank_1_alone_reaches_the_terminal_naming_the_rank(text_file: Path, tmp_path: Path) -> None:
    """`--nproc 4` on a 2-GPU machine: ranks 2 and 3 alone raise the LOCAL_RANK error (here rank 1 of 2,
    by a patched resolve_device). Only rank 0 used to print, and the launcher took exit 2 as planned: silence."""
    body = (
        "if os.environ.get('RANK') == '1':\n"
        "    import minigpt.training.launch as launch\n"
        "    from minigpt.errors import UserError\n"
        "    def resolve_device(name, dist=None):\n"
        "        raise UserError('LOCAL_RANK 1 but only 1 CUDA device(s): lower --nproc_per_node')\n"
        "    launch.resolve_device = resolve_device\n"
    )
    out = tmp_path / "r"
    proc = launch("--data", text_file, "--out", out, *RUN, cache=tmp_path / "cache", extra_path=hook(tmp_path, body))
    err = proc.communicate_result[1]
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert lines == ["error: rank 1: LOCAL_RANK 1 but only 1 CUDA device(s): lower --nproc_per_node"], err
    assert "Traceback" not in err


@pytest.mark.slow  # a torchrun launch and a resume (15-25 s); .ci/run runs it
def test_nproc_on_the_cpu_shares_the_cores_and_a_single_process_resume_takes_them_all(
    text_file: Path, tmp_path: Path, cli, monkeypatch
) -> None:
    """With OMP_NUM_THREADS unset, torchrun gave each of --nproc's CPU ranks one thread, recorded as the
    run's, so a later one-process resume kept one. The rule: the cores (6 here, patched in every
    process of the launch) divided among the processes; a resume on its own measures its own."""
    from minigpt.config.files import load_config
    from minigpt.runtime import cores

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    body = "import minigpt.runtime.cores as cores\ncores.allowed_cores = lambda: 6\n"
    out = tmp_path / "r"
    proc = launch("--data", text_file, "--out", out, *RUN, cache=tmp_path / "cache", extra_path=hook(tmp_path, body))
    assert proc.returncode == 0, proc.communicate_result[1]
    assert load_config(out / "config.yaml").train.threads == 6 // 2
    ckpt = load_checkpoint(out / "last.pt")  # the one resolved config, and the share it was counted for
    assert ckpt["config"]["train"]["threads"] == 3 and ckpt["decided"]["processes"] == 2
    monkeypatch.setattr(cores, "allowed_cores", lambda: 6)
    monkeypatch.setattr(cores.CoreLoad, "others", lambda self: 0.0)  # an idle machine
    r = cli("train", "--out", out, "--resume", "train.max_steps=14")
    assert r.code == 0, r
    assert load_config(out / "config.yaml").train.threads == 6
    ckpt = load_checkpoint(out / "last.pt")
    assert ckpt["config"]["train"]["threads"] == 6 and ckpt["decided"]["processes"] == 1


@pytest.mark.slow  # a torchrun launch (10-20 s); .ci/run runs it
def test_a_compile_that_fails_on_rank_1_alone_trains_every_rank_eagerly(text_file: Path, tmp_path: Path) -> None:
    """torch.compile's trial fails on rank 1 only (out of memory on a shared GPU, a cache race): every
    rank trains eagerly, one warning; rank 1 used to wrap the model for DDP a second time, a verify and a
    broadcast the other rank never made."""
    body = (
        "import torch\n\n"
        "class Failing(torch.nn.Module):  # compiles (lazily), then fails at its first call\n"
        "    def __init__(self, model):\n"
        "        super().__init__()\n"
        "        self.model = model\n\n"
        "    def forward(self, *args, **kwargs):\n"
        "        raise RuntimeError('simulated compile failure on rank 1')\n\n"
        "torch.compile = lambda model, **kw: Failing(model) if RANK == 1 else model\n\n"
        "class Shown(minigpt.Callback):\n"
        "    def on_train_start(self, trainer):\n"
        "        print(f'rank {RANK} trains {type(trainer.train_model.module).__name__}', flush=True)\n\n"
        "run = minigpt.train(None, [*OVERRIDES, 'train.compile=true'], out=OUT, callbacks=[Shown()])\n"
        "print(f'rank {RANK} returned at step {run.result.step}', flush=True)\n"
    )
    proc = torchrun_script(tmp_path, text_file, body, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for rank in (0, 1):
        assert f"rank {rank} trains GPT" in proc.stdout and f"rank {rank} returned at step 12" in proc.stdout
    assert proc.stderr.count("training eagerly") == 1, proc.stderr
    assert "warning: torch.compile failed on another process; training eagerly" in proc.stderr


@pytest.mark.slow  # a run and a torchrun launch (15-25 s); .ci/run runs it
def test_ranks_that_find_different_checkpoints_stop_with_one_line(text_file: Path, tmp_path: Path, cli) -> None:
    """A shared filesystem that lags: rank 1 finds an older last.pt (patched: a copy of step 6) than
    rank 0 (step 12). Each used to resume from its own; now one line, naming both, and nothing trains."""
    out = tmp_path / "r"
    assert cli("train", "--data", text_file, "--out", out, *RUN, "train.max_steps=6").code == 0
    (out / "older.pt").write_bytes((out / "last.pt").read_bytes())
    assert cli("train", "--out", out, "--resume", "train.max_steps=12").code == 0
    body = (
        "if os.environ.get('RANK') == '1':\n"
        "    import minigpt.training.launch as launch\n"
        "    real = launch.find_checkpoint\n"
        "    def find_checkpoint(out_dir, prefer):\n"
        "        found = real(out_dir, prefer)\n"
        "        return found.with_name('older.pt') if found is not None and found.name == 'last.pt' else found\n"
        "    launch.find_checkpoint = find_checkpoint\n"
    )
    extra = hook(tmp_path, body)
    proc = launch("--out", out, "--resume", "train.max_steps=18", cache=tmp_path / "cache", extra_path=extra)
    err = proc.communicate_result[1]
    assert proc.returncode == 2, err
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and lines[0].startswith("error: the processes do not start from the same checkpoint ("), err
    assert "rank 0: plan resume, file last.pt, step 12, checksum " in lines[0]
    assert "rank 1: plan resume, file older.pt, step 6, checksum " in lines[0]
    assert load_checkpoint(out / "last.pt")["step"] == 12
