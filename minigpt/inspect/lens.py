"""The logit lens (`minigpt lens`, `Model.lens`): the model's own head (`GPT.logits`) applied to the
residual stream entering block 0 and after each block; the last layer is the model's output, exactly.
One window is read: the first block_size tokens (docs/inside.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from minigpt.data.tokenizer import Tokenizer, checked_text
from minigpt.errors import UserError
from minigpt.infer.loading import LoadedModel
from minigpt.inspect.pages import TOP_GUESSES, HtmlPage, _snippet, render, token_label
from minigpt.model import GPT, evaluating


@dataclass
class Lens:
    """What the model would predict after each layer at each position i (token i + 1): the likeliest
    tokens, most likely first, and `loss[l][i]`, -ln p of the token that came (one fewer than the positions)."""

    chars: list[str]  # what each token of the text shows as (tokenizer.pieces)
    ids: list[int]
    layers: list[str]  # "embeddings", "after block 0", ..., the last being the model's output
    top_ids: list[list[list[int]]]  # [layer][position][k]
    top_probs: list[list[list[float]]]  # [layer][position][k]
    top_chars: list[list[list[str]]]  # [layer][position][k]: each guess as text (a byte model: 0xNN past ASCII)
    loss: list[list[float]]  # [layer][position], nats
    unit: str = "char"
    norm: str = "pre"
    dropped: int = 0  # tokens past block_size, not read

    @property
    def mean_loss(self) -> list[float]:
        """Each layer's mean loss over the text, nats."""
        return [sum(row) / len(row) for row in self.loss]

    @property
    def bits_per_char(self) -> list[float]:
        """Each layer's mean loss in bits per character (or byte)."""
        return [m / math.log(2) for m in self.mean_loss]

    def __repr__(self) -> str:
        """Each layer's bits per character and its top guess after each character (the first 60)."""
        width = max(map(len, self.layers))
        rows = [f"{'':{width}}  bits  {''.join(c if c.isprintable() else ' ' for c in self.chars[:60])}"]
        for name, bits, top in zip(self.layers, self.bits_per_char, self.top_chars):
            guesses = "".join(g[0][:1] if g[0][:1].isprintable() else " " for g in top[:60])
            rows.append(f"{name:{width}}  {bits:4.2f}  {guesses}")
        return "\n".join(rows)

    def to_dict(self) -> dict:
        last = len(self.layers) - 1
        layers = [
            {
                "name": name,
                "output": n == last,
                "mean_loss": self.mean_loss[n],
                "bits_per_char": self.bits_per_char[n],
                "loss": self.loss[n],
                "top": [
                    [{"char": c, "p": p} for c, p in zip(cs, ps)]
                    for cs, ps in zip(self.top_chars[n], self.top_probs[n])
                ],
            }
            for n, name in enumerate(self.layers)
        ]
        return {"chars": self.chars, "unit": self.unit, "norm": self.norm, "dropped": self.dropped, "layers": layers}


def guess_text(tok: Tokenizer, i: int) -> str:
    """A guessed token as plain text: its character (a byte model: ASCII, else its hex value)."""
    if tok.kind == "byte":
        return chr(i) if i < 128 else f"0x{i:02X}"
    return tok.pieces([i])[0]


@torch.no_grad()
def logit_lens(model: GPT, tok: Tokenizer, text: str, top: int = TOP_GUESSES) -> Lens:
    """The lens over the first block_size tokens of a checked `text`, the `top` likeliest guesses kept."""
    ids = torch.from_numpy(tok.encode_checked(text, "the text", skip_hint=False))
    block = model.cfg.block_size
    dropped = max(0, len(ids) - block)
    ids = ids[:block]
    if len(ids) < 2:
        raise UserError("the text needs at least 2 characters (the first one has no context)")
    idx = ids[None].to(model.device)  # (1, T)
    targets = idx[0, 1:, None]  # (T-1, 1)
    top_ids, top_probs, top_chars, losses = [], [], [], []
    with evaluating(model):
        x, rope = model.embed(idx)  # (1, T, C): the stream entering block 0
        for layer in range(model.cfg.n_layer + 1):
            if layer > 0:
                x = model.run_blocks(x, idx, rope, first=layer - 1, last=layer)  # the stream after block layer-1
            logp = model.logits(x)[0].float().log_softmax(-1)  # (T, V)
            probs, guesses = logp.exp().topk(min(top, logp.size(-1)), dim=-1)  # (T, k), most likely first
            losses.append((-logp[:-1].gather(1, targets))[:, 0].tolist())
            top_probs.append(probs.tolist())
            top_ids.append(guesses.tolist())
            top_chars.append([[guess_text(tok, i) for i in row] for row in top_ids[-1]])
    ids_list = ids.tolist()
    names = ["embeddings", *(f"after block {i}" for i in range(model.cfg.n_layer))]
    return Lens(
        tok.pieces(ids_list), ids_list, names, top_ids, top_probs, top_chars, losses, tok.unit, model.cfg.norm, dropped
    )


def lens_of(loaded: LoadedModel, text: str, label: str = "the text", unknown: str = "error") -> Lens:
    """The lens over `text` as `minigpt lens` reads it: unknown characters refused (unknown='skip': dropped)."""
    return logit_lens(loaded.model, loaded.tokenizer, checked_text(loaded.tokenizer, text, label, unknown))


def lens_html(lens: Lens, tok: Tokenizer, source: str) -> HtmlPage:
    """The lens page: the text once per layer, each character coloured by that layer's surprise."""
    seen = sorted({i for layer in lens.top_ids for row in layer for i in row} | set(lens.ids))
    data = {
        "source": source,
        "unit": lens.unit,
        "norm": lens.norm,
        "dropped": lens.dropped,
        "pieces": lens.chars,
        "ids": lens.ids,
        "layers": lens.layers,
        "bits": [[round(n / math.log(2), 4) for n in row] for row in lens.loss],
        "bitsPerChar": lens.bits_per_char,
        "topIds": lens.top_ids,
        "topProbs": [[[round(p, 5) for p in row] for row in layer] for layer in lens.top_probs],
        "labels": {i: token_label(tok, i) for i in seen},
    }
    unit = "character" if lens.unit == "char" else lens.unit
    bpc = lens.bits_per_char
    summary = (
        f"{len(lens.layers)} layers over {len(lens.chars):,} {unit}s, {bpc[0]:.3f} bits per {unit} "
        f"from the embeddings to {bpc[-1]:.3f} at the output"
    )
    return HtmlPage(render("lens", f"logit lens: {_snippet(lens.chars)}", data), "lens", summary, height=640)
