"""Mixed precision on the CPU: when bf16 is chosen (training and sampling), and attention kept in float32."""

from __future__ import annotations

import copy
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from minigpt.checkpoint import load_checkpoint, save_checkpoint
from minigpt.config.schema import Config, ModelConfig
from minigpt.infer import sample as generation
from minigpt.infer.decode import generate_steps
from minigpt.model import GPT, KVCache, causal_attention
from minigpt.runtime import device as runtime
from minigpt.runtime import precision
from minigpt.runtime.attention import attention_by_products
from minigpt.runtime.device import sampling_dtype
from tests.helpers import ROOT, TINY

CPU = torch.device("cpu")


def _measured(monkeypatch, ratio: float) -> list[tuple[int, int]]:
    """Make the CPU look bf16-capable and its probe measure `ratio`; returns the shapes probed."""
    probed: list[tuple[int, int]] = []
    monkeypatch.setattr(precision, "machine_busy", lambda: False)
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setattr(precision, "measure", lambda rows, width: probed.append((rows, width)) or ratio)
    monkeypatch.setattr(precision, "decode_speed", lambda layers, width: probed.append((layers, width)) or ratio)
    return probed


@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_on_the_cpu_is_bf16_only_where_the_cpu_has_it(native: bool, monkeypatch) -> None:
    _measured(monkeypatch, 3.0)
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: native)
    assert runtime.resolve_dtype("auto", CPU)[0] == (torch.bfloat16 if native else torch.float32)
    # an explicit choice is kept either way
    assert runtime.resolve_dtype("float32", CPU) == (torch.float32, "set by train.dtype")
    assert runtime.resolve_dtype("bfloat16", CPU) == (torch.bfloat16, "set by train.dtype")


def test_native_bf16_check_reads_the_cpu_flags(monkeypatch) -> None:
    for avx512_bf16, amx, expected in [(True, False, True), (False, True, True), (False, False, False)]:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v, raising=False)
        assert runtime.cpu_has_native_bf16() is expected


def test_attention_under_cpu_autocast_runs_in_float32() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8).bfloat16().requires_grad_() for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = causal_attention(q, k, v, 0.0)
    assert y.dtype == torch.bfloat16  # the blocks around it stay in bf16
    # the float32 attention of the same (bf16-rounded) inputs, rounded once at the end
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).bfloat16()
    assert torch.equal(y, expected)
    with pytest.raises(ValueError, match="explicit attention mask"):  # neither causal nor one query
        causal_attention(q[:, :, :4], k, v)
    y.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == torch.bfloat16 for t in (q, k, v))


@pytest.mark.parametrize("ratio", [0.5, 1.05, 3.0])
def test_auto_takes_bf16_only_where_it_measures_faster(ratio: float, monkeypatch, capsys) -> None:
    """A CPU whose flags promise bf16 but whose products run slower (or barely faster) trains in float32."""
    probed = _measured(monkeypatch, ratio)
    expected = torch.bfloat16 if ratio >= precision.MARGIN else torch.float32
    why = f"bf16 products at {ratio:.2f}x float32's speed on this CPU"
    assert runtime.resolve_dtype("auto", CPU, (4096, 384)) == (expected, f"auto, measured: {why}")
    assert probed == [(4096, 384)]
    assert capsys.readouterr().err == ""  # resolving says nothing: a user error after it stays one line
    assert runtime.resolve_dtype("auto", CPU, (4096, 384)) == (expected, f"auto, cached: {why}")
    assert len(probed) == 1  # the second answer came from the cache
    assert runtime.sampling_dtype("auto", CPU, (6, 384)) == expected and probed[-1] == (6, 384)
    # decoding measured as it decodes (one row through the model's weights, cast once), cached under its own name
    assert f"precision for 6x384 decode on {torch.get_num_threads()} thread(s)" in precision.cached_lines()[-1]
    assert capsys.readouterr().err == ""  # sampling's stderr stays its own (an error stays one line)


