from __future__ import annotations

import math

import pytest
import torch

from minigpt.config.schema import ModelConfig
from minigpt.model import GPT, KVCache

from .helpers import TINY_MODEL, tiny_model

CFG = ModelConfig(**TINY_MODEL, dropout=0.0)
V = 20


def model(cfg: ModelConfig = CFG, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(cfg, V).eval()


def test_shapes_and_loss() -> None:
    m = model()
    idx = torch.randint(V, (3, 16))
    logits, loss = m(idx)
    assert logits.shape == (3, 16, V) and loss is None
    logits, loss = m(idx, idx)
    assert loss is not None and loss.shape == ()


def test_causal_future_does_not_change_the_past() -> None:
    m = model()
    idx = torch.randint(V, (1, 16))
    changed = idx.clone()
    t = 7
    changed[0, t + 1] = (idx[0, t + 1] + 1) % V
    a, _ = m(idx)
    b, _ = m(changed)
    assert torch.allclose(a[0, : t + 1], b[0, : t + 1], atol=1e-6)
    assert not torch.allclose(a[0, t + 1], b[0, t + 1])


def test_initial_loss_is_close_to_uniform() -> None:
    m = model()
    idx = torch.randint(V, (8, 16))
    _, loss = m(idx, torch.randint(V, (8, 16)))
    assert abs(loss.item() - math.log(V)) < 0.1


def test_head_is_tied_to_the_token_embedding() -> None:
    m = model()
    assert m.lm_head.weight is m.wte.weight
    assert m.num_params(non_embedding=False) == sum(p.numel() for p in m.parameters())


def test_residual_projections_use_scaled_init() -> None:
    cfg = ModelConfig(n_layer=8, n_head=2, n_embd=64, block_size=16)
    m = model(cfg)
    proj = m.blocks[0].attn.c_proj.weight.std().item()
    other = m.blocks[0].attn.c_attn.weight.std().item()
    assert proj == pytest.approx(0.02 / math.sqrt(16), rel=0.2)
    assert other == pytest.approx(0.02, rel=0.2)


def test_overfits_one_batch() -> None:
    torch.manual_seed(0)
    m = GPT(CFG, V)
    idx = torch.randint(V, (4, 16))
    targets = torch.randint(V, (4, 16))
    opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
    for _ in range(150):
        _, loss = m(idx, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.2


def test_kv_cache_matches_full_forward() -> None:
    m = model()
    idx = torch.randint(V, (2, 16))
    full, _ = m(idx)
    cache = KVCache(CFG, 2, 16, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        first, _ = m(idx[:, :5], cache=cache)  # prefill 5 positions
        assert torch.allclose(first[:, 0], full[:, 4], atol=1e-5)
        two, _ = m(idx[:, 5:7], cache=cache)  # 2 more at once (explicit mask path)
        assert torch.allclose(two[:, 0], full[:, 6], atol=1e-5)
        for t in range(7, 16):  # then one at a time
            step, _ = m(idx[:, t : t + 1], cache=cache)
            assert torch.allclose(step[:, 0], full[:, t], atol=1e-5)
    assert cache.length == 16


def test_too_long_input_is_refused() -> None:
    with pytest.raises(AssertionError, match="exceeds block_size"):
        model()(torch.zeros((1, 17), dtype=torch.long))


def test_dropout_only_in_training_mode() -> None:
    m = tiny_model(V, 0, dropout=0.5)
    idx = torch.randint(V, (2, 16))
    assert torch.equal(m(idx)[0], m(idx)[0])  # eval: deterministic
    m.train()
    assert not torch.equal(m(idx)[0], m(idx)[0])
