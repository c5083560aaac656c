"""What a training run shows and records about itself: the start-up lines, the progress bar,
TensorBoard scalars, text samples, attention images, the HParams dashboard's record and the
projector's embeddings, tokens/s and MFU, and the summary. The only module that draws progress
or writes TensorBoard events; rank 0 only (docs/tensorboard.md)."""

from __future__ import annotations

import contextlib
import json
import math
import statistics
import sys
import threading
import time
import unicodedata
import warnings
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from minigpt.config.schema import Config, all_keys
from minigpt.data.corpus import Corpus
from minigpt.data.tokenizer import Tokenizer
from minigpt.errors import WriteError
from minigpt.infer.decode import generate
from minigpt.infer.evaluate import EvalResult
from minigpt.io.diskspace import write_errors
from minigpt.model import GPT, evaluating
from minigpt.runtime import device as runtime
from minigpt.runtime import distributed
from minigpt.runtime.device import log
from minigpt.runtime.mfu import device_peak, flops_per_token, mfu_percent


def sample_text(model: GPT, tok: Tokenizer, prompt: str, length: int, seed: int) -> str:
    """A short sample for TensorBoard, from its own generator (training RNG untouched); prompt
    characters the model does not know are dropped."""
    device = model.device
    ids = tok.encode_checked(prompt, "log.sample_prompt", unknown="skip").tolist() or [0]
    gen = torch.Generator(device=device).manual_seed(seed)
    return tok.decode(ids + generate(model, ids, length, temperature=0.8, generator=gen))


class AttentionLogger:
    """The probe text's attention maps as a TensorBoard image at each eval (unknown characters
    dropped); the figure is built once and redrawn (its cost: docs/benchmarks.md)."""

    def __init__(self, model: GPT, tok: Tokenizer, probe: str):
        self.model = model
        self.ids = tok.encode_checked(probe, "log.attention_probe", unknown="skip")[: model.cfg.block_size].tolist()
        self.chars = tok.pieces(self.ids)
        self.figure: Any = None

    def log(self, writer: Any, step: int) -> None:
        if len(self.ids) < 2:
            return
        from minigpt.inspect.attention import AttentionFigure

        model = self.model
        with evaluating(model):
            maps = model.attention_maps(torch.tensor([self.ids], device=model.device))[:, 0]
        if self.figure is None:
            cfg = model.cfg
            self.figure = AttentionFigure(self.chars, list(range(cfg.n_layer)), list(range(cfg.n_head)), light=True)
        writer.add_figure("attention", self.figure.update(maps, f"step {step}"), step, close=False)

    def close(self) -> None:
        if self.figure is not None:
            self.figure.close()


class HeadsLogger:
    """At each eval, heads/icl_score (the ICL score over a fixed spread sample of the validation split)
    and every head's heads/induction/L{l}H{h} and heads/previous/L{l}H{h} pattern scores on that
    text, as `minigpt heads RUN --over-training` scores its snapshots (docs/heads.md, with its
    measured cost: a small share of an eval's time)."""

    def __init__(self, model: GPT, tok: Tokenizer, val: Any, table: Any) -> None:
        self.model, self.val, self.table = model, val, table
        self.layout_written = False

    def log(self, writer: Any, step: int) -> None:
        from minigpt.inspect.formation import score_point

        point = score_point(self.model, self.val, self.table)
        if not self.layout_written and point.induction:  # Custom Scalars: a chart per pattern, a line per head
            layout = {f"heads/{name}": ["Multiline", [rf"heads/{name}/.*"]] for name in ("induction", "previous")}
            writer.add_custom_scalars({"heads": layout})
            self.layout_written = True
        writer.add_scalar("heads/icl_score", point.icl_score, step)
        for name, grid in (("induction", point.induction), ("previous", point.previous)):
            for layer, row in enumerate(grid):
                for head, score in enumerate(row):
                    writer.add_scalar(f"heads/{name}/L{layer}H{head}", score, step)


HPARAM_METRICS = ("val/loss", "val/bpc", "val/loss_full", "val/bpc_full")  # scalars on_eval and on_final log
HPARAM_SECTIONS = ("model", "optim", "train")  # the keys shown unless log.hparam_keys names others


