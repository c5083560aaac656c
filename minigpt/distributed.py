"""Multi-process training through torchrun (DistributedDataParallel).

`torchrun --nproc_per_node=N -m minigpt train ...` sets RANK / WORLD_SIZE / LOCAL_RANK; `init`
reads them, starts the process group (nccl on CUDA, gloo on CPU) and picks this rank's device.
Without them everything here is a no-op and training runs in one process.

The global batch keeps its single-process meaning: `train.batch_size` sequences per optimizer
step in total, as `train.grad_accum_steps` micro-steps on every rank, so each rank's micro-batch
is batch_size / (grad_accum_steps x world_size).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, NoReturn

import torch
import torch.distributed as tdist

from minigpt.errors import UserError


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

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
    except ValueError:
        raise UserError("RANK / WORLD_SIZE / LOCAL_RANK must be integers (set them through torchrun)") from None
    return Dist(rank, local, world)


def init(device_name: str) -> tuple[Dist, torch.device | None]:
    """Start the process group when launched by torchrun; returns (dist, this rank's device or None).

    None means single-process: the caller resolves the device itself.
    """
    dist = launched()
    if not dist.enabled:
        return dist, None
    use_cuda = torch.cuda.is_available() and device_name in ("auto", "cuda") or device_name.startswith("cuda:")
    if device_name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device '{device_name}' requested but CUDA is not available here; use --device cpu")
    if use_cuda:
        if dist.local_rank >= torch.cuda.device_count():
            raise UserError(
                f"LOCAL_RANK {dist.local_rank} but only {torch.cuda.device_count()} CUDA device(s): "
                "lower --nproc_per_node"
            )
        device = torch.device("cuda", dist.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if not tdist.is_initialized():
        tdist.init_process_group(backend=backend, timeout=timedelta(minutes=10))
    return dist, device


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


def barrier(dist: Dist) -> None:
    if dist.enabled:
        tdist.barrier()


def launch_local(nproc: int, argv: list[str]) -> NoReturn:
    """Replace this process with torchrun's elastic launcher running `minigpt ARGV` on `nproc` local
    processes (standalone rendezvous on a free port). Signals and the exit code pass straight through."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "minigpt", *argv]  # fmt: skip
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
