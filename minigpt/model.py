"""A decoder-only GPT: token embeddings and positions (learned, sinusoidal or rotary), causal
self-attention and MLP blocks, a tied LM head; options off by default in docs/configuration.md.
Only the model: no I/O, device choice or optimizer; inspection hooks its HookPoints."""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
import torch.nn as nn
import torch.nn.functional as F

if TYPE_CHECKING:
    from minigpt.config.schema import ModelConfig

Rope = tuple[torch.Tensor, torch.Tensor] | None  # cos, signed sin (T, head_size) of the current positions
QK_NORM_EPS = 1e-6  # model.qk_norm's epsilon (fixed, so exports and the playground use the same)
SINUSOIDAL_SCALE = 0.02 * math.sqrt(2)  # the fixed position table's scale (GPT.__init__ says why)


def parameter_count(m: ModelConfig, vocab_size: int) -> int:
    """The GPT's parameters counted from the config, the tied head once (a test holds it to the model's count)."""
    C, b = m.n_embd, int(m.bias)
    norm = C * (1 + b)
    attn = norm + (3 * C * C + 3 * C * b) + (C * C + C * b)
    mlp = 0 if m.attn_only else norm + (4 * C * C + 4 * C * b) + (4 * C * C + C * b)
    block = attn + mlp
    learned = m.block_size * C if m.pos_emb == "learned" else 0
    values = m.n_layer * (vocab_size * C + 1) if m.value_embeds else 0  # a table and a mixing weight a block
    return vocab_size * C + learned + m.n_layer * block + (norm if m.norm == "pre" else 0) + values


@contextlib.contextmanager
def evaluating(model: nn.Module) -> Iterator[nn.Module]:
    """The model in eval mode (no dropout) inside the block, and back in the mode it had after it."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


class KVCache:
    """Keys and values of the positions seen so far, for every layer, so that generating one more
    token costs one position of work. Preallocated to `max_len` positions."""

    def __init__(self, cfg: ModelConfig, batch_size: int, max_len: int, device: torch.device, dtype: torch.dtype):
        hs = cfg.n_embd // cfg.n_head
        shape = (cfg.n_layer, batch_size, cfg.n_head, max_len, hs)  # (L, B, nh, S, hs)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0  # positions filled so far

    def reset(self) -> None:
        self.length = 0


def sinusoidal_table(n_pos: int, dim: int) -> torch.Tensor:
    """The fixed encoding of the original Transformer: (n_pos, dim), sin on even, cos on odd channels."""
    pos = torch.arange(n_pos, dtype=torch.float32)[:, None]  # (P, 1)
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # (dim/2,)
    table = torch.zeros(n_pos, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table


def rope_tables(n_pos: int, head_size: int, base: float = 10000.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary angles' cos and signed sin, each (n_pos, head_size): channel i is paired with
    i + head_size/2, so the tables hold [cos, cos] and [-sin, sin] over the two halves."""
    inv_freq = base ** (-torch.arange(0, head_size, 2, dtype=torch.float32) / head_size)  # (hs/2,)
    angles = torch.arange(n_pos, dtype=torch.float32)[:, None] * inv_freq[None, :]  # (P, hs/2)
    cos, sin = angles.cos(), angles.sin()
    return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate channel pairs (i, i + hs/2) of x (..., T, hs) by position-dependent angles, with
    the tables of rope_tables (T, hs): (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin). The halves
    are swapped with one roll: the same numbers as splitting and concatenating them, in fewer operations."""
    return x * cos.to(x.dtype) + x.roll(x.size(-1) // 2, dims=-1) * sin.to(x.dtype)


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Scaled dot-product attention (flash kernel where there is one), on every device. Without
    `mask`, either as many queries as keys, attended causally (training, a full forward), or one
    query that sees every key (a KV-cache decoding step); the KV-cache path passes its own mask
    otherwise. On the CPU a bf16 model attends in float32, as its KV cache holds keys and values
    (decode.py); q's dtype comes back."""
    if mask is None and q.size(2) not in (1, k.size(2)):
        raise ValueError(f"{q.size(2)} queries over {k.size(2)} keys need an explicit attention mask")
    causal = mask is None and k.size(2) == q.size(2)
    if (q.dtype == torch.bfloat16 and q.device.type == "cpu") or k.dtype != q.dtype:
        # out of training's autocast (bf16 again there); decoding has none, and entering one costs ~20 Python calls
        with torch.autocast("cpu", enabled=False) if torch.is_autocast_enabled("cpu") else contextlib.nullcontext():
            y = F.scaled_dot_product_attention(
                q.float(), k.float(), v.float(), attn_mask=mask, dropout_p=dropout_p, is_causal=causal
            )
        return y.to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)


