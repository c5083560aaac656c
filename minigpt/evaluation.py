"""The exact validation number: a model's mean next-character loss over every position of a text,
shared by `minigpt eval` and the trainer's final evaluation."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from minigpt.errors import UserError
from minigpt.model import GPT


@dataclass
class EvalResult:
    loss: float
    tokens: int

    @property
    def bpc(self) -> float:
        return self.loss / math.log(2)

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    def to_dict(self) -> dict[str, float | int]:
        return {"loss": self.loss, "bpc": self.bpc, "perplexity": self.perplexity, "tokens": self.tokens}


@torch.no_grad()
def evaluate_ids(model: GPT, ids: torch.Tensor, batch_windows: int = 64) -> EvalResult:
    """Mean next-character loss over all of `ids`: non-overlapping windows of block_size, every
    position scored (the last, shorter window too), so exactly len(ids) - 1 predictions."""
    block = model.cfg.block_size
    device = next(model.parameters()).device
    n_pred = len(ids) - 1
    if n_pred < 1:
        raise UserError("the text to evaluate needs at least 2 characters")
    n_full = n_pred // block
    total = 0.0
    xs = ids[: n_full * block].view(n_full, block)
    ys = ids[1 : n_full * block + 1].view(n_full, block)
    for i in range(0, n_full, batch_windows):
        x, y = xs[i : i + batch_windows].to(device), ys[i : i + batch_windows].to(device)
        logits, _ = model(x)
        total += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item()
    if n_pred > n_full * block:  # the tail
        x = ids[n_full * block : n_pred][None].to(device)
        y = ids[n_full * block + 1 : n_pred + 1][None].to(device)
        logits, _ = model(x)
        total += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="sum").item()
    return EvalResult(total / n_pred, n_pred)
