"""The callbacks of a training run (`Callback`, the base of a user's too), the step intervals that
say when logging, evaluation, checkpoints and snapshots are due (`Every`), and the callbacks that
stop a run. The progress display is `progress.py`'s, TensorBoard `tensorboard.py`'s;
`minigpt.train(callbacks=...)` adds a user's own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from minigpt.training.loop import StepStats


class Callback:
    """A callback of a run (`minigpt.train(callbacks=...)`): each event is given the trainer.
    `on_train_start` once; `on_log` (step, loss, lr, grad_norm, tokens, tokens_per_s, mfu),
    `on_eval`, `on_save` (after last.pt or best.pt is written) and `on_step_end` (every step);
    `on_train_end` once, with the `TrainResult`, or with None when the run failed or was
    interrupted. A callback may also be due at steps of its own: after each optimizer step the loop
    asks `due(step, last)` and calls `on_due` where it is. Under DDP every rank gets every event
    (`trainer.dist.is_main` is the one that writes). Stop a run with `trainer.request_stop(reason)`
    (or `stop`, the same): under DDP, a call on any rank stops every rank at the next point the
    processes meet (docs/distributed.md)."""

    def due(self, step: int, last: bool) -> bool:
        """Whether `on_due` runs after optimizer step `step` (`last`: the run's final step). A pure
        function of the step and the callback's own config, so every rank gives the same answer."""
        return False

    def on_due(self, trainer: Any, stats: StepStats) -> None: ...

    def on_train_start(self, trainer: Any) -> None: ...

    def on_step_end(self, trainer: Any, stats: StepStats) -> None:
        """After every step (keep it cheap: `stats` holds tensors still on the device)."""

    def on_log(self, trainer: Any, logs: dict[str, Any]) -> None: ...

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None: ...

    def on_save(self, trainer: Any, paths: list[Path]) -> None: ...

    def on_train_end(self, trainer: Any, result: Any) -> None: ...


class Every:
    """A step interval from the config: due at every `interval` steps (0: never), and at the run's
    last step when `at_last`. The loop asks it (`due`) and then names the call itself."""

    def __init__(self, interval: int, at_last: bool) -> None:
        self.interval = interval
        self.at_last = at_last

    def due(self, step: int, last: bool) -> bool:
        return (bool(self.interval) and step % self.interval == 0) or (self.at_last and last)


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

    def on_step_end(self, trainer: Any, stats: StepStats) -> None:
        if trainer.deadline is not None and trainer.dist.is_main and time.perf_counter() > trainer.deadline:
            t = trainer.cfg.train
            trainer.request_stop(
                f"stopped at step {trainer.state.step}: train.max_time ({t.max_time}) reached; "
                f"saved {trainer.out_dir / 'last.pt'}"
            )