def unchanged(x: torch.Tensor, *_: object) -> torch.Tensor:
    """What an option that is off does: nothing (chosen at construction, so no forward tests an option)."""
    return x


def rotate(qk: torch.Tensor, rope: Rope) -> torch.Tensor:
    """model.pos_emb=rope: queries and keys rotated together by the positions' tables (half the operations);
    a block called on its own, with no tables, attends without positions."""
    return qk if rope is None else apply_rope(qk, *rope)


def no_values(*_: object) -> None:
    """model.value_embeds off: no value embedding for any block."""
    return None


def relu_squared(h: torch.Tensor) -> torch.Tensor:
    """model.mlp_act=relu2: relu(h)^2."""
    return F.relu(h).square()


class HookPoint(nn.Identity):
    """A place in the forward pass where inspection attaches, through `register_forward_hook`: a hook
    sees the tensor there and may return its replacement. The model calls it only while it has
    hooks, so an unwatched model pays one dict check there, not a module call."""

    def hooked(self) -> bool:
        return bool(self._forward_hooks)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.dropout = cfg.dropout
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        hs = cfg.n_embd // cfg.n_head
        # the options, each chosen once: RMS 1 for each head's queries and keys (model.qk_norm), rotary
        # positions (model.pos_emb=rope), and how much of the block's value embedding joins its values
        self.qk_norm = (
            functools.partial(F.rms_norm, normalized_shape=(hs,), eps=QK_NORM_EPS) if cfg.qk_norm else unchanged
        )
        self.rotate = rotate if cfg.pos_emb == "rope" else unchanged
        self.ve_mix = nn.Parameter(torch.tensor(0.5)) if cfg.value_embeds else None
        self.add_values = self.add_value_embeds if cfg.value_embeds else unchanged
        # the probabilities (B, nh, T, S), written out while this is hooked (no fused kernel; eval only)
        self.pattern = HookPoint()
        self.head_out = HookPoint()  # each head's output (B, nh, T, hs) before the projection (head ablation)
        # the attention every run executes; only where train.attention chose the CPU's bf16 products does the
        # trainer swap in that form (runtime/attention.py use_products, docs/design.md)
        self.attend = causal_attention

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        rope: Rope = None,
        ve: torch.Tensor | None = None,
    ) -> torch.Tensor:
        B, T, C = x.shape
        hs = C // self.n_head
        qkv = self.c_attn(x).view(B, T, 3, self.n_head, hs).permute(2, 0, 3, 1, 4)  # (3, B, nh, T, hs)
        qk, v = qkv.split((2, 1))  # not slices, whose backward fills a zero gradient and adds into it
        v = v.squeeze(0)
        qk = self.rotate(self.qk_norm(qk), rope)
        q, k = qk.unbind(0)
        v = self.add_values(v, ve)  # (B, nh, T, hs)
        start = 0
        if cache is not None:
            start = cache.length
            end = start + T
            cache.k[layer, :, :, start:end] = k
            cache.v[layer, :, :, start:end] = v
            k, v = cache.k[layer, :, :, :end], cache.v[layer, :, :, :end]  # (B, nh, end, hs)
        S = k.size(2)
        if self.pattern.hooked():
            # the same attention, written out so that the hooks see the probabilities (no dropout: eval only)
            causal = (
                torch.arange(S, device=x.device)[None, :] <= torch.arange(start, start + T, device=x.device)[:, None]
            )
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(hs)  # (B, nh, T, S)
            y = self.pattern(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1)) @ v  # (B, nh, T, hs)
        elif cache is None:
            y = self.attend(q, k, v, self.dropout if self.training else 0.0)
        else:
            # query i (absolute position start+i) sees keys 0..start+i; one new query sees them all
            mask = None
            if T > 1:
                mask = torch.arange(S, device=x.device)[None, :] <= torch.arange(start, S, device=x.device)[:, None]
            y = self.attend(q, k, v, mask=mask)  # (B, nh, T, hs)
        if self.head_out.hooked():
            y = self.head_out(y)
        y = self.c_proj(y.transpose(1, 2).reshape(B, T, C))  # (B, T, C)
        return self.resid_dropout(y) if self.training else y  # no module call a layer and token when sampling

    def add_value_embeds(self, v: torch.Tensor, ve: torch.Tensor) -> torch.Tensor:
        """model.value_embeds: the block's value embedding ve (B, T, C), mixed into the values v (B, nh, T, hs)."""
        B, nh, T, hs = v.shape
        return v + self.ve_mix * ve.view(B, T, nh, hs).transpose(1, 2)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)
        self.act = relu_squared if cfg.mlp_act == "relu2" else F.gelu  # model.mlp_act, chosen once

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)  # (B, T, 4C)
        y = self.c_proj(self.act(h))
        return self.dropout(y) if self.training else y


