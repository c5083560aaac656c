"""What watches a training run: the `Callback` events the loop emits, and the callbacks that stop
it or keep snapshots. Each owns its config keys and decides its own timing; `Trainer.train()`
only steps, evaluates and saves. The progress display is `progress.py`'s, TensorBoard is
`tensorboard.py`'s; `minigpt.train(callbacks=...)` adds a user's own, which gets the same events."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any


class Callback:
    """The events of a run, each given the `Trainer` (training/trainer.py), in order: `on_train_start`
    once; per optimizer step `on_log` (every log.interval steps: step, loss, lr, grad_norm, tokens,
    tokens_per_s, mfu), `on_eval` (every train.eval_interval steps and the last), `on_save` (after
    last.pt or best.pt is written) and `on_step_end`; `on_train_end` once, with the `TrainResult`,
    or with None when the run failed or was interrupted. Under DDP every rank emits every event
    (`trainer.dist.is_main` is the one that writes). Stop a run with `trainer.request_stop(reason)`
    or, from a decision every rank makes alike (an evaluation's), `trainer.stop(reason)`."""

    def on_train_start(self, trainer: Any) -> None: ...

    def on_step_end(self, trainer: Any, stats: Any) -> None:
        """After every step (keep it cheap: `stats` holds tensors still on the device)."""

    def on_log(self, trainer: Any, logs: dict[str, Any]) -> None: ...

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None: ...

    def on_save(self, trainer: Any, paths: list[Path]) -> None: ...

    def on_train_end(self, trainer: Any, result: Any) -> None: ...


class Snapshots(Callback):
    """train.keep_every: rank 0 keeps the weights of every Nth step as step_NNNNNNN.pt, unless the
    step went non-finite (the next sync point reports the divergence; a broken model is never kept)."""

    def on_step_end(self, trainer: Any, stats: Any) -> None:
        from minigpt.checkpoint import snapshot_name

        t, step = trainer.cfg.train, trainer.state.step
        if not t.keep_every or step % t.keep_every or not trainer.dist.is_main:
            return
        # under a GradScaler (fp16) a non-finite gradient is a skipped step: the weights are whole
        norm_ok = trainer.scaler.is_enabled() or math.isfinite(float(stats.grad_norm))
        if not (math.isfinite(stats.loss.item()) and norm_ok):
            return
        snapshot = trainer.checkpoint(resumable=False)
        if trainer.evaluated_at != step:
            snapshot.val_loss = None  # the latest evaluation was an earlier step's
        snapshot.save(trainer.out_dir / snapshot_name(step))


class EarlyStopping(Callback):
    """train.patience: stop after that many evaluations without a new best (by more than
    train.min_delta)."""

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None:
        t, state = trainer.cfg.train, trainer.state
        if not t.patience or state.evals_since_best < t.patience:
            return
        what = "a new best" if not t.min_delta else f"an improvement of more than {t.min_delta:g} (min_delta)"
        trainer.stop(
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
