"""What a person at the terminal sees of a training run (rank 0): the start-up lines, `Progress` (the bar or
lines, evaluations, the summary) and `ByteProgress` (encoding a large corpus); the only module using tqdm."""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from tqdm import tqdm

from minigpt.runtime import device as runtime
from minigpt.runtime import distributed
from minigpt.runtime.device import log
from minigpt.runtime.mfu import Host, device_peak, flops_per_token
from minigpt.training.callbacks import Callback


def describe_run(trainer: Any) -> None:
    """The start-up lines of a `Trainer`: the data, the model and where it runs, the MFU basis."""
    cfg, corpus, tok, model = trainer.cfg, trainer.corpus, trainer.tok, trainer.model
    device, dist = trainer.device, trainer.dist
    n_train, n_val = len(corpus.train), len(corpus.val)
    unit = tok.unit + "s"
    log(
        f"data: {corpus.description} ({n_train + n_val:,} {unit}, {tok.kind} vocab {tok.vocab_size}; "
        f"{n_train:,} train / {n_val:,} val)"
    )
    where = f"{dist.world_size} processes ({device.type}, DDP)" if dist.enabled else f"device {device}"
    log(f"model: {model.num_params() / 1e6:.2f}M parameters | {where} | dtype {runtime.dtype_name(trainer.dtype)}")
    peak, peak_source = device_peak(device, cfg.log.peak_tflops)
    if peak is not None or device.type == "cuda":
        log(f"MFU: {flops_per_token(cfg.model, tok.vocab_size) / 1e6:.1f} MFLOP per token trained; peak {peak_source}")


BIG_ENCODE = 64 << 20  # bytes: smaller texts encode in well under a second, silently


class ByteProgress:
    """Encoding or hashing a large corpus: a bar in bytes/s on a terminal, then one line (rank 0 only)."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.start = total, desc, time.perf_counter()
        self.show = total >= BIG_ENCODE and distributed.launched().is_main
        self.bar = tqdm(
            total=total,
            desc=desc,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            leave=False,
            disable=not (self.show and sys.stderr.isatty()),
        )

    def update(self, n: int) -> None:
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()
        if self.show:
            seconds = time.perf_counter() - self.start
            log(f"{self.desc}: {self.total / 1e6:,.0f} MB in {seconds:.2f} s ({self.total / 1e6 / seconds:,.0f} MB/s)")


def eta_text(seconds: float) -> str:
    return f"{int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"


class Progress(Callback):
    """log.progress (a bar, or a line every log.progress_seconds), each evaluation's line and the summary."""

    def on_train_start(self, trainer: Any) -> None:
        self.cfg, self.out_dir, self.start_step = trainer.cfg, trainer.out_dir, trainer.state.step
        self.bits = "bpc" if trainer.tok.unit == "char" else "bits/byte"  # a byte model's loss is per byte
        # auto: a bar on a terminal, lines in a file or a pipe (where a bar leaves carriage-return fragments)
        mode = self.cfg.log.progress
        self.mode = mode if mode != "auto" else "bar" if sys.stderr.isatty() else "lines"
        self.budget = (trainer.started, trainer.deadline) if trainer.time_budget else None
        total = None if self.budget else self.cfg.train.max_steps  # a step count there is only a cap
        self.bar = tqdm(
            total=total,
            initial=self.start_step,
            desc="train",
            unit="step",
            file=sys.stderr,
            dynamic_ncols=True,
            disable=self.mode != "bar",
        )
        self._exit = contextlib.ExitStack()
        if self.mode == "bar":
            self._exit.enter_context(runtime.log_sink(lambda msg: tqdm.write(msg, file=sys.stderr)))
        self.t_start = self.t_line = time.perf_counter()  # t_line: when the last progress line was written

    def on_step_end(self, trainer: Any, stats: Any) -> None:
        self.bar.update(1)

    def on_log(self, trainer: Any, logs: dict[str, float]) -> None:
        step, loss, lr, tps, mfu = (logs[k] for k in ("step", "loss", "lr", "tokens_per_s", "mfu"))
        shown = {"loss": f"{loss:.4f}", "lr": f"{lr:.2e}", "tok_s": f"{tps:,.0f}"}
        if mfu is not None:
            shown["mfu"] = f"{mfu:.1f}%"
        self.bar.set_postfix(shown, refresh=False)
        now, total = time.perf_counter(), self.cfg.train.max_steps
        if self.mode != "lines" or (now - self.t_line < self.cfg.log.progress_seconds and step != total):
            return
        self.t_line = now
        if self.budget:
            start, deadline = self.budget
            left = max(0.0, deadline - now)
            done = f"step {step} ({100 * min(1.0, (now - start) / max(deadline - start, 1e-9)):.0f}% of the time)"
        else:
            rate = (step - self.start_step) / max(now - self.t_start, 1e-9)  # steps/s in this process
            left = (total - step) / rate if rate > 0 else 0.0
            done = f"step {step}/{total} ({100 * step / total:.0f}%)"
        extra = f" | MFU {mfu:.1f}%" if mfu is not None else ""
        log(f"{done} | loss {loss:.4f} | lr {lr:.2e} | {tps:,.0f} tokens/s{extra} | ETA {eta_text(left)}")

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None:
        best = " *best" if improved else ""
        log(f"step {trainer.state.step}: val est {val_loss:.4f} ({val_loss / math.log(2):.3f} {self.bits}){best}")

    def on_train_end(self, trainer: Any, result: Any) -> None:
        self.bar.close()
        self._exit.close()
        if result is None:
            return
        speed, full = "", result.full
        if result.tokens_per_s is not None:
            mfu = trainer.mfu(result.tokens_per_s)
            speed = f", {result.tokens_per_s:,.0f} tokens/s" + (f" (MFU {mfu:.1f}%)" if mfu is not None else "")
        exact = ""
        if full is not None:
            took = f"scored in {result.final_seconds:.1f}s"
            if result.target and result.target["reached"]:
                took = f"scored at step {result.target['step']:,} for the target"
            exact = f"; val full {full.loss:.4f} ({full.bpc:.3f} {self.bits} on the whole split, {took})"
            if full.sampled:  # past train.final_eval_tokens
                exact = (
                    f"; val full {full.loss:.4f} ({full.bpc:.3f} {self.bits}) on a spread sample of "
                    f"{full.tokens:,} of its {full.of_tokens:,} {trainer.tok.unit}s (train.final_eval_tokens; "
                    f"{took}; minigpt eval scores them all)"
                )
        out, best = self.out_dir, result.best_val_loss
        target = f"\n  target:      {target_text(result.target)}" if result.target else ""
        row = f"\n{TARGET_ROW_HEADING}\n{target_row(result)}" if result.target else ""
        log(
            f"done: {result.step} steps in {result.wall_seconds:.1f}s{speed}, best val est {best:.4f} "
            f"({best / math.log(2):.3f} {self.bits}){exact}{target}\n"
            f"  sample:      minigpt sample {out}\n"
            f"  evaluate:    minigpt eval {out}\n"
            f"  tensorboard: tensorboard --logdir {out.parent}{row}"
        )


