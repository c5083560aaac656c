"""A training run for the loop (`loop.train`): `Trainer` builds one process's model, optimizer and
batches, applies precision, attention form, compile and DDP, and gives the loop what it calls by
name (the schedule, logging, evaluation, checkpoints); `Agreement` is where the processes meet
(signals, stop requests, callback failures, divergence). Around the loop: OOM advice and the final
evaluation (docs/design.md, "The core")."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import math
import signal
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from minigpt.checkpoint import BEST, LAST, Checkpoint, find_checkpoint, resume_command, snapshot_name
from minigpt.config.fields import parse_duration
from minigpt.config.files import value_text
from minigpt.config.schema import Config, config_from_dict
from minigpt.data.corpus import Batcher, Corpus
from minigpt.data.tokenizer import Tokenizer
from minigpt.errors import Diverged, TrainingInterrupted, UserError, first_line
from minigpt.infer.evaluate import EvalResult, evaluate_ids
from minigpt.infer.windows import token_losses
from minigpt.model import GPT, evaluating
from minigpt.runtime import distributed
from minigpt.runtime.attention import use_products
from minigpt.runtime.device import (
    autocast,
    enable_fast_matmul,
    log,
    maybe_compile,
)
from minigpt.runtime.distributed import wrap_ddp
from minigpt.runtime.memory import free_cached, out_of_memory
from minigpt.runtime.mfu import device_peak, flops_per_token, mfu_percent
from minigpt.training import loop
from minigpt.training.callbacks import Callback, EarlyStopping, Every, TargetLoss, TimeBudget
from minigpt.training.disk import write_run_file
from minigpt.training.interrupts import StopNow, StopRequest
from minigpt.training.loop import Due, Step, StepStats, lr_at
from minigpt.training.optim import build_optimizer, load_optimizer_state
from minigpt.training.preflight import accum_steps
from minigpt.training.progress import Progress, describe_run
from minigpt.training.schedule import time_progress
from minigpt.training.state import RngStreams, TrainState
from minigpt.training.tensorboard import tensorboard_callbacks


@torch.no_grad()
def estimate_loss(model: GPT, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], ctx) -> float:
    """Mean loss over fixed batches, in eval mode (no dropout)."""
    total = torch.zeros((), device=batches[0][0].device)
    with evaluating(model):
        for x, y in batches:
            with ctx:
                total += token_losses(model, x, y)[0].mean()
    return total.item() / len(batches)


@dataclass
class TrainResult:
    out_dir: Path
    step: int
    best_val_loss: float
    val_loss: float | None
    wall_seconds: float
    stopped: str | None = None  # why training ended before max_steps (patience, max_time)
    full: EvalResult | None = None  # the best checkpoint on the whole validation split
    tokens_per_s: float | None = None  # the median over the run's log intervals
    final_seconds: float = 0.0  # how long the final evaluation took
    target: dict[str, Any] | None = None  # train.target_loss: reached where and when, or missed by how much


class Agreement:
    """What the processes of a run agree on where they meet (`loop.train` calls it): the training
    loss since the last log step, stop signals, `request_stop()`, a user's callback that failed, and
    a loss that diverged. On one process the agreement is at once; under DDP it is reached at the
    steps where some component is due (the same on every rank), the only host syncs between evals."""

    def __init__(self, run: Trainer) -> None:
        self.run = run
        self.dist = run.dist
        self.signals = StopRequest()  # Trainer.train() installs the handlers
        self.loss_sum = torch.zeros((), device=run.device)  # training loss since the last log step
        self.loss_count = 0
        self.mean_loss = math.nan  # the training loss agreed at the latest meeting
        self.request: str | None = None  # request_stop()'s reason, on this rank
        self.agreed_request = False  # some rank's request_stop(), agreed at a meeting
        self.agreed_signal: int | None = None  # under DDP: a stop signal every rank has seen
        self.failure: str | None = None  # a user's callback failed here (under DDP: told at the next meeting)
        self.stopping = False  # stopping for that failure

    def add_loss(self, loss: torch.Tensor) -> None:
        self.loss_sum += loss
        self.loss_count += 1

    def take_mean_loss(self) -> float:
        """The loss agreed at this meeting, averaged since the last log step; the count starts again."""
        self.loss_sum.zero_()
        self.loss_count = 0
        return self.mean_loss

    def stop_if_signalled(self) -> None:
        """A stop signal (under DDP, one every rank has seen) saves last.pt and stops the run."""
        signum = self.signals.signum if not self.dist.enabled else self.agreed_signal
        if signum is None:
            return
        self.save_between_steps()
        out_dir = self.run.out_dir
        raise TrainingInterrupted(
            128 + signum,
            f"stopped at step {self.run.state.step}; saved {out_dir / LAST}. Resume with: {resume_command(out_dir)}",
        )

    def meet(self) -> None:
        """Where every rank meets (a step some component is due at): the mean training loss over
        ranks since the last log step, and whether any rank got a stop signal, called
        `request_stop` or had a callback fail; a non-finite loss is refused before anything is saved."""
        flags = [float(self.signals.signum or 0), float(self.request is not None), float(self.failure is not None)]
        reduced = distributed.all_sum(
            torch.stack([self.loss_sum.float(), *map(self.loss_sum.new_tensor, flags)]), self.dist
        )
        self.mean_loss = reduced[0].item() / self.dist.world_size / max(self.loss_count, 1)
        self.agreed_request = reduced[2].item() > 0
        if reduced[3].item() > 0:
            self.stop_for_failure()
        if self.dist.enabled and reduced[1].item() > 0:
            self.agreed_signal = self.signals.signum or signal.SIGTERM
        if not math.isfinite(self.mean_loss):  # never checkpoint a broken model
            raise self.run.diverged("training loss", self.mean_loss)

    def stop_requested(self, met: bool, last: bool) -> str | None:
        """request_stop()'s reason: on one process at once, under DDP once the ranks agreed at a meeting."""
        if not (self.request or self.agreed_request) or last:
            return None
        if self.dist.enabled and not (met and self.agreed_request):
            return None
        if not met:
            self.meet()
        return self.request or f"stopped at step {self.run.state.step}: another process asked to stop"

    def finish(self) -> None:
        if self.dist.enabled:  # a callback's failure since the last meeting is told here
            self.meet()

    def callback_failed(self, where: str, error: Exception, at_end: bool) -> None:
        """A user's callback raised `error` (`where`: which, in which event): the run stops, last.pt
        saved (not after `on_train_end`); under DDP at the next meeting, where every rank stops (a
        checkpoint gathers from every rank: no rank may save alone)."""
        if self.stopping:  # the failure being told already stops the run
            return
        self.failure = self.failure or f"{where}: {first_line(error)}"
        if not self.dist.enabled or at_end:
            self.stop_for_failure(save=not at_end)

    def stop_for_failure(self, save: bool = True) -> None:
        """A callback failed, on this rank or (under DDP) another: save last.pt (unless not `save`) and stop."""
        self.stopping = True
        if save:
            self.save_between_steps()
        failure = self.failure or "a callback failed on another process"
        out_dir = self.run.out_dir
        raise UserError(f"{failure}; saved {out_dir / LAST}; resume with: {resume_command(out_dir)}")

    def save_between_steps(self) -> None:
        """last.pt now (never a broken model: a non-finite loss since the last meeting raises). Every
        rank comes here together (an agreed signal or failure): the loss is summed over ranks, so all
        raise or all save, never one raising while the others wait in the save's collectives."""
        loss = distributed.all_sum(self.loss_sum.reshape(1), self.dist).item()
        if self.loss_count and not math.isfinite(loss):
            raise self.run.diverged("training loss", loss)
        self.run.save(LAST)


