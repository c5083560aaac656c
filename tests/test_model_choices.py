"""The speed-record options of the model (model.qk_norm, mlp_act, zero_init_proj, value_embeds,
logit_softcap): what each computes, that each is off by default, that they hold the invariants
every model holds (causality, the KV cache, the parameter count), where the optimizer puts their
parameters, and that a run trains, samples and draws attention with all of them on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from minigpt.checkpoint import Checkpoint
from minigpt.config.schema import Config, ModelConfig, OptimConfig
from minigpt.data.tokenizer import CharTokenizer
from minigpt.infer.decode import generate
from minigpt.infer.loading import load_model
from minigpt.model import GPT, KVCache, parameter_count
from minigpt.training.optim import build_optimizer

from .helpers import TINY, TINY_MODEL, make_text, tiny_model, trained_like

V = 20
BASE = TINY_MODEL
ALL = {"qk_norm": True, "mlp_act": "relu2", "zero_init_proj": True, "value_embeds": True, "logit_softcap": 5.0}
CPU = torch.device("cpu")


def model(seed: int = 0, **options) -> GPT:
    return tiny_model(V, seed, **options)


def test_every_option_is_off_by_default() -> None:
    cfg = ModelConfig()
    assert (cfg.qk_norm, cfg.mlp_act, cfg.zero_init_proj, cfg.value_embeds, cfg.logit_softcap) == (
        False,
        "gelu",
        False,
        False,
        0.0,
    )
    idx = torch.randint(V, (2, 16))
    explicit = {"qk_norm": False, "mlp_act": "gelu", "zero_init_proj": False, "value_embeds": False, "logit_softcap": 0}
    assert torch.equal(model()(idx)[0], model(**explicit)(idx)[0])


def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys() -> None:
    idx = torch.randint(V, (2, 16))
    for on in (True, False):
        m = model(qk_norm=on)
        before = m(idx)[0]
        with torch.no_grad():
            for block in m.blocks:
                block.attn.c_attn.weight[: 2 * 32] *= 7.0  # the query and key rows, not the values
        after = m(idx)[0]
        assert torch.allclose(before, after, atol=1e-5) == on


def test_relu2_is_relu_squared() -> None:
    m = model(mlp_act="relu2")
    mlp, x = m.blocks[0].mlp, torch.randn(2, 5, 32)
    torch.testing.assert_close(mlp(x), mlp.c_proj(F.relu(mlp.c_fc(x)) ** 2))
    assert not torch.allclose(mlp(x), mlp.c_proj(F.gelu(mlp.c_fc(x))))


def test_zero_initialised_projections_start_every_block_as_the_identity_and_still_learn() -> None:
    m = model(zero_init_proj=True).train()
    projections = [p for n, p in m.named_parameters() if n.endswith("c_proj.weight")]
    assert len(projections) == 4 and all(torch.count_nonzero(p) == 0 for p in projections)
    idx, targets = torch.randint(V, (4, 16)), torch.randint(V, (4, 16))
    _, loss = m(idx, targets)
    assert abs(loss.item() - math.log(V)) < 0.1  # small random embeddings: about uniform
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in projections)


def test_the_soft_cap_bounds_every_logit_in_both_paths() -> None:
    m = trained_like(model(logit_softcap=2.0))
    with torch.no_grad():
        m.wte.weight.mul_(50)  # logits far past the cap without it
        idx = torch.randint(V, (2, 16))
        logits = m(idx)[0]
        assert logits.abs().max() <= 2.0 and logits.abs().max() > 1.9
        cache = KVCache(m.cfg, 2, 16, CPU, torch.float32)
        assert m(idx[:, :3], cache=cache)[0].abs().max() <= 2.0
        uncapped = model(logit_softcap=0.0)
        uncapped.load_state_dict(m.state_dict())
        assert uncapped(idx)[0].abs().max() > 10


def test_value_embeddings_are_counted_and_feed_the_values() -> None:
    for options in ({}, {"value_embeds": True}, ALL, {**ALL, "bias": True, "pos_emb": "learned", "norm": "post"}):
        cfg = ModelConfig(**BASE, **options)
        assert parameter_count(cfg, V) == sum(p.numel() for p in GPT(cfg, V).parameters()), options
    m = trained_like(model(value_embeds=True))
    idx = torch.randint(V, (1, 16))
    before = m(idx)[0]
    with torch.no_grad():
        m.value_embeds[1].weight[idx[0, 9]] += 1.0  # the value table of the token at position 9
    after = m(idx)[0]
    changed = (after - before).abs().amax(dim=-1)[0]  # (T,)
    assert changed[9:].min() > 0  # position 9 and later read that token's value
    assert changed[:9].max() == 0 or idx[0, :9].eq(idx[0, 9]).any()  # earlier ones only if they hold it too


@pytest.mark.parametrize("options", [ALL, {**ALL, "pos_emb": "learned", "norm": "post"}])
def test_all_options_keep_causality_and_the_kv_cache_exact(options: dict) -> None:
    m = trained_like(model(**options))
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
    maps = m.attention_maps(idx)  # the explicit attention path: rows of weights summing to 1
    assert maps.shape == (2, 2, 2, 16, 16) and torch.allclose(maps.sum(-1), torch.ones(2, 2, 2, 16))


def test_value_embeddings_and_mix_weights_go_to_adamw_without_decay() -> None:
    cfg = Config(model=ModelConfig(**BASE, value_embeds=True), optim=OptimConfig(optimizer="muon"))
    m = GPT(cfg.model, V)
    opt = build_optimizer(m, cfg, CPU)
    muon = {id(p) for p in opt.muon_group["params"]}
    decayed, plain = (opt.adam.param_groups[0]["params"], opt.adam.param_groups[1]["params"])
    for table in m.value_embeds:
        assert id(table.weight) not in muon and any(table.weight is p for p in decayed)
    for block in m.blocks:
        assert any(block.attn.ve_mix is p for p in plain) and id(block.attn.ve_mix) not in muon


def test_a_checkpoint_from_before_the_options_loads_with_them_off(tmp_path: Path) -> None:
    cfg = Config(model=ModelConfig(**BASE))
    m = GPT(cfg.model, V)
    saved = cfg.to_dict()
    for key in ALL:
        del saved["model"][key]  # as a checkpoint written before they existed
    tok = CharTokenizer.from_text("abcdefghijklmnopqrst")
    Checkpoint(model=m.state_dict(), config=saved, tokenizer=tok.to_dict(), data={}, step=3).save(tmp_path / "old.pt")
    loaded = load_model(tmp_path / "old.pt", CPU)
    assert loaded.config.model.qk_norm is False and loaded.config.model.logit_softcap == 0.0
    idx = torch.randint(V, (1, 16))
    assert torch.equal(loaded.model(idx)[0], m.eval()(idx)[0])


def test_a_run_with_every_option_trains_samples_and_draws_attention(tmp_path: Path, cli) -> None:
    data = tmp_path / "text.txt"
    data.write_text(make_text(5_000), encoding="utf-8")
    options = [
        "model.qk_norm=true",
        "model.mlp_act=relu2",
        "model.zero_init_proj=true",
        "model.value_embeds=true",
        "model.logit_softcap=10",
        "optim.optimizer=muon",
    ]
    run = tmp_path / "run"
    r = cli(
        "train",
        "--data",
        data,
        "--out",
        run,
        *TINY,
        *options,
        "train.max_steps=30",
        "train.eval_interval=30",
        "log.tensorboard=false",
        "log.progress=off",
    )
    assert r.code == 0, r.err
    results = json.loads((run / "results.json").read_text())
    assert results["val_loss_full"] < math.log(len(set(data.read_text()))) - 0.3  # it learned
    s = cli("sample", run, "--max-new-tokens", "40", "--prompt", "the ", "--device", "cpu")
    assert s.code == 0 and s.out.startswith("the ") and len(s.out) >= 44
    a = cli("attention", run, "--text", "the king", "--out", tmp_path / "att.png", "--device", "cpu")
    assert a.code == 0 and (tmp_path / "att.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("model.mlp_act=relu3", "model.mlp_act"),
        ("model.logit_softcap=-1", "model.logit_softcap"),
        ("model.qk_norm=maybe", "model.qk_norm"),
    ],
)
def test_bad_option_values_are_one_line_naming_the_key(override: str, named: str, tmp_path: Path, cli) -> None:
    r = cli("train", "--out", tmp_path / "run", *TINY, override)
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], r
    assert not (tmp_path / "run").exists()
