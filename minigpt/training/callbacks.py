"""The components of a training run (`loop.Callback`): logging, evaluation, checkpoints and
snapshots, each due by its own config key, and the ones that stop a run. The progress display is
`progress.py`'s, TensorBoard `tensorboard.py`'s; `minigpt.train(callbacks=...)` adds a user's own."""

from __future__ import annotations

import math
import time
from typing import Any

from minigpt.training.loop import Callback, StepStats


def every(interval: int, step: int) -> bool:
    """Whether `step` is a multiple of `interval` (0: never)."""
    return bool(interval) and step % interval == 0


class Logging(Callback):
    """log.interval: the training loss, learning rate, gradient norm and speed (`on_log`), at every
    log.interval steps and the last."""

    def __init__(self, cfg: Any) -> None:
        self.interval = cfg.log.interval

    def due(self, step: int, last: bool) -> bool:
        return every(self.interval, step) or last

    def on_due(self, trainer: Any, stats: StepStats) -> None:
        trainer.log_step(stats)


class Evaluation(Callback):
    """train.eval_interval: the validation loss at every eval_interval steps and the last, then
    last.pt (and best.pt when it is a new best)."""

    def __init__(self, cfg: Any) -> None:
        self.interval = cfg.train.eval_interval

    def due(self, step: int, last: bool) -> bool:
        return every(self.interval, step) or last

    def on_due(self, trainer: Any, stats: StepStats) -> None:
        trainer._evaluate_and_save()


class Checkpointing(Callback):
    """train.ckpt_interval: last.pt at every ckpt_interval steps (unless an evaluation saved it)."""

    def __init__(self, cfg: Any) -> None:
        self.interval = cfg.train.ckpt_interval

    def due(self, step: int, last: bool) -> bool:
        return every(self.interval, step)

    def on_due(self, trainer: Any, stats: StepStats) -> None:
        if trainer.evaluated_at != trainer.state.step:
            trainer.save("last.pt")


class Snapshots(Callback):
    """train.keep_every: rank 0 keeps the weights of every Nth step as step_NNNNNNN.pt, unless the
    step went non-finite (a broken model is never kept)."""

    def __init__(self, cfg: Any) -> None:
        self.interval = cfg.train.keep_every

    def due(self, step: int, last: bool) -> bool:
        return every(self.interval, step)

    def on_due(self, trainer: Any, stats: StepStats) -> None:
        from minigpt.checkpoint import snapshot_name

        step = trainer.state.step
        if not trainer.dist.is_main:
            return
        # under a GradScaler (fp16) a non-finite gradient is a skipped step: the weights are whole
        norm_ok = trainer.scaler.is_enabled() or math.isfinite(float(stats.grad_norm))
        if not (math.isfinite(stats.loss.item()) and norm_ok):
            return
        snapshot = trainer.checkpoint(resumable=False)
        if trainer.evaluated_at != step:
            snapshot.val_loss = None  # the latest evaluation was an earlier step's
        snapshot.save(trainer.out_dir / snapshot_name(step))


def components(cfg: Any) -> list[Callback]:
    """The loop's own components, in the order they run when due at the same step."""
    return [Logging(cfg), Evaluation(cfg), Checkpointing(cfg), Snapshots(cfg)]


class EarlyStopping(Callback):
    """train.patience: stop after that many evaluations without a new best (by more than
    train.min_delta)."""

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None:
        t, state = trainer.cfg.train, trainer.state
        if not t.patience or state.evals_since_best < t.patience:
            return
        what = "a new best" if not t.min_delta else f"an improvement of more than {t.min_delta:g} (min_delta)"
        trainer.stopped = trainer.stopped or (  # every rank decides alike (the agreed val loss): stop now
            f"early stop at step {state.step}: {state.evals_since_best} evaluations without {what} "
            f"(train.patience {t.patience}); the best, {state.best_val_loss:.4f}, was at step {state.best_step}"
        )


class TimeBudget(Callback):
    """train.max_time: once it has passed (by rank 0's clock), the run scores and saves the weights
    it trained last and stops."""

    def on_step_end(self, trainer: Any, stats: Any) -> None:
        if trainer.deadline is not None and trainer.dist.is_main and time.perf_counter() > trainer.deadline:
            t = trainer.cfg.train
            trainer.request_stop(
                f"stopped at step {trainer.state.step}: train.max_time ({t.max_time}) reached; "
                f"saved {trainer.out_dir / 'last.pt'}"
            )