def test_the_answer_is_cached_per_machine_and_invalidated_when_the_key_changes(monkeypatch, capsys) -> None:
    probed = _measured(monkeypatch, 2.0)
    now = f"torch {torch.__version__}"
    assert runtime.resolve_dtype("auto", CPU, (256, 64))[0] == torch.bfloat16
    assert runtime.resolve_dtype("auto", CPU, (256, 64))[0] == torch.bfloat16
    assert probed == [(256, 64)]  # the second run read the cache
    monkeypatch.setattr(precision, "measure", lambda rows, width: probed.append((rows, width)) or 0.5)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)  # another thread count: another answer
        assert runtime.resolve_dtype("auto", CPU, (256, 64))[0] == torch.float32
    finally:
        torch.set_num_threads(threads)
    monkeypatch.setattr(torch, "__version__", "0.0.test")  # a new torch: measured again
    assert runtime.resolve_dtype("auto", CPU, (256, 64))[0] == torch.float32
    assert len(probed) == 3
    installed = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.0.test" if name == "minigpt" else installed(name)
    )
    assert runtime.resolve_dtype("auto", CPU, (256, 64))[0] == torch.float32 and len(probed) == 4
    monkeypatch.setattr(precision, "machine_busy", lambda: True)  # measured under another's load: not kept
    assert runtime.resolve_dtype("auto", CPU, (512, 64))[0] == torch.float32
    assert runtime.resolve_dtype("auto", CPU, (512, 64))[0] == torch.float32 and probed[-2:] == [(512, 64)] * 2
    assert precision.cached_lines() == [  # what `minigpt --version` prints, after its first line
        f"precision for 256x64 products on {threads} thread(s), {now}: bfloat16 (bf16 at 2.0x float32)",
        f"precision for 256x64 products on {threads + 1} thread(s), {now}: float32 (bf16 at 0.5x float32)",
        f"precision for 256x64 products on {threads} thread(s), torch 0.0.test: float32 (bf16 at 0.5x float32)",
        f"precision for 256x64 products on {threads} thread(s), torch 0.0.test: float32 (bf16 at 0.5x float32)",
    ]


def test_a_slow_bf16_is_measured_and_refused_in_seconds(tmp_path) -> None:
    """oneDNN limited to AVX2 emulates bf16 (hundreds of times slower here): auto must pick float32, and
    the probe's scout must find out without running the slow products at full size."""
    code = (
        "import torch; from minigpt.runtime.device import resolve_dtype, cpu_bf16_choice;"
        "choice = cpu_bf16_choice((4096, 384));"
        "print(resolve_dtype('auto', torch.device('cpu'), (4096, 384))[0], choice and choice.ratio)"
    )
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "MINIGPT_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    dtype, ratio = r.stdout.split()
    assert dtype == "torch.float32" and r.stderr == ""
    if ratio != "None":  # the flags said bf16 (else there is nothing to measure): the measurement said no
        assert float(ratio) < 1 / precision.MARGIN


@pytest.mark.parametrize("native", [True, False])
def test_sampling_dtype_follows_the_cpu(native: bool, monkeypatch) -> None:
    _measured(monkeypatch, 3.0)
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: native)
    assert sampling_dtype("auto", CPU) == (torch.bfloat16 if native else torch.float32)
    assert sampling_dtype("float32", CPU) == torch.float32
    assert sampling_dtype("bfloat16", CPU) == torch.bfloat16


def test_bf16_model_decodes_against_a_float32_cache_close_to_float32() -> None:
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, dropout=0.0, pos_emb="rope")
    torch.manual_seed(0)
    m32 = GPT(cfg, 20).eval()
    with torch.no_grad():  # logits of a useful size, so that bf16 rounding is visible
        m32.wte.weight.mul_(20)
    m16 = copy.deepcopy(m32).to(torch.bfloat16)
    idx = torch.randint(20, (1, 12))
    cache = KVCache(cfg, 1, cfg.block_size, CPU, torch.float32)  # what generate uses on the CPU
    with torch.inference_mode():
        m16(idx[:, :8], cache=cache)
        for t in range(8, 12):  # one position at a time, attending to float32 keys and values
            logits16, _ = m16(idx[:, t : t + 1], cache=cache)
        full32, _ = m32(idx)
    assert logits16.dtype == torch.float32  # sampling logits stay float32: no exact ties from bf16 rounding
    diff = (logits16[0, -1] - full32[0, -1]).abs().max().item()
    assert 0 < diff < 0.05 * full32[0, -1].abs().max().item()


