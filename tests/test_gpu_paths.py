"""The CUDA / MPS / multi-process paths, checked on the CPU as far as their logic allows: where
tensors for collectives live, optimizer settings after a cross-device load, no recompilation
after the compile trial, and the device rules."""

from __future__ import annotations

import functools
import socket
from pathlib import Path

import pytest
import torch

from minigpt.config.schema import ModelConfig
from minigpt.data.corpus import Batcher
from minigpt.errors import UserError
from minigpt.model import GPT, parameter_count
from minigpt.runtime import device as runtime
from minigpt.runtime import distributed
from minigpt.runtime.distributed import wrap_ddp
from minigpt.training.loop import train_step
from minigpt.training.optim import AdamW, load_optimizer_state
from minigpt.training.state import RngStreams

from .helpers import make_trainer, one_error_line

TINY_MODEL = ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8)


def test_collectives_get_tensors_on_the_training_device(text_file: Path, tmp_path: Path, monkeypatch) -> None:
    """Under nccl only CUDA tensors can be reduced. Here the default device for new tensors is
    'meta' while training runs on the CPU: a tensor made without device=... shows up as meta."""
    trainer = make_trainer(text_file, tmp_path / "run")
    train_step(trainer)
    seen = []

    def all_sum(values: torch.Tensor, dist) -> torch.Tensor:
        seen.append(values.device)
        return values

    monkeypatch.setattr(distributed, "all_sum", all_sum)
    with torch.device("meta"):
        trainer.evaluate()
        trainer.agreement.meet()
    assert seen == [trainer.device, trainer.device]


def test_a_cpu_optimizer_state_keeps_the_live_optimizers_settings() -> None:
    torch.manual_seed(0)
    model = GPT(TINY_MODEL, 10)
    groups = [{"params": list(model.parameters()), "weight_decay": 0.1}]
    cpu_opt = AdamW(groups, lr=1e-3)
    model(torch.randint(10, (2, 8)), torch.randint(10, (2, 8)))[1].backward()
    cpu_opt.step()
    saved = cpu_opt.state_dict()
    assert saved["param_groups"][0]["fused"] is None  # what a CPU/MPS checkpoint carries

    plain = torch.optim.AdamW(groups, lr=1e-3, fused=True)
    plain.load_state_dict(saved)
    assert not plain.param_groups[0]["fused"]  # torch's own load drops the fused kernel: the bug

    live = torch.optim.AdamW(groups, lr=1e-3, fused=True)  # the CUDA optimizer (fused exists on the CPU too)
    load_optimizer_state(live, saved)
    assert live.param_groups[0]["fused"] is True and live.param_groups[0]["foreach"] is None
    p = next(iter(model.parameters()))
    step = live.state[p]["step"]
    assert step.device == p.device and step.dtype == torch.float32 and step.item() == 1  # placed for the fused kernel
    assert torch.equal(live.state[p]["exp_avg"], cpu_opt.state[p]["exp_avg"])
    live.step()  # and it steps
    assert live.state[p]["step"].item() == 2


def test_cpu_adamw_keeps_step_counts_on_the_parameters_device() -> None:
    p = torch.nn.Parameter(torch.zeros(3, device="meta"))
    opt = AdamW([{"params": [p]}], lr=1e-3)
    assert opt._state_of(p)["step"].device == p.device
    state = {"step": torch.tensor(5.0), "exp_avg": torch.zeros(3), "exp_avg_sq": torch.zeros(3)}
    opt.load_state_dict({"state": {0: state}, "param_groups": [{"params": [0], "lr": 1e-3}]})
    assert opt.state[p]["step"].device == p.device


def test_the_compile_trial_leaves_nothing_to_compile_for_the_first_step(text_file, tmp_path, monkeypatch) -> None:
    graphs = []

    def counting_backend(gm, example_inputs):  # compiles nothing; counts the graphs dynamo hands over
        graphs.append(len(gm.graph.nodes))
        return gm.forward

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=counting_backend))
    trainer = make_trainer(text_file, tmp_path / "run", "train.compile=true", "model.n_layer=1")
    assert len(graphs) == 1 and trainer.train_model is not trainer.model  # compiled by the trial
    train_step(trainer)
    train_step(trainer)
    assert len(graphs) == 1  # the real batches (views of one window) matched the trial's guards


