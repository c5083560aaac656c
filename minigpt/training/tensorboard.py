"""What a training run records in TensorBoard (rank 0, docs/runs.md): the `TensorBoard` callback and
`HeadScores` (log.head_scores). The only module that writes events; `events.py` reads them back."""

from __future__ import annotations

import math
import threading
import unicodedata
import warnings
from pathlib import Path
from typing import Any

import torch

from minigpt.checkpoint import resume_command
from minigpt.config.files import value_text
from minigpt.config.schema import Config, all_keys
from minigpt.data.tokenizer import Tokenizer
from minigpt.errors import WriteError
from minigpt.infer.decode import generate
from minigpt.io.diskspace import write_errors
from minigpt.model import GPT, evaluating
from minigpt.runtime.mfu import Host
from minigpt.training.callbacks import Callback

HPARAM_METRICS = (
    "val/loss_est",
    "val/bpc_est",
    "val/loss_full",
    "val/bpc_full",
)  # scalars on_eval and on_train_end log
HPARAM_SECTIONS = ("model", "optim", "train")  # the keys shown unless log.hparam_keys names others


def hparam_summaries(cfg: Config) -> tuple[Any, Any, Any]:
    """The HParams plugin's experiment, session-start and (success) session-end summaries of log.hparam_keys:
    numbers as numbers, the rest as config.yaml spells them; keys with choices, and booleans, are categories."""
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
    """What kind of character token `i` is, for colouring the projector (docs/runs.md lists the classes)."""
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
    """One [token, class] row per id, the token as the pages label it, unprintable characters escaped
    so that no label breaks a line of the projector's TSV file."""
    from minigpt.inspect.pages import token_label

    rows = []
    for i in range(tok.vocab_size):
        label = token_label(tok, i)
        if not label.isprintable():
            label = label.encode("unicode_escape").decode("ascii")
        rows.append([label, token_class(tok, i)])
    return rows


_EVENT_BYTES = 4096  # an event is small, but a full disk has no page left to take it


def _events_after(run: Path) -> str:
    return f"the checkpoints are unchanged; then resume: {resume_command(run, auto=True)}"


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
    """A TensorBoard SummaryWriter whose failed writes are one `WriteError` line naming the event file,
    at the next call after the background failure; after one, the writer does nothing more."""

    def __init__(self, writer: Any) -> None:
        _quiet_writer_threads()
        self._writer = writer
        self.failed = False
        event_writer = writer.file_writer.event_writer
        self.path = Path(getattr(event_writer, "_file_name", writer.get_logdir()))
        self._after = _events_after(self.path.parent)

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
        """Ready-made summaries into the run's own event file (`add_hparams` would start another run's folder)."""
        for summary in summaries:
            self._guarded(self._writer.file_writer.add_summary, summary, step)