def test_sample_dtype_flag(trained_run, cli, monkeypatch) -> None:
    seen = []

    def recording_generate(model, *args, **kwargs):
        seen.append(next(model.parameters()).dtype)
        return generate_steps(model, *args, **kwargs)

    monkeypatch.setattr(generation, "generate_steps", recording_generate)
    a = cli("sample", trained_run, "--max-new-tokens", "40", "--temperature", "0", "--dtype", "float32")
    b = cli("sample", trained_run, "--max-new-tokens", "40", "--temperature", "0", "--dtype", "bfloat16")
    assert a.code == b.code == 0 and len(a.out) == len(b.out) == 41  # newline prompt + 40
    assert seen == [torch.float32, torch.bfloat16]
    r = cli("sample", trained_run, "--dtype", "float16")
    assert r.code == 2 and r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("error: Invalid value for '--dtype'")
    assert "'float16' is not one of 'auto', 'float32', 'bfloat16'" in r.err


def _choices(run: Path) -> tuple[dict, dict]:
    """The run's recorded train.dtype, train.attention and train.threads, and where auto chose which:
    the checkpoint carries config.yaml's one resolved config."""
    ckpt = load_checkpoint(run / "last.pt")
    assert ckpt["config"] == yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    return {k: ckpt["config"]["train"][k] for k in ("dtype", "attention", "threads")}, ckpt["decided"]


def test_a_resume_keeps_the_precision_its_run_trained_in(text_file, tmp_path, cli, monkeypatch) -> None:
    """train.dtype auto is measured once per run: a resume on a machine that now measures bf16 slower
    (a busier machine, say) continues in the run's bf16, so the resumed run is the same run."""
    _measured(monkeypatch, 3.0)
    out = tmp_path / "run"
    args = ["--data", text_file, *TINY, "train.max_steps=4", "train.eval_interval=2", "train.dtype=auto"]
    assert cli("train", "--out", out, *args).code == 0
    used = {"dtype": "bfloat16", "attention": "flash", "threads": torch.get_num_threads()}
    decided = {"keys": ["train.dtype", "train.attention", "train.threads"], "device": "cpu", "processes": 1}
    assert _choices(out) == (used, decided)
    (precision.default_cache_dir() / precision.CACHE_NAME).unlink()  # this machine now measures afresh
    _measured(monkeypatch, 0.5)
    r = cli("train", "--out", out, "--resume", "train.max_steps=6")
    assert r.code == 0, r
    assert "precision: bfloat16 (train.dtype auto, kept on resume: the run trained in it so far)" in r.err
    assert load_checkpoint(out / "last.pt")["step"] == 6 and _choices(out) == (used, decided)
    assert runtime.resolve_dtype("auto", CPU, (64, 32))[0] == torch.float32  # a new run measures again


def test_a_resume_elsewhere_decides_again_what_auto_chose_and_keeps_what_the_user_set(
    text_file, tmp_path, cli, monkeypatch
) -> None:
    """The checkpoint says where auto chose its keys: a run that trained on another kind of device
    (a GPU, here written into the checkpoint) decides train.dtype again on the CPU; a key the user set
    is the user's, wherever the run goes on."""
    _measured(monkeypatch, 3.0)
    out = tmp_path / "run"
    args = ["--data", text_file, *TINY, "train.max_steps=4", "train.eval_interval=2", "train.dtype=auto"]
    assert cli("train", "--out", out, *args, "train.attention=flash").code == 0
    used, decided = _choices(out)
    assert used["dtype"] == "bfloat16" and decided["keys"] == ["train.dtype", "train.threads"]
    for name in ("last.pt", "best.pt"):  # as if it had trained on a GPU
        ckpt = load_checkpoint(out / name)
        ckpt["decided"]["device"] = "cuda"
        save_checkpoint(ckpt, out / name)
    (precision.default_cache_dir() / precision.CACHE_NAME).unlink()
    _measured(monkeypatch, 0.5)  # this CPU measures bf16 slower
    r = cli("train", "--out", out, "--resume", "train.max_steps=6")
    assert r.code == 0, r
    assert "precision: float32 (auto, measured: bf16 products at 0.50x" in r.err
    used, decided = _choices(out)
    assert used["dtype"] == "float32" and used["attention"] == "flash"  # decided again; as set
    assert decided == {"keys": ["train.dtype", "train.threads"], "device": "cpu", "processes": 1}


