"""A trained minigpt model inside TransformerLens (`minigpt.load(run).hooked()`): the same weights in
a native `TransformerBridge`, with the same logits; what it cannot express exactly is refused
(docs/inside.md says how each weight converts)."""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING, Any

import torch

from minigpt.config.schema import ModelConfig
from minigpt.errors import UserError
from minigpt.model import GPT

if TYPE_CHECKING:
    from minigpt.infer.loading import LoadedModel

INSTALL = "pip install 'minigpt[interp]' (in a checkout: uv sync --extra interp)"
MIN_VERSION = (4, 3)


def refusal(cfg: ModelConfig) -> str | None:
    """Why TransformerLens' native blocks cannot compute this model exactly, or None when they can."""
    if cfg.norm == "post":
        return "model.norm=post: TransformerLens has no post-LayerNorm block (its native blocks are pre-LN)"
    if cfg.mlp_act == "relu2":
        return "model.mlp_act=relu2: TransformerLens has no relu(x)^2 activation (its MLPs: gelu, relu, silu, solu)"
    if cfg.qk_norm:
        return "model.qk_norm=true: TransformerLens' native attention has no RMS norm of queries and keys"
    if cfg.value_embeds:
        return "model.value_embeds=true: TransformerLens' attention has no per-block value embeddings"
    return None


def bridge_config(cfg: ModelConfig, vocab_size: int, eps: float) -> dict[str, Any]:
    """The `TransformerBridgeConfig` fields of a minigpt model (boot_native takes them as a dict)."""
    return {
        "d_model": cfg.n_embd,
        "d_head": cfg.n_embd // cfg.n_head,
        "n_heads": cfg.n_head,
        "n_layers": cfg.n_layer,
        "n_ctx": cfg.block_size,
        "d_vocab": vocab_size,
        "d_mlp": 4 * cfg.n_embd,
        "act_fn": "gelu",  # F.gelu, exact, as minigpt's MLP
        "normalization_type": "LN",
        "eps": eps,
        "positional_embedding_type": "rotary" if cfg.pos_emb == "rope" else "standard",
        "rotary_base": 10000,  # minigpt.model.rope_tables' base
        "attn_only": cfg.attn_only,
        # cap * tanh(logits / cap) after the head, as GPT.softcap; TransformerLens reads <= 0 as off
        "output_logits_soft_cap": cfg.logit_softcap if cfg.logit_softcap > 0 else -1.0,
        "init_weights": False,  # every weight is loaded next
        "model_name": "minigpt",
    }


def converted_state_dict(model: GPT) -> dict[str, torch.Tensor]:
    """minigpt's weights under TransformerLens' native keys (blocks.{l}.attn.q.weight, ...)."""
    cfg = model.cfg
    C, nh = cfg.n_embd, cfg.n_head
    hs = C // nh
    order = None  # with rope, the minigpt channel each TransformerLens query/key channel of a head takes
    if cfg.pos_emb == "rope":
        half = torch.arange(hs // 2)
        order = torch.stack((half, half + hs // 2), dim=1).flatten()  # [0, h, 1, h+1, ...]

    def bias(linear: torch.nn.Module, size: int) -> torch.Tensor:
        b = getattr(linear, "bias", None)
        return b.detach() if b is not None else torch.zeros(size, device=model.device, dtype=model.dtype)

    def norm(prefix: str, ln: torch.nn.Module) -> dict[str, torch.Tensor]:
        return {f"{prefix}.weight": ln.weight.detach(), f"{prefix}.bias": bias(ln, C)}

    def per_head_rows(t: torch.Tensor) -> torch.Tensor:  # (C, ...) with rows grouped by head
        return t if order is None else t.view(nh, hs, *t.shape[1:])[:, order].reshape(t.shape)

    wte = model.wte.weight.detach()
    out = {"embed.weight": wte, "unembed.weight": wte, "unembed.bias": torch.zeros_like(wte[:, 0])}
    if cfg.pos_emb == "learned":
        out["pos_embed.weight"] = model.wpe.weight.detach()
    elif cfg.pos_emb == "sinusoidal":
        out["pos_embed.weight"] = model.pos_table.to(model.dtype)
    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}"
        out.update(norm(f"{p}.ln1", block.ln_1))
        weights = block.attn.c_attn.weight.detach().split(C, dim=0)  # q, k, v: (C, C) each
        biases = bias(block.attn.c_attn, 3 * C).split(C)
        for name, w, b in zip("qkv", weights, biases):
            rotated = name in "qk"
            out[f"{p}.attn.{name}.weight"] = per_head_rows(w) if rotated else w
            out[f"{p}.attn.{name}.bias"] = per_head_rows(b) if rotated else b
        out[f"{p}.attn.o.weight"] = block.attn.c_proj.weight.detach()
        out[f"{p}.attn.o.bias"] = bias(block.attn.c_proj, C)
        if not cfg.attn_only:
            out.update(norm(f"{p}.ln2", block.ln_2))
            out[f"{p}.mlp.in.weight"] = block.mlp.c_fc.weight.detach()
            out[f"{p}.mlp.in.bias"] = bias(block.mlp.c_fc, 4 * C)
            out[f"{p}.mlp.out.weight"] = block.mlp.c_proj.weight.detach()
            out[f"{p}.mlp.out.bias"] = bias(block.mlp.c_proj, C)
    out.update(norm("ln_final", model.ln_f))
    return out


def hooked_model(loaded: LoadedModel) -> Any:
    """The loaded model as a TransformerLens `TransformerBridge` in eval mode, on its device and dtype, whose
    logits on ids (B, T) are minigpt's; it has no tokenizer: pass ids from `loaded.tokenizer.encode`."""
    model = loaded.model
    reason = refusal(model.cfg)
    if reason is not None:
        raise UserError(reason)
    try:
        version = metadata.version("transformer-lens")
    except metadata.PackageNotFoundError:
        raise UserError(f"TransformerLens is not installed: {INSTALL}") from None
    if tuple(int(part) for part in version.split(".")[:2] if part.isdigit()) < MIN_VERSION:
        need = ".".join(map(str, MIN_VERSION))
        raise UserError(f"TransformerLens {version} is installed; hooked() needs {need} or newer: {INSTALL}")
    from transformer_lens.model_bridge import TransformerBridge

    config = bridge_config(model.cfg, model.vocab_size, model.ln_f.eps)
    with torch.random.fork_rng(devices=[]):  # building nn.Linear layers draws from the global generator
        bridge = TransformerBridge.boot_native(config, device=model.device, dtype=model.dtype)
    bridge.load_state_dict(converted_state_dict(model), strict=True)
    return bridge.eval()