class TensorBoard(Callback):
    """log.tensorboard: the run's event file (rank 0): scalars at each log step; at each eval the val loss,
    a text sample from its own generator (training's untouched), the attention image and the projector's
    embeddings; the HParams session's start, and its end once the run finishes (docs/runs.md)."""

    def __init__(self, trainer: Any) -> None:
        cfg, out_dir, tok, start = trainer.cfg, trainer.out_dir, trainer.tok, trainer.state.step
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.utils.tensorboard import SummaryWriter
        # on resume, drop events a crashed run logged after its checkpoint (steps > start)
        with write_errors(out_dir / "events.out.tfevents.*", _EVENT_BYTES, _events_after(out_dir)):
            self.raw = SummaryWriter(log_dir=str(out_dir), purge_step=start + 1 if start else None)
        self.writer, self.out_dir = GuardedWriter(self.raw), out_dir
        self.rows = embedding_metadata(tok) if cfg.log.embeddings else None
        config = out_dir / "projector_config.pbtxt"
        if self.rows is not None and config.exists():
            # add_embedding rewrites the config from what the writer holds: a resume keeps the steps listed
            from google.protobuf import text_format
            from tensorboard.plugins.projector.projector_config_pb2 import ProjectorConfig

            self.raw._projector_config = text_format.Parse(config.read_text(encoding="utf-8"), ProjectorConfig())
        self.session_end: Any = None  # the HParams session's end (success), written once the run finishes
        if cfg.log.hparams:
            # a resume writes its start again; TensorBoard keeps the first, the values the run started with
            experiment, session_start, self.session_end = hparam_summaries(cfg)
            self.writer.add_summaries([experiment, session_start], start)
        probe = tok.encode_checked(cfg.log.attention_probe, "log.attention_probe", unknown="skip")
        self.probe = probe[: cfg.model.block_size].tolist()

    def on_log(self, trainer: Any, logs: dict[str, Any]) -> None:
        step, add = logs["step"], self.writer.add_scalar
        add("train/loss", logs["loss"], step)
        add("lr", logs["lr"], step)
        add("grad_norm", logs["grad_norm"], step)
        add("tokens_per_sec", logs["tokens_per_s"], step)
        if logs["mfu"] is not None:
            add("mfu", logs["mfu"], step)

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None:
        step, log, model, tok = trainer.state.step, trainer.cfg.log, trainer.model, trainer.tok
        self.writer.add_scalar("val/loss_est", val_loss, step)  # val/loss_full: the whole split, at the end
        self.writer.add_scalar("val/bpc_est", val_loss / math.log(2), step)
        if log.sample_length > 0:
            ids = tok.encode_checked(log.sample_prompt, "log.sample_prompt", unknown="skip").tolist() or [0]
            gen = torch.Generator(device=model.device).manual_seed(trainer.cfg.train.seed)
            text = tok.decode(ids + generate(model, ids, log.sample_length, temperature=0.8, generator=gen))
            # TensorBoard renders text as markdown: a code block keeps the line breaks
            self.writer.add_text("sample", "```\n" + text + "\n```", step)
        if len(self.probe) >= 2:
            self._attention(model, tok, step)
        self.writer.flush()
        if self.rows is not None:  # after the events, whose failure (a full disk) comes first
            weight = model.wte.weight.detach().float().cpu()  # (vocab, n_embd)
            room = 16 * weight.numel()  # ~16 characters a number; written at once, a failure names the folder
            with write_errors(self.out_dir / f"{step:05d}", room, _events_after(self.out_dir)):
                header = ["token", "class"]
                self.raw.add_embedding(weight, self.rows, global_step=step, tag="embeddings", metadata_header=header)

    def _attention(self, model: GPT, tok: Any, step: int) -> None:
        from minigpt.inspect.attention import attention_grid

        with evaluating(model):
            maps = model.attention_maps(torch.tensor([self.probe], device=model.device))[:, 0]
        self.writer.add_image(
            "attention", attention_grid(maps, tok.pieces(self.probe), f"step {step}"), step, dataformats="HWC"
        )

    def _target(self, target: dict[str, Any], step: int) -> None:
        """train.target_loss: the seconds to it (training, the whole process) at the step it was reached,
        or by how much the run missed it at its last step; the host as text."""
        if target["reached"]:
            self.writer.add_scalar("target/train_seconds", target["train_s"], target["step"])
            self.writer.add_scalar("target/process_seconds", target["process_s"], target["step"])
        else:
            self.writer.add_scalar("target/missed_by", target["missed_by"], step)
        if target["host"] is not None:
            self.writer.add_text("target/host", Host(**target["host"]).text(), step)

    def on_train_end(self, trainer: Any, result: Any) -> None:
        """The whole-split loss and the HParams session's end with success (none for a stopped run: TensorBoard
        keeps the first end, so it stays unknown until a resume finishes it); then the file closes."""
        try:
            if result is not None and result.full is not None:
                self.writer.add_scalar("val/loss_full", result.full.loss, result.step)
                self.writer.add_scalar("val/bpc_full", result.full.bpc, result.step)
            if result is not None and result.target is not None:
                self._target(result.target, result.step)
            if result is not None and self.session_end is not None:
                self.writer.add_summaries([self.session_end], result.step)
        finally:
            try:
                self.writer.close()
            except WriteError:
                if result is not None:
                    raise


class HeadScores(Callback):
    """log.head_scores: at each eval, the ICL score and every head's induction and previous scores, as
    `minigpt heads RUN --over-training` scores its snapshots (docs/inside.md)."""

    def __init__(self, writer: GuardedWriter) -> None:
        self.writer, self.layout_written = writer, False

    def on_eval(self, trainer: Any, val_loss: float, improved: bool) -> None:
        from minigpt.inspect.formation import score_point

        step, corpus = trainer.state.step, trainer.corpus
        point = score_point(trainer.model, corpus.val, corpus.id_map)
        if not self.layout_written and point.induction:  # Custom Scalars: a chart per pattern, a line per head
            layout = {f"heads/{name}": ["Multiline", [rf"heads/{name}/.*"]] for name in ("induction", "previous")}
            self.writer.add_custom_scalars({"heads": layout})
            self.layout_written = True
        self.writer.add_scalar("heads/icl_score", point.icl_score, step)
        for name, grid in (("induction", point.induction), ("previous", point.previous)):
            for layer, row in enumerate(grid):
                for head, score in enumerate(row):
                    self.writer.add_scalar(f"heads/{name}/L{layer}H{head}", score, step)


def tensorboard_callbacks(trainer: Any) -> list[Callback]:
    """TensorBoard and, on its writer, the head scores (log.tensorboard, log.head_scores)."""
    if not trainer.cfg.log.tensorboard:
        return []
    board = TensorBoard(trainer)
    return [HeadScores(board.writer), board] if trainer.cfg.log.head_scores else [board]
