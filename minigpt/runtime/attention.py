"""The CPU's bf16 attention as explicit products on the matrix engine: measured against the model's own
attention (`attends_by_products`), and swapped into a built model only where chosen (`use_products`)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from minigpt.runtime.precision import Choice, cached_choice, interleaved_medians

Attention = Callable[..., torch.Tensor]  # the model's attention: (q, k, v, dropout_p, mask) -> y

PRODUCTS_FROM = (32, 128)  # head size, context: below either, the float32 flash kernel won where measured
PRODUCTS_CONTEXT_MAX = 512  # products hold context² scores per head, which the flash kernel never does


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


def attend_by_products(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    mask: torch.Tensor | None = None,
    *,
    otherwise: Attention,
) -> torch.Tensor:
    """bf16 causal attention on the CPU as `attention_by_products`; anything else (a mask, a decoding
    step, another dtype or device) as `otherwise`, the model's own attention."""
    if mask is None and q.size(2) == k.size(2) and q.dtype == torch.bfloat16 and q.device.type == "cpu":
        return attention_by_products(q, k, v, dropout_p)
    return otherwise(q, k, v, dropout_p, mask)


def use_products(model: torch.nn.Module) -> None:
    """The speed layer's one swap: every attention layer of a built GPT attends by products where
    train.attention chose them (the trainer calls this, once, before training)."""
    for module in model.modules():
        if hasattr(module, "attend"):
            module.attend = functools.partial(attend_by_products, otherwise=module.attend)


def attention_speed(heads: int, context: int, head_size: int) -> float:
    """bf16 causal attention's speed as products over the float32 flash kernel's, forward and
    backward, for `heads` (batch x heads) rows of `context` x `head_size` on this CPU."""
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, heads, context, head_size, generator=gen).bfloat16().requires_grad_() for _ in range(3))

    def flash() -> None:  # as model.causal_attention attends bf16 on the CPU: in float32
        F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).bfloat16().sum().backward()

    def products() -> None:
        attention_by_products(q, k, v).float().sum().backward()

    flash_s, products_s = interleaved_medians([flash, products])
    return flash_s / products_s


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
