"""Will this training fit in memory? An estimate made before the first step, compared with what
the machine has, so an impossible batch is a clear error instead of the kernel's silent SIGKILL
(or a CUDA out-of-memory traceback).

The estimate counts float32 weights, their gradients and AdamW's two moments (16 bytes a
parameter) and the activations autograd keeps for one micro-batch: per token and layer about
26 values of the block's width in the compute dtype's precision (the attention inputs and output
in float32 on the CPU, LayerNorm in float32, the rest in the autocast type), plus the logits and
their float32 copies for the loss. The per-token constants were measured on this project's model
(`scripts/bench_memory.py` prints the estimate beside the measured peak).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import torch

from minigpt.config.schema import Config, ModelConfig

# bytes an element takes in the activations that autograd keeps, per compute dtype
_ACT_BYTES_PER_TOKEN_LAYER = {torch.bfloat16: 60, torch.float16: 60, torch.float32: 68}  # x n_embd
_LOGIT_BYTES = {torch.bfloat16: 14, torch.float16: 14, torch.float32: 16}  # x vocab, per token
_OVERHEAD = 1.15  # allocator slack and temporaries of the backward pass
_FIRST_STEP = 64 * 2**20  # workspaces and thread buffers the first steps allocate, whatever the size


@dataclass(frozen=True)
class Estimate:
    fixed: int  # weights, gradients, optimizer state
    per_sequence: int  # activations of one sequence of the micro-batch

    def total(self, micro_batch: int) -> int:
        return self.fixed + micro_batch * self.per_sequence


def parameter_count(m: ModelConfig, vocab_size: int) -> int:
    """GPT's parameters, counted from the config (a test holds it to the model's own count): the
    tied embedding/head, learned positions, and per block two LayerNorms, qkv, the projection and
    the 4x MLP, biases where model.bias; a final LayerNorm in pre-norm models."""
    C, b = m.n_embd, int(m.bias)
    norm = C * (1 + b)
    block = 2 * norm + (3 * C * C + 3 * C * b) + (C * C + C * b) + (4 * C * C + 4 * C * b) + (4 * C * C + C * b)
    learned = m.block_size * C if m.pos_emb == "learned" else 0
    return vocab_size * C + learned + m.n_layer * block + (norm if m.norm == "pre" else 0)


def estimate(cfg: Config, vocab_size: int, n_params: int, dtype: torch.dtype) -> Estimate:
    m = cfg.model
    per_token = m.n_layer * m.n_embd * _ACT_BYTES_PER_TOKEN_LAYER.get(dtype, 68) + vocab_size * _LOGIT_BYTES.get(
        dtype, 16
    )
    per_sequence = m.block_size * per_token
    if m.dropout > 0:
        per_sequence += m.block_size * m.n_layer * m.n_embd * 3  # a mask byte per element at 3 dropouts
        # attention dropout takes the unfused path, which keeps the (T, T) scores, probabilities
        # and mask of every head: about 13 bytes an entry
        per_sequence += 13 * m.n_layer * m.n_head * m.block_size**2
    return Estimate(fixed=16 * n_params + _FIRST_STEP, per_sequence=int(_OVERHEAD * per_sequence))


def available_bytes(device: torch.device) -> tuple[int | None, str]:
    """Memory this process may still use on `device`, and where the figure came from."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free, f"free on {torch.cuda.get_device_name(device)}"
    if device.type != "cpu":
        return None, "unknown"
    limit = _cgroup_room()
    avail = _meminfo_available()
    if limit is not None and (avail is None or limit < avail):
        return limit, "left under this container's memory limit"
    return avail, "MemAvailable"


def _meminfo_available() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """cgroup v2 memory.max - memory.current for this process's group (None when unlimited)."""
    try:
        group = Path("/proc/self/cgroup").read_text().strip().split("::", 1)[1]
        base = Path("/sys/fs/cgroup") / group.lstrip("/")
        limit = (base / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int((base / "memory.current").read_text()))
    except (OSError, ValueError, IndexError):
        return None


def gb(n: float) -> str:
    return f"{n / 2**30:.1f} GB"


def preflight(cfg: Config, est: Estimate, available: int | None, where: str, processes: int = 1) -> str | None:
    """None when one micro-batch fits in 90% of what is available; else the error: the estimate,
    what is available, and a grad_accum_steps that keeps the batch and fits."""
    if available is None:
        return None
    t = cfg.train
    micro = t.batch_size // t.grad_accum_steps // processes
    room = 0.9 * available
    if est.total(micro) <= room:
        return None
    per_rank = t.batch_size // processes
    fits = [
        a for a in range(t.grad_accum_steps, per_rank + 1) if per_rank % a == 0 and est.total(per_rank // a) <= room
    ]
    need = (f"train.batch_size={t.batch_size} in micro-batches of {micro} (model.block_size "
            f"{cfg.model.block_size}) needs about {gb(est.total(micro))} ({gb(est.fixed)} weights and optimizer, "
            f"{gb(micro * est.per_sequence)} activations) but {gb(available)} is {where}")  # fmt: skip
    if fits:
        accum = fits[0]
        return (f"{need}; train.grad_accum_steps={accum} keeps the batch in micro-batches of {per_rank // accum} "
                f"(about {gb(est.total(per_rank // accum))})")  # fmt: skip
    return (f"{need}; even one sequence at a time does not fit: lower model.block_size or the model's size "
            f"(model.n_layer, model.n_embd)")  # fmt: skip


def check(cfg: Config, vocab_size: int, device: torch.device, dtype: torch.dtype, processes: int = 1) -> str | None:
    """The preflight for a training run about to start on `device`: None, or what to change."""
    est = estimate(cfg, vocab_size, parameter_count(cfg.model, vocab_size), dtype)
    available, where = available_bytes(device)
    local = processes if device.type == "cpu" else 1  # the CPU processes of one machine share its memory
    return preflight(cfg, est, None if available is None else available // local, where, processes)


def process_rss() -> int:
    """This process's resident memory now, in bytes (0 where /proc is missing)."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
