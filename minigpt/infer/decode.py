"""Text generation: a pure next-token sampler and a KV-cached generation loop.

Past `block_size` the cache is refilled from the last half window (re-encoded at positions 0..):
one half-window forward every block_size // 2 tokens, with between half and a whole context seen.
Within block_size the cached and uncached paths give the same tokens (in float32)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from minigpt.model import GPT, KVCache, evaluating


def half_window(block: int) -> int:
    """Half a context: how far the windows over a long text advance (scores, attention pages), and
    what the sampler keeps when its cache is full, so a character always has at least half a
    context before it."""
    return max(1, block // 2)


def next_token_probs(
    logits: torch.Tensor, temperature: float, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """The distribution each row of `logits` (B, V) samples from, after temperature, top_k and
    top_p (temperature > 0). Every operation is row by row: a row's result does not depend on the
    other rows of the batch."""
    logits = logits.float()
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
    return F.softmax(logits, dim=-1)


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
    if temperature == 0:
        return logits.float().argmax(dim=-1)
    return torch.multinomial(next_token_probs(logits, temperature, top_k, top_p), 1, generator=generator)[:, 0]


def _sample_rows(
    logits: torch.Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    generators: Sequence[torch.Generator | None],
) -> list[int]:
    """One token per row, row i drawn from generators[i] alone: the same draw as batch 1 gives."""
    if temperature == 0:
        return logits.float().argmax(dim=-1).tolist()
    probs = next_token_probs(logits, temperature, top_k, top_p)
    draws = [torch.multinomial(probs[i : i + 1], 1, generator=g) for i, g in enumerate(generators)]
    return torch.cat(draws).view(-1).tolist()  # one device sync a step, not one a row


@torch.inference_mode()
def generate_steps(
    model: GPT,
    prompts: Sequence[Sequence[int]],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generators: Sequence[torch.Generator | None] | None = None,
    use_cache: bool = True,
) -> Iterator[list[int]]:
    """Generate after B prompts of the same length at once, through one KV cache: each step is one
    (B, 1) forward instead of B, and yields the step's new ids, one a row, for max_new_tokens steps.
    A caller that needs no more (every row ended by a stop string) stops iterating: nothing more is
    computed. Row i draws from generators[i], so it gives the tokens batch 1 gives with that
    generator (up to the last bits of the batched matrix products, which can change a draw).
    use_cache=False recomputes the last block_size ids at every step instead: the reference the KV
    cache is tested against.
    """
    if not prompts or not prompts[0] or len({len(p) for p in prompts}) != 1:
        raise ValueError("generate_steps needs prompts of one length, at least one token each")
    B = len(prompts)
    generators = list(generators) if generators is not None else [None] * B
    device, block = model.device, model.cfg.block_size
    seqs = [list(p) for p in prompts]
    # float32 keys and values on the CPU, where attention runs in float32 (model.causal_attention)
    dtype = torch.float32 if device.type == "cpu" else model.dtype
    cache = KVCache(model.cfg, B, block, device, dtype) if use_cache else None
    with evaluating(model):
        for step in range(max_new_tokens):
            n = 1  # the positions the model reads: the last one, with the cache holding those before
            if step == 0 or cache is None:
                n = block
            elif cache.length >= block:  # full: slide to the last half window
                cache.reset()
                n = half_window(block)
            logits, _ = model(torch.tensor([s[-n:] for s in seqs], device=device), cache=cache)
            tokens = _sample_rows(logits[:, -1, :], temperature, top_k, top_p, generators)
            for seq, tid in zip(seqs, tokens):
                seq.append(tid)
            yield tokens


def generate(
    model: GPT,
    prompt: list[int],
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> list[int]:
    """Generate `max_new_tokens` ids after `prompt` (batch 1); returns only the new ids."""
    if not prompt:
        raise ValueError("generation needs a prompt of at least one token")
    steps = generate_steps(model, [prompt], max_new_tokens, temperature, top_k, top_p, [generator], use_cache)
    return [ids[0] for ids in steps]
