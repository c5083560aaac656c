"""Muon (optim.optimizer=muon): the orthogonalization, which parameters it takes, the size of its
update, and an exact resume through its state dict."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from minigpt.config.schema import Config, ModelConfig, OptimConfig
from minigpt.model import GPT
from minigpt.training import optim
from minigpt.training.loop import train_step
from minigpt.training.optim import MuonAdamW, build_optimizer, orthogonalize

from .helpers import make_trainer, weights

CPU = torch.device("cpu")


def test_orthogonalize_keeps_the_singular_vectors_and_flattens_the_values() -> None:
    torch.manual_seed(0)
    for rows, cols in [(32, 32), (96, 24), (24, 96)]:
        u, _ = torch.linalg.qr(torch.randn(rows, rows))
        v, _ = torch.linalg.qr(torch.randn(cols, cols))
        k = min(rows, cols)
        s = torch.logspace(-1, 1, k)  # a hundredfold between the smallest and largest
        g = u[:, :k] @ torch.diag(s) @ v[:, :k].T
        o = orthogonalize(g.unsqueeze(0))[0]
        assert (orthogonalize(g.unsqueeze(0), dtype=torch.float32)[0] - o).abs().max() < 0.05
        core = u[:, :k].T @ o @ v[:, :k]  # diagonal if o has g's singular vectors
        off = core - torch.diag(torch.diagonal(core))
        assert off.norm() / core.norm() < 0.2, (rows, cols)  # ~0.1 in bfloat16; ~1 for unrelated vectors
        assert torch.diagonal(core).min() > 0.5 and torch.diagonal(core).max() < 1.3, (rows, cols)
        values = torch.linalg.svdvals(o)[:k]
        assert values.min() > 0.5 and values.max() < 1.3, (rows, cols, values)


def test_the_gram_route_gives_the_direct_iterations_numbers(monkeypatch) -> None:
    """Long float32 matrices iterate on their Gram matrices: the same result as the three products an
    iteration on the matrix itself, up to float32 rounding, for both orientations and any schedule."""
    torch.manual_seed(0)
    for shape in [(3, 24, 96), (2, 128, 32)]:
        g = torch.randn(*shape)
        for schedule in (optim.NS_SCHEDULE, (optim.NS_COEFFS,) * 5):
            x = g.mT if shape[1] > shape[2] else g
            x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
            for a, b, c in schedule:  # the direct iteration, written out
                s = x @ x.mT
                x = a * x + (b * s + c * s @ s) @ x
            direct = x.mT if shape[1] > shape[2] else x
            got = orthogonalize(g, dtype=torch.float32, schedule=schedule)
            assert got.shape == g.shape
            assert (got - direct).abs().max() < 2e-5 * direct.abs().max(), (shape, len(schedule))
    calls = []
    real = optim.gram_newton_schulz
    monkeypatch.setattr(optim, "gram_newton_schulz", lambda x, schedule: calls.append(x.shape) or real(x, schedule))
    orthogonalize(torch.randn(1, 16, 64), dtype=torch.float32)  # long: the Gram route
    orthogonalize(torch.randn(1, 16, 20), dtype=torch.float32)  # nearly square: direct
    orthogonalize(torch.randn(1, 16, 64), dtype=torch.bfloat16)  # bfloat16: direct
    assert calls == [torch.Size([1, 16, 64])]


def test_newton_schulz_runs_in_bfloat16_only_where_the_run_trains_in_it(monkeypatch) -> None:
    """The run's decided dtype, not a probe of its own (ranks and reruns agree); emulated bf16 products
    (an AVX2-only CPU, where auto trains in float32) made a step of the four-minute recipe 15x slower."""
    cfg = Config(model=ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8), optim=OptimConfig(optimizer="muon"))
    model = GPT(cfg.model, 40)
    seen = []
    real = optim.orthogonalize
    monkeypatch.setattr(optim, "orthogonalize", lambda g, dtype: seen.append(dtype) or real(g, dtype=dtype))
    for trains, dtype in ((torch.float32, torch.float32), (torch.float16, torch.float32), (torch.bfloat16,) * 2):
        opt = build_optimizer(model, cfg, CPU, trains)
        assert opt.ns_dtype == dtype
        model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))[1].backward()
        seen.clear()
        opt.step()
        assert seen and set(seen) == {dtype}
        opt.zero_grad()


def test_muon_takes_the_block_matrices_and_adamw_the_rest() -> None:
    cfg = Config(model=ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8), optim=OptimConfig(optimizer="muon"))
    model = GPT(cfg.model, 40)
    opt = build_optimizer(model, cfg, CPU)
    assert isinstance(opt, MuonAdamW)
    names = {id(p): n for n, p in model.named_parameters()}
    muon = [names[id(p)] for p in opt.param_groups[0]["params"]]
    adam = [names[id(p)] for g in opt.param_groups[1:] for p in g["params"]]
    assert sorted(muon) == sorted(n for n, p in model.named_parameters() if n.startswith("blocks.") and p.dim() == 2)
    assert "wte.weight" in adam and not any(n.startswith("blocks.") and "weight" in n and "ln" not in n for n in adam)
    assert sorted(muon + adam) == sorted(names.values())  # every parameter once (the tied head is wte)
    assert opt.param_groups[0]["lr"] == pytest.approx(cfg.optim.muon_lr)


def test_one_muon_step_moves_each_matrix_by_an_orthogonal_step_of_its_learning_rate() -> None:
    cfg = Config(
        model=ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=8),
        optim=OptimConfig(optimizer="muon", muon_lr=0.01),
    )
    torch.manual_seed(0)
    model = GPT(cfg.model, 40)
    opt = build_optimizer(model, cfg, CPU)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()
    after = {n: p.detach() for n, p in model.named_parameters()}
    fc = after["blocks.0.mlp.c_fc.weight"] - before["blocks.0.mlp.c_fc.weight"]  # 128 x 32: 2x the step
    proj = after["blocks.0.attn.c_proj.weight"] - before["blocks.0.attn.c_proj.weight"]
    q = (after["blocks.0.attn.c_attn.weight"] - before["blocks.0.attn.c_attn.weight"])[:32]  # q on its own
    for delta, scale in [(fc, 2.0), (proj, 1.0), (q, 1.0)]:
        values = torch.linalg.svdvals(delta)
        assert values.max() < 0.01 * scale * 1.3 and values.median() > 0.01 * scale * 0.5, values
    # AdamW's first step moves every entry by lr (sign of the gradient), whatever the gradient's size
    wte = after["wte.weight"] - before["wte.weight"]
    assert wte.abs().mean() == pytest.approx(cfg.optim.lr, rel=0.05)


def test_muon_weight_decay_shrinks_the_matrices_by_lr_times_wd_before_the_step() -> None:
    def one_step(wd: float) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """the weights before one Muon step, and what the step added to each"""
        cfg = Config(
            model=ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=8),
            optim=OptimConfig(optimizer="muon", muon_lr=0.01, muon_weight_decay=wd),
        )
        torch.manual_seed(0)
        model = GPT(cfg.model, 40)
        opt = build_optimizer(model, cfg, CPU)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        torch.manual_seed(1)
        for p in model.parameters():
            p.grad = torch.randn_like(p)
        opt.step()
        return before, {n: p.detach() - before[n] for n, p in model.named_parameters()}

    (before, plain), (_, decayed) = one_step(0.0), one_step(0.5)
    name = "blocks.0.mlp.c_fc.weight"
    weights = before[name]
    # the same orthogonal step, plus -lr * wd * p (0.01 * 0.5 of the weights); AdamW's part is not touched
    assert torch.allclose(decayed[name], plain[name] - 0.01 * 0.5 * weights, atol=1e-6)
    assert not torch.allclose(decayed[name], plain[name], atol=1e-4)
    assert torch.equal(decayed["wte.weight"], plain["wte.weight"])


def test_a_muon_run_resumes_exactly(text_file: Path, tmp_path: Path) -> None:
    first = make_trainer(text_file, tmp_path / "a", "optim.optimizer=muon")
    for _ in range(3):
        train_step(first)
    snapshot = copy.deepcopy(first.state_dict())
    ahead = [train_step(first).loss.item() for _ in range(2)]
    second = make_trainer(text_file, tmp_path / "b", "optim.optimizer=muon")
    second.load_state_dict(snapshot)
    assert [train_step(second).loss.item() for _ in range(2)] == ahead
    expected, got = weights(first), weights(second)
    assert all(torch.equal(expected[k], got[k]) for k in expected)
    assert math.isfinite(ahead[-1])


def test_adamw_checkpoint_does_not_load_into_muon(text_file: Path, tmp_path: Path) -> None:
    adam = make_trainer(text_file, tmp_path / "a", "optim.optimizer=adamw")
    train_step(adam)
    muon = make_trainer(text_file, tmp_path / "b", "optim.optimizer=muon")
    with pytest.raises(ValueError, match="parameter groups"):
        muon.optimizer.load_state_dict(adam.optimizer.state_dict())


def test_zero_grad_clears_both_optimizers_parameters() -> None:
    cfg = Config(model=ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8), optim=OptimConfig(optimizer="muon"))
    model = GPT(cfg.model, 40)
    opt = build_optimizer(model, cfg, CPU)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
