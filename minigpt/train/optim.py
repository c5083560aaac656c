"""AdamW for CPU (and MPS) training.

The update is torch.optim.AdamW's, op for op (decoupled weight decay, bias-corrected moments), and
a test holds the two to the same numbers. It exists for start-up time: the first use of any
torch.optim optimizer imports torch._dynamo, which costs about 6 s on a 2-core machine before the
first step, a tenth of a one-minute CPU run. The update itself is torch's fused AdamW kernel
(`torch._fused_adamw_`, the one behind `torch.optim.AdamW(fused=True)`, which has a CPU
implementation): one vectorised pass over each parameter, its gradient and both moments, where the
foreach formulation makes eight passes. On the reference recipe that is 0.75 ms a step instead of
3.7 ms. Where the fused kernel is missing (an older torch, another device) the same update runs as
foreach operations. On CUDA the trainer uses torch.optim.AdamW(fused=True) instead. The state dict has
torch.optim.AdamW's layout, so checkpoints move between the two.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from minigpt.config.schema import Config


class AdamW:
    """The subset of the torch.optim.Optimizer interface the trainer uses."""

    def __init__(
        self,
        groups: Iterable[dict[str, Any]],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.01,
    ):
        self.param_groups: list[dict[str, Any]] = []
        for group in groups:
            self.param_groups.append(
                {
                    "params": list(group["params"]),
                    "lr": lr,
                    "betas": betas,
                    "eps": eps,
                    "weight_decay": group.get("weight_decay", weight_decay),
                    "amsgrad": False,
                    "maximize": False,
                    "foreach": None,
                    "capturable": False,
                    "differentiable": False,
                    "fused": None,
                    "decoupled_weight_decay": True,
                }
            )
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}
        self.fused = hasattr(torch, "_fused_adamw_")  # cleared if the kernel turns out to be missing

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
            grads = [p.grad for p in params]
            states = [self._state_of(p) for p in params]
            exp_avgs = [s["exp_avg"] for s in states]
            exp_avg_sqs = [s["exp_avg_sq"] for s in states]
            steps = [s["step"] for s in states]
            torch._foreach_add_(steps, 1)
            if self.fused:
                try:
                    torch._fused_adamw_(
                        params, grads, exp_avgs, exp_avg_sqs, [], steps, lr=lr, beta1=beta1, beta2=beta2,
                        weight_decay=wd, eps=eps, amsgrad=False, maximize=False,
                    )  # fmt: skip
                    continue
                except (RuntimeError, NotImplementedError):  # no kernel for this device or dtype
                    self.fused = False
            self._foreach_update(params, grads, exp_avgs, exp_avg_sqs, [t.item() for t in steps], group)

    @staticmethod
    def _foreach_update(
        params: list[torch.Tensor],
        grads: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
        steps: list[float],
        group: dict[str, Any],
    ) -> None:
        """The same update as the fused kernel, as foreach operations (torch.optim's formulation)."""
        lr, (beta1, beta2), eps, wd = group["lr"], group["betas"], group["eps"], group["weight_decay"]
        if wd != 0:
            torch._foreach_mul_(params, 1 - lr * wd)
        torch._foreach_lerp_(exp_avgs, grads, 1 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1 - beta2)
        step_sizes = [-(lr / (1 - beta1**t)) for t in steps]
        bias2_sqrt = [(1 - beta2**t) ** 0.5 for t in steps]
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_div_(denom, bias2_sqrt)
        torch._foreach_add_(denom, eps)
        torch._foreach_addcdiv_(params, exp_avgs, denom, step_sizes)

    def _state_of(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        state = self.state.get(p)
        if state is None:
            state = {
                "step": torch.tensor(0.0, dtype=torch.float32, device=p.device),  # where the fused kernel wants it
                "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format),
            }
            self.state[p] = state
        return state

    def _indexed(self) -> list[torch.Tensor]:
        return [p for group in self.param_groups for p in group["params"]]

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: parameters numbered in group order."""
        index = {id(p): i for i, p in enumerate(self._indexed())}
        groups = []
        for group in self.param_groups:
            saved = {k: v for k, v in group.items() if k != "params"}
            saved["params"] = [index[id(p)] for p in group["params"]]
            groups.append(saved)
        state = {index[id(p)]: dict(s) for p, s in self.state.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or any(
            len(g["params"]) != len(mine["params"]) for g, mine in zip(groups, self.param_groups)
        ):
            raise ValueError("optimizer state does not match the model's parameter groups")
        params = self._indexed()
        for saved, mine in zip(groups, self.param_groups):
            for key in ("lr", "betas", "eps", "weight_decay"):
                if key in saved:
                    mine[key] = tuple(saved[key]) if key == "betas" else saved[key]
        self.state = {}
        for i, s in state_dict["state"].items():
            p = params[int(i)]
            self.state[p] = {
                "step": torch.as_tensor(s["step"], dtype=torch.float32).to(p.device).clone(),
                "exp_avg": s["exp_avg"].to(p.device, p.dtype).clone(),
                "exp_avg_sq": s["exp_avg_sq"].to(p.device, p.dtype).clone(),
            }


def build_optimizer(model: torch.nn.Module, cfg: Config, device: torch.device) -> Any:
    """AdamW with weight decay on matrices (Linear weights, embeddings) only, fused where supported;
    with optim.optimizer=muon, Muon on the blocks' matrices and this AdamW on the rest (minigpt/train/muon.py)."""
    from minigpt.train.muon import MuonAdamW, split_muon

    o = cfg.optim
    muon, params = split_muon(model.named_parameters()) if o.optimizer == "muon" else ([], list(model.parameters()))
    params = [p for p in params if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": o.weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    betas = (o.beta1, o.beta2)
    if device.type == "cuda":
        adam: torch.optim.AdamW | AdamW = torch.optim.AdamW(groups, lr=o.lr, betas=betas, fused=True)
    else:
        adam = AdamW(groups, lr=o.lr, betas=betas)  # same update, ~6 s less start-up (see above)
    if o.optimizer != "muon":
        return adam
    return MuonAdamW(muon, adam, o.lr, o.muon_lr / o.lr if o.lr > 0 else 0.0, o.muon_momentum)


def load_optimizer_state(optimizer: torch.optim.Optimizer | AdamW, saved: dict[str, Any]) -> None:
    """Load a saved optimizer state, keeping the live optimizer's settings.

    torch's Optimizer.load_state_dict takes every group setting from the saved groups, so a
    checkpoint written by the CPU optimizer (fused: None) would turn a CUDA run's fused AdamW into
    the foreach one, leave its `step` tensors on the CPU and, under fp16, trip GradScaler's
    found_inf path. The settings belong to this run's device (and its config, which a resume may
    not change); only the state tensors come from the checkpoint."""
    live = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    groups = [{**group, **settings} for group, settings in zip(saved["param_groups"], live)]
    optimizer.load_state_dict({**saved, "param_groups": groups})