def test_a_compile_that_dynamo_ran_eagerly_is_not_called_compiled(monkeypatch) -> None:
    """With torch._dynamo's suppress_errors, a backend failure falls back to eager without raising:
    maybe_compile says so and trains eagerly, instead of 'compiled the model'."""
    import torch._dynamo

    def failing_backend(gm, example_inputs):
        raise RuntimeError("no C++ compiler")

    lines: list[str] = []
    monkeypatch.setattr(runtime, "log", lines.append)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=failing_backend))
    torch._dynamo.reset()
    model = torch.nn.Linear(4, 4)
    with torch._dynamo.config.patch(suppress_errors=True):
        compiled = runtime.maybe_compile(
            model, True, lambda m: m, lambda m: m(torch.ones(2, 4)).sum().backward(), torch.device("cpu")
        )
    torch._dynamo.reset()
    assert compiled is model and model.weight.grad is None
    assert lines == [
        "warning: torch.compile fell back to eager (torch._dynamo suppressed its errors); training eagerly"
    ]


def test_mps_is_refused_for_several_processes(text_file: Path, tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    with pytest.raises(UserError, match="not on mps"):
        runtime.resolve_device("mps", distributed.Dist(rank=0, local_rank=0, world_size=2))
    assert runtime.resolve_device("mps", distributed.Dist()) == torch.device("mps")
    # auto never picks mps for several processes: they train on the CPU
    assert runtime.resolve_device("auto", distributed.Dist(0, 0, 2)) == torch.device("cpu")
    line = one_error_line(cli("train", "--nproc", "2", "--device", "mps", "--data", text_file, "--out", tmp_path / "r"))
    assert "not on mps" in line and not (tmp_path / "r").exists()


def test_ddp_does_not_broadcast_the_constant_buffers() -> None:
    import torch.distributed as tdist

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tdist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        wrapped = wrap_ddp(GPT(TINY_MODEL, 10), torch.device("cpu"))
        # the setting's name depends on the torch version: forward_sync_buffers in newer ones
        assert getattr(wrapped, "forward_sync_buffers", getattr(wrapped, "broadcast_buffers", None)) is False
    finally:
        tdist.destroy_process_group()


def test_batches_are_copied_without_non_blocking_unless_pinned(monkeypatch) -> None:
    calls = []

    def fake_to(self, *args, **kwargs):
        calls.append(kwargs.get("non_blocking", False))
        return self

    monkeypatch.setattr(torch.Tensor, "to", fake_to)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: self)
    data = torch.arange(100) % 7
    Batcher(data, 8, 4, 0, torch.device("mps")).next()
    Batcher(data, 8, 4, 0, torch.device("cuda")).next()
    assert calls == [False, True]


def test_cuda_random_state_is_restored_for_the_local_gpu_when_counts_differ(monkeypatch, capsys) -> None:
    restored = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: restored.append((int(state[0]), device)))
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: restored.append(("all", len(states))))
    data = torch.arange(100) % 7
    streams = RngStreams(torch.device("cuda", 1), Batcher(data, 8, 4, 0, torch.device("cpu")), distributed.Dist(), 0)
    streams._restore_cuda([torch.tensor([7], dtype=torch.uint8)])  # saved on a one-GPU machine
    assert restored == [(7, torch.device("cuda", 1))]
    assert "restored cuda:1's from the saved GPU 0" in capsys.readouterr().err
    streams._restore_cuda([torch.tensor([1], dtype=torch.uint8), torch.tensor([2], dtype=torch.uint8)])
    assert restored[-1] == ("all", 2)


def test_cuda_memory_pytorch_caches_counts_as_free(monkeypatch) -> None:
    """A sweep's second run in the same process: the first one's freed blocks stay in PyTorch's
    cache, which the driver's free figure counts as used; the preflight must not refuse a run
    that fits in them."""
    from minigpt.config.files import load_config
    from minigpt.runtime.memory import available_bytes
    from minigpt.training import preflight

    cuda = torch.device("cuda", 0)
    cfg = load_config(None, ["model.n_layer=4", "model.n_embd=256", "model.block_size=256", "train.batch_size=32"])
    need = preflight.estimate(cfg, 65, parameter_count(cfg.model, 65), torch.float32).total(32)
    free, cached = need // 2, need  # the driver sees half of it free; PyTorch holds as much again, unused
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (free, 80 * 2**30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: cached + 2**30)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 2**30)  # in use: not free
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "H100")
    assert available_bytes(cuda) == (free + cached, "free on H100")
    assert preflight.check(cfg, 65, cuda, torch.float32) is None


