"""The exact validation number: a model's mean next-character loss over every position of a text,
shared by `minigpt eval` and the trainer's final evaluation."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from minigpt.config.schema import DataConfig
from minigpt.data.corpus import encode_corpus, load_corpus
from minigpt.data.tokenizer import name_chars
from minigpt.errors import UserError
from minigpt.infer.loading import Loaded
from minigpt.model import GPT
from minigpt.runtime.memory import release_pages


@dataclass
class EvalResult:
    loss: float
    tokens: int
    unit: str = "char"  # what one token is: bits per char, or per byte for a byte model
    of_tokens: int | None = None  # a sample: the predictions the whole text has (tokens of them were scored)

    @property
    def sampled(self) -> bool:
        return self.of_tokens is not None and self.of_tokens > self.tokens

    @property
    def bpc(self) -> float:
        return self.loss / math.log(2)

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    def to_dict(self) -> dict[str, float | int]:
        out = {"loss": self.loss, "bpc": self.bpc, "perplexity": self.perplexity, "tokens": self.tokens,
               "unit": self.unit}  # fmt: skip
        return {**out, "of_tokens": self.of_tokens} if self.sampled else out


@torch.no_grad()
def evaluate_ids(model: GPT, ids: np.ndarray | torch.Tensor, table: np.ndarray | None = None,
                 batch_windows: int = 64) -> EvalResult:  # fmt: skip
    """Mean next-token loss over all of `ids`: non-overlapping windows of block_size, every
    position scored (the last, shorter window too), so exactly len(ids) - 1 predictions.

    `ids` may be a memory map of any integer type: it is read `batch_windows` windows at a time
    (mapped into the model's vocabulary through `table` when given), so memory stays flat."""
    block = model.cfg.block_size
    device = next(model.parameters()).device
    data = ids.numpy() if isinstance(ids, torch.Tensor) else ids
    n_pred = len(data) - 1
    if n_pred < 1:
        raise UserError("the text to evaluate needs at least 2 characters")
    total = 0.0
    span = batch_windows * block
    for start in range(0, n_pred, span):
        end = min(start + span, n_pred)  # predictions start..end-1, of ids start+1..end
        window = data[start : end + 1]
        chunk = table[window] if table is not None else np.array(window, dtype=np.int64)  # one copy out of the map
        release_pages(data)
        n_full = (end - start) // block
        if n_full:
            x = torch.from_numpy(chunk[: n_full * block].reshape(n_full, block)).to(device)
            y = torch.from_numpy(chunk[1 : n_full * block + 1].reshape(n_full, block)).to(device)
            total += _loss_sum(model, x, y)
        if end - start > n_full * block:  # the tail
            x = torch.from_numpy(chunk[n_full * block : end - start][None]).to(device)
            y = torch.from_numpy(chunk[n_full * block + 1 : end - start + 1][None]).to(device)
            total += _loss_sum(model, x, y)
    return EvalResult(total / n_pred, n_pred)


@torch.no_grad()
def evaluate_bounded(model: GPT, ids: np.ndarray | torch.Tensor, table: np.ndarray | None = None,
                     max_tokens: int = 0, batch_windows: int = 64) -> EvalResult:  # fmt: skip
    """`evaluate_ids` (every position) when the text has at most `max_tokens` predictions or
    `max_tokens` is 0; past it, an evenly spread, deterministic sample of the same whole windows
    of block_size that `evaluate_ids` reads (max_tokens // block_size of them, from the first to
    near the last), so the sample estimates the same number without a random seed."""
    data = ids.numpy() if isinstance(ids, torch.Tensor) else ids
    block, n_pred = model.cfg.block_size, len(data) - 1
    if not max_tokens or n_pred <= max_tokens:
        return evaluate_ids(model, data, table, batch_windows)
    windows = n_pred // block
    n = max(1, min(windows, max_tokens // block))
    starts = [(i * windows // n) * block for i in range(n)]
    device = next(model.parameters()).device
    total = 0.0
    for first in range(0, n, batch_windows):
        chunk = np.stack([np.asarray(data[s : s + block + 1]) for s in starts[first : first + batch_windows]])
        chunk = table[chunk] if table is not None else chunk.astype(np.int64)
        release_pages(data)
        rows = torch.from_numpy(chunk).to(device)  # (B, block + 1)
        total += _loss_sum(model, rows[:, :-1], rows[:, 1:])
    return EvalResult(total / (n * block), n * block, of_tokens=n_pred)


def _loss_sum(model: GPT, x: torch.Tensor, y: torch.Tensor) -> float:
    logits, _ = model(x)
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item()


def eval_ids_for(loaded: Loaded, data: str | None) -> tuple[np.ndarray, np.ndarray | None, str]:
    """The ids to evaluate (a memory map), the table into the model's vocabulary, and what they
    are: the run's validation split, or all of `data` (a file, folder or glob, joined as in
    training)."""
    tok = loaded.tokenizer
    dcfg = loaded.config.data
    if data is not None:
        cfg = DataConfig(path=data, val_path=None, doc_separator=dcfg.doc_separator, tokenizer=tok.kind,
                         cache_dir=dcfg.cache_dir)  # fmt: skip
        enc, _, desc = encode_corpus(cfg)
        unseen = enc.tokenizer.unknown_to(tok)
        if unseen:
            raise UserError(f"data {desc} has characters the model never saw in training: {name_chars(unseen)}")
        table = None if enc.tokenizer.same_as(tok) else tok.ids_of(enc.tokenizer)
        return enc.ids, table, f"all of {desc}"
    info = loaded.checkpoint.data
    recorded = DataConfig(**{**dataclasses.asdict(dcfg), "path": info.get("path", dcfg.path)})
    try:
        corpus = load_corpus(recorded, loaded.config.model.block_size)
    except UserError as e:
        raise UserError(f"cannot read the run's data ({e}); pass --data FILE|FOLDER to evaluate other text") from None
    if info.get("sha256") and corpus.sha256 != info["sha256"] or corpus.tokenizer.unknown_to(tok):
        raise UserError(
            f"{corpus.description} changed since this run was trained; pass --data FILE|FOLDER to evaluate on it anyway"
        )
    table = None if corpus.tokenizer.same_as(tok) else tok.ids_of(corpus.tokenizer)
    return corpus.val, table, f"validation split of {corpus.description}"


def evaluate(loaded: Loaded, data: str | Path | None, max_tokens: int = 0) -> tuple[EvalResult, str]:
    """`minigpt eval`: every position of the validation split (or of `data`), or with `max_tokens`
    a spread sample of whole windows when there are more predictions than that."""
    ids, table, what = eval_ids_for(loaded, str(data) if data is not None else None)
    result = evaluate_bounded(loaded.model, ids, table, max_tokens)
    result.unit = loaded.tokenizer.unit
    return result, what
