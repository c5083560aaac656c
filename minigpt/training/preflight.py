"""Will this training fit in memory? An estimate before the first step (16 bytes a parameter, 4 more
for DDP's gradient buckets and 2 for autocast's copies of the weights, plus the activations one
micro-batch keeps, by constants `scripts/bench.py memory` measures, as each device's attention kernels
keep them), so an impossible batch is one error line, not a silent SIGKILL."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from minigpt.config.schema import Config
from minigpt.model import parameter_count
from minigpt.runtime.device import log
from minigpt.runtime.memory import available_bytes, gb

# bytes an element takes in the activations that autograd keeps, per compute dtype
_ACT_BYTES_PER_TOKEN_LAYER = {torch.bfloat16: 60, torch.float16: 60, torch.float32: 68}  # x n_embd
_LOGIT_BYTES = {torch.bfloat16: 14, torch.float16: 14, torch.float32: 16}  # x vocab, per token
_ATTN_ONLY_SHARE = 0.58  # of those activations, what a block without its MLP keeps (model.attn_only)
_OVERHEAD = 1.15  # allocator slack and temporaries of the backward pass
_FIRST_STEP = 64 * 2**20  # workspaces and thread buffers the first steps allocate, whatever the size


@dataclass(frozen=True)
class Estimate:
    fixed: int  # weights, gradients, optimizer state
    per_sequence: int  # activations of one sequence of the micro-batch

    def total(self, micro_batch: int) -> int:
        return self.fixed + micro_batch * self.per_sequence


def estimate(
    cfg: Config, vocab_size: int, n_params: int, dtype: torch.dtype, device_type: str = "cpu", ddp: bool = False
) -> Estimate:
    """The memory of one training process on a `device_type` device (`ddp`: wrapped for several processes)."""
    m = cfg.model
    per_layer = m.n_embd * _ACT_BYTES_PER_TOKEN_LAYER.get(dtype, 68) * (_ATTN_ONLY_SHARE if m.attn_only else 1)
    per_token = m.n_layer * per_layer + vocab_size * _LOGIT_BYTES.get(dtype, 16)
    per_sequence = int(m.block_size * per_token)
    if m.dropout > 0:
        dropouts = 2 if m.attn_only else 3  # the embedding's, attention's output and the MLP's
        per_sequence += m.block_size * m.n_layer * m.n_embd * dropouts  # a mask byte per element
    if (m.dropout > 0 and device_type == "cpu") or device_type == "mps":
        # the unfused attention (the CPU's under dropout, MPS's always) keeps every head's (T, T) scores,
        # probabilities and mask; CUDA's flash and memory-efficient kernels apply dropout without them
        per_sequence += 13 * m.n_layer * m.n_head * m.block_size**2
    per_param = 16 + (4 if ddp else 0) + (2 if dtype != torch.float32 else 0)
    return Estimate(fixed=per_param * n_params + _FIRST_STEP, per_sequence=int(_OVERHEAD * per_sequence))


def accum_steps(cfg: Config, processes: int, least: int) -> list[int]:
    """The train.grad_accum_steps from `least` up that split each process's share of the batch evenly."""
    per_rank = cfg.train.batch_size // processes
    return [a for a in range(least, per_rank + 1) if per_rank % a == 0]


def preflight(cfg: Config, est: Estimate, available: int | None, where: str, processes: int = 1) -> str | None:
    """None when one micro-batch fits in 90% of what is available; else the error, with a
    grad_accum_steps that keeps the batch and fits."""
    if available is None:
        return None
    t = cfg.train
    micro = t.batch_size // t.grad_accum_steps // processes
    room = 0.9 * available
    if est.total(micro) <= room:
        return None
    per_rank = t.batch_size // processes
    fits = [a for a in accum_steps(cfg, processes, t.grad_accum_steps) if est.total(per_rank // a) <= room]
    need = (
        f"train.batch_size={t.batch_size} in micro-batches of {micro} (model.block_size "
        f"{cfg.model.block_size}) needs about {gb(est.total(micro))} ({gb(est.fixed)} weights and optimizer, "
        f"{gb(micro * est.per_sequence)} activations) but {gb(available)} is {where}"
    )
    if fits:
        accum = fits[0]
        return (
            f"{need}; train.grad_accum_steps={accum} keeps the batch in micro-batches of {per_rank // accum} "
            f"(about {gb(est.total(per_rank // accum))})"
        )
    return (
        f"{need}; even one sequence at a time does not fit: lower model.block_size or the model's size "
        f"(model.n_layer, model.n_embd)"
    )


def check(cfg: Config, vocab_size: int, device: torch.device, dtype: torch.dtype, processes: int = 1) -> str | None:
    """The preflight for one of `processes` (the world size: every node's) training processes about to
    start on `device`: None, or what to change. Each GPU is its own process's; the CPU processes of one
    machine (LOCAL_WORLD_SIZE of them) share its memory."""
    est = estimate(cfg, vocab_size, parameter_count(cfg.model, vocab_size), dtype, device.type, processes > 1)
    available, where = available_bytes(device)
    if available is None:
        log(f"memory: not checked on {device} ({where}); a batch too large stops with an out-of-memory error")
        return None
    local = int(os.environ.get("LOCAL_WORLD_SIZE", processes)) if device.type == "cpu" else 1
    return preflight(cfg, est, available // local, where, processes)
