"""Where a training process is: its counts and best evaluation (`TrainState`), and every random-number
stream (`RngStreams`), saved and restored so that a resume is exact (design.md, "Random-number streams")."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import torch

from minigpt.data.corpus import Batcher
from minigpt.runtime import distributed
from minigpt.runtime.device import log


@dataclass
class TrainState:
    """Where the run is: optimizer steps taken, tokens trained on, the best validation loss and its
    step, and how many evaluations have passed without an improvement that counts (patience)."""

    step: int = 0
    tokens_seen: int = 0
    best_val_loss: float = math.inf
    best_step: int = 0
    evals_since_best: int = 0
    time_progress: float = 0.0  # optim.schedule_by=time: the fraction of the decay done

    def state_dict(self) -> dict[str, Any]:
        return asdict(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.tokens_seen = int(state["tokens_seen"])
        self.best_val_loss = float(state["best_val_loss"])
        self.best_step = int(state.get("best_step") or 0)  # checkpoints from before early stopping
        self.evals_since_best = int(state.get("evals_since_best") or 0)
        self.time_progress = float(state.get("time_progress") or 0.0)

    def record_eval(self, val_loss: float, min_delta: float) -> bool:
        """Count an evaluation; True when it is a new best (best.pt). Only an improvement of more
        than `min_delta` over the best so far resets the patience count."""
        counts = val_loss < self.best_val_loss - min_delta
        improved = val_loss < self.best_val_loss
        if improved:
            self.best_val_loss = val_loss
            self.best_step = self.step
        self.evals_since_best = 0 if counts else self.evals_since_best + 1
        return improved


class RngStreams:
    """torch's global generator (weights, dropout; per device and rank) and the batcher's, which every rank
    shares; evaluation and logged samples have their own generators and are not part of this."""

    def __init__(self, device: torch.device, batcher: Batcher, dist: distributed.Dist, seed: int):
        self.device = device
        self.batcher = batcher
        self.dist = dist
        self.seed = seed

    def state_dict(self) -> dict[str, Any]:
        """{"rng": this process's streams, "rng_ranks": every rank's torch streams or None}; collective under DDP."""
        own: dict[str, Any] = {"torch_cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            own["torch_cuda"] = torch.cuda.get_rng_state_all()
        elif self.device.type == "mps":
            own["torch_mps"] = torch.mps.get_rng_state()
        ranks = distributed.all_gather(own, self.dist)
        return {"rng": {**own, "batcher": self.batcher.state_dict()}, "rng_ranks": ranks if self.dist.enabled else None}

    def load_state_dict(self, state: dict[str, Any], step: int) -> None:
        """Put every stream back where the checkpoint left it; the per-rank dropout streams are re-derived
        from the seed and step when the number of processes changed."""
        self.batcher.load_state_dict(state["rng"]["batcher"])
        ranks, dist = state.get("rng_ranks"), self.dist
        if dist.enabled == bool(ranks) and (not ranks or len(ranks) == dist.world_size):
            own = ranks[dist.rank] if ranks else state["rng"]
            torch.set_rng_state(own["torch_cpu"])
            if self.device.type == "cuda":
                self._restore_cuda(own.get("torch_cuda", []))
            elif self.device.type == "mps" and "torch_mps" in own:
                torch.mps.set_rng_state(own["torch_mps"])
        else:
            torch.manual_seed(self.seed + 1 + dist.rank + 7919 * step)
            log("note: the number of processes changed since the checkpoint; dropout masks are re-seeded")

    def _restore_cuda(self, saved: list[torch.Tensor]) -> None:
        """Every GPU's stream when the same number are visible; else the device's own from the saved one of
        its index (or the first), with a note."""
        if len(saved) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(saved)
            return
        if not saved:
            log("note: the checkpoint holds no CUDA random state; dropout masks on the GPU start afresh")
            return
        index = self.device.index or 0
        torch.cuda.set_rng_state(saved[index if index < len(saved) else 0], self.device)
        log(
            f"note: the checkpoint saved {len(saved)} GPU random state(s) and {torch.cuda.device_count()} GPU(s) "
            f"are visible; restored {self.device}'s from the saved GPU {index if index < len(saved) else 0}"
        )
