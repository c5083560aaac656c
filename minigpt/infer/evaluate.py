"""The exact validation number: mean next-character loss over every position (`minigpt eval`, the final eval)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minigpt.config.schema import DataConfig
from minigpt.data.corpus import encode_corpus, load_corpus
from minigpt.data.tokenizer import name_chars
from minigpt.errors import UserError
from minigpt.infer.loading import LoadedModel
from minigpt.infer.windows import spread_starts, text_windows, token_losses
from minigpt.model import GPT, evaluating
from minigpt.runtime.device import full_float32, log
from minigpt.runtime.memory import free_cached, out_of_memory


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
        out = {
            "loss": self.loss,
            "bpc": self.bpc,
            "perplexity": self.perplexity,
            "tokens": self.tokens,
            "unit": self.unit,
        }
        return {**out, "of_tokens": self.of_tokens} if self.sampled else out


@torch.no_grad()
def evaluate_ids(
    model: GPT, ids: np.ndarray | torch.Tensor, table: np.ndarray | None = None, max_tokens: int = 0, batch: int = 64
) -> EvalResult:
    """Mean next-token loss over all of `ids` (each of its len(ids) - 1 predictions), or past `max_tokens`
    predictions over an evenly spread, deterministic sample of whole windows (`spread_starts`), `batch`
    windows at a time, in float32 products (no TF32). Out of memory, it scores again in batches half
    as large, saying so, down to one window."""
    block, n_pred = model.cfg.block_size, len(ids) - 1
    if n_pred < 1:
        raise UserError("the text to evaluate needs at least 2 characters")
    starts = spread_starts(n_pred, block, max_tokens)
    while True:
        try:
            total, scored = _summed_losses(model, ids, table, starts, batch)
            break
        except RuntimeError as e:
            if batch == 1 or not out_of_memory(e):
                raise
            free_cached(model.device)
            log(f"evaluation: out of memory on {model.device} in batches of {batch} windows; again in {batch // 2}")
            batch //= 2
    return EvalResult(total / scored, scored, of_tokens=n_pred if starts is not None else None)


def _summed_losses(
    model: GPT, ids: np.ndarray | torch.Tensor, table: np.ndarray | None, starts: list[int] | None, batch: int
) -> tuple[float, int]:
    total, scored = 0.0, 0
    with evaluating(model), full_float32():
        for x, y in text_windows(ids, model.cfg.block_size, table, starts, batch, device=model.device):
            total += token_losses(model, x, y)[0].sum().item()
            scored += y.numel()
    return total, scored


@torch.no_grad()
def loss_by_position(
    model: GPT, ids: np.ndarray | torch.Tensor, table: np.ndarray | None = None, max_tokens: int = 0
) -> np.ndarray:
    """The mean loss (nats) at each position 0..block_size-1 of the context, over the whole
    windows of `ids` (a spread sample of them past `max_tokens`): position t predicts the
    (t+2)-th character of a window from the t+1 before it."""
    block, n_pred = model.cfg.block_size, len(ids) - 1
    if n_pred < block:
        raise UserError(
            f"the text has {n_pred + 1:,} tokens; the loss by position needs one whole window of "
            f"block_size + 1 = {block + 1:,}"
        )
    starts = spread_starts(n_pred, block, max_tokens) or list(range(0, n_pred - block + 1, block))
    total = torch.zeros(block, dtype=torch.float64)  # on the CPU: MPS has no float64
    with evaluating(model):
        for x, y in text_windows(ids, block, table, starts, device=model.device):
            total += token_losses(model, x, y)[0].sum(0).cpu()  # a batch summed on the device, in float32
    return (total / len(starts)).numpy()


def icl_score(by_position: np.ndarray) -> tuple[float, int, int]:
    """The in-context-learning score of Olsson et al. (2022), docs/inside.md: the loss at the 500th token
    minus the 50th's (in a shorter context, at 500/512 and 50/512 of it); returns it and the two positions."""
    block = len(by_position)
    late, early = (499, 49) if block >= 512 else (round(block * 500 / 512) - 1, max(0, round(block * 50 / 512) - 1))
    return float(by_position[late] - by_position[early]), late, early


def eval_ids_for(loaded: LoadedModel, data: str | None) -> tuple[np.ndarray, np.ndarray | None, str]:
    """The ids to evaluate (a memory map), the table into the model's vocabulary, and what they are: the
    run's validation split, or all of `data` (a file, folder or glob, joined as in training)."""
    tok, dcfg = loaded.tokenizer, loaded.config.data
    if data is not None:
        cfg = dataclasses.replace(dcfg, path=str(data), val_path=None, tokenizer=tok.kind)
        enc, _, desc = encode_corpus(cfg, whole=True)
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


def evaluate(loaded: LoadedModel, data: str | Path | None, max_tokens: int = 0) -> tuple[EvalResult, str]:
    """`minigpt eval`: every position of the validation split (or of `data`), or past `max_tokens` a spread sample."""
    ids, table, label = eval_ids_for(loaded, str(data) if data is not None else None)
    result = evaluate_ids(loaded.model, ids, table, max_tokens)
    result.unit = loaded.tokenizer.unit
    return result, label
