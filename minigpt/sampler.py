"""Text generation: a pure next-token sampler and a KV-cached generation loop.

Past `block_size` the cached loop slides its window: when the cache is full it is refilled from
the last half window (block_size // 2 tokens, re-encoded at positions 0..), and generation goes
on from there. This costs one half-window forward every block_size // 2 tokens instead of a
whole-window forward every token. Unlike recomputing the whole window each step, the model then
sees between block_size // 2 and block_size tokens of context rather than always block_size, so
text past the first window can differ slightly from what the uncached path would produce.
Within block_size the two paths produce exactly the same tokens (in float32; a bf16 model rounds
the two differently).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from minigpt.model import GPT, KVCache


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick the next token for each row of `logits` (B, V) -> (B,).

    temperature 0 is greedy (argmax). top_k keeps the k most likely tokens; top_p keeps the
    smallest set of most likely tokens whose probability adds up to at least p (nucleus).
    Randomness comes only from `generator`.
    """
    logits = logits.float()
    if temperature == 0:
        return logits.argmax(dim=-1)
    # shift so the largest logit is 0 before dividing: a tiny temperature cannot overflow
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None and top_k < logits.size(-1):
        top = torch.topk(logits, top_k, dim=-1)  # exactly k survive, ties included or not
        logits = torch.full_like(logits, float("-inf")).scatter(-1, top.indices, top.values)
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = F.softmax(sorted_logits, dim=-1)
        # drop a token when the tokens before it already reach top_p (the first always stays)
        drop_sorted = (probs.cumsum(dim=-1) - probs) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocab order
        logits = logits.masked_fill(drop, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


@torch.inference_mode()
def generate(
    model: GPT,
    prompt: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    on_token: Callable[[int], None] | None = None,
) -> list[int]:
    """Generate `max_new_tokens` ids after `prompt` (batch 1); returns only the new ids.

    `on_token` is called with each id as soon as it is chosen (for streaming output).
    """
    if not prompt:
        raise ValueError("generation needs a prompt of at least one token")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    block = model.cfg.block_size
    seq = list(prompt)
    new: list[int] = []
    try:
        if use_cache:
            # float32 keys and values on the CPU, where attention runs in float32 (model.causal_attention)
            dtype = torch.float32 if device.type == "cpu" else next(model.parameters()).dtype
            cache = KVCache(model.cfg, 1, block, device, dtype)
            window = seq[-block:]
            logits, _ = model(torch.tensor([window], device=device), cache=cache)
        for _ in range(max_new_tokens):
            if not use_cache:
                logits, _ = model(torch.tensor([seq[-block:]], device=device))
            token = sample_next_token(logits[:, -1, :], temperature, top_k, top_p, generator)
            tid = int(token.item())
            seq.append(tid)
            new.append(tid)
            if on_token is not None:
                on_token(tid)
            if use_cache and len(new) < max_new_tokens:
                if cache.length >= block:  # full: slide to the last half window
                    cache.reset()
                    window = seq[-max(1, block // 2) :]
                    logits, _ = model(torch.tensor([window], device=device), cache=cache)
                else:
                    logits, _ = model(token.view(1, 1), cache=cache)
    finally:
        model.train(was_training)
    return new
