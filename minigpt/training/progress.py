"""What a person at the terminal sees of a training run (rank 0): the start-up lines, `Progress` (the bar or
lines, evaluations, the summary) and `ByteProgress` (encoding a large corpus); the only module using tqdm."""

from __future__ import annotations

import contextlib
import math
import sys
import time
from typing import Any

from tqdm import tqdm

from minigpt.runtime import device as runtime
from minigpt.runtime import distributed
from minigpt.runtime.device import log
from minigpt.runtime.mfu import device_peak, flops_per_token
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
            exact = f"; val full {full.loss:.4f} ({full.bpc:.3f} {self.bits} on the whole split, {took})"
            if full.sampled:  # past train.final_eval_tokens
                exact = (
                    f"; val full {full.loss:.4f} ({full.bpc:.3f} {self.bits}) on a spread sample of "
                    f"{full.tokens:,} of its {full.of_tokens:,} {trainer.tok.unit}s (train.final_eval_tokens; "
                    f"{took}; minigpt eval scores them all)"
                )
        out, best = self.out_dir, result.best_val_loss
        log(
            f"done: {result.step} steps in {result.wall_seconds:.1f}s{speed}, best val est {best:.4f} "
            f"({best / math.log(2):.3f} {self.bits}){exact}\n"
            f"  sample:      minigpt sample {out}\n"
            f"  evaluate:    minigpt eval {out}\n"
            f"  tensorboard: tensorboard --logdir {out.parent}"
        )