TARGET_ROW_HEADING = "time to target, a markdown table row (host | command | time to target | steps | final loss):"


def target_text(target: dict[str, Any]) -> str:
    """The done line's words on train.target_loss (results.json's `target`): where and how fast it was
    reached, on what; or that it was not, by how much, and what ended the run."""
    goal = f"{target['loss']:g}"
    where = f" on {Host(**target['host']).text()}" if target["host"] else ""
    if target["reached"]:
        resumed = f" (resumed at step {target['from_step']:,})" if target["from_step"] else ""
        split = "a spread sample of the split (train.final_eval_tokens)" if target["val_sampled"] else "the whole split"
        return (
            f"val {target['val_loss_full']:.4f} on {split}, at or below {goal}, at step {target['step']:,}: "
            f"{target['train_s']:.1f}s of training{resumed}, {target['process_s']:.1f}s since the command "
            f"started{where}"
        )
    best = f"{target['best']:.4f}"
    if target["missed_by"] <= 0:  # best.pt, whose estimate was above the target, is at or below it
        return (
            f"{goal} reached only by the final evaluation ({best}): no estimate was at or below it, so the run "
            f"did not stop there ({target['ended']}){where}"
        )
    what = "whole-split loss" if target["best_of"] == "whole split" else "estimate"
    return (
        f"{goal} not reached: the best {what}, {best}, is {target['missed_by']:.4f} above it ({target['ended']}){where}"
    )


def target_row(result: Any) -> str:
    """The run as one row of a markdown table: host | command | time to target | steps | final loss
    (the whole split's: at the target, else the final evaluation's)."""
    target = result.target
    where = Host(**target["host"]).text() if target["host"] else "?"
    if target["reached"]:
        took = f"{target['process_s']:.0f} s ({target['train_s']:.0f} s training)"
        steps, loss = target["step"], target["val_loss_full"]
    else:
        took = f"not reached in {result.wall_seconds:.0f} s (+{target['missed_by']:.4f})"
        if target["missed_by"] <= 0:
            took = f"at most {result.wall_seconds:.0f} s (the final evaluation)"
        steps, loss = result.step, result.full.loss if result.full is not None else result.best_val_loss
    return f"| {where} | {command_line()} | {took} | {steps:,} | {loss:.4f} |"


def command_line() -> str:
    """The command that started this process as typed (`minigpt train speedrun`); --nproc's workers
    are told it by the launcher (MINIGPT_COMMAND), a Python caller's is its script's."""
    if os.environ.get("MINIGPT_COMMAND"):
        return os.environ["MINIGPT_COMMAND"]
    name = Path(sys.argv[0]).name
    program = "minigpt" if name in ("minigpt", "__main__.py") else f"python {name}"
    return shlex.join([program, *sys.argv[1:]]) if sys.argv[1:] else program