def test_a_compiled_sweep_compiles_each_run_afresh(tmp_path: Path, text_file: Path, cli, monkeypatch) -> None:
    """dynamo's cache is the process's: without a reset between a sweep's runs, each shape adds
    graphs until its recompile limit (8), past which the later runs train eagerly."""

    def eager_backend(gm, example_inputs):
        return gm.forward

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=eager_backend))
    base = ["model.n_layer=1", "model.n_head=2", "model.block_size=16", "train.batch_size=8", "train.eval_steps=1"]
    grid = ["model.n_embd=16,32", "train.max_steps=2", "train.compile=true", "log.progress=off"]
    r = cli("sweep", *base, *grid, f"data.path={text_file}", "--out", tmp_path / "sweep")
    assert r.code == 0, r.err
    assert r.err.count("compiled the model") == 2
    graphs = torch._C._dynamo.eval_frame._debug_get_cache_entry_list(GPT.forward.__code__)
    assert len(graphs) == 1  # the last run's shape only


def test_synchronize_waits_for_the_runs_own_device(monkeypatch) -> None:
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(device))
    monkeypatch.setattr(torch.mps, "synchronize", lambda: synced.append("mps"))
    for device in ("cuda:1", "mps", "cpu"):
        runtime.synchronize(torch.device(device))
    assert synced == [torch.device("cuda", 1), "mps"]  # cuda:1, not the current GPU; MPS too


def test_the_speed_probe_times_steps_as_the_run_will_train(monkeypatch) -> None:
    """--auto's probe: fast matmul (TF32) on before its first step, as the trainer sets it, and
    every timed step waits for the device (a GPU or a Mac would otherwise time the launches)."""
    from minigpt.training import autosize

    events = []
    monkeypatch.setattr(autosize, "enable_fast_matmul", lambda device: events.append(("fast", device)))
    monkeypatch.setattr(autosize, "synchronize", lambda device: events.append(("sync", device)))
    autosize.time_steps(TINY_MODEL, 10, 2, torch.device("cpu"), torch.float32, 0.0)
    assert events[0] == ("fast", torch.device("cpu"))
    assert events[1:] == [("sync", torch.device("cpu"))] * (len(events) - 1) and len(events) >= 6  # 2 warm-up + 3


def test_no_device_call_that_gpus_answer_wrongly() -> None:
    """What no CPU run reaches: `torch.cuda.synchronize()` without a device waits for the current
    GPU (not cuda:N, and never MPS: use runtime.device.synchronize); `mem_get_info` alone counts
    PyTorch's cached blocks as used (count memory_reserved - memory_allocated beside it)."""
    import ast

    found = []
    for path in sorted((Path(__file__).parents[1] / "minigpt").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
            names = {c.func.attr for c in calls}
            for call in calls:
                where = f"{path.name}:{call.lineno}"
                if call.func.attr == "synchronize" and ast.unparse(call.func) == "torch.cuda.synchronize":
                    if not call.args and not call.keywords:
                        found.append(f"{where} torch.cuda.synchronize() without the device")
                if call.func.attr == "mem_get_info" and "memory_reserved" not in names:
                    found.append(f"{where} mem_get_info without PyTorch's cache")
    assert found == []


GPT2_SMALL_1024 = [  # the example: 12 layers x 12 heads, context 1024, dropout 0.1, micro-batch 16
    "model.n_layer=12",
    "model.n_head=12",
    "model.n_embd=768",
    "model.block_size=1024",
    "model.dropout=0.1",
    "train.batch_size=16",
]


def test_the_preflight_charges_attention_scores_only_where_the_kernels_keep_them(monkeypatch) -> None:
    """CUDA's flash and memory-efficient kernels apply attention dropout without (T, T) scores: the
    example that the CPU's unfused path would need ~36 GB more for fits a 24 GB GPU. The CPU under
    dropout and MPS (whose attention always materialises the scores) are still charged them."""
    from minigpt.config.files import load_config
    from minigpt.training import preflight

    cfg = load_config(None, GPT2_SMALL_1024)
    monkeypatch.setattr(preflight, "available_bytes", lambda device: (24 * 2**30, "free on a 24 GB GPU"))
    assert preflight.check(cfg, 65, torch.device("cuda", 0), torch.bfloat16) is None
    refused = preflight.check(cfg, 65, torch.device("cpu"), torch.bfloat16)
    assert refused is not None and refused.startswith("train.batch_size=16 in micro-batches of 16 ")
    n = parameter_count(cfg.model, 65)
    est = {kind: preflight.estimate(cfg, 65, n, torch.bfloat16, kind) for kind in ("cpu", "cuda", "mps")}
    scores = 1.15 * 16 * 13 * 12 * 12 * 1024**2  # the overhead factor x micro-batch x every head's (T, T) bytes
    assert 35e9 < scores < 37e9  # "about 36 GB"
    assert est["cpu"].total(16) - est["cuda"].total(16) == pytest.approx(scores, rel=1e-3)
    assert est["mps"].total(16) == est["cpu"].total(16)
    # DDP's gradient buckets (4 bytes a parameter) and autocast's weight copies (2) are charged too
    ddp = preflight.estimate(cfg, 65, n, torch.bfloat16, "cuda", ddp=True)
    fp32 = preflight.estimate(cfg, 65, n, torch.float32, "cuda")
    assert ddp.fixed - est["cuda"].fixed == 4 * n and est["cuda"].fixed - fp32.fixed == 2 * n


def test_cpu_processes_share_one_machines_memory_and_split_the_worlds_batch(monkeypatch) -> None:
    """Two nodes of one CPU process each (world 2, LOCAL_WORLD_SIZE 1): each process holds half the
    batch, in all of its machine's memory, not a half share of it."""
    from minigpt.config.files import load_config
    from minigpt.training import preflight

    cfg = load_config(None, ["model.n_layer=4", "model.n_embd=256", "model.block_size=256", "train.batch_size=32"])
    n = parameter_count(cfg.model, 65)
    one = preflight.estimate(cfg, 65, n, torch.float32).total(16) + 4 * n  # DDP's buckets: 4 bytes a parameter
    available = int(one / 0.9) + 2**20  # one process's half of the batch, and no more
    monkeypatch.setattr(preflight, "available_bytes", lambda device: (available, "MemAvailable"))
    cpu = torch.device("cpu")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert preflight.check(cfg, 65, cpu, torch.float32, processes=2) is None
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # both on one machine: half of it each
    assert preflight.check(cfg, 65, cpu, torch.float32, processes=2) is not None


def test_a_mac_is_checked_against_metals_recommended_memory_or_told_it_is_not(monkeypatch, capsys) -> None:
    from minigpt.runtime.memory import available_bytes
    from minigpt.training import preflight

    mps = torch.device("mps")
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 16 * 2**30, raising=False)
    monkeypatch.setattr(torch.mps, "driver_allocated_memory", lambda: 2**30, raising=False)
    assert available_bytes(mps) == (15 * 2**30, "recommended for Metal on this Mac")
    monkeypatch.delattr(torch.mps, "recommended_max_memory")  # an older torch
    assert available_bytes(mps) == (None, "not reported by this torch release")
    from minigpt.config.files import load_config

    assert preflight.check(load_config(None, GPT2_SMALL_1024), 65, mps, torch.float32) is None
    assert "memory: not checked on mps (not reported by this torch release)" in capsys.readouterr().err


