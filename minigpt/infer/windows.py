"""Windows of a text and the loss over them: the one reader behind the trainer's final number,
`minigpt eval` (and its loss by position), `score` and the head ablations of `minigpt heads`."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from minigpt.model import GPT
from minigpt.runtime.memory import release_pages


def token_losses(model: GPT, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The next-token loss in nats at each position of x (B, T) against y (B, T), float32, and the logits (B, T, V)."""
    logits, _ = model(x)
    return losses_of(logits, y), logits


def losses_of(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The next-token loss in nats (B, T), float32, of logits (B, T, V) against targets y (B, T)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), reduction="none").view(y.shape)


def spread_starts(n_pred: int, block: int, max_tokens: int) -> list[int] | None:
    """The starts of an evenly spread, deterministic sample of whole windows (max_tokens // block
    of them, from the first window to near the last) when the text has more than `max_tokens`
    predictions; None when every position is read (max_tokens 0, or a text no longer than that)."""
    if not max_tokens or n_pred <= max_tokens:
        return None
    windows = n_pred // block
    n = max(1, min(windows, max_tokens // block))
    return [(i * windows // n) * block for i in range(n)]


def text_windows(
    ids: np.ndarray | torch.Tensor,
    block: int,
    table: np.ndarray | None = None,
    starts: list[int] | None = None,
    batch_windows: int = 64,
    device: torch.device | str = "cpu",
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Batches (x, y = x shifted by one) of windows of `ids` on `device`: without `starts`, windows of
    `block` and a shorter last one, each of the len(ids) - 1 predictions made once; with `starts`, the
    whole windows beginning there. `ids` (any integer memmap; through `table` if given) is read
    `batch_windows` windows at a time, its pages given back."""
    data = ids.numpy() if isinstance(ids, torch.Tensor) else ids
    n_pred = len(data) - 1

    def tensors(chunk: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.from_numpy(table[chunk] if table is not None else chunk.astype(np.int64)).to(device)
        return rows[:, :-1], rows[:, 1:]

    if starts is not None:
        for first in range(0, len(starts), batch_windows):
            chunk = np.stack([np.asarray(data[s : s + block + 1]) for s in starts[first : first + batch_windows]])
            release_pages(data)
            yield tensors(chunk)
        return
    span = batch_windows * block
    for start in range(0, n_pred, span):
        end = min(start + span, n_pred)  # predictions start..end-1, of ids start+1..end
        chunk = np.array(data[start : end + 1])  # one copy out of the map
        release_pages(data)
        n_full = (end - start) // block
        if n_full:
            # overlapping rows of block + 1 ids: row i is ids i*block .. (i+1)*block
            rows = np.lib.stride_tricks.sliding_window_view(chunk[: n_full * block + 1], block + 1)[::block]
            yield tensors(np.ascontiguousarray(rows))
        if end - start > n_full * block:  # the tail
            yield tensors(chunk[n_full * block :][None])
