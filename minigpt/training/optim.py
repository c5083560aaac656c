"""The optimizers, in torch.optim's state-dict layout (design.md, "Optimizers"): AdamW, torch's update op for op
(a test holds it), and Muon on the blocks' matrices beside it (`optim.optimizer=muon`). Speed trick: AdamW
imports no torch._dynamo, so a run starts seconds sooner (design.md, "Optimizers"); benchmark
`scripts/bench.py tricks`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from minigpt.runtime.device import full_float32

if TYPE_CHECKING:
    from minigpt.config.schema import Config


class Optimizer(torch.optim.Optimizer):
    """The shared part of AdamW and MuonAdamW: a torch.optim.Optimizer by type, which overrides every
    method a run calls. It never calls torch's `__init__`, whose first parameter group imports
    torch._dynamo (seconds in a fresh process; design.md, "Optimizers")."""

    param_groups: list[dict[str, Any]]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.zero_()


class AdamW(Optimizer):
    """torch.optim.AdamW's update (fused kernel, or foreach where it is missing)."""

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
                        params,
                        grads,
                        exp_avgs,
                        exp_avg_sqs,
                        [],
                        steps,
                        lr=lr,
                        beta1=beta1,
                        beta2=beta2,
                        weight_decay=wd,
                        eps=eps,
                        amsgrad=False,
                        maximize=False,
                    )
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