def test_a_single_process_on_cuda_n_makes_it_the_current_device(monkeypatch) -> None:
    """cuda:1 without torchrun: the compiler's kernels and every call without a device go to cuda:1, not cuda:0."""
    current = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    distributed.init(distributed.Dist(), torch.device("cuda", 1))
    distributed.init(distributed.Dist(), torch.device("cpu"))
    assert current == [torch.device("cuda", 1)]


def test_tf32_stays_out_of_muons_float32_iteration_and_the_final_evaluation(monkeypatch) -> None:
    """The trainer turns TF32 on for CUDA's training products; Muon's float32 Newton-Schulz and the
    evaluation that results.json reports must run in float32 (TF32 is read per product: checked on the CPU)."""
    from minigpt.infer import evaluate as evaluation
    from minigpt.training import optim

    seen = []

    def orthogonalize(g, dtype=torch.bfloat16, schedule=optim.NS_SCHEDULE):
        seen.append(("muon", torch.backends.cuda.matmul.allow_tf32))
        return torch.zeros_like(g)

    def token_losses(model, x, y):
        seen.append(("eval", torch.backends.cuda.matmul.allow_tf32))
        return torch.zeros(x.shape), None

    monkeypatch.setattr(optim, "orthogonalize", orthogonalize)
    monkeypatch.setattr(evaluation, "token_losses", token_losses)
    model = GPT(TINY_MODEL, 10)
    muon = optim.build_optimizer(model, _muon_config(), torch.device("cpu"), torch.float32)
    model(torch.randint(10, (2, 8)), torch.randint(10, (2, 8)))[1].backward()
    before = torch.backends.cuda.matmul.allow_tf32  # a torch setting, not an attribute monkeypatch restores
    torch.backends.cuda.matmul.allow_tf32 = True  # as the trainer sets it on CUDA
    try:
        muon.step()
        evaluation.evaluate_ids(model, torch.arange(40) % 10)
        after = torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert seen and {flag for _, flag in seen} == {False} and {what for what, _ in seen} == {"muon", "eval"}
    assert after  # and back on for the training after them


def _muon_config():
    from minigpt.config.files import load_config

    return load_config(None, ["optim.optimizer=muon", "model.n_layer=1", "model.n_head=2", "model.n_embd=16"])