class Trainer:
    """One training process of one run, built whole before `loop.train` trains it. Under torchrun
    every rank builds one; rank 0 alone writes."""

    def __init__(
        self,
        cfg: Config,
        corpus: Corpus,
        tok: Tokenizer,
        device: torch.device,
        dtype: torch.dtype,
        out_dir: Path,
        dist: distributed.Dist | None = None,
        decided: dict[str, Any] | None = None,
    ) -> None:
        """`cfg` is the resolved config (train.dtype, train.attention and a CPU's train.threads concrete:
        what config.yaml holds and the checkpoint carries); `decided` says which of those keys auto chose,
        on which device and with how many processes sharing it (a resume elsewhere decides them again)."""
        self.cfg = cfg
        self.corpus = corpus
        self.tok = tok
        self.out_dir = out_dir
        self.device = device
        self.dtype = dtype
        self.dist = dist or distributed.Dist()
        t = cfg.train
        rank = self.dist.rank
        world = self.dist.world_size
        torch.manual_seed(t.seed)  # weights (the same on every rank) and dropout
        enable_fast_matmul(device)
        self.model = GPT(cfg.model, tok.vocab_size).to(device)
        self.decided = decided
        if t.attention == "products":
            use_products(self.model)  # the CPU's bf16 attention by products, where train.attention chose it
        if self.dist.enabled:
            torch.manual_seed(t.seed + 1 + rank)  # each rank its own dropout masks
        self.optimizer = build_optimizer(self.model, cfg, device, dtype)
        micro = t.batch_size // t.grad_accum_steps  # sequences per micro-step, all ranks together
        block = cfg.model.block_size
        ids = {"rank": rank, "world_size": world, "id_map": corpus.id_map}
        self.batcher = Batcher(corpus.train, block, micro, t.seed, device, **ids)
        self.ctx = autocast(device, dtype)
        val_source = Batcher(corpus.val, block, micro, t.seed + 1, device, **ids)
        self.val_batches = [val_source.next() for _ in range(t.eval_steps)]  # fixed for the whole run
        self.state = TrainState()
        self.max_steps = t.max_steps
        self.tokens_per_step = t.batch_size * block
        self.logging = Every(cfg.log.interval, at_last=True)
        self.evaluation = Every(t.eval_interval, at_last=True)
        self.checkpointing = Every(t.ckpt_interval, at_last=False)
        self.snapshots = Every(t.keep_every, at_last=False)
        self.callbacks: list[Callback] = []  # Trainer.train() sets them, in the order they run
        self.agreement = Agreement(self)
        self.rng = RngStreams(device, self.batcher, self.dist, t.seed)
        self.stopped: str | None = None  # why the run ended before train.max_steps
        self.val_loss: float | None = None  # the latest evaluation's
        self.evaluated_at: int | None = None  # the step of the latest evaluation
        self.init_from: dict[str, Any] | None = None  # where a fine-tuned run's weights came from
        self.started = time.perf_counter()  # train.max_time counts from started
        self.deadline: float | None = None
        self.rates: list[float] = []  # tokens/s of each log interval
        self.time_budget: tuple[float, float, float] | None = None  # (start, progress then, deadline)
        self.target = TargetLoss(None)  # train.target_loss: Trainer.train() sets it
        describe_run(self)
        wrap = functools.partial(wrap_ddp, device=device) if self.dist.enabled else lambda m: m
        trial = self._compile_trial(micro // world)
        self.train_model = maybe_compile(self.model, t.compile, wrap, trial, device, self.dist)  # agreed by all ranks
        self.step = Step(
            model=self.model,
            train_model=self.train_model,
            optimizer=self.optimizer,
            next_batch=self.batcher.next,
            ctx=self.ctx,
            scaler=torch.amp.GradScaler(device.type, enabled=dtype == torch.float16),
            accum=t.grad_accum_steps,
            grad_clip=cfg.optim.grad_clip,
            no_sync=self.train_model.no_sync if self.dist.enabled else contextlib.nullcontext,
        )

    def _compile_trial(self, rows: int) -> Callable[[torch.nn.Module], None]:
        """A forward and backward shaped like a real micro-step: x and y are views of one (B, T+1)
        window, as the batcher gives them (torch.compile guards on strides), under DDP's no_sync."""

        def trial(wrapped: torch.nn.Module) -> None:
            window = torch.zeros((rows, self.cfg.model.block_size + 1), dtype=torch.long, device=self.device)
            no_sync = wrapped.no_sync() if self.dist.enabled else contextlib.nullcontext()
            with no_sync, self.ctx:
                _, loss = wrapped(window[:, :-1], window[:, 1:])
            loss.backward()

        return trial

    # -- the schedule, one evaluation --------------------------------------------------------

    def learning_rate(self) -> float:
        """This step's peak rate: `lr_at`, following a time budget's progress where there is one."""
        progress = None
        if self.time_budget is not None:  # optim.schedule_by=time
            progress = self.state.time_progress = time_progress(*self.time_budget)
        return lr_at(self.state.step, self.cfg.optim, self.cfg.train.max_steps, progress)

    def evaluate(self) -> float:
        """The validation loss on the run's fixed batches, averaged over ranks."""
        local = estimate_loss(self.model, self.val_batches, self.ctx)
        return distributed.all_sum(torch.tensor([local], device=self.device), self.dist).item() / self.dist.world_size

    # -- state and checkpoints ----------------------------------------------------------------

    def checkpoint(self, resumable: bool = True) -> Checkpoint:
        """The run as it stands (live tensors), with, when `resumable`, all a resume needs (a collective
        call under DDP); without it, train.keep_every's weights-only snapshot."""
        extra: dict[str, Any] = {"step": self.state.step, "tokens_seen": self.state.tokens_seen}
        if resumable:
            scaler = self.step.scaler.state_dict() if self.step.scaler.is_enabled() else None
            extra = {
                "optimizer": self.optimizer.state_dict(),
                "scaler": scaler,
                **self.state.state_dict(),
                **self.rng.state_dict(),
            }
        return Checkpoint(
            model=self.model.state_dict(),  # the unwrapped model: loads anywhere, with or without DDP
            config=self.cfg.to_dict(),
            tokenizer=self.tok.to_dict(),
            data={"path": self.cfg.data.path, "sha256": self.corpus.sha256},
            val_loss=self.val_loss,
            decided=self.decided,
            init_from=self.init_from,
            **extra,
        )

    def state_dict(self) -> dict[str, Any]:
        """The resumable checkpoint's content, for `load_state_dict` (a collective call under DDP)."""
        return self.checkpoint().to_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        load_optimizer_state(self.optimizer, state["optimizer"])
        if state.get("scaler"):
            self.step.scaler.load_state_dict(state["scaler"])
        self.state.load_state_dict(state)
        self.rng.load_state_dict(state, self.state.step)
        self.init_from = state.get("init_from")

    def save(self, *names: str) -> None:
        """Write the current state as each of `names` (last.pt, best.pt) in the run directory."""
        ckpt = self.checkpoint()
        if self.dist.is_main:
            for name in names:
                ckpt.save(self.out_dir / name)
        distributed.all_sum(torch.ones(1, device=self.device), self.dist).item()  # DDP: on_save after the files exist
        self.emit("on_save", [self.out_dir / name for name in names])

    def _out_of_memory(self) -> UserError:
        """A device that ran out of memory despite the preflight: the same advice, nothing saved."""
        t = self.cfg.train
        self.optimizer.zero_grad(set_to_none=True)
        free_cached(self.device)
        micro = t.batch_size // t.grad_accum_steps // self.dist.world_size
        split = accum_steps(self.cfg, self.dist.world_size, t.grad_accum_steps + 1)
        advice = f"; try train.grad_accum_steps={split[0]} (the same batch in smaller micro-batches)" if split else ""
        return UserError(
            f"out of memory on {self.device} at step {self.state.step} with micro-batches of {micro} sequences of "
            f"{self.cfg.model.block_size}{advice}, or a smaller model; {self.out_dir / LAST} is unchanged"
        )

    def diverged(self, quantity: str, value: float) -> Diverged:
        """The error a non-finite loss or gradient ends the run with: where the last good checkpoint
        is, and the command that continues from it at half the rate (`lower_rate_command`)."""
        good = find_checkpoint(self.out_dir, prefer=LAST)
        o, where = self.cfg.optim, f"training diverged: the {quantity} became {value} at step {self.state.step}"
        if good is None:
            return Diverged(
                f"{where} (no checkpoint was written); start again with a lower optim.lr (now {o.lr:g}), "
                "keep optim.grad_clip on, or check the data"
            )
        return Diverged(
            f"{where} (the last good checkpoint is kept: {good}); continue from it at half the learning rate "
            f"with: {lower_rate_command(self.out_dir, self.cfg, good)} (halve it again if it diverges again), "
            "or check the data"
        )

    # -- what the loop calls by name ----------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """End the run at the next point the ranks agree on (at once on one process), after scoring
        and saving the weights trained last."""
        self.agreement.request = self.agreement.request or reason

    stop = request_stop  # one rank's call must reach every rank: never at once under DDP

    def emit(self, event: str, *args: object, to: Sequence[Due] | None = None) -> None:
        """Call `event` on every callback (or those `to`), in order. A user's callback that raises
        stops the run with an error naming it (`Agreement.callback_failed`)."""
        for callback in self.callbacks if to is None else to:
            try:
                getattr(callback, event)(self, *args)
            except Exception as e:
                if type(callback).__module__.startswith("minigpt."):
                    raise
                rank = f" on rank {self.dist.rank}" if self.dist.enabled else ""
                where = f"callback {type(callback).__name__} failed in {event} at step {self.state.step}{rank}"
                self.agreement.callback_failed(where, e, at_end=event == "on_train_end")

    def log(self, stats: StepStats) -> None:
        """`on_log` with the loss agreed at this step's meeting, averaged since the last log step."""
        loss = self.agreement.take_mean_loss()
        now = time.perf_counter()
        tokens = self.state.tokens_seen
        tps = (tokens - self._tokens_at_log) / max(now - self._t_log, 1e-9)
        self._t_log = now
        self._tokens_at_log = tokens
        self.rates.append(tps)
        logs = {"step": self.state.step, "loss": loss, "lr": stats.lr, "grad_norm": float(stats.grad_norm)}
        self.emit("on_log", {**logs, "tokens": tokens, "tokens_per_s": tps, "mfu": self.mfu(tps)})

    def evaluate_and_save(self) -> None:
        """The validation loss (a divergence stops the run), then last.pt, and best.pt when it is a new best."""
        t0 = time.perf_counter()
        self.val_loss = self.evaluate()
        if not math.isfinite(self.val_loss):
            raise self.diverged("validation loss", self.val_loss)
        improved = self.state.record_eval(self.val_loss, self.cfg.train.min_delta)
        self.evaluated_at = self.state.step
        if improved:
            self.save(LAST, BEST)
        else:
            self.save(LAST)
        self.emit("on_eval", self.val_loss, improved)
        self._t_log += time.perf_counter() - t0  # evaluation and its callbacks stay out of tokens/s

    def save_last(self) -> None:
        self.save(LAST)

    def save_snapshot(self, stats: StepStats) -> None:
        """train.keep_every: rank 0 keeps this step's weights as step_NNNNNNN.pt, unless the step went
        non-finite (a broken model is never kept)."""
        if not self.dist.is_main:
            return
        # under a GradScaler (fp16) a non-finite gradient is a skipped step: the weights are whole
        norm_ok = self.step.scaler.is_enabled() or math.isfinite(float(stats.grad_norm))
        if not (math.isfinite(stats.loss.item()) and norm_ok):
            return
        snapshot = self.checkpoint(resumable=False)
        if self.evaluated_at != self.state.step:
            snapshot.val_loss = None  # the latest evaluation was an earlier step's
        snapshot.save(self.out_dir / snapshot_name(self.state.step))

    def mfu(self, tokens_per_s: float) -> float | None:
        """Model FLOPs utilisation in percent, where the device's peak is known."""
        if self._peak is None:
            return None
        return mfu_percent(tokens_per_s, self._flops_per_token, self._peak, self.dist.world_size)

    def final_eval(self) -> EvalResult:
        """The best checkpoint (else the current weights) on the whole validation split (`score`)."""
        best = find_checkpoint(self.out_dir, prefer=BEST)
        return self.score(Checkpoint.load(best).model if best is not None else None)

    def score(self, weights: dict[str, torch.Tensor] | None = None) -> EvalResult:
        """`weights` (else the current ones) on the whole validation split, in float32, as `minigpt eval`
        scores it; past train.final_eval_tokens, a spread sample of its windows."""
        model = copy.deepcopy(self.model).float().eval()
        if weights is not None:
            model.load_state_dict(weights)
        t = self.cfg.train  # windows a batch: at most what a training micro-batch held, beside the optimizer's state
        rows = max(1, min(64, t.batch_size // t.grad_accum_steps // self.dist.world_size))
        return evaluate_ids(model, self.corpus.val, self.corpus.id_map, t.final_eval_tokens, rows)

    def score_now(self) -> EvalResult:
        """The current weights on the whole validation split (`score`), scored on rank 0 and sent to
        every rank (an all-reduce to which the others add zeros), so every rank holds rank 0's result."""
        mine = self.score() if self.dist.is_main else EvalResult(0.0, 0)
        mine.unit = self.tok.unit
        if not self.dist.enabled:
            return mine
        sent = torch.tensor([mine.loss, mine.tokens, mine.of_tokens or 0], dtype=torch.float64, device=self.device)
        loss, tokens, of_tokens = distributed.all_sum(sent, self.dist).tolist()
        return EvalResult(loss, int(tokens), self.tok.unit, int(of_tokens) or None)

    def _final_evaluation(self) -> tuple[EvalResult | None, float]:
        """final_eval() and its seconds; a stop signal ends it at once: last.pt holds the final step;
        out of memory even one window at a time, None (results.json is written without it)."""
        n, bound = len(self.corpus.val), self.cfg.train.final_eval_tokens
        what = (
            f"the whole validation split ({n:,} {self.tok.unit}s)"
            if not bound or n <= bound
            else (
                f"a spread sample of about {bound:,} of the validation split's {n:,} {self.tok.unit}s "
                "(train.final_eval_tokens)"
            )
        )
        if self.target.full is not None:  # best.pt holds the weights the target's check scored
            log(f"final evaluation: {what}, scored at step {self.target.reached['step']} for train.target_loss")
            return self.target.full, 0.0
        log(f"final evaluation: {what}")
        t_full = time.perf_counter()
        try:
            with self.agreement.signals.at_once():
                return self.final_eval(), time.perf_counter() - t_full
        except StopNow as e:
            raise TrainingInterrupted(
                128 + e.signum,
                f"stopped during the final evaluation; training ended at step "
                f"{self.state.step}, saved in {self.out_dir / LAST}. Score it with: "
                f"{resume_command(self.out_dir, auto=True)}",
            ) from None
        except RuntimeError as e:
            if not out_of_memory(e):
                raise
            log(f"final evaluation: out of memory on {self.device} in one window; later: minigpt eval {self.out_dir}")
            return None, time.perf_counter() - t_full

    def _write_results(self, result: TrainResult) -> None:
        full = result.full
        results = {
            "steps": result.step,
            "wall_s": round(result.wall_seconds, 3),
            "tokens": self.state.tokens_seen,
            "best_step": self.state.best_step,
            "best_val_loss_est": result.best_val_loss,  # train.eval_steps batches; val_loss_full: the whole split
            "val_loss_full": full.loss if full else None,
            "val_bpc_full": full.bpc if full else None,
            "tokens_per_s": result.tokens_per_s,
            "stopped": result.stopped or "max_steps",
            "val_tokens_scored": full.tokens if full else None,
            "val_tokens": (full.of_tokens or full.tokens) if full else None,
            "target": result.target,
        }
        kept = f"training finished and {self.out_dir / LAST} is saved; score it with: minigpt eval {self.out_dir}"
        write_run_file(self.out_dir / "results.json", json.dumps(results, indent=1) + "\n", kept)

    def _begin(self, started: float | None, callbacks: Sequence[Callback]) -> None:
        """The clocks, the time budget and the callbacks of one `train()`."""
        t = self.cfg.train
        self.started = started or time.perf_counter()
        self.deadline = self.started + parse_duration(t.max_time) if t.max_time else None
        if self.cfg.optim.schedule_by == "time" and self.deadline is not None:
            # the rest of the decay (all of it, unless resumed) runs over what is left of max_time
            self.time_budget = (time.perf_counter(), self.state.time_progress, self.deadline)
        self._flops_per_token = flops_per_token(self.cfg.model, self.tok.vocab_size)
        self._peak = device_peak(self.device, self.cfg.log.peak_tflops)[0]
        self._t_log = time.perf_counter()
        self._tokens_at_log = self.state.tokens_seen
        self.callbacks = []  # a built-in that fails to start leaves none to close
        watchers = [Progress(), *tensorboard_callbacks(self)] if self.dist.is_main else []  # the terminal first
        self.target = TargetLoss(t.target_loss)  # before the other stops: a run at its target says so
        self.callbacks = [*watchers, self.target, EarlyStopping(), TimeBudget(), *callbacks]

    def train(self, started: float | None = None, callbacks: Sequence[Callback] = ()) -> TrainResult:
        """Train (`loop.train`) until train.max_steps (or a stop), telling `callbacks` (after the
        built-in ones) each event; then score the best checkpoint on the whole validation split.
        `started` is the perf_counter time the command began (wall times and train.max_time count
        from it)."""
        t = self.cfg.train
        result = None
        self._begin(started, callbacks)
        try:
            self.emit("on_train_start")
            with StopRequest(hard_exit=not self.dist.enabled) as self.agreement.signals:
                try:
                    loop.train(self)
                except RuntimeError as e:  # CUDA's OutOfMemoryError, MPS's RuntimeError
                    if not out_of_memory(e):
                        raise
                    raise self._out_of_memory() from None
                if self.stopped:
                    log(self.stopped)
                full, seconds = self._final_evaluation() if t.final_eval and self.dist.is_main else (None, 0.0)
            result = self._result(full, seconds)
        except BaseException:
            with contextlib.suppress(Exception):  # the error on its way out is the one to tell
                self.emit("on_train_end", None)
            raise
        self.emit("on_train_end", result)
        return result

    def _result(self, full: EvalResult | None, final_seconds: float) -> TrainResult:
        s = self.state
        rate = statistics.median(self.rates) if self.rates else None
        wall = time.perf_counter() - self.started
        result = TrainResult(self.out_dir, s.step, s.best_val_loss, self.val_loss, wall, self.stopped, full, rate)
        result.final_seconds = final_seconds
        result.target = self.target.summary(full, s.best_val_loss, self.stopped)
        if self.dist.is_main:
            self._write_results(result)
        return result


# -- after a divergence (a NaN or infinite loss): the one command that continues the run from its
# last good checkpoint at a lower rate. A resume may change the rates (`schedule.RATE_KEYS`), so
# the way on is the checkpoint, not a new run.


def lower_rate_command(out_dir: Path, cfg: Config, good: Path) -> str:
    """`minigpt train --out RUN --resume ...`: the settings this process ran with where they differ
    from those saved in the last good checkpoint `good` (a longer train.max_steps, say), and the
    whole schedule at half the rate (Muon's too), gradient clipping on if it was off."""
    o = cfg.optim
    rates = {"optim.lr": f"{o.lr / 2:g}"}
    if o.min_lr > 0:
        rates["optim.min_lr"] = f"{o.min_lr / 2:g}"
    if o.optimizer == "muon":
        rates["optim.muon_lr"] = f"{o.muon_lr / 2:g}"
    if o.grad_clip == 0:
        rates["optim.grad_clip"] = "1"
    try:
        saved = config_from_dict(Checkpoint.load(good, verify=()).config, str(good)).flat()
    except UserError:
        saved = {}
    now = cfg.flat()
    kept = [f"{k}={value_text(v)}" for k, v in now.items() if k in saved and saved[k] != v and k not in rates]
    return resume_command(out_dir, *kept, *(f"{k}={v}" for k, v in rates.items()))