# the quintic iteration's coefficients, tuned to push singular values towards 1 fast (Jordan 2024)
NS_COEFFS = (3.4445, -4.7750, 2.0315)
# one (a, b, c) per iteration: Polar Express (Amsel et al. 2025) less its second step (docs/lab/benchmarks.md)
NS_SCHEDULE: tuple[tuple[float, float, float], ...] = (
    (8.156554524902461, -22.48329292557795, 15.878769915207462),
    (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
    (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
    (2.3465413258596377, -1.7097828382687081, 0.42323551169305323),
)


def orthogonalize(
    g: torch.Tensor, dtype: torch.dtype = torch.bfloat16, schedule: tuple[tuple[float, float, float], ...] = NS_SCHEDULE
) -> torch.Tensor:
    """An approximately semi-orthogonal matrix (singular values ~0.7 to 1.2) with g's singular vectors, for each
    matrix of a (batch, rows, cols) stack, computed in `dtype`, returned in float32; one iteration per (a, b, c)
    of `schedule`. A float32 matrix over 1.5 times as long as short takes the Gram route (same numbers, fewer FLOPs)."""
    x = g.to(dtype)
    wide = g.size(-2) > g.size(-1)
    if wide:
        x = x.mT
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)  # spectral norm <= Frobenius <= 1
    if dtype == torch.float32 and 2 * x.size(-1) > 3 * x.size(-2):
        x = gram_newton_schulz(x, schedule)
    else:
        x = x.contiguous()
        for a, b, c in schedule:
            s = torch.bmm(x, x.mT)
            x = torch.baddbmm(x, torch.baddbmm(s, s, s, beta=b, alpha=c), x, beta=a)  # a x + (b s + c s^2) x
    if wide:
        x = x.mT
    return x.float()


def gram_newton_schulz(x: torch.Tensor, schedule: tuple[tuple[float, float, float], ...]) -> torch.Tensor:
    """The Newton-Schulz iterations of `orthogonalize` on short, long matrices x (B, m, n), m < n, carried out
    on their (m, m) Gram matrices (design.md, "Optimizers"): the direct route's numbers up to float32 rounding;
    float32 only (bfloat16 loses too much)."""
    a_mat = torch.bmm(x, x.mT)  # (B, m, m)
    p_mat: torch.Tensor | None = None
    last = len(schedule) - 1
    for i, (a, b, c) in enumerate(schedule):
        q = torch.baddbmm(a_mat, a_mat, a_mat, beta=b, alpha=c)  # b A + c A^2
        q.diagonal(dim1=-2, dim2=-1).add_(a)  # + a I
        p_mat = q if p_mat is None else torch.bmm(p_mat, q)
        if i < last:
            a_mat = torch.bmm(torch.bmm(q, a_mat), q)
    assert p_mat is not None, "an empty Newton-Schulz schedule"
    return torch.bmm(p_mat, x)  # (B, m, n)


def muon_views(name: str, p: torch.Tensor) -> torch.Tensor:
    """The matrices Muon orthogonalizes for one parameter: attention's fused q, k, v weight is
    three square matrices, every other weight is itself."""
    if name.endswith("attn.c_attn.weight"):
        return p.view(3, p.size(1), p.size(1))
    return p.unsqueeze(0)


class MuonAdamW(Optimizer):
    """Muon on the block matrices, AdamW on the rest: param_groups[0] is Muon's, then AdamW's in its order;
    the state dict holds both in torch.optim's layout, parameters numbered in group order."""

    def __init__(
        self,
        muon_params: list[tuple[str, torch.Tensor]],
        adam: AdamW | torch.optim.AdamW,
        lr: float,
        lr_scale: float,
        momentum: float = 0.95,
        ns_dtype: torch.dtype = torch.bfloat16,
        weight_decay: float = 0.0,
    ) -> None:
        self.adam, self.ns_dtype = adam, ns_dtype
        self.muon_group: dict[str, Any] = {
            "params": [p for _, p in muon_params],
            "names": [n for n, _ in muon_params],
            "lr": lr * lr_scale,
            "lr_scale": lr_scale,
            "momentum": momentum,
            "nesterov": True,
            "weight_decay": weight_decay,
        }
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = {}

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return [self.muon_group, *self.adam.param_groups]

    @torch.no_grad()
    def step(self) -> None:
        group = self.muon_group
        lr, momentum = group["lr"], group["momentum"]
        live = [(name, p) for name, p in zip(group["names"], group["params"]) if p.grad is not None]
        if live:
            grads = [p.grad for _, p in live]
            states = [self.state.setdefault(p, {"momentum_buffer": torch.zeros_like(p)}) for _, p in live]
            bufs = [state["momentum_buffer"] for state in states]
            # one foreach operation each over every matrix, not two per matrix
            torch._foreach_lerp_(bufs, grads, 1 - momentum)
            updates = torch._foreach_lerp(grads, bufs, momentum)  # Nesterov: the gradient pushed on along the momentum
            if group["weight_decay"]:  # decoupled, as AdamW's: the weights shrink by lr * wd before the step
                torch._foreach_mul_([p for _, p in live], 1 - lr * group["weight_decay"])
            by_shape: dict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = {}
            for (name, p), update in zip(live, updates):
                for view, upd in zip(muon_views(name, p), muon_views(name, update)):
                    by_shape.setdefault(tuple(view.shape), []).append((view, upd))
            for (rows, cols), pairs in by_shape.items():  # one batched orthogonalization per shape
                with full_float32():  # the float32 iteration (Gram route included) is not run in TF32
                    ortho = orthogonalize(torch.stack([u for _, u in pairs]), dtype=self.ns_dtype)
                views = [view for view, _ in pairs]
                torch._foreach_add_(
                    views,
                    [o.to(v.dtype) for v, o in zip(views, ortho.unbind())],
                    alpha=-lr * max(1.0, rows / cols) ** 0.5,
                )
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
        for key in ("lr", "momentum", "weight_decay"):
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
        if p.dim() == 2 and name.startswith("blocks."):  # the blocks' weight matrices
            muon.append((name, p))
        else:
            rest.append(p)
    return muon, rest


def build_optimizer(
    model: torch.nn.Module, cfg: Config, device: torch.device, dtype: torch.dtype = torch.float32
) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices (Linear weights, embeddings) only, fused where supported;
    with optim.optimizer=muon, Muon on the blocks' matrices (Newton-Schulz in bf16 when the run trains
    in `dtype` bf16, else float32) and this AdamW on the rest (above)."""
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
        adam = AdamW(groups, lr=o.lr, betas=betas)  # same update, less start-up (see above)
    if o.optimizer != "muon":
        return adam
    ns_dtype = torch.bfloat16 if dtype == torch.bfloat16 else torch.float32
    muon_lr_scale = o.muon_lr / o.lr if o.lr > 0 else 0.0
    return MuonAdamW(muon, adam, o.lr, muon_lr_scale, o.muon_momentum, ns_dtype, o.muon_weight_decay)


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Load a saved optimizer state, keeping the live optimizer's group settings (they belong to this run's
    device and config; design.md, "Optimizers"): only the state tensors come from the checkpoint."""
    live = [{k: v for k, v in group.items() if k != "params"} for group in optimizer.param_groups]
    groups = [{**group, **settings} for group, settings in zip(saved["param_groups"], live)]
    optimizer.load_state_dict({**saved, "param_groups": groups})