def value_text(value: Any) -> str:
    """A config value as YAML and the command line spell it: true/false, null, a text with line
    breaks or edge spaces in double quotes ("\\n"), anything else as str() writes it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str) and (not value.isprintable() or value != value.strip()):
        return json.dumps(value)  # YAML's double-quoted form: "\n" stays a newline
    return str(value)


def hparam_summaries(cfg: Config) -> tuple[Any, Any, Any]:
    """The HParams plugin's experiment, session-start and (success) session-end summaries for this
    run: log.hparam_keys (default every model, optim and train key), numbers as numbers and the rest
    as config.yaml spells them; keys with choices, and true/false, are categories."""
    from torch.utils.tensorboard.summary import hparams

    fields = all_keys()
    keys = cfg.log.hparam_keys or [k for k in fields if k.split(".")[0] in HPARAM_SECTIONS]
    flat = cfg.flat()
    values: dict[str, Any] = {}
    domains: dict[str, list[str]] = {}
    for key in keys:
        value = flat[key]
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        values[key] = value if number else value_text(value)
        choices = fields[key].metadata.get("choices") or (("false", "true") if isinstance(value, bool) else None)
        if choices:
            domains[key] = list(choices)
    return hparams(values, dict.fromkeys(HPARAM_METRICS), domains)


def token_class(tok: Tokenizer, i: int) -> str:
    """What kind of character token `i` is, for colouring the projector: lower-case letter, capital,
    digit, whitespace, punctuation (symbols too: $ + |), other; a byte model's bytes past ASCII
    are "non-ASCII byte"."""
    if tok.kind == "byte" and i >= 128:
        return "non-ASCII byte"
    c = chr(i) if tok.kind == "byte" else tok.pieces([i])[0]
    if c.isspace():
        return "whitespace"
    if c.isdigit():
        return "digit"
    if c.islower():
        return "lower-case letter"
    if c.isupper():
        return "capital"
    return "punctuation" if unicodedata.category(c)[0] in "PS" else "other"


def embedding_metadata(tok: Tokenizer) -> list[list[str]]:
    """One [token, class] row per id: the token as the pages label it (whitespace made visible,
    a byte model's other bytes as 0xC3), with any character left that cannot be read escaped
    (\\x0b), so that no label breaks a line of the projector's TSV file."""
    from minigpt.inspect.pages import token_label

    rows = []
    for i in range(tok.vocab_size):
        label = token_label(tok, i)
        if not label.isprintable():
            label = label.encode("unicode_escape").decode("ascii")
        rows.append([label, token_class(tok, i)])
    return rows


class EmbeddingLogger:
    """The token embedding matrix for TensorBoard's projector at each eval: RUN/NNNNN/embeddings/
    holds tensors.tsv and metadata.tsv (folders without event files, so no extra runs) and
    RUN/projector_config.pbtxt lists every step. One row per vocabulary entry: small next to an eval."""

    def __init__(self, model: GPT, tok: Tokenizer, writer: Any, out_dir: Path) -> None:
        self.model, self.rows, self.writer, self.out_dir = model, embedding_metadata(tok), writer, out_dir
        config = out_dir / "projector_config.pbtxt"
        if config.exists():
            # the writer rewrites the whole config at each add_embedding from what it holds: a
            # resumed run starts from the steps already listed, or they would drop out of it
            from google.protobuf import text_format
            from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

            writer._projector_config = text_format.Parse(config.read_text(encoding="utf-8"), ProjectorConfig())

    def log(self, step: int) -> None:
        """Written at once (not by the event thread): a failure names the step's folder."""
        weight = self.model.wte.weight.detach().float().cpu()  # (vocab, n_embd)
        after = _EVENTS_AFTER.replace("DIR", str(self.out_dir))
        with write_errors(self.out_dir / f"{step:05d}", 16 * weight.numel(), after):  # ~16 characters a number
            self.writer.add_embedding(
                weight, metadata=self.rows, metadata_header=["token", "class"], global_step=step, tag="embeddings"
            )


def describe_run(
    cfg: Config,
    corpus: Corpus,
    tok: Tokenizer,
    model: GPT,
    device: torch.device,
    dtype: torch.dtype,
    dist: distributed.Dist,
) -> None:
    """The start-up lines: the data, the model and where it runs, the MFU basis."""
    n_train, n_val = len(corpus.train), len(corpus.val)
    unit = tok.unit + "s"
    log(
        f"data: {corpus.description} ({n_train + n_val:,} {unit}, {tok.kind} vocab {tok.vocab_size}; "
        f"{n_train:,} train / {n_val:,} val)"
    )
    where = f"{dist.world_size} processes ({device.type}, DDP)" if dist.enabled else f"device {device}"
    log(f"model: {model.num_params() / 1e6:.2f}M parameters | {where} | dtype {runtime.dtype_name(dtype)}")
    peak, peak_source = device_peak(device, cfg.log.peak_tflops)
    if peak is not None or device.type == "cuda":
        log(f"MFU: {flops_per_token(cfg.model, tok.vocab_size) / 1e6:.1f} MFLOP per token trained; peak {peak_source}")


BIG_ENCODE = 64 << 20  # bytes: smaller texts encode in well under a second, silently


class ByteProgress:
    """Encoding or hashing a large corpus: a tqdm bar in bytes/s on a terminal, and one line with the
    throughput when it is done (rank 0 only)."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.start = total, desc, time.perf_counter()
        show = total >= BIG_ENCODE and distributed.launched().is_main
        self.bar = tqdm(
            total=total,
            desc=desc,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            leave=False,
            disable=not (show and sys.stderr.isatty()),
        )
        self.show = show

    def update(self, n: int) -> None:
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()
        if self.show:
            seconds = time.perf_counter() - self.start
            log(f"{self.desc}: {self.total / 1e6:,.0f} MB in {seconds:.2f} s ({self.total / 1e6 / seconds:,.0f} MB/s)")


def byte_progress(total: int, desc: str) -> ByteProgress:
    return ByteProgress(total, desc)


def progress_mode(setting: str) -> str:
    """log.progress resolved: auto is a bar on a terminal and plain lines in a file or a pipe (a bar
    there leaves carriage-return fragments: ~500 KB of them for a 4-minute run)."""
    if setting != "auto":
        return setting
    return "bar" if sys.stderr.isatty() else "lines"


_EVENT_BYTES = 4096  # an event is small, but a full disk has no page left to take it
_EVENTS_AFTER = "the checkpoints are unchanged; then resume: minigpt train --out DIR --resume auto"


def _quiet_writer_threads() -> None:
    """TensorBoard's writer thread keeps its failure for the next call (which GuardedWriter turns
    into one line) and then raises it again in the thread: that traceback would only be noise."""
    previous = threading.excepthook
    if getattr(previous, "minigpt_quiet", False):
        return

    def hook(args: Any) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and isinstance(args.exc_value, OSError):
            return
        previous(args)

    hook.minigpt_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class GuardedWriter:
    """A TensorBoard SummaryWriter whose failed writes are one `WriteError` line naming the event
    file. Its thread writes in the background: a failure surfaces at the next call (or at flush
    and close); after one, the writer does nothing more."""

    def __init__(self, writer: Any) -> None:
        _quiet_writer_threads()
        self._writer = writer
        self.failed = False
        event_writer = writer.file_writer.event_writer
        self.path = Path(getattr(event_writer, "_file_name", writer.get_logdir()))
        self._after = _EVENTS_AFTER.replace("DIR", str(self.path.parent))

    def _guarded(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        if self.failed:
            return None
        try:
            with write_errors(self.path, _EVENT_BYTES, self._after):
                return method(*args, **kwargs)
        except WriteError:
            self.failed = True
            raise

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._writer, name)
        return lambda *args, **kwargs: self._guarded(method, *args, **kwargs)

    def add_summaries(self, summaries: Any, step: int) -> None:
        """Ready-made summaries (the HParams plugin's) into the run's own event file, where
        `add_hparams` would start a folder of its own, which TensorBoard lists as another run."""
        for summary in summaries:
            self._guarded(self._writer.file_writer.add_summary, summary, step)


class Reporter:
    """Progress bar, TensorBoard and status lines for one training process (silent off rank 0).

    The trainer calls `on_log` every log.interval steps, `on_eval` after each evaluation (inside
    `paused()`, so evaluation time stays out of tokens/s), and `close` at the end."""

    def __init__(
        self,
        cfg: Config,
        out_dir: Path,
        model: GPT,
        tok: Tokenizer,
        device: torch.device,
        dist: distributed.Dist,
        start_step: int,
        start_tokens: int,
        time_budget: tuple[float, float] | None = None,
        val: tuple[Any, Any] | None = None,
    ) -> None:
        self.cfg, self.out_dir, self.model, self.tok, self.dist = cfg, out_dir, model, tok, dist
        # optim.schedule_by=time: (start, deadline) in perf_counter seconds; progress is time, not steps
        self.time_budget = time_budget
        self.bits = "bpc" if tok.unit == "char" else "bits/byte"  # a byte model's loss is per byte
        self.flops_tok = flops_per_token(cfg.model, tok.vocab_size)
        self.peak = device_peak(device, cfg.log.peak_tflops)[0]
        self.rates: list[float] = []  # tokens/s of each log interval, for the summary
        self.final_seconds = 0.0  # how long the final whole-split evaluation took
        self.t_log, self.tokens_at_log = time.perf_counter(), start_tokens
        self._exit = contextlib.ExitStack()
        self.writer: Any = None
        self.embeddings: EmbeddingLogger | None = None
        self.session_end: Any = None  # the HParams session's end (success), written once the run finishes
        if cfg.log.tensorboard and dist.is_main:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from torch.utils.tensorboard import SummaryWriter
            # on resume, drop events a crashed run logged after its checkpoint (steps > start_step)
            with write_errors(out_dir / "events.out.tfevents.*", _EVENT_BYTES, _EVENTS_AFTER):
                writer = SummaryWriter(log_dir=str(out_dir), purge_step=start_step + 1 if start_step else None)
            self.writer = GuardedWriter(writer)
            if cfg.log.embeddings:
                self.embeddings = EmbeddingLogger(model, tok, writer, out_dir)
            if cfg.log.hparams:
                # a resumed run writes its start again: TensorBoard keeps a run's first (the first
                # metadata of a tag), so the dashboard shows the values the run started with
                experiment, start, self.session_end = hparam_summaries(cfg)
                self.writer.add_summaries([experiment, start], start_step)
        probe = cfg.log.attention_probe
        self.attention = AttentionLogger(model, tok, probe) if self.writer is not None and probe else None
        # val: the validation split's ids and their table into the vocabulary, for the heads' scores
        scored = val is not None and cfg.log.head_scores
        self.heads = HeadsLogger(model, tok, *val) if self.writer is not None and scored else None
        self.mode = progress_mode(cfg.log.progress)
        total = None if time_budget else cfg.train.max_steps  # a step count there is only a cap
        self.bar = tqdm(
            total=total,
            initial=start_step,
            desc="train",
            unit="step",
            file=sys.stderr,
            dynamic_ncols=True,
            disable=not dist.is_main or self.mode != "bar",
        )
        if self.mode == "bar":
            self._exit.enter_context(runtime.log_sink(lambda msg: tqdm.write(msg, file=sys.stderr)))
        self.start_step, self.t_start = start_step, time.perf_counter()
        self.t_line = self.t_start  # lines mode: when the last progress line was written

    def _mfu(self, tokens_per_s: float) -> float | None:
        if self.peak is None:
            return None
        return mfu_percent(tokens_per_s, self.flops_tok, self.peak, self.dist.world_size)

    def step(self) -> None:
        self.bar.update(1)

    def on_log(self, step: int, tokens_seen: int, loss: float, lr: float, grad_norm: float) -> None:
        now = time.perf_counter()
        tps = (tokens_seen - self.tokens_at_log) / max(now - self.t_log, 1e-9)
        self.t_log, self.tokens_at_log = now, tokens_seen
        self.rates.append(tps)
        mfu = self._mfu(tps)
        shown = {"loss": f"{loss:.4f}", "lr": f"{lr:.2e}", "tok_s": f"{tps:,.0f}"}
        if mfu is not None:
            shown["mfu"] = f"{mfu:.1f}%"
        self.bar.set_postfix(shown, refresh=False)
        last = step == self.cfg.train.max_steps
        if self.mode == "lines" and (now - self.t_line >= self.cfg.log.progress_seconds or last):
            self.t_line = now
            log(self._progress_line(step, loss, lr, tps, mfu, now))
        if self.writer is not None:
            self.writer.add_scalar("train/loss", loss, step)
            self.writer.add_scalar("lr", lr, step)
            self.writer.add_scalar("grad_norm", grad_norm, step)
            self.writer.add_scalar("tokens_per_sec", tps, step)
            if mfu is not None:
                self.writer.add_scalar("mfu", mfu, step)

    def _progress_line(self, step: int, loss: float, lr: float, tps: float, mfu: float | None, now: float) -> str:
        """One plain progress line (lines mode): what the bar shows, plus the time left."""
        total = self.cfg.train.max_steps
        if self.time_budget:
            start, deadline = self.time_budget
            left = max(0.0, deadline - now)
            done = f"step {step} ({100 * min(1.0, (now - start) / max(deadline - start, 1e-9)):.0f}% of the time)"
        else:
            rate = (step - self.start_step) / max(now - self.t_start, 1e-9)  # steps/s in this process
            left = (total - step) / rate if rate > 0 else 0.0
            done = f"step {step}/{total} ({100 * step / total:.0f}%)"
        eta = f"{int(left // 3600)}:{int(left % 3600 // 60):02d}:{int(left % 60):02d}"
        extra = f" | MFU {mfu:.1f}%" if mfu is not None else ""
        return f"{done} | loss {loss:.4f} | lr {lr:.2e} | {tps:,.0f} tokens/s{extra} | ETA {eta}"

    @contextlib.contextmanager
    def paused(self):
        """Time spent inside does not count towards tokens/s (evaluation, checkpoints)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.t_log += time.perf_counter() - t0

    def on_eval(self, step: int, val_loss: float, improved: bool) -> None:
        best = " *best" if improved else ""
        log(f"step {step}: val loss {val_loss:.4f} ({val_loss / math.log(2):.3f} {self.bits}){best}")
        if self.writer is None:
            return
        self.writer.add_scalar("val/loss", val_loss, step)
        self.writer.add_scalar("val/bpc", val_loss / math.log(2), step)
        log_cfg = self.cfg.log
        if log_cfg.sample_length > 0:
            text = sample_text(self.model, self.tok, log_cfg.sample_prompt, log_cfg.sample_length, self.cfg.train.seed)
            # TensorBoard renders text as markdown: a code block keeps the line breaks
            self.writer.add_text("sample", "```\n" + text + "\n```", step)
        if self.attention is not None:
            self.attention.log(self.writer, step)
        if self.heads is not None:
            self.heads.log(self.writer, step)
        self.writer.flush()
        if self.embeddings is not None:  # after the events, whose failure (a full disk) comes first
            self.embeddings.log(step)

    def end_session(self, step: int) -> None:
        """The run finished (max_steps, patience or max_time): its HParams session ends with
        success. A run stopped by a signal or an error writes no end, so it shows as unknown: as
        with the start, TensorBoard would keep the first end, and an 'aborted' would outlive the
        resume that finishes the run."""
        if self.writer is not None and self.session_end is not None:
            self.writer.add_summaries([self.session_end], step)

    def end_progress(self) -> None:
        """Close the progress bar (and give status lines back to plain stderr); idempotent."""
        self.bar.close()
        self._exit.close()

    def close(self, quiet: bool = False) -> None:
        """Flush and close the event file; `quiet` while another error is on its way out (it is
        the one to report)."""
        self.end_progress()
        if self.attention is not None:
            self.attention.close()
        if self.writer is not None:
            try:
                self.writer.close()
            except WriteError:
                if not quiet:
                    raise

    def on_final(self, step: int, full: EvalResult, seconds: float) -> None:
        """The best checkpoint's whole-validation-split loss (TensorBoard val/loss_full)."""
        self.final_seconds = seconds
        if self.writer is not None:
            self.writer.add_scalar("val/loss_full", full.loss, step)
            self.writer.add_scalar("val/bpc_full", full.bpc, step)
            self.writer.flush()

    def median_rate(self) -> float | None:
        """The median tokens/s over the run's log intervals."""
        return statistics.median(self.rates) if self.rates else None

    def summary(self, steps: int, wall: float, best_val_loss: float, full: EvalResult | None) -> None:
        speed = ""
        rate = self.median_rate()
        if rate is not None:
            mfu = self._mfu(rate)
            speed = f", {rate:,.0f} tokens/s" + (f" (MFU {mfu:.1f}%)" if mfu is not None else "")
        exact = ""
        if full is not None:
            took = f"scored in {self.final_seconds:.1f}s"
            exact = f"; whole val split {full.loss:.4f} ({full.bpc:.3f} {self.bits}, {took})"
            if full.sampled:  # past train.final_eval_tokens
                exact = (
                    f"; val split {full.loss:.4f} ({full.bpc:.3f} {self.bits}) on a spread sample of "
                    f"{full.tokens:,} of its {full.of_tokens:,} {self.tok.unit}s (train.final_eval_tokens; "
                    f"{took}; minigpt eval scores them all)"
                )
        out = self.out_dir
        log(
            f"done: {steps} steps in {wall:.1f}s{speed}, best val loss {best_val_loss:.4f} "
            f"({best_val_loss / math.log(2):.3f} {self.bits}){exact}\n"
            f"  sample:      minigpt sample {out}\n"
            f"  evaluate:    minigpt eval {out}\n"
            f"  tensorboard: tensorboard --logdir {out.parent}"
        )
