"""The training loop: the learning-rate schedule, one optimizer step, and the loop that steps and
then asks each component whether it is due. Everything around it (which model, optimizer and
batches; precision, compile and DDP; checkpoints, evaluation, logging, signals and advice) is
built and applied from outside, by `training/trainer.py`, which subclasses `Loop`."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch


def lr_at(step: int, cfg: Any, max_steps: int, progress: float | None = None) -> float:
    """Learning rate for step `step` (0-based) of `max_steps`: a linear warm-up to `lr` (never 0), then
    the decay to `min_lr` at the last step, or following `progress` (0 to 1, a time budget's share)."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / (cfg.warmup_steps + 1)
    if cfg.schedule == "constant":
        return cfg.lr
    if progress is None:
        decay_steps = max(1, max_steps - 1 - cfg.warmup_steps)
        progress = (step - cfg.warmup_steps) / decay_steps
    progress = min(1.0, max(0.0, progress))
    if cfg.schedule == "linear":
        coeff = 1.0 - progress
    else:  # cosine
        coeff = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_lr + coeff * (cfg.lr - cfg.min_lr)


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
            self.best_val_loss, self.best_step = val_loss, self.step
        self.evals_since_best = 0 if counts else self.evals_since_best + 1
        return improved


@dataclass
class StepStats:
    """What one optimizer step reports: its learning rate, gradient norm and summed loss (tensors
    stay on the device until a log step needs them)."""

    lr: float
    loss: torch.Tensor
    grad_norm: torch.Tensor


class Callback:
    """A component of a run. After each optimizer step the loop asks every component `due(step,
    last)`; it calls `on_due` on those that are. The other events, each given the trainer:
    `on_train_start` once; `on_log` (step, loss, lr, grad_norm, tokens, tokens_per_s, mfu),
    `on_eval`, `on_save` (after last.pt or best.pt is written) and `on_step_end` (every step);
    `on_train_end` once, with the `TrainResult`, or with None when the run failed or was
    interrupted. Under DDP every rank gets every event (`trainer.dist.is_main` is the one that
    writes). Stop a run with `trainer.request_stop(reason)` (or `stop`, the same): under DDP, a
    call on any rank stops every rank at the next sync point (docs/distributed.md)."""

    def due(self, step: int, last: bool) -> bool:
        """Whether `on_due` runs after optimizer step `step` (`last`: the run's final step). A pure
        function of the step and the component's own config, so every rank gives the same answer."""
        return False

    def on_due(self, trainer: Any, stats: StepStats) -> None: ...

    def on_train_start(self, trainer: Any) -> None: ...

    def on_step_end(self, trainer: Any, stats: StepStats) -> None:
        """After every step (keep it cheap: `stats` holds tensors still on the device)."""

    def on_log(self, trainer: Any, logs: dict[str, Any]) -> None: ...

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None: ...

    def on_save(self, trainer: Any, paths: list[Path]) -> None: ...

    def on_train_end(self, trainer: Any, result: Any) -> None: ...


class Loop:
    """One process's training loop over a built model.

    `model` is the GPT, `train_model` what the step calls (the same model, or it compiled or
    wrapped for DDP), `batches.next()` gives (x, y) id tensors of one micro-batch, `ctx` is the
    precision's autocast context and `scaler` a `torch.amp.GradScaler` (on for float16 only).
    `cfg` is the run's config: train.max_steps, train.grad_accum_steps, train.batch_size,
    model.block_size, optim.* (the schedule and optim.grad_clip)."""

    def __init__(
        self, cfg: Any, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Any, ctx: Any
    ) -> None:
        self.cfg, self.model, self.optimizer, self.batcher, self.ctx = cfg, model, optimizer, batches, ctx
        self.device = next(model.parameters()).device
        self.train_model: torch.nn.Module = model
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=False)
        self.state = TrainState()
        self.callbacks: list[Callback] = []  # the components, in the order they run
        self.stopped: str | None = None  # why the run ended before train.max_steps
        self._loss_sum = torch.zeros((), device=self.device)  # training loss since the last log step
        self._loss_count = 0

    def no_sync(self, last_micro_step: bool) -> contextlib.AbstractContextManager:
        """Where gradients are not averaged over processes (DDP's no_sync); one process: nowhere."""
        return contextlib.nullcontext()

    def learning_rate(self) -> float:
        """This step's peak learning rate (the trainer's follows a time budget where there is one)."""
        return lr_at(self.state.step, self.cfg.optim, self.cfg.train.max_steps)

    def train_step(self) -> StepStats:
        """One optimizer step over train.batch_size sequences (grad_accum_steps micro-steps)."""
        cfg = self.cfg
        lr = self.learning_rate()
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_scale", 1.0)  # Muon's group has its own peak
        accum = cfg.train.grad_accum_steps
        step_loss = torch.zeros((), device=self.device)
        for micro_step in range(accum):
            x, y = self.batcher.next()
            with self.no_sync(micro_step == accum - 1), self.ctx:
                _, loss = self.train_model(x, y)
                loss = loss / accum
            self.scaler.scale(loss).backward()
            step_loss += loss.detach()
        self.scaler.unscale_(self.optimizer)
        max_norm = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else math.inf
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.state.step += 1
        self.state.tokens_seen += cfg.train.batch_size * cfg.model.block_size
        self._loss_sum += step_loss
        self._loss_count += 1
        return StepStats(lr, step_loss, grad_norm)

    def emit(self, event: str, *args: Any, to: Sequence[Callback] | None = None) -> None:
        """Call `event` on every component (or those `to`), in order."""
        for callback in self.callbacks if to is None else to:
            getattr(callback, event)(self, *args)

    def run(self) -> None:
        """Step until train.max_steps or a stop; after each step, the components that are due run
        (after the processes meet: `meet`), then every step's `on_step_end`."""
        max_steps = self.cfg.train.max_steps
        every_step = [c for c in self.callbacks if type(c).on_step_end is not Callback.on_step_end]
        self.model.train()
        while self.state.step < max_steps and self.stopped is None:
            self.before_step()
            stats = self.train_step()
            step = self.state.step
            due = [c for c in self.callbacks if c.due(step, step == max_steps)]
            if due:
                self.meet()
                self.emit("on_due", stats, to=due)
            self.emit("on_step_end", stats, to=every_step)
            self.after_step(synced=bool(due), last=step == max_steps)

    # where the trainer adds what a run needs around the loop (signals, agreement across processes)

    def before_step(self) -> None: ...

    def meet(self) -> None: ...

    def after_step(self, synced: bool, last: bool) -> None: ...
