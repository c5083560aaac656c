"""Pictures of attention: heat maps of the causal attention weights over a text, one per layer and
head, with the characters on both axes. Uses matplotlib (headless, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from minigpt.errors import UserError
from minigpt.model import GPT
from minigpt.tokenizer import Tokenizer

VISIBLE = {" ": "\u2423", "\n": "\u21b5", "\t": "\u2192", "\r": "\u240d"}  # ␣ ↵ → ␍


def visible(ch: str) -> str:
    """A character as it can be read on an axis: whitespace gets a visible stand-in."""
    return VISIBLE.get(ch, ch)


def attention_figure(
    maps: torch.Tensor, chars: list[str], layers: list[int], heads: list[int], title: str = "", light: bool = False
) -> Any:
    """A matplotlib Figure: rows are layers, columns heads; maps is (L, nh, T, T) for one text.

    `light` (TensorBoard, every eval) labels only the outer axes and skips the layout solver:
    creating and drawing hundreds of tick labels is what makes the full figure take seconds.
    """
    figure = AttentionFigure(chars, layers, heads, light)
    return figure.update(maps, title)


class AttentionFigure:
    """A grid of attention heat maps that can be redrawn with new weights for the same text, so
    logging at every eval pays for the axes and labels once."""

    def __init__(self, chars: list[str], layers: list[int], heads: list[int], light: bool = False):
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        T = len(chars)
        # inches per character: long texts shrink, short ones stay readable; TensorBoard's is smaller
        cell = min(0.12 if light else 0.22, 9.0 / max(T, 1))
        side = max(2.6, T * cell + 0.9)
        font = max(4.0, min(9.0, cell * (50 if light else 40)))
        self.layers, self.heads = layers, heads
        self.fig, axes = plt.subplots(
            len(layers), len(heads), figsize=(side * len(heads) + 1.2, side * len(layers) + 0.6), squeeze=False,
            layout=None if light else "constrained", dpi=72 if light else 100,
        )  # fmt: skip
        labels = [visible(c) for c in chars]
        blank = [[0.0] * T for _ in range(T)]
        self.images = {}
        for r, layer in enumerate(layers):
            for c, head in enumerate(heads):
                ax = axes[r][c]
                image = ax.imshow(blank, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
                self.images[layer, head] = image
                bottom, left = r == len(layers) - 1, c == 0
                ax.set_xticks(range(T), labels, fontsize=font) if bottom or not light else ax.set_xticks([])
                ax.set_yticks(range(T), labels, fontsize=font) if left or not light else ax.set_yticks([])
                ax.tick_params(length=0, pad=1)
                ax.set_title(f"layer {layer} head {head}", fontsize=9)
                if left:
                    ax.set_ylabel("query (predicting after)", fontsize=8)
                if bottom:
                    ax.set_xlabel("key (attended to)", fontsize=8)
        self.fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")

    def update(self, maps: torch.Tensor, title: str = "") -> Any:
        """Show `maps` (L, nh, T, T); returns the Figure."""
        for (layer, head), image in self.images.items():
            image.set_data(maps[layer, head].float().cpu().numpy())
        self.fig.suptitle(title, fontsize=10)
        return self.fig

    def close(self) -> None:
        import matplotlib.pyplot as plt

        plt.close(self.fig)


def attention_maps_for(model: GPT, tok: Tokenizer, text: str) -> tuple[torch.Tensor, list[str]]:
    """(L, nh, T, T) weights over `text` (at most block_size characters) and its characters."""
    if not text:
        raise UserError("--text must not be empty")
    ids = torch.from_numpy(tok.encode_checked(text, "--text", skip_hint=False))[None, : model.cfg.block_size]
    labels = tok.pieces(ids[0].tolist())  # a byte model: each character on its last byte
    ids = ids.to(next(model.parameters()).device)
    return model.attention_maps(ids)[:, 0], labels  # (L, nh, T, T)


def write_attention_png(model: GPT, tok: Tokenizer, text: str, out: Path, layer: int | None, head: int | None) -> Path:
    """Render the attention of `model` over `text` to `out` (any matplotlib format, e.g. .png)."""
    cfg = model.cfg
    if layer is not None and not 0 <= layer < cfg.n_layer:
        raise UserError(f"--layer must be in 0..{cfg.n_layer - 1} (the model has {cfg.n_layer} layers), got {layer}")
    if head is not None and not 0 <= head < cfg.n_head:
        raise UserError(f"--head must be in 0..{cfg.n_head - 1} (the model has {cfg.n_head} heads), got {head}")
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: the folder {out.parent} does not exist")
    maps, chars = attention_maps_for(model, tok, text)
    layers = [layer] if layer is not None else list(range(cfg.n_layer))
    heads = [head] if head is not None else list(range(cfg.n_head))
    fig = attention_figure(maps, chars, layers, heads)
    try:
        fig.savefig(out, dpi=150, bbox_inches="tight")
    except (OSError, ValueError) as e:
        raise UserError(f"cannot write {out}: {e}") from None
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    return out
