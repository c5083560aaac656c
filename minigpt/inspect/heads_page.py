"""`minigpt heads --html`: the heads of a model on one offline page. A grid (layers x heads) of each
head's role, pattern scores on the text and attention over the repeated probe sequence; one head's pattern large; the
loss each head's ablation costs. Built from a `HeadsReport`'s plain numbers (no torch here); the
page itself is web/heads_page.html and heads_page.js, inlined by `pages.render`."""

from __future__ import annotations

import base64
import math
from collections import Counter
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

from minigpt.inspect.pages import MAX_PAGE_WEIGHTS, HtmlPage, render

if TYPE_CHECKING:
    from minigpt.inspect.heads import HeadsReport

MAX_SIDE = 256  # positions a pattern shows per side: the large view is ~400 px, finer detail would not show


def heads_page(report: HeadsReport, labels: list[str] | None = None) -> HtmlPage:
    """The page of `report`; `labels` (one string per token of `report.tokens`, e.g. `pages.token_label`)
    lets it show the sequence's characters, else it shows positions only."""
    from minigpt.inspect.heads import LOCAL_DISTANCE, ROLE_MARGIN, ROLE_MIN, TEXT_POSITIONS  # loaded already

    meta = report.meta
    n_layer, n_head = meta["n_layer"], meta["n_head"]
    T = len(report.tokens)
    if labels is not None and len(labels) != T:
        raise ValueError(f"labels has {len(labels)} entries; the report's sequence has {T} tokens")
    pool, weights = pooled_patterns(report.patterns, T)
    data = {
        "source": meta.get("source", ""),
        "unit": meta.get("unit", "char"),
        "nLayer": n_layer,
        "nHead": n_head,
        "tokens": report.tokens,
        "labels": labels,
        "ceilings": report.ceilings,  # the probe's
        "probeUniform": report.probe_uniform,
        "uniform": report.uniform,  # the text's (a perfect head scores 1 there)
        "positions": report.positions,
        "text": meta.get("text", ""),
        "windows": meta.get("windows", 0),
        "context": meta.get("context", 0),
        "heads": [asdict(h) for h in report.heads],  # layer, head, scores, probe, evidence, role, ablation
        "ablation": report.ablation,
        "baseLoss": report.base_loss,
        "ablationTokens": report.ablation_tokens,
        "ablationText": meta.get("ablation_text", ""),
        "blockSize": meta.get("block_size"),
        "roleMin": ROLE_MIN,
        "textPositions": TEXT_POSITIONS,
        "roleMargin": ROLE_MARGIN,
        "localDistance": LOCAL_DISTANCE,
        "pool": pool,  # each pixel of a pattern: the largest weight over pool x pool (query, key) pairs
        "side": weights.shape[-1],
        "weights": base64.b64encode(weights.tobytes()).decode("ascii"),  # (L, nh, side, side), weight x 255
    }
    roles = Counter(h.role for h in report.heads)
    shown = ", ".join(f"{n} {role}" for role, n in roles.most_common())
    ablation = (
        f"; {report.ablation} ablation on {report.ablation_tokens:,} predictions"
        if report.base_loss is not None
        else "; no ablation"
    )
    summary = f"{len(report.heads)} heads ({n_layer} layers x {n_head}): {shown}{ablation}"
    title = f"heads: {n_layer} layers x {n_head} heads"
    return HtmlPage(render("heads_page", title, data), "heads", summary, height=980)


def pooled_patterns(patterns: list, T: int) -> tuple[int, np.ndarray]:
    """The weights (L, nh, T, T) as bytes (weight x 255, rounded), max-pooled over pool x pool blocks
    when T is past MAX_SIDE or the page would hold more than MAX_PAGE_WEIGHTS of them: a stripe
    one position wide stays visible, where a mean would fade it."""
    w = np.asarray(patterns, dtype=np.float32).reshape(-1, T, T)  # (L * nh, T, T)
    pool = 1
    while math.ceil(T / pool) > MAX_SIDE or w.shape[0] * math.ceil(T / pool) ** 2 > MAX_PAGE_WEIGHTS:
        pool += 1
    if pool > 1:
        side = math.ceil(T / pool)
        padded = np.zeros((w.shape[0], side * pool, side * pool), dtype=np.float32)
        padded[:, :T, :T] = w
        w = padded.reshape(w.shape[0], side, pool, side, pool).max(axis=(2, 4))
    return pool, np.rint(np.clip(w, 0.0, 1.0) * 255).astype(np.uint8)
