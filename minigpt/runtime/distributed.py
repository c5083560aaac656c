"""Multi-process training through torchrun (DDP): `launched` reads RANK / WORLD_SIZE / LOCAL_RANK, `init`
starts the process group (nccl on CUDA, gloo on CPU); without torchrun all of it is a no-op (docs/distributed.md)."""

from __future__ import annotations

import hashlib
import inspect
import os
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as tdist

from minigpt.errors import UserError


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1
    local_world: int | None = None  # the processes on this machine (LOCAL_WORLD_SIZE); None: world_size

    @property
    def local_world_size(self) -> int:
        return self.local_world or self.world_size

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched() -> Dist:
    """This process's place in a torchrun launch (rank 0 of 1 when not launched by torchrun)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", "0"))
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    except ValueError:
        raise UserError(
            "RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE must be integers (set them through torchrun)"
        ) from None
    return Dist(rank, local, world, local_world)


def init(dist: Dist, device: torch.device) -> None:
    """Make a CUDA device the current one (cuda:N in one process too: the compiler's kernels and any
    call without a device go there, not to cuda:0), and start the process group when launched by
    torchrun: nccl for CUDA devices, gloo for the CPU."""
    if device.type == "cuda" and device.index is not None:  # plain "cuda" is the current device already
        torch.cuda.set_device(device)
    if dist.enabled and not tdist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        tdist.init_process_group(backend=backend, timeout=timedelta(minutes=10))


def shutdown() -> None:
    if tdist.is_available() and tdist.is_initialized():
        tdist.destroy_process_group()


def all_sum(values: torch.Tensor, dist: Dist) -> torch.Tensor:
    """Sum a small tensor over ranks (identity in a single process)."""
    if dist.enabled:
        values = values.clone()
        tdist.all_reduce(values, op=tdist.ReduceOp.SUM)
    return values


def all_gather(obj: Any, dist: Dist) -> list[Any]:
    """Every rank's `obj`, in rank order (a one-element list in a single process)."""
    if not dist.enabled:
        return [obj]
    out: list[Any] = [None] * dist.world_size
    tdist.all_gather_object(out, obj)
    return out


def all_agree(ok: bool, dist: Dist) -> bool:
    """Whether `ok` holds on every rank: one answer, the same on each (`ok` itself in one process)."""
    return all(all_gather(bool(ok), dist))


def check_same_start(plan: str, source: Path | None, ckpt: Any, dist: Dist) -> None:
    """Every rank starts from what rank 0 found: its plan (new, resume, fine_tune) and checkpoint
    (`source`, and `ckpt`'s step and tensor checksums), against rank 0's. A difference (a shared
    filesystem that lags) is the same UserError on every rank: one line naming what each found."""
    found: dict[str, Any] = {"plan": plan}
    if source is not None and ckpt is not None:
        checksum = hashlib.sha256(repr(sorted((ckpt.checksums or {}).items())).encode()).hexdigest()[:12]
        found.update(file=source.name, step=ckpt.step, checksum=checksum)
    every = all_gather(found, dist)
    differ = [rank for rank, theirs in enumerate(every) if theirs != every[0]]
    if not differ:
        return
    shown = "; ".join(f"rank {rank}: " + ", ".join(f"{k} {v}" for k, v in every[rank].items()) for rank in [0, *differ])
    raise UserError(
        f"the processes do not start from the same checkpoint ({shown}); every node must see the same run "
        "folder (a shared filesystem that lags?): wait until it does, then start again"
    )


def wrap_ddp(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DistributedDataParallel for training, without broadcasting the buffers (constant, equal on every rank)."""
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.type == "cuda" else None
    # newer torch renames the setting (and warns about the old name); both keep the sync at start-up
    newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    no_sync = {"forward_sync_buffers": False} if newer else {"broadcast_buffers": False}
    return DistributedDataParallel(model, device_ids=device_ids, **no_sync)
