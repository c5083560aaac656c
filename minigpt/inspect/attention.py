"""Pictures of attention: heat maps per layer and head over a text (Pillow), and the
interactive explorer page over texts of any length, read window by window (docs/inside.md)."""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from minigpt.data.tokenizer import Tokenizer, checked_text
from minigpt.errors import UserError
from minigpt.infer.decode import half_window
from minigpt.infer.score import window_count
from minigpt.inspect.pages import MAX_PAGE_CHARS, MAX_PAGE_WEIGHTS, VISIBLE, HtmlPage, _snippet, check_length, render
from minigpt.model import GPT


def visible(ch: str) -> str:
    """A character as it can be read on an axis: whitespace gets a visible stand-in."""
    return VISIBLE.get(ch, ch)


VIRIDIS = np.array([(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)], dtype=np.float32)


def attention_grid(
    maps: torch.Tensor, chars: list[str], title: str, layers: list[int] | None = None, heads: list[int] | None = None
) -> np.ndarray:
    """The one picture of attention (TensorBoard's, and `minigpt attention --out`'s): `maps` (L, nh, T, T)
    over `chars` as an RGB array (H, W, 3), a heat map per layer (rows) and head (columns) of `layers` and
    `heads` (all by default), characters on the outer axes, in viridis (five stops). Drawn with Pillow in
    its own font, without importing matplotlib: seconds less a run."""
    from PIL import Image, ImageDraw, ImageFont

    layers = list(range(maps.size(0))) if layers is None else layers
    heads = list(range(maps.size(1))) if heads is None else heads
    weights = maps[layers][:, heads].float().clamp(0, 1).cpu().numpy() * (len(VIRIDIS) - 1)
    low = np.minimum(weights.astype(int), len(VIRIDIS) - 2)
    f = (weights - low)[..., None]
    colours = (VIRIDIS[low] * (1 - f) + VIRIDIS[low + 1] * f).astype(np.uint8)  # (L, nh, T, T, 3)
    L, H, T = colours.shape[:3]
    cell = max(4, min(16, 320 // T))
    font = ImageFont.load_default(max(8, min(12, cell)))
    side = T * cell
    margin = cell + 16
    top = 30
    picture = Image.new("RGB", (margin + H * (side + 8), top + L * (side + 20) + margin), "white")
    draw = ImageDraw.Draw(picture)
    draw.text((4, 4), title, fill="black", font=font)
    for r in range(L):
        for c in range(H):
            x = margin + c * (side + 8)
            y = top + r * (side + 20) + 14
            picture.paste(Image.fromarray(colours[r, c]).resize((side, side), Image.NEAREST), (x, y))
            draw.text((x, y - 14), f"layer {layers[r]} head {heads[c]}", fill="black", font=font)
            for t, ch in enumerate(visible(ch) for ch in chars):
                if t % math.ceil(9 / cell):  # no overlapping labels: a long probe labels every few characters
                    continue
                if c == 0:
                    draw.text((x - cell - 4, y + t * cell), ch, fill="black", font=font)
                if r == L - 1:
                    draw.text((x + t * cell, y + side + 2), ch, fill="black", font=font)
    return np.asarray(picture)


def attention_maps_for(model: GPT, tok: Tokenizer, text: str) -> tuple[torch.Tensor, list[str]]:
    """(L, nh, T, T) weights over `text` (at most block_size characters) and its characters."""
    if not text:
        raise UserError("--text must not be empty")
    ids = torch.from_numpy(tok.encode_checked(text, "--text", skip_hint=False))[None, : model.cfg.block_size]
    labels = tok.pieces(ids[0].tolist())  # a byte model: each character on its last byte
    ids = ids.to(model.device)
    return model.attention_maps(ids)[:, 0], labels  # (L, nh, T, T)


def chosen_layers_heads(model: GPT, layer: int | None, head: int | None) -> tuple[list[int], list[int]]:
    """The layers and heads to show: all of them, or the one `--layer` / `--head` names."""
    cfg = model.cfg
    if layer is not None and not 0 <= layer < cfg.n_layer:
        raise UserError(f"--layer must be in 0..{cfg.n_layer - 1} (the model has {cfg.n_layer} layers), got {layer}")
    if head is not None and not 0 <= head < cfg.n_head:
        raise UserError(f"--head must be in 0..{cfg.n_head - 1} (the model has {cfg.n_head} heads), got {head}")
    layers = [layer] if layer is not None else list(range(cfg.n_layer))
    heads = [head] if head is not None else list(range(cfg.n_head))
    return layers, heads


def write_attention_png(model: GPT, tok: Tokenizer, text: str, out: Path, layer: int | None, head: int | None) -> Path:
    """Render the attention of `model` over `text` to `out` (`attention_grid`; any Pillow format, e.g. .png)."""
    from PIL import Image

    layers, heads = chosen_layers_heads(model, layer, head)
    if not out.parent.is_dir():
        raise UserError(f"cannot write {out}: the folder {out.parent} does not exist")
    maps, chars = attention_maps_for(model, tok, text)
    try:
        Image.fromarray(attention_grid(maps, chars, "attention weights: query (rows) by key", layers, heads)).save(out)
    except (OSError, ValueError) as e:
        raise UserError(f"cannot write {out}: {e}") from None
    return out


@dataclass
class WindowedAttention:
    """The attention over a text of any length: windows of block_size every `stride` characters, as
    `minigpt score` reads it; character i is shown from `owner_window(i)`, where it has the most context.
    `maps[w]` is window w's (L', nh', T_w, T_w) weights for the chosen `layers` and `heads`."""

    pieces: list[str]  # what each token shows as (`Tokenizer.pieces`)
    ids: list[int]
    block: int
    stride: int
    layers: list[int]
    heads: list[int]
    maps: list[torch.Tensor]

    def owner_window(self, i: int) -> int:
        return 0 if i < self.block else (i - self.block) // self.stride + 1

    def row(self, i: int) -> tuple[int, torch.Tensor]:
        """Character i's attention as the page shows it: (first key's position, weights (L', nh', keys)),
        the keys from its window's start up to i."""
        w = self.owner_window(i)
        start = w * self.stride
        return start, self.maps[w][:, :, i - start, : i - start + 1]

    def weight_bytes(self) -> bytes:
        """The weights as the page stores them: round(255 w) bytes of each window's lower triangle,
        in the order layer, head, window, row, column."""
        tris = []
        for m in self.maps:  # (L', nh', T, T), each window made bytes at once: a quarter of the memory
            rows, cols = torch.tril_indices(m.size(-1), m.size(-1))
            tris.append((m[:, :, rows, cols] * 255).round().clamp(0, 255).to(torch.uint8))
        return torch.cat(tris, dim=-1).numpy().tobytes()  # (L', nh', cells)


@torch.no_grad()
def windowed_attention(
    model: GPT, pieces: list[str], ids: list[int], layers: list[int], heads: list[int], batch: int = 32
) -> WindowedAttention:
    """`GPT.attention_maps` over every window of `ids` (forward passes of up to `batch` windows at once)."""
    block = model.cfg.block_size
    stride = half_window(block)
    n = len(ids)
    starts = [w * stride for w in range(window_count(n, block))]
    device = model.device
    data = torch.tensor(ids, dtype=torch.long, device=device)
    layer_index = torch.tensor(layers, device=device)
    head_index = torch.tensor(heads, device=device)
    maps: list[torch.Tensor] = []
    full = [s for s in starts if s + block <= n]  # every window but perhaps the last has block characters
    for k in range(0, len(full), batch):
        chunk = torch.stack([data[s : s + block] for s in full[k : k + batch]])  # (B, T)
        kept = model.attention_maps(chunk)[layer_index][:, :, head_index]  # (L', B, nh', T, T)
        maps += list(kept.float().cpu().unbind(1))
    for s in starts[len(full) :]:  # a text shorter than a block, or the last window
        kept = model.attention_maps(data[None, s:])[layer_index][:, :, head_index]
        maps.append(kept[:, 0].float().cpu())
    return WindowedAttention(pieces, ids, block, stride, layers, heads, maps)


def attention_page(
    model: GPT,
    tok: Tokenizer,
    text: str,
    source: str = "",
    layer: int | None = None,
    head: int | None = None,
    label: str = "--text",
    unknown: str = "error",
) -> HtmlPage:
    """The interactive attention explorer over `text` (up to the page's limit), for all layers and
    heads or the one `layer` / `head`."""
    layers, heads = chosen_layers_heads(model, layer, head)
    text = checked_text(tok, text, label, unknown)
    ids = tok.encode(text)
    block = model.cfg.block_size
    limit = min(MAX_PAGE_CHARS, MAX_PAGE_WEIGHTS // (len(layers) * len(heads) * block))
    many = len(layers) * len(heads) > 1 and limit < MAX_PAGE_CHARS
    hint = f" with this model's {len(layers)} layers x {len(heads)} heads (one --layer or --head allows more)"
    check_length(len(ids), limit, label, hint if many else "")
    att = windowed_attention(model, tok.pieces(ids), ids, layers, heads)
    data = {
        "source": source,
        "pieces": att.pieces,
        "block": att.block,
        "stride": att.stride,
        "layers": layers,
        "heads": heads,
        "nLayer": model.cfg.n_layer,
        "nHead": model.cfg.n_head,
        "weights": base64.b64encode(att.weight_bytes()).decode("ascii"),
    }
    summary = f"{len(ids):,} characters, {len(layers)} layer(s) x {len(heads)} head(s), {len(att.maps)} window(s)"
    return HtmlPage(render("attention", f"attention: {_snippet(att.pieces)}", data), "attention", summary)