class Block(nn.Module):
    """Residual block, pre-norm (GPT-2): x + attn(ln_1(x)), then x + mlp(ln_2(x)). The options
    model.norm=post and model.attn_only are the subclasses below (`block_type` picks one)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        # model.attn_only: no ln_2 and no mlp (no parameters for them)
        self.ln_2 = None if cfg.attn_only else nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = None if cfg.attn_only else MLP(cfg)

    def forward(
        self,
        x: torch.Tensor,
        cache: KVCache | None = None,
        layer: int = 0,
        rope: Rope = None,
        ve: torch.Tensor | None = None,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), cache, layer, rope, ve)
        return x + self.mlp(self.ln_2(x))


class PostNormBlock(Block):
    """model.norm=post (the original Transformer): ln_1(x + attn(x)), then ln_2(x + mlp(x))."""

    def forward(self, x: torch.Tensor, *attn_args: object) -> torch.Tensor:  # Block.forward's arguments
        x = self.ln_1(x + self.attn(x, *attn_args))
        return self.ln_2(x + self.mlp(x))


class AttentionOnlyBlock(Block):
    """model.attn_only (pre-norm): the attention half alone, x + attn(ln_1(x))."""

    def forward(self, x: torch.Tensor, *attn_args: object) -> torch.Tensor:  # Block.forward's arguments
        return x + self.attn(self.ln_1(x), *attn_args)


class PostNormAttentionOnlyBlock(Block):
    """model.attn_only with model.norm=post: ln_1(x + attn(x))."""

    def forward(self, x: torch.Tensor, *attn_args: object) -> torch.Tensor:  # Block.forward's arguments
        return self.ln_1(x + self.attn(x, *attn_args))


def block_type(cfg: ModelConfig) -> type[Block]:
    """The block of model.norm and model.attn_only, chosen once for the whole model."""
    if cfg.attn_only:
        return AttentionOnlyBlock if cfg.norm == "pre" else PostNormAttentionOnlyBlock
    return Block if cfg.norm == "pre" else PostNormBlock


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.wte = nn.Embedding(vocab_size, cfg.n_embd)
        # positions: a learned table (wpe), a fixed sinusoidal table, or rotary angles used inside
        # attention; the fixed tables are buffers recomputed at construction, not saved
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd) if cfg.pos_emb == "learned" else None
        with torch.device("cpu"):  # computed, never loaded: real tables even when the weights are built on "meta"
            if cfg.pos_emb == "sinusoidal":
                # scaled to the token embeddings' size at init (std 0.02 a channel; sin/cos have rms 1/sqrt 2),
                # as the original Transformer's sqrt(d) embedding scale makes the two comparable there;
                # unscaled, the positions drown the characters (docs/inside.md)
                table = sinusoidal_table(cfg.block_size, cfg.n_embd) * SINUSOIDAL_SCALE
                self.register_buffer("pos_table", table, persistent=False)
            if cfg.pos_emb == "rope":
                cos, sin = rope_tables(cfg.block_size, cfg.n_embd // cfg.n_head)
                self.register_buffer("rope_cos", cos, persistent=False)
                self.register_buffer("rope_sin", sin, persistent=False)
        # the positions, chosen once: what `embed` adds to the tokens, or the rotary tables it hands on
        options = {
            "learned": self.learned_positions,
            "sinusoidal": self.sinusoidal_positions,
            "rope": self.rotary_positions,
        }
        self.positions = options[cfg.pos_emb]
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(block_type(cfg)(cfg) for _ in range(cfg.n_layer))
        # model.value_embeds: one more token table per block, read into its attention's values (outside
        # `blocks`: an embedding, trained as the token embedding is, not as the blocks' matrices)
        tables = (nn.Embedding(vocab_size, cfg.n_embd) for _ in range(cfg.n_layer))
        self.value_embeds = nn.ModuleList(tables) if cfg.value_embeds else None
        self.block_values = self.value_embeddings if cfg.value_embeds else no_values
        # post-norm blocks already end in a LayerNorm; pre-norm needs one before the head
        self.ln_f = nn.LayerNorm(cfg.n_embd, bias=cfg.bias) if cfg.norm == "pre" else nn.Identity()
        self.lm_head = nn.Linear(cfg.n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: one matrix reads and writes characters
        self.softcap = self.capped if cfg.logit_softcap > 0 else unchanged  # model.logit_softcap, chosen once
        self.apply(self._init_weights)
        # GPT-2: scale the residual projections by 1/sqrt(their number: 2 * n_layer, n_layer without
        # MLPs) so the stream's variance does not grow with depth
        branches = cfg.n_layer * (1 if cfg.attn_only else 2)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(branches))
                if cfg.zero_init_proj:  # each block starts as the identity; the gradient still reaches it
                    nn.init.zeros_(p)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    @property
    def device(self) -> torch.device:
        return self.wte.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.wte.weight.dtype

    def num_params(self, non_embedding: bool = True) -> int:
        """Parameter count (the tied head counted once; learned positions excluded when non_embedding)."""
        n = parameter_count(self.cfg, self.vocab_size)
        return n - self.wpe.weight.numel() if non_embedding and self.wpe is not None else n

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx (B, T) ids -> logits (B, T, V), and the mean cross-entropy if targets (B, T) are given. With
        a KVCache, idx is the next T positions; the cache grows and only the last logits (B, 1, V) return."""
        x, rope = self.embed(idx, cache.length if cache is not None else 0)
        x = self.ln_f(self.run_blocks(x, idx, rope, cache=cache))
        if cache is not None:
            cache.length += idx.size(1)
            # float32 logits for sampling even from a bf16 model: rounded to bf16 (steps of ~0.03 near
            # the top), the most likely characters can tie exactly (no-op casts for a float32 model)
            return self.softcap(F.linear(x[:, -1:, :].float(), self.lm_head.weight.float())), None  # (B, 1, V)
        logits = self.softcap(self.lm_head(x))  # (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), targets.reshape(-1), ignore_index=-1)
        return logits, loss

    def embed(self, idx: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, Rope]:
        """The residual stream entering the first block for ids idx (B, T) at positions start..start+T-1:
        (B, T, C), and the rotary tables of those positions (None unless model.pos_emb is rope)."""
        T = idx.size(1)
        assert start + T <= self.cfg.block_size, f"sequence of {start + T} exceeds block_size {self.cfg.block_size}"
        x, rope = self.positions(self.wte(idx), start)  # (B, T, C)
        return (self.drop(x) if self.training else x), rope

    def learned_positions(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, Rope]:
        """model.pos_emb=learned (GPT-2): rows start.. of a trained table, added to the tokens x (B, T, C)."""
        return x + self.wpe(torch.arange(start, start + x.size(1), device=x.device)), None

    def sinusoidal_positions(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, Rope]:
        """model.pos_emb=sinusoidal (the original Transformer): rows of the fixed table, added to x."""
        return x + self.pos_table[start : start + x.size(1)].to(x.dtype), None

    def rotary_positions(self, x: torch.Tensor, start: int) -> tuple[torch.Tensor, Rope]:
        """model.pos_emb=rope: the tokens as they are, and the rotary tables of these positions for attention."""
        end = start + x.size(1)
        return x, (self.rope_cos[start:end], self.rope_sin[start:end])

    def value_embeddings(self, i: int, idx: torch.Tensor) -> torch.Tensor:
        """model.value_embeds: block i's value embedding of the ids idx (B, T) -> (B, T, C)."""
        return self.value_embeds[i](idx)

    def run_blocks(
        self,
        x: torch.Tensor,
        idx: torch.Tensor,
        rope: Rope,
        first: int = 0,
        last: int | None = None,
        cache: KVCache | None = None,
    ) -> torch.Tensor:
        """The residual stream x (B, T, C) through blocks first..last-1 (all of them by default): the
        stream after block last-1, before the final LayerNorm. idx (B, T) feeds the value embeddings."""
        for i in range(first, len(self.blocks) if last is None else last):
            x = self.blocks[i](x, cache, i, rope, self.block_values(i, idx))
        return x

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """The head on a residual stream (B, T, C): the final LayerNorm, the tied unembedding and
        the soft-cap (B, T, V); what the model predicts if the stream stopped there (the logit lens)."""
        return self.softcap(self.lm_head(self.ln_f(x)))

    def capped(self, logits: torch.Tensor) -> torch.Tensor:
        """model.logit_softcap: logits bounded smoothly to (-cap, cap)."""
        cap = self.cfg.logit_softcap
        return cap * torch.tanh(logits / cap)

    @torch.no_grad()
    def attention_maps(self, idx: torch.Tensor) -> torch.Tensor:
        """The causal attention weights of every layer and head over idx (B, T): (L, B, nh, T, T).

        The same forward pass as training, each attention's softmax written out for a hook that keeps it."""
        kept: list[torch.Tensor] = []
        hooks = [b.attn.pattern.register_forward_hook(lambda _m, _x, w: kept.append(w.detach())) for b in self.blocks]
        try:
            self(idx)
            return torch.stack(kept)
        finally:
            for h in hooks:
                h.remove()
