"""model.attn_only: blocks of attention alone, as in the induction-head papers' toy models. No MLP
and no second LayerNorm in the weights or the count; the invariants every model holds (causality,
the KV cache); a run trains, samples and draws attention through the CLI; ONNX exports it exactly,
and --format hf refuses it with one line. The playground's JavaScript is held to it in
tests/test_playground.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch

import minigpt
from minigpt.checkpoint import load_checkpoint
from minigpt.cli.app import main
from minigpt.config.schema import Config, ModelConfig
from minigpt.errors import UserError
from minigpt.infer.decode import generate
from minigpt.infer.loading import load_model
from minigpt.model import GPT, KVCache, parameter_count
from minigpt.runtime.mfu import flops_per_token
from minigpt.training.launch import vocabulary_check
from minigpt.training.preflight import estimate

from .helpers import TINY, TINY_MODEL, make_text, one_error_line, tiny_model, trained_like

V = 20
BASE = {**TINY_MODEL, "attn_only": True}
CPU = torch.device("cpu")


def model(seed: int = 0, **options) -> GPT:
    """A tiny attention-only model with every weight moved off its initial value, as training would."""
    return trained_like(tiny_model(V, seed, **{"attn_only": True, **options}))


@pytest.mark.parametrize(
    "options", [{}, {"norm": "post"}, {"bias": True, "pos_emb": "learned"}, {"value_embeds": True, "qk_norm": True}]
)
def test_blocks_hold_no_mlp_and_the_count_is_the_models_own(options: dict) -> None:
    cfg = ModelConfig(**{**BASE, **options})
    m = GPT(cfg, V)
    assert not [k for k in m.state_dict() if ".mlp." in k or ".ln_2." in k]
    assert all(block.mlp is None and block.ln_2 is None for block in m.blocks)
    assert parameter_count(cfg, V) == sum(p.numel() for p in m.parameters())
    full = ModelConfig(**{**BASE, **options, "attn_only": False})
    C, b = cfg.n_embd, int(cfg.bias)
    per_block = C * (1 + b) + 8 * C * C + 5 * C * b  # ln_2, c_fc and the MLP's c_proj
    assert parameter_count(full, V) - parameter_count(cfg, V) == cfg.n_layer * per_block


@pytest.mark.parametrize("norm_at", ["pre", "post"])
def test_a_block_is_its_attention_alone(norm_at: str) -> None:
    m = model(norm=norm_at)
    block, x = m.blocks[0], torch.randn(2, 16, 32)
    with torch.no_grad():
        want = x + block.attn(block.ln_1(x)) if norm_at == "pre" else block.ln_1(x + block.attn(x))
        torch.testing.assert_close(block(x), want)


@pytest.mark.parametrize("options", [{}, {"norm": "post", "pos_emb": "learned"}])
def test_causality_and_the_kv_cache_hold(options: dict) -> None:
    m = model(**options)
    idx = torch.randint(V, (2, 16))
    full = m(idx)[0]
    changed = idx.clone()
    changed[:, 10] = (changed[:, 10] + 1) % V
    assert torch.allclose(m(changed)[0][:, :10], full[:, :10], atol=1e-6)
    cache = KVCache(m.cfg, 2, 16, CPU, torch.float32)
    with torch.no_grad():
        assert torch.allclose(m(idx[:, :5], cache=cache)[0][:, 0], full[:, 4], atol=1e-5)
        for t in range(5, 16):
            assert torch.allclose(m(idx[:, t : t + 1], cache=cache)[0][:, 0], full[:, t], atol=1e-5)
    prompt = idx[0, :4].tolist()
    cached = generate(m, prompt, 30, temperature=0, use_cache=True)  # past the context: the cache slides
    assert cached[:12] == generate(m, prompt, 12, temperature=0, use_cache=False)
    seeded = [generate(m, prompt, 12, generator=torch.Generator().manual_seed(3), use_cache=c) for c in (True, False)]
    assert seeded[0] == seeded[1]


def test_flops_leave_out_the_mlps() -> None:
    cfg = ModelConfig(**BASE)
    full = ModelConfig(**{**BASE, "attn_only": False})
    assert flops_per_token(full, V) - flops_per_token(cfg, V) == 6 * 2 * 8 * 32 * 32  # 6 x L x the MLP's 8C^2


def test_the_vocabulary_check_weighs_the_blocks_the_model_has() -> None:
    """The table may grow to the blocks' weight matrices: 512 rows of 64 for two attention-only
    blocks (1,536 with their MLPs)."""
    cfg = ModelConfig(**{**BASE, "n_embd": 64})
    matrices = sum(p.numel() for p in GPT(cfg, V).blocks.parameters() if p.dim() == 2)
    assert matrices == 512 * 64
    check = vocabulary_check(cfg)
    check(512)
    with pytest.raises(UserError, match=r"513 distinct characters"):
        check(513)
    vocabulary_check(ModelConfig(**{**BASE, "n_embd": 64, "attn_only": False}))(1500)  # the MLPs weigh too


def test_the_memory_estimate_leaves_out_the_mlps_activations() -> None:
    full = Config(model=ModelConfig(**{**BASE, "attn_only": False}))
    alone = Config(model=ModelConfig(**BASE))
    est = [estimate(c, V, parameter_count(c.model, V), torch.float32) for c in (full, alone)]
    assert est[1].per_sequence < 0.65 * est[0].per_sequence  # measured: tests/test_slow.py holds it to the peak


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny attention-only run, trained once for the module through the CLI."""
    folder = tmp_path_factory.mktemp("attn_only")
    data = folder / "text.txt"
    data.write_text(make_text(5_000), encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINIGPT_CACHE_DIR", str(folder / "cache"))
    try:
        options = [
            "model.attn_only=true",
            "train.max_steps=30",
            "train.eval_interval=30",
            "log.tensorboard=false",
            "log.progress=off",
        ]
        assert main(["train", "--data", str(data), "--out", str(folder / "run"), *TINY, *options]) == 0
    finally:
        mp.undo()
    return folder / "run"


def test_a_run_trains_samples_and_draws_attention(run: Path, tmp_path: Path, cli) -> None:
    ckpt = load_checkpoint(run / "best.pt")
    assert ckpt["config"]["model"]["attn_only"] is True
    assert not [k for k in ckpt["model"] if ".mlp." in k or ".ln_2." in k]
    results = json.loads((run / "results.json").read_text())
    assert results["val_loss_full"] < math.log(len(ckpt["tokenizer"]["chars"])) - 0.3  # it learned
    s = cli("sample", run, "--max-new-tokens", "40", "--prompt", "the ", "--device", "cpu")
    assert s.code == 0 and s.out.startswith("the ") and len(s.out) >= 44
    a = cli("attention", run, "--text", "the king the king", "--out", tmp_path / "att.png", "--device", "cpu")
    assert a.code == 0 and (tmp_path / "att.png").stat().st_size > 1000
    loaded = minigpt.load(run, device="cpu")
    assert loaded.config.model.attn_only and loaded.sample("KING", max_new_tokens=20, temperature=0).startswith("KING")


@pytest.mark.slow  # an ONNX export (7 s on 2 cores): CI runs it in its slow step
def test_onnx_export_computes_the_same_logits(run: Path, tmp_path: Path, cli) -> None:
    assert cli("export", run, tmp_path / "onnx", "--format", "onnx").code == 0
    loaded = load_model(run, CPU)
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array([loaded.tokenizer.encode(make_text(100, seed=s)[:16]) for s in (1, 2)], dtype=np.int64)
    (logits,) = session.run(["logits"], {"input_ids": ids})
    with torch.no_grad():
        ours = loaded.model(torch.from_numpy(ids))[0].numpy()
    np.testing.assert_allclose(logits, ours, atol=1e-4, rtol=0)


def test_hf_export_is_refused_with_one_line_and_nothing_written(run: Path, tmp_path: Path, cli) -> None:
    line = one_error_line(cli("export", run, tmp_path / "hf"))
    assert "model.attn_only is true" in line and "attention-only blocks" in line and "--format onnx" in line
    assert not (tmp_path / "hf").exists() and list(tmp_path.iterdir()) == []
