"""The training: the learning-rate schedule (`lr_at`), one optimizer step (`optimizer_step`), and
`train`, the loop whose body names each call: the step, then logging, evaluation and saving when
each is due, where the processes meet, and why the run stops. What it trains (model, optimizer,
batches, precision, compile, DDP) is built before it and handed to it: `training/trainer.py`'s
`Trainer` is such a run."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import torch


class Schedule(Protocol):
    """The schedule's keys (optim.* of the run's config)."""

    warmup_steps: int
    schedule: str  # cosine, linear or constant
    lr: float
    min_lr: float


def lr_at(step: int, cfg: Schedule, max_steps: int, progress: float | None = None) -> float:
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
class StepStats:
    """What one optimizer step reports: its learning rate, gradient norm and summed loss (tensors
    stay on the device until a log step needs them)."""

    lr: float
    loss: torch.Tensor
    grad_norm: torch.Tensor


@dataclass
class Step:
    """The parts of one optimizer step, built before the loop."""

    model: torch.nn.Module  # the GPT: its gradients are clipped
    train_model: torch.nn.Module  # what the micro-steps call: the model, or it compiled or wrapped for DDP
    optimizer: torch.optim.Optimizer
    next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]]  # (x, y) ids of one micro-batch
    ctx: AbstractContextManager[object]  # the precision's autocast
    scaler: torch.amp.GradScaler  # on for float16 only
    accum: int  # micro-steps per optimizer step (train.grad_accum_steps)
    grad_clip: float  # the gradient norm's bound (optim.grad_clip; 0: none)
    # DDP's no_sync: gradients are averaged over processes on the last micro-step only
    no_sync: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext


def optimizer_step(step: Step, lr: float) -> StepStats:
    """One optimizer step at rate `lr`: `step.accum` micro-steps (forward and backward), the clip, the step."""
    for group in step.optimizer.param_groups:
        group["lr"] = lr * group.get("lr_scale", 1.0)  # Muon's group has its own peak
    loss_sum = torch.zeros((), device=next(step.model.parameters()).device)
    for micro_step in range(step.accum):
        x, y = step.next_batch()
        last_micro_step = micro_step == step.accum - 1
        with contextlib.nullcontext() if last_micro_step else step.no_sync(), step.ctx:
            _, loss = step.train_model(x, y)
            loss = loss / step.accum
        step.scaler.scale(loss).backward()
        loss_sum += loss.detach()
    step.scaler.unscale_(step.optimizer)
    max_norm = step.grad_clip if step.grad_clip > 0 else math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(step.model.parameters(), max_norm)
    step.scaler.step(step.optimizer)
    step.scaler.update()
    step.optimizer.zero_grad(set_to_none=True)
    return StepStats(lr, loss_sum, grad_norm)


# What `train` needs from the run it trains. A Protocol states a shape that a run has (nothing
# subclasses one, and nothing fills its methods in): training/trainer.py's Trainer is the run.


class Counts(Protocol):
    step: int  # optimizer steps taken
    tokens_seen: int


class Due(Protocol):
    def due(self, step: int, last: bool) -> bool:
        """Whether it runs after optimizer step `step` (`last`: the run's final step): a pure
        function of the step and its own config, so every process gives the same answer."""


class Agreement(Protocol):
    """What the processes agree on where they meet (one process agrees with itself at once)."""

    def add_loss(self, loss: torch.Tensor) -> None:
        """Count a step's training loss (agreed, averaged over processes, at the next meeting)."""

    def stop_if_signalled(self) -> None:
        """A stop signal (under DDP, one every process has seen): save last.pt and stop (raises)."""

    def meet(self) -> None:
        """The loss, stop signals and requests and callback failures agreed; a non-finite loss refused."""

    def stop_requested(self, met: bool, last: bool) -> str | None:
        """A `request_stop()`'s reason once the processes agree on it (under DDP only where they met)."""

    def finish(self) -> None:
        """Under DDP, meet once more: a callback's failure since the last meeting stops every process."""


class Run(Protocol):
    step: Step
    state: Counts
    max_steps: int
    tokens_per_step: int  # train.batch_size sequences of model.block_size
    logging: Due  # log.interval
    evaluation: Due  # train.eval_interval
    checkpointing: Due  # train.ckpt_interval
    snapshots: Due  # train.keep_every
    callbacks: Sequence[Due]  # the built-in callbacks, then a user's (minigpt.train(callbacks=...))
    agreement: Agreement
    stopped: str | None  # why the run ended before max_steps
    evaluated_at: int | None  # the step of the latest evaluation

    def learning_rate(self) -> float:
        """This step's rate: `lr_at`, by steps or by a time budget."""

    def log(self, stats: StepStats) -> None:
        """`on_log` with the loss agreed at this meeting, averaged since the last log step."""

    def evaluate_and_save(self) -> None:
        """The validation loss, then last.pt (and best.pt when it is a new best); `on_eval`."""

    def save_last(self) -> None:
        """last.pt; `on_save`."""

    def save_snapshot(self, stats: StepStats) -> None:
        """The weights of this step as step_NNNNNNN.pt, unless the step went non-finite."""

    def emit(self, event: str, *args: object, to: Sequence[Due] | None = None) -> None:
        """Call `event` on every callback (or those `to`), in order."""


def train_step(run: Run) -> StepStats:
    """One optimizer step of `run` at the schedule's rate (`learning_rate`), counted."""
    stats = optimizer_step(run.step, run.learning_rate())
    run.state.step += 1
    run.state.tokens_seen += run.tokens_per_step
    run.agreement.add_loss(stats.loss)
    return stats


def train(run: Run) -> None:
    """Train `run` from its step to `run.max_steps`, or until a stop."""
    run.step.model.train()
    while run.state.step < run.max_steps and run.stopped is None:
        run.agreement.stop_if_signalled()
        stats = train_step(run)  # at the schedule's rate: the micro-steps, the clip, the optimizer step
        step = run.state.step
        last = step == run.max_steps
        log_due = run.logging.due(step, last)
        eval_due = run.evaluation.due(step, last)
        save_due = run.checkpointing.due(step, last) and not eval_due  # an evaluation saves last.pt itself
        snapshot_due = run.snapshots.due(step, last)
        theirs = [c for c in run.callbacks if c.due(step, last)]  # callbacks that are due get on_due
        met = log_due or eval_due or save_due or snapshot_due or bool(theirs)
        if met:
            run.agreement.meet()  # where the processes meet: never at a step where nothing is due
        if log_due:
            run.log(stats)
        if eval_due:
            run.evaluate_and_save()
        if save_due:
            run.save_last()
        if snapshot_due:
            run.save_snapshot(stats)
        run.emit("on_due", stats, to=theirs)
        run.emit("on_step_end", stats)
        stop = run.agreement.stop_requested(met, last)
        if stop is not None and run.stopped is None:
            if run.evaluated_at != step:
                run.evaluate_and_save()  # the weights trained last are scored and saved first: they may be the best
            run.stopped = stop
    run.agreement.finish()