def test_attention_by_products_is_the_flash_kernels_attention_in_bf16() -> None:
    """The products form computes the same causal attention, forward and backward, within bf16's rounding."""
    gen = torch.Generator().manual_seed(0)
    qkv = [torch.randn(2, 3, 24, 16, generator=gen).bfloat16() for _ in range(3)]
    outs, grads = [], []
    for products in (False, True):
        q, k, v = (t.clone().requires_grad_() for t in qkv)
        y = (attention_by_products if products else causal_attention)(q, k, v)
        y.float().pow(2).sum().backward()
        outs.append(y.float())
        grads.append([t.grad.float() for t in (q, k, v)])
    torch.testing.assert_close(outs[1], outs[0], atol=3e-2, rtol=3e-2)
    for a, b in zip(grads[1], grads[0]):
        torch.testing.assert_close(a, b, atol=6e-2, rtol=6e-2)
    shifted = [t.clone() for t in qkv]
    shifted[1][:, :, -1] += 1.0  # a later key changes nothing before it: still causal
    before = attention_by_products(*qkv)[:, :, :-1]
    assert torch.equal(attention_by_products(*shifted)[:, :, :-1], before)


def test_the_trainer_attends_by_products_where_measured_faster_and_a_resume_keeps_it(
    text_file, tmp_path, cli, monkeypatch
) -> None:
    from minigpt.runtime import attention as trainer  # noqa: PLC0415

    monkeypatch.setattr(precision, "machine_busy", lambda: False)
    measured: list[tuple[int, int, int]] = []
    ratio = {"now": 2.0}
    monkeypatch.setattr(trainer, "attention_speed", lambda *shape: measured.append(shape) or ratio["now"])
    shape = ["model.n_embd=64", "model.n_head=1", "model.block_size=128", "train.dtype=bfloat16"]
    args = ["--data", text_file, *TINY, *shape, "train.max_steps=4", "train.eval_interval=2"]
    out = tmp_path / "run"
    r = cli("train", "--out", out, *args)
    assert r.code == 0, r
    assert "attention: bf16 products (auto, measured: products at 2.00x the flash kernel's speed" in r.err
    assert measured == [(8, 128, 64)]  # batch 8 x 1 head, context 128, head size 64
    assert _choices(out)[0]["attention"] == "products"
    (precision.default_cache_dir() / precision.CACHE_NAME).unlink()
    ratio["now"] = 0.5  # the machine now measures the flash kernel faster: the run keeps its form
    r = cli("train", "--out", out, "--resume", "train.max_steps=6")
    assert r.code == 0 and "attention: bf16 products (kept on resume: the run trained so)" in r.err
    assert measured == [(8, 128, 64)]  # the resume did not measure again
    assert _choices(out)[0]["attention"] == "products"
    r = cli("train", "--out", tmp_path / "new", *args)  # a new run measures afresh
    assert r.code == 0 and "attention: the float32 flash kernel (auto, measured: products at 0.50x" in r.err
    assert _choices(tmp_path / "new")[0]["attention"] == "flash"
    measured.clear()
    small = ["--data", text_file, *TINY, "train.max_steps=2", "train.dtype=bfloat16"]  # head size 16
    assert cli("train", "--out", tmp_path / "small", *small).code == 0 and measured == []
    long = Config().replace(**{"model.n_embd": 128, "model.n_head": 2, "model.block_size": 1024})
    assert trainer.attends_by_products(long, CPU, torch.bfloat16, 8) is None and measured == []  # context² scores


def _lines(err: str, start: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(start)]


def test_one_precision_line_agrees_with_the_model_line_measured_cached_or_set(text_file, tmp_path, cli, monkeypatch):
    """The `model:` line's dtype and the one `precision:` line come from the same decision, whatever its reason."""
    probed = _measured(monkeypatch, 3.0)
    args = ["--data", text_file, *TINY, "train.max_steps=2", "train.eval_interval=2"]
    for name, extra, dtype, why in [
        ("measured", [], "bfloat16", "auto, measured: bf16 products at 3.00x"),
        ("cached", [], "bfloat16", "auto, cached: bf16 products at 3.00x"),
        ("set", ["train.dtype=float32"], "float32", "set by train.dtype"),
    ]:
        r = cli("train", "--out", tmp_path / name, *args, *extra)
        assert r.code == 0, r
        [model], [line] = _lines(r.err, "model: "), _lines(r.err, "precision: ")
        assert model.endswith(f"| dtype {dtype}") and line.startswith(f"precision: {dtype} ({why}"), r.err
    assert len(probed) == 1  # measured once; the cached and the set runs measured nothing


