"""A training run around the loop (`loop.py`): `Trainer` builds one process's model, optimizer and
batches, applies precision, attention form, compile and DDP, and adds evaluation, checkpoints, sync
points, signals, OOM and divergence advice, and the final evaluation (docs/design.md, "The core")."""

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

from minigpt.checkpoint import BEST, LAST, Checkpoint, find_checkpoint, resume_command
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
from minigpt.runtime.attention import set_attention
from minigpt.runtime.device import (
    autocast,
    dtype_name,
    enable_fast_matmul,
    log,
    maybe_compile,
)
from minigpt.runtime.distributed import wrap_ddp
from minigpt.runtime.memory import free_cached, out_of_memory
from minigpt.runtime.mfu import device_peak, flops_per_token, mfu_percent
from minigpt.training.callbacks import EarlyStopping, TimeBudget, components
from minigpt.training.disk import write_run_file
from minigpt.training.interrupts import StopNow, StopRequest
from minigpt.training.loop import Callback, Loop, StepStats, lr_at
from minigpt.training.optim import build_optimizer, load_optimizer_state
from minigpt.training.preflight import accum_steps
from minigpt.training.progress import Progress, describe_run
from minigpt.training.schedule import time_progress
from minigpt.training.state import RngStreams
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


class Trainer(Loop):
    """One training process of one run. Under torchrun every rank builds one; rank 0 alone writes."""

    def __init__(
        self,
        cfg: Config,
        corpus: Corpus,
        tok: Tokenizer,
        device: torch.device,
        dtype: torch.dtype,
        out_dir: Path,
        dist: distributed.Dist | None = None,
        products: bool = False,
    ) -> None:
        """`products`: bf16 attention as products on a CPU (train.attention, decided before)."""
        self.corpus, self.tok, self.out_dir = corpus, tok, out_dir
        self.dtype, self.dist = dtype, dist or distributed.Dist()
        t, rank, world = cfg.train, self.dist.rank, self.dist.world_size
        torch.manual_seed(t.seed)  # weights (the same on every rank) and dropout
        enable_fast_matmul(device)
        model = GPT(cfg.model, tok.vocab_size).to(device)
        self.products = products
        set_attention(model, products)
        if self.dist.enabled:
            torch.manual_seed(t.seed + 1 + rank)  # each rank its own dropout masks
        optimizer = build_optimizer(model, cfg, device, dtype)
        micro = t.batch_size // t.grad_accum_steps  # sequences per micro-step, all ranks together
        block = cfg.model.block_size
        ids = {"rank": rank, "world_size": world, "id_map": corpus.id_map}
        batcher = Batcher(corpus.train, block, micro, t.seed, device, **ids)
        super().__init__(cfg, model, optimizer, batcher, autocast(device, dtype))
        self.scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
        val_source = Batcher(corpus.val, block, micro, t.seed + 1, device, **ids)
        self.val_batches = [val_source.next() for _ in range(t.eval_steps)]  # fixed for the whole run
        self.rng = RngStreams(device, self.batcher, self.dist, t.seed)
        self.val_loss: float | None = None  # the latest evaluation's
        self.evaluated_at: int | None = None  # the step of the latest evaluation
        self.init_from: dict[str, Any] | None = None  # where a fine-tuned run's weights came from
        self.started, self.deadline = time.perf_counter(), None  # train.max_time counts from started
        self.rates: list[float] = []  # tokens/s of each log interval
        self.signals = StopRequest()  # train() installs the handlers
        self._failure: str | None = None  # a user's callback failed here (under DDP: told at the next sync point)
        self._stopping = False  # stopping for that failure
        self.mean_loss = math.nan  # the training loss agreed at the latest sync point
        self._request: str | None = None  # request_stop()'s reason, on this rank
        self._agreed_request = False  # some rank's request_stop(), agreed at a sync point
        self._agreed_signal: int | None = None  # under DDP: a stop signal every rank has seen
        self.time_budget: tuple[float, float, float] | None = None  # (start, progress then, deadline)
        describe_run(self)
        wrap = functools.partial(wrap_ddp, device=device) if self.dist.enabled else lambda m: m
        trial = self._compile_trial(micro // world)
        self.train_model = maybe_compile(self.model, t.compile, wrap, trial, device, self.dist)  # agreed by all ranks

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

    # -- one step, one evaluation -------------------------------------------------------------

    def learning_rate(self) -> float:
        progress = None
        if self.time_budget is not None:  # optim.schedule_by=time
            progress = self.state.time_progress = time_progress(*self.time_budget)
        return lr_at(self.state.step, self.cfg.optim, self.cfg.train.max_steps, progress)

    def no_sync(self, last_micro_step: bool) -> contextlib.AbstractContextManager:
        """Under DDP, gradients are averaged over ranks only on the last micro-step."""
        if not self.dist.enabled or last_micro_step:
            return contextlib.nullcontext()
        return self.train_model.no_sync()

    def train_step(self) -> StepStats:
        try:
            return super().train_step()
        except RuntimeError as e:  # CUDA's OutOfMemoryError, MPS's RuntimeError
            if not out_of_memory(e):
                raise
            raise self._out_of_memory() from None

    def evaluate(self) -> float:
        """The validation loss on the run's fixed batches, averaged over ranks."""
        local = estimate_loss(self.model, self.val_batches, self.ctx)
        return distributed.all_sum(torch.tensor([local], device=self.device), self.dist).item() / self.dist.world_size

    def _sync(self, stop: StopRequest) -> tuple[float, bool, bool, bool]:
        """A sync point (the same steps on every rank): the mean training loss over ranks since the
        last call, whether any rank got a stop signal, whether any called `request_stop`, and
        whether a callback failed on any; the only host sync between evals."""
        flags = [float(stop.signum or 0), float(self._request is not None), float(self._failure is not None)]
        reduced = distributed.all_sum(
            torch.stack([self._loss_sum.float(), *map(self._loss_sum.new_tensor, flags)]), self.dist
        )
        mean = reduced[0].item() / self.dist.world_size / max(self._loss_count, 1)
        return mean, reduced[1].item() > 0, reduced[2].item() > 0, reduced[3].item() > 0

    # -- state and checkpoints ----------------------------------------------------------------

    def checkpoint(self, resumable: bool = True) -> Checkpoint:
        """The run as it stands (live tensors), with, when `resumable`, all a resume needs (a collective
        call under DDP); without it, train.keep_every's weights-only snapshot."""
        extra: dict[str, Any] = {"step": self.state.step, "tokens_seen": self.state.tokens_seen}
        if resumable:
            scaler = self.scaler.state_dict() if self.scaler.is_enabled() else None
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
            precision={
                "device": self.device.type,
                "dtype": dtype_name(self.dtype),
                "attention": "products" if self.products else "flash",
                "threads": torch.get_num_threads(),
                "processes": self.dist.local_world_size,  # the processes that shared the cores
            },
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
            self.scaler.load_state_dict(state["scaler"])
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

    def _diverged(self, what: str, value: float) -> Diverged:
        return diverged_error(self.out_dir, self.cfg, self.state.step, what, value)

    # -- the loop -----------------------------------------------------------------------------

    def _save_between_steps(self) -> None:
        """last.pt now (never a broken model: a non-finite loss since the last sync point raises). Every
        rank comes here together (an agreed signal or failure): the loss is summed over ranks, so all
        raise or all save, never one raising while the others wait in the save's collectives."""
        loss = distributed.all_sum(self._loss_sum.reshape(1), self.dist).item()
        if self._loss_count and not math.isfinite(loss):
            raise self._diverged("training loss", loss)
        self.save(LAST)

    def _stop_for_signal(self, signum: int) -> None:
        """Save last.pt and stop with the resume command."""
        self._save_between_steps()
        raise TrainingInterrupted(
            128 + signum,
            f"stopped at step {self.state.step}; saved {self.out_dir / LAST}. Resume with: "
            f"{resume_command(self.out_dir)}",
        )

    def request_stop(self, reason: str) -> None:
        """End the run at the next point the ranks agree on (at once on one process), after scoring
        and saving the weights trained last."""
        self._request = self._request or reason

    stop = request_stop  # one rank's call must reach every rank: never at once under DDP

    def emit(self, event: str, *args: Any, to: Sequence[Callback] | None = None) -> None:
        """Call `event` on every callback (or those `to`), in order. A user's callback that raises
        stops the run, last.pt saved, with an error naming it; under DDP at the next sync point,
        where every rank stops (a checkpoint gathers from every rank: no rank may save alone)."""
        for callback in self.callbacks if to is None else to:
            try:
                getattr(callback, event)(self, *args)
            except Exception as e:
                if type(callback).__module__.startswith("minigpt."):
                    raise
                if self._stopping:  # the failure being told already stops the run
                    continue
                rank = f" on rank {self.dist.rank}" if self.dist.enabled else ""
                where = f"callback {type(callback).__name__} failed in {event} at step {self.state.step}{rank}"
                self._failure = self._failure or f"{where}: {first_line(e)}"
                if not self.dist.enabled or event == "on_train_end":
                    self._stop_for_failure(save=event != "on_train_end")

    def _stop_for_failure(self, save: bool = True) -> None:
        """A callback failed, on this rank or (under DDP) another: save last.pt (unless not `save`) and stop."""
        self._stopping = True
        if save:
            self._save_between_steps()
        failure = self._failure or "a callback failed on another process"
        raise UserError(f"{failure}; saved {self.out_dir / LAST}; resume with: {resume_command(self.out_dir)}")

    def _evaluate_and_save(self) -> None:
        """The validation loss (a divergence stops the run), then last.pt, and best.pt when it is a new best."""
        t0 = time.perf_counter()
        self.val_loss = self.evaluate()
        if not math.isfinite(self.val_loss):
            raise self._diverged("validation loss", self.val_loss)
        improved = self.state.record_eval(self.val_loss, self.cfg.train.min_delta)
        self.evaluated_at = self.state.step
        self.save(LAST, BEST) if improved else self.save(LAST)
        self.emit("on_eval", self.val_loss, improved)
        self._t_log += time.perf_counter() - t0  # evaluation and its callbacks stay out of tokens/s

    def before_step(self) -> None:
        """A stop signal (under DDP, one every rank has seen) saves last.pt and stops the run."""
        signum = self.signals.signum if not self.dist.enabled else self._agreed_signal
        if signum is not None:
            self._stop_for_signal(signum)

    def meet(self) -> None:
        """Where every rank meets (a step some component is due at): the loss and stop flags
        agreed, and a non-finite loss refused before anything is saved."""
        self.mean_loss, any_stop, self._agreed_request, any_failed = self._sync(self.signals)
        if any_failed:
            self._stop_for_failure()
        if self.dist.enabled and any_stop:
            self._agreed_signal = self.signals.signum or signal.SIGTERM
        if not math.isfinite(self.mean_loss):  # never checkpoint a broken model
            raise self._diverged("training loss", self.mean_loss)

    def log_step(self, stats: StepStats) -> None:
        """`on_log` with the loss agreed at this step's sync point, averaged since the last log step."""
        self._loss_sum.zero_()
        self._loss_count = 0
        now, tokens = time.perf_counter(), self.state.tokens_seen
        tps = (tokens - self._tokens_at_log) / max(now - self._t_log, 1e-9)
        self._t_log, self._tokens_at_log = now, tokens
        self.rates.append(tps)
        logs = {"step": self.state.step, "loss": self.mean_loss, "lr": stats.lr, "grad_norm": float(stats.grad_norm)}
        self.emit("on_log", {**logs, "tokens": tokens, "tokens_per_s": tps, "mfu": self.mfu(tps)})

    def mfu(self, tokens_per_s: float) -> float | None:
        """Model FLOPs utilisation in percent, where the device's peak is known."""
        if self._peak is None:
            return None
        return mfu_percent(tokens_per_s, self._flops_per_token, self._peak, self.dist.world_size)

    def final_eval(self) -> EvalResult:
        """The best checkpoint (else the current weights) on the whole validation split, in float32,
        as `minigpt eval` scores it; past train.final_eval_tokens, a spread sample of its windows."""
        model = copy.deepcopy(self.model).float().eval()
        best = find_checkpoint(self.out_dir, prefer=BEST)
        if best is not None:
            model.load_state_dict(Checkpoint.load(best).model)
        t = self.cfg.train  # windows a batch: at most what a training micro-batch held, beside the optimizer's state
        rows = max(1, min(64, t.batch_size // t.grad_accum_steps // self.dist.world_size))
        return evaluate_ids(model, self.corpus.val, self.corpus.id_map, t.final_eval_tokens, rows)

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
        log(f"final evaluation: {what}")
        t_full = time.perf_counter()
        try:
            with self.signals.at_once():
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
        }
        kept = f"training finished and {self.out_dir / LAST} is saved; score it with: minigpt eval {self.out_dir}"
        write_run_file(self.out_dir / "results.json", json.dumps(results, indent=1) + "\n", kept)

    def _begin(self, started: float | None, callbacks: Sequence[Any]) -> None:
        """The clocks, the time budget and the components of one `train()`."""
        t = self.cfg.train
        self.started = started or time.perf_counter()
        self.deadline = self.started + parse_duration(t.max_time) if t.max_time else None
        if self.cfg.optim.schedule_by == "time" and self.deadline is not None:
            # the rest of the decay (all of it, unless resumed) runs over what is left of max_time
            self.time_budget = (time.perf_counter(), self.state.time_progress, self.deadline)
        self._flops_per_token = flops_per_token(self.cfg.model, self.tok.vocab_size)
        self._peak = device_peak(self.device, self.cfg.log.peak_tflops)[0]
        self._t_log, self._tokens_at_log = time.perf_counter(), self.state.tokens_seen
        self.callbacks = []  # a built-in that fails to start leaves none to close
        watchers = [Progress(), *tensorboard_callbacks(self)] if self.dist.is_main else []  # the terminal first
        self.callbacks = [*components(self.cfg), *watchers, EarlyStopping(), TimeBudget(), *callbacks]

    def train(self, started: float | None = None, callbacks: Sequence[Any] = ()) -> TrainResult:
        """Train until train.max_steps (or a component stops it), telling `callbacks` (after the
        built-in ones) each event; then score the best checkpoint on the whole validation split.
        `started` is the perf_counter time the command began (wall times and train.max_time count
        from it)."""
        t, result = self.cfg.train, None
        self._begin(started, callbacks)
        try:
            self.emit("on_train_start")
            with StopRequest(hard_exit=not self.dist.enabled) as self.signals:
                self.run()
                if self.dist.enabled:  # a callback's failure since the last sync point is told here
                    self.meet()
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

    def after_step(self, synced: bool, last: bool) -> None:
        """request_stop(): on one process at once, under DDP once the ranks agree at a sync point;
        the weights trained last are scored (they may be the best) and saved first."""
        if not (self._request or self._agreed_request) or last or self.stopped is not None:
            return
        if self.dist.enabled and not (synced and self._agreed_request):
            return
        if self.evaluated_at != self.state.step:
            if not synced:
                self.meet()
            self._evaluate_and_save()
        self.stopped = self._request or f"stopped at step {self.state.step}: another process asked to stop"

    def _result(self, full: EvalResult | None, final_seconds: float) -> TrainResult:
        s = self.state
        rate = statistics.median(self.rates) if self.rates else None
        wall = time.perf_counter() - self.started
        result = TrainResult(self.out_dir, s.step, s.best_val_loss, self.val_loss, wall, self.stopped, full, rate)
        result.final_seconds = final_seconds
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


def diverged_error(out_dir: Path, cfg: Config, step: int, quantity: str, value: float) -> Diverged:
    """The error a non-finite loss or gradient ends a run with: where the last good checkpoint is,
    and the command that continues from it at half the rate."""
    good = find_checkpoint(out_dir, prefer=LAST)
    o, where = cfg.optim, f"training diverged: the {quantity} became {value} at step {step}"
    if good is None:
        return Diverged(
            f"{where} (no checkpoint was written); start again with a lower optim.lr (now {o.lr:g}), "
            "keep optim.grad_clip on, or check the data"
        )
    return Diverged(
        f"{where} (the last good checkpoint is kept: {good}); continue from it at half the learning rate with: "
        f"{lower_rate_command(out_dir, cfg, good)} (halve it again if it diverges again), or check the data"
    )
