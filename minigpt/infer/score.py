"""The model's surprise at each character of a text (`minigpt score`, the surprise page) and its windows."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from minigpt.errors import UserError
from minigpt.infer.decode import half_window
from minigpt.infer.loading import LoadedModel
from minigpt.infer.windows import token_losses


def window_count(n: int, block: int) -> int:
    """How many windows of `block` advancing by half a window cover n characters."""
    return 1 if n <= block else (n - 1 - block) // half_window(block) + 2


@dataclass
class Scores:
    """The model's surprise at each token of a text: bits[i] = -log2 p(token i+1 | tokens up to i).
    `text` holds what each token shows as: the characters (char models), or for a byte model each
    character on its last byte and '' on the bytes before it."""

    text: list[str]
    bits: list[float]  # one per token after the first (the first has no context to predict it)
    unit: str = "char"
    ids: list[int] = dataclasses.field(default_factory=list)  # the text's token ids
    # with score_text(top=k): the model's k likeliest tokens at each scored position, and their probabilities
    top_ids: list[list[int]] = dataclasses.field(default_factory=list)
    top_probs: list[list[float]] = dataclasses.field(default_factory=list)

    @property
    def probs(self) -> list[float]:
        """The probability the model gave each scored token (2 ** -bits)."""
        return [2.0**-b for b in self.bits]

    @property
    def bits_per_char(self) -> float:
        return sum(self.bits) / len(self.bits)

    def __repr__(self) -> str:
        per = f", {self.bits_per_char:.3f} bits per {self.unit}" if self.bits else ""
        return f"<Scores: {len(self.bits):,} {self.unit}s scored{per}>"

    def to_dict(self) -> dict:
        return {
            "chars": len(self.text),
            "scored": len(self.bits),
            "bits_per_char": self.bits_per_char,
            "total_bits": sum(self.bits),
            "per_char": [{"char": c, "bits": b} for c, b in zip(self.text[1:], self.bits)],
        }


@torch.no_grad()
def score_text(loaded: LoadedModel, text: str, top: int = 0) -> Scores:
    """Surprise per character, a long text read in windows of block_size advancing by half a window (each
    character scored once); `top` > 0 also keeps the model's `top` likeliest tokens at each position."""
    tok = loaded.tokenizer
    ids = torch.from_numpy(tok.encode_checked(text, "the text", skip_hint=False))
    if len(ids) < 2:
        raise UserError("the text to score needs at least 2 characters (the first one has no context)")
    model, block = loaded.model, loaded.model.cfg.block_size
    device, stride = model.device, half_window(block)
    bits = torch.empty(len(ids) - 1)
    top_ids: list[list[int]] = []
    top_probs: list[list[float]] = []
    done = start = 0  # predictions scored so far (prediction i is of ids[i + 1]), and where the window starts
    while done < len(ids) - 1:
        end = min(start + block, len(ids) - 1)
        x = ids[start:end][None].to(device)
        y = ids[start + 1 : end + 1].to(device)
        nats, logits = token_losses(model, x, y[None])
        nll = nats[0] / math.log(2)  # bits
        first_new = done - start  # positions before it were scored by the previous window
        bits[done:end] = nll[first_new:].cpu()
        if top:
            probs, guesses = logits[0, first_new:].float().softmax(-1).topk(min(top, logits.size(-1)), dim=-1)
            top_probs += probs.tolist()
            top_ids += guesses.tolist()
        done = end
        start = max(0, end - block + stride) if end < len(ids) - 1 else end
    return Scores(tok.pieces(ids.tolist()), bits.tolist(), tok.unit, ids.tolist(), top_ids, top_probs)