def test_a_run_of_the_recorded_config_reuses_its_choices_whatever_the_probe_says_now(
    text_file, tmp_path, cli, monkeypatch
) -> None:
    """The run's config.yaml records what auto chose; training it again, on a machine whose probe now
    answers the other way, measures nothing and gives the same weights. The same overrides measure
    afresh and train another model: the recording is what keeps them equal."""
    probed = _measured(monkeypatch, 3.0)
    args = ["--data", text_file, *TINY, "train.max_steps=6", "train.eval_interval=3", "train.dtype=auto"]
    assert cli("train", "--out", tmp_path / "first", *args).code == 0
    recorded = (tmp_path / "first" / "config.yaml").read_text()
    assert "dtype: bfloat16" in recorded and "attention: flash" in recorded
    assert f"threads: {torch.get_num_threads()}" in recorded
    (precision.default_cache_dir() / precision.CACHE_NAME).unlink()
    _measured(monkeypatch, 0.5)  # a busy machine, say: bf16 now measures slower
    r = cli("train", tmp_path / "first" / "config.yaml", "--out", tmp_path / "again")
    assert r.code == 0 and "precision: bfloat16 (set by train.dtype)" in r.err, r
    assert len(probed) == 1  # nothing measured again
    first, again = (load_checkpoint(tmp_path / n / "last.pt")["model"] for n in ("first", "again"))
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert cli("train", "--out", tmp_path / "afresh", *args).code == 0  # auto again: float32 now
    afresh = load_checkpoint(tmp_path / "afresh" / "last.pt")
    assert afresh["config"]["train"]["dtype"] == "float32"
    assert not all(torch.equal(first[k], afresh["model"][k]) for k in first)


@pytest.mark.parametrize("capability, dtype", [((7, 5), torch.float16), ((8, 0), torch.bfloat16)])
def test_auto_keeps_a_resumed_bf16_only_on_a_gpu_with_bf16_in_hardware(capability, dtype, monkeypatch) -> None:
    """A run trained in bf16 on an A100, resumed on a T4 or V100 (capability 7.x): float16, as a fresh
    run there, and the line says it left the run's bf16."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    monkeypatch.setattr(torch.version, "hip", None)
    gpu, trained = torch.device("cuda", 0), {"device": "cuda", "dtype": "bfloat16", "attention": "flash"}
    assert runtime.resolve_dtype("auto", gpu)[0] == dtype  # a fresh run
    chosen, why = runtime.resolve_dtype("auto", gpu, trained=trained)
    assert chosen == dtype
    kept = dtype == torch.bfloat16
    assert ("kept on resume" in why) is kept and ("not the bfloat16 the run trained in so far" in why) is not kept
    assert runtime.resolve_dtype("bfloat16", gpu, trained=trained)[0] == torch.bfloat16  # set by the user: kept


@pytest.mark.slow  # a torchrun launch (10-20 s): `uv run pytest -m slow`
def test_every_rank_trains_in_rank_0s_precision_whatever_its_own_probe_says(text_file, tmp_path) -> None:
    """Two gloo processes whose probes answer differently (rank 0: bf16 3x faster, rank 1: 2x slower):
    rank 0 decides, rank 1 measures nothing and takes its dtype, Muon's Newton-Schulz dtype and threads."""
    script = tmp_path / "train.py"
    overrides = [*TINY, "train.max_steps=2", "train.eval_interval=2", "optim.optimizer=muon", f"data.path={text_file}"]
    script.write_text(
        "import os, sys\nfrom pathlib import Path\nimport torch, minigpt\n"
        "from minigpt.runtime import device, precision\n"
        "from minigpt.training.launch import start_run\nfrom minigpt.training.plan import Resume\n"
        "rank = int(os.environ['RANK'])\n"
        "device.cpu_has_native_bf16 = lambda: True\nprecision.machine_busy = lambda: False\n"
        "precision.measure = lambda rows, width: print('measured on rank', rank) or (3.0 if rank == 0 else 0.5)\n\n"
        "class Record(minigpt.Callback):\n"
        "    def on_train_start(self, trainer):\n"
        "        used = f'{trainer.dtype} {trainer.optimizer.ns_dtype} {torch.get_num_threads()}'\n"
        "        Path(sys.argv[1] + f'.rank{rank}').write_text(used)\n\n"
        f"start_run(None, {overrides!r}, Path(sys.argv[1]), Resume.NO, callbacks=[Record()])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MINIGPT_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    proc = subprocess.run([*cmd, str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=150)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("measured on rank") == 1 and "measured on rank 0" in proc.stdout, proc.stdout
    used = [(tmp_path / f"run.rank{rank}").read_text() for rank in (0, 1)]
    assert used == ["torch.bfloat16 torch.bfloat16 1"] * 2
    assert "dtype: bfloat16" in (tmp_path / "run" / "config.yaml").read_text()
