"""The attention form, set on a built model from outside (`set_attention`): on the CPU, bf16 attended in
float32, or as bf16 products on the matrix engine where `attends_by_products` measures that faster."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.nn.functional as F

from minigpt.runtime.precision import Choice, cached_choice, interleaved_medians

PRODUCTS_FROM = (32, 128)  # head size, context: below either, the float32 flash kernel won where measured
PRODUCTS_CONTEXT_MAX = 512  # products hold context² scores per head, which the flash kernel never does


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    mask: torch.Tensor | None = None,
    products: bool = False,
) -> torch.Tensor:
    """The model's attention (`model.plain_attention`), except for bf16 queries on the CPU: attended
    in float32, or with `products` (and no mask) as `attention_by_products`; q's dtype comes back."""
    if mask is None and q.size(2) not in (1, k.size(2)):
        raise ValueError(f"{q.size(2)} queries over {k.size(2)} keys need an explicit attention mask")
    causal = mask is None and k.size(2) == q.size(2)
    if q.dtype != torch.bfloat16 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)
    if products and causal:
        return attention_by_products(q, k, v, dropout_p)
    # out of training's autocast (bf16 again there); decoding has none, and entering one costs ~20 Python calls
    with torch.autocast("cpu", enabled=False) if torch.is_autocast_enabled("cpu") else contextlib.nullcontext():
        y = F.scaled_dot_product_attention(
            q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout_p, is_causal=causal
        )
    return y.to(q.dtype)


def by_products(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, mask=None) -> torch.Tensor:
    return causal_attention(q, k, v, dropout_p, mask, products=True)


def attention_by_products(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0) -> torch.Tensor:
    """Causal attention as explicit products: scores, mask, softmax, weighted sum, in q's dtype.
    Speed trick: in bf16 these products run on a CPU's matrix engine, which its flash kernel does
    not use; benchmark scripts/step_levers.py (products)."""
    B, H, T, D = q.shape
    future = torch.full((T, T), float("-inf"), dtype=q.dtype, device=q.device).triu(1)  # 0 where a key is seen
    # the scale and the causal mask inside the product (alpha, the added matrix): no pass of their own
    scores = torch.baddbmm(future, q.reshape(B * H, T, D), k.reshape(B * H, T, D).transpose(1, 2), alpha=D**-0.5)
    weights = F.dropout(scores.softmax(-1), dropout_p)
    return torch.bmm(weights, v.reshape(B * H, T, D)).view(B, H, T, D)


def set_attention(model: Any, products: bool = False) -> None:
    """Give every attention layer of a built GPT its form: `causal_attention`, by products or not."""
    for block in model.blocks:
        block.attn.attend = by_products if products else causal_attention


def attention_speed(heads: int, context: int, head_size: int) -> float:
    """bf16 causal attention's speed as products over the float32 flash kernel's, forward and
    backward, for `heads` (batch x heads) rows of `context` x `head_size` on this CPU."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, context, head_size, generator=gen).bfloat16().requires_grad_() for _ in range(3))
    flash, products = interleaved_medians(
        [lambda p=p: causal_attention(q, k, v, products=p).float().sum().backward() for p in (False, True)]
    )
    return flash / products


def attends_by_products(cfg: Any, device: torch.device, dtype: torch.dtype, sequences: int) -> Choice | None:
    """Whether bf16 attention runs as products rather than the float32 flash kernel, measured for the
    run's shape and cached like the precision; None where it is not measured (PRODUCTS_FROM and _MAX)."""
    m = cfg.model
    size = m.n_embd // m.n_head
    if device.type != "cpu" or dtype != torch.bfloat16 or size < PRODUCTS_FROM[0]:
        return None
    if not PRODUCTS_FROM[1] <= m.block_size <= PRODUCTS_CONTEXT_MAX:
        return None
    heads = sequences * m.n_head
    shape = f"{heads}x{m.block_size}x{size}"
    return cached_choice(shape, lambda: attention_speed(heads, m.block_size, size), kind="attention")


def attention_form(
    cfg: Any, device: torch.device, dtype: torch.dtype, sequences: int, trained: dict | None
) -> tuple[str, str | None]:
    """train.attention decided ("flash" or "products") and the line that says why, where it is not the
    default: a resume's recorded form on the same device and dtype, else `attends_by_products`' measurement
    for `sequences` per micro-batch."""
    kept = trained or {}
    if cfg.train.attention != "auto":
        products = cfg.train.attention == "products"
        return cfg.train.attention, "attention: bf16 products (set by train.attention)" if products else None
    if (
        kept.get("attention")
        and kept.get("device") == device.type
        and kept.get("dtype") == str(dtype).removeprefix("torch.")
    ):
        products = kept["attention"] == "products"
        return kept["attention"], "attention: bf16 products (kept on resume: the run trained so)" if products else None
    choice = None if cfg.train.auto else attends_by_products(cfg, device, dtype, sequences)  # --auto times flash
    if choice is None:
        return "flash", None
    form, how = ("bf16 products", "products") if choice.bf16 else ("the float32 flash kernel", "flash")
    why = f"{'cached' if choice.cached else 'measured'}: products at {choice.ratio:.2f}x the flash kernel's speed"
    return how, f"attention: {form} (auto, {why} for this shape)"
