"""Muon for the transformer blocks' weight matrices, AdamW for everything else (`optim.optimizer=muon`).

Muon (Keller Jordan, 2024; the optimizer of the speed-record GPT trainers) keeps a Nesterov
momentum of each matrix's gradient and replaces the update by its nearest semi-orthogonal matrix,
found with five Newton-Schulz iterations in bfloat16: every direction of the update moves by the
same amount, where Adam's would be dominated by a few. It applies to the 2-D weights inside the
blocks (attention q, k and v, each its own square matrix; the attention and MLP projections).
Embeddings, the tied head, norms and biases stay with AdamW, as in the speed-record trainers.

Its step size is `optim.muon_lr` at the peak, scaled by the same schedule as `optim.lr` (the
trainer sets every group's lr to schedule x the group's `lr_scale`). A matrix with more rows than
columns gets a sqrt(rows / cols) larger step, so that its update's RMS per entry matches a square one's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from minigpt.train.optim import AdamW

# the quintic iteration's coefficients, tuned to push singular values towards 1 fast (Jordan 2024)
NS_COEFFS = (3.4445, -4.7750, 2.0315)


def orthogonalize(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """An approximately semi-orthogonal matrix (singular values ~0.7 to 1.2) with g's singular
    vectors, for each matrix of a (batch, rows, cols) stack; returned in float32. Each iteration is
    three batched matrix products with the scalings folded in (baddbmm): on a 2-core CPU the
    separate bfloat16 multiplies and adds took longer than the products."""
    a, b, c = NS_COEFFS
    x = g.to(torch.bfloat16)
    wide = g.size(-2) > g.size(-1)
    if wide:
        x = x.mT
    x = (x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)).contiguous()  # spectral norm <= Frobenius <= 1
    for _ in range(steps):
        s = torch.bmm(x, x.mT)
        x = torch.baddbmm(x, torch.baddbmm(s, s, s, beta=b, alpha=c), x, beta=a)  # a x + (b s + c s^2) x
    if wide:
        x = x.mT
    return x.float()


def muon_views(name: str, p: torch.Tensor) -> torch.Tensor:
    """The matrices Muon orthogonalizes for one parameter: attention's fused q, k, v weight is
    three square matrices, every other weight is itself."""
    if name.endswith("attn.c_attn.weight"):
        return p.view(3, p.size(1), p.size(1))
    return p.unsqueeze(0)


def is_muon_param(name: str, p: torch.Tensor) -> bool:
    """Weight matrices inside the transformer blocks."""
    return p.dim() == 2 and name.startswith("blocks.")


class MuonAdamW:
    """Muon on the block matrices, the project's AdamW (fused on CUDA: torch's) on the rest.

    param_groups[0] is Muon's; the rest are AdamW's, in the order the AdamW optimizer keeps them.
    The state dict holds both in torch.optim's layout, parameters numbered in group order."""

    def __init__(self, muon_params: list[tuple[str, torch.Tensor]], adam: AdamW | torch.optim.AdamW,
                 lr: float, lr_scale: float, momentum: float = 0.95) -> None:  # fmt: skip
        self.adam = adam
        self.muon_group: dict[str, Any] = {
            "params": [p for _, p in muon_params], "names": [n for n, _ in muon_params],
            "lr": lr * lr_scale, "lr_scale": lr_scale, "momentum": momentum, "nesterov": True,
        }  # fmt: skip
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [self.muon_group, *self.adam.param_groups]

    zero_grad = AdamW.zero_grad  # it walks self.param_groups: Muon's group and AdamW's

    @torch.no_grad()
    def step(self) -> None:
        group = self.muon_group
        lr, momentum = group["lr"], group["momentum"]
        by_shape: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
        for name, p in zip(group["names"], group["params"]):
            if p.grad is None:
                continue
            buf = self.state.setdefault(p, {"momentum_buffer": torch.zeros_like(p)})["momentum_buffer"]
            buf.lerp_(p.grad, 1 - momentum)
            update = p.grad.lerp(buf, momentum)  # Nesterov: the gradient pushed on along the momentum
            for view, upd in zip(muon_views(name, p), muon_views(name, update)):
                by_shape.setdefault(tuple(view.shape), []).append((view, upd))
        for (rows, cols), pairs in by_shape.items():  # one batched orthogonalization per shape
            ortho = orthogonalize(torch.stack([u for _, u in pairs]))
            scale = -lr * max(1.0, rows / cols) ** 0.5
            for (view, _), o in zip(pairs, ortho):
                view.add_(o.to(view.dtype), alpha=scale)
        self.adam.step()

    def state_dict(self) -> dict[str, Any]:
        adam = self.adam.state_dict()
        n = len(self.muon_group["params"])
        saved_group = {k: v for k, v in self.muon_group.items() if k not in ("params", "names")}
        groups = [{**saved_group, "params": list(range(n))}]
        groups += [{**g, "params": [i + n for i in g["params"]]} for g in adam["param_groups"]]
        state: dict[int, Any] = {
            i: dict(self.state[p]) for i, p in enumerate(self.muon_group["params"]) if p in self.state
        }
        state.update({int(i) + n: s for i, s in adam["state"].items()})
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        n = len(self.muon_group["params"])
        if len(groups) != len(self.param_groups) or len(groups[0]["params"]) != n:
            raise ValueError("optimizer state does not match the model's parameter groups")
        for key in ("lr", "momentum"):
            self.muon_group[key] = groups[0].get(key, self.muon_group[key])
        self.state = {}
        for i, p in enumerate(self.muon_group["params"]):
            if i in state_dict["state"]:
                self.state[p] = {
                    "momentum_buffer": state_dict["state"][i]["momentum_buffer"].to(p.device, p.dtype).clone()
                }
        adam_groups = [{**g, "params": [i - n for i in g["params"]]} for g in groups[1:]]
        adam_state = {int(i) - n: s for i, s in state_dict["state"].items() if int(i) >= n}
        self.adam.load_state_dict({"state": adam_state, "param_groups": adam_groups})


def split_muon(named: Iterable[tuple[str, torch.Tensor]]) -> tuple[list[tuple[str, torch.Tensor]], list[torch.Tensor]]:
    """(Muon's named parameters, the rest), trainable parameters only, each tied tensor once."""
    muon, rest, seen = [], [], set()
    for name, p in named:
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        if is_muon_param(name, p):
            muon.append((name, p))
        else:
            rest.append(p)
    return muon, rest
