"""The callbacks of a training run (`Callback`, the base of a user's too), the step intervals that
say when logging, evaluation, checkpoints and snapshots are due (`Every`), and the callbacks that
stop a run (`EarlyStopping`, `TimeBudget`, `TargetLoss`). The progress display is `progress.py`'s,
TensorBoard `tensorboard.py`'s;
`minigpt.train(callbacks=...)` adds a user's own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from minigpt.checkpoint import BEST
from minigpt.infer.evaluate import EvalResult
from minigpt.runtime.device import log
from minigpt.runtime.mfu import Host, host
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


class TargetLoss(Callback):
    """train.target_loss: the run ends once its validation loss reaches the target. An evaluation whose
    estimate (the run's fixed batches, averaged over ranks) is at or below it has the weights scored on
    the whole validation split as the final evaluation scores them (`Trainer.score_now`: rank 0 computes
    it and sends every rank its result, so every rank decides alike); only that confirms, and the run
    stops. An estimate the whole split does not confirm lets training go on. The time to the target is
    the training's (from the first step, after any compilation: steps, evaluations, checks, saves) and
    the whole process's (from the command's start, torch's import in it)."""

    def __init__(self, target: float | None) -> None:
        self.target = target or None  # 0: off
        self.reached: dict[str, Any] | None = None  # the step, the times and the losses where it was reached
        self.full: EvalResult | None = None  # the whole split's result there (the final evaluation's, unscored again)
        self.best_full: float | None = None  # the lowest whole-split loss a check found
        self.from_step = 0
        self.t_train = time.perf_counter()
        self.host: Host | None = None

    def on_train_start(self, trainer: Any) -> None:
        self.t_train = time.perf_counter()
        self.from_step = trainer.state.step  # a resumed run's times count from here
        if self.target is not None:
            self.host = host(trainer.device, trainer.cfg.log.peak_tflops)

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None:
        if self.target is None or self.reached is not None or val_loss > self.target:
            return
        full, step = trainer.score_now(), trainer.state.step
        self.best_full = min(full.loss, self.best_full if self.best_full is not None else full.loss)
        if full.loss > self.target:
            log(
                f"step {step}: val est {val_loss:.4f} is at or below train.target_loss {self.target:g}, "
                f"the whole split's {full.loss:.4f} is not: training goes on"
            )
            return
        train_s, process_s = time.perf_counter() - self.t_train, time.perf_counter() - trainer.started
        if trainer.state.best_step != step:
            # a lower estimate came earlier, and its weights failed the whole split: best.pt becomes these
            trainer.state.best_val_loss, trainer.state.best_step = val_loss, step
            trainer.save(BEST)
        self.full = full
        self.reached = {
            "step": step,
            "train_s": round(train_s, 3),
            "process_s": round(process_s, 3),
            "val_loss_full": full.loss,
            "val_loss_est": val_loss,
            "val_sampled": full.sampled,  # past train.final_eval_tokens: a spread sample of the split's windows
        }
        trainer.stopped = trainer.stopped or (  # every rank decides alike (rank 0's whole-split loss)
            f"target reached at step {step}: val {full.loss:.4f} on the whole split, at or below "
            f"train.target_loss {self.target:g}"
        )

    def summary(self, full: EvalResult | None, best_est: float, stopped: str | None) -> dict[str, Any] | None:
        """results.json's `target`: where it was reached and how long it took, or by how much the run
        missed it (the best whole-split loss known, a check's or the final evaluation's, else the best
        estimate, minus the target) and why it ended."""
        if self.target is None:
            return None
        base = {"loss": self.target, "reached": self.reached is not None, "from_step": self.from_step}
        base["host"] = self.host.to_dict() if self.host is not None else None
        if self.reached is not None:
            return {**base, **self.reached}
        known = [loss for loss in (self.best_full, full.loss if full is not None else None) if loss is not None]
        best, of = (min(known), "whole split") if known else (best_est, "estimate")
        return {**base, "best": best, "best_of": of, "missed_by": best - self.target, "ended": stopped or "max_steps"}
