"""Which `transformers` architecture (GPT-NeoX, GPT-2, OPT) computes exactly what a minigpt model computes,
its config.json, and minigpt's weights renamed onto it; options none computes are refused, one line each.
Plain dicts and tensors, no transformers import; the mapping's table is in docs/export.md."""

from __future__ import annotations

from typing import Any

import torch

from minigpt.config.schema import ModelConfig
from minigpt.errors import UserError
from minigpt.model import SINUSOIDAL_SCALE, sinusoidal_table

Weights = dict[str, torch.Tensor]

ARCHITECTURES = {"gpt_neox": "GPTNeoXForCausalLM", "gpt2": "GPT2LMHeadModel", "opt": "OPTForCausalLM"}


# options GPT-NeoX, GPT-2 and OPT do not compute: what each would need
UNMAPPED = {
    "attn_only": "attention-only blocks (every block there has an MLP)",
    "qk_norm": "normalised queries and keys",
    "value_embeds": "value embeddings",
    "logit_softcap": "soft-capped logits",
}


def architecture_for(cfg: ModelConfig) -> str:
    """The transformers model_type that computes exactly this model, or a UserError naming the option."""
    for key, feature in UNMAPPED.items():
        if value := getattr(cfg, key):
            shown = "true" if value is True else value
            raise UserError(
                f"model.{key} is {shown}, and no transformers architecture minigpt exports to "
                f"(GPT-NeoX, GPT-2, OPT) computes {feature}; --format onnx exports this model exactly"
            )
    if cfg.norm == "pre":
        return "gpt_neox" if cfg.pos_emb == "rope" else "gpt2"
    if cfg.pos_emb == "rope":
        raise UserError(
            "model.norm post with model.pos_emb rope has no exact transformers architecture (its rotary "
            "model, GPT-NeoX, is pre-LayerNorm only); --format hf exports rope with norm pre (GPT-NeoX), "
            "learned or sinusoidal with norm pre (GPT-2) or post (OPT); --format onnx exports any model"
        )
    return "opt"


def hf_config(cfg: ModelConfig, vocab_size: int, dtype: str) -> dict[str, Any]:
    """config.json for the model's architecture; no special tokens (a character model has none)."""
    arch = architecture_for(cfg)
    C, drop = cfg.n_embd, cfg.dropout
    common: dict[str, Any] = {
        "architectures": [ARCHITECTURES[arch]],
        "model_type": arch,
        "vocab_size": vocab_size,
        "tie_word_embeddings": True,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
        "use_cache": True,
        "torch_dtype": dtype,
    }
    if arch == "gpt_neox":
        specific = {
            "hidden_size": C,
            "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head,
            "intermediate_size": 4 * C,
            "hidden_act": cfg.mlp_act,
            "max_position_embeddings": cfg.block_size,
            "rotary_pct": 1.0,
            "rotary_emb_base": 10000.0,
            "use_parallel_residual": False,
            "attention_bias": True,
            "layer_norm_eps": 1e-5,
            "attention_dropout": drop,
            "hidden_dropout": drop,
        }
    elif arch == "gpt2":
        specific = {
            "n_embd": C,
            "n_layer": cfg.n_layer,
            "n_head": cfg.n_head,
            "n_inner": 4 * C,
            "n_positions": cfg.block_size,
            "n_ctx": cfg.block_size,
            "activation_function": cfg.mlp_act,
            "layer_norm_epsilon": 1e-5,
            "resid_pdrop": drop,
            "embd_pdrop": drop,
            "attn_pdrop": drop,
            "scale_attn_weights": True,
        }
    else:
        specific = {
            "hidden_size": C,
            "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head,
            "ffn_dim": 4 * C,
            "word_embed_proj_dim": C,
            "max_position_embeddings": cfg.block_size,
            "do_layer_norm_before": False,
            "activation_function": cfg.mlp_act,
            "enable_bias": True,
            "layer_norm_elementwise_affine": True,
            "dropout": drop,
            "attention_dropout": drop,
            "layerdrop": 0.0,
        }
    return {**common, **specific}


def _bias(sd: Weights, name: str, size: int) -> torch.Tensor:
    """A layer's bias, or zeros where the model has none (model.bias false): the same sums."""
    return sd[name] if name in sd else torch.zeros(size, dtype=sd["wte.weight"].dtype)


def _norm(sd: Weights, src: str, dst: str, out: Weights) -> None:
    out[dst + ".weight"] = sd[src + ".weight"]
    out[dst + ".bias"] = _bias(sd, src + ".bias", sd[src + ".weight"].numel())


def _linear(sd: Weights, src: str, dst: str, out: Weights, conv1d: bool = False) -> None:
    """nn.Linear weights (out, in); GPT-2's Conv1D stores them transposed, (in, out)."""
    w = sd[src + ".weight"]
    out[dst + ".weight"] = w.t().contiguous() if conv1d else w
    out[dst + ".bias"] = _bias(sd, src + ".bias", w.shape[0])


def position_table(cfg: ModelConfig, sd: Weights) -> torch.Tensor:
    """The (block_size, n_embd) table added to the token embeddings: learned, or the fixed sinusoidal one."""
    if cfg.pos_emb == "learned":
        return sd["wpe.weight"]
    table = sinusoidal_table(cfg.block_size, cfg.n_embd) * SINUSOIDAL_SCALE  # as model.GPT builds it
    return table.to(sd["wte.weight"].dtype)


def _neox(cfg: ModelConfig, sd: Weights) -> Weights:
    C, nh = cfg.n_embd, cfg.n_head
    hs = C // nh
    out: Weights = {"gpt_neox.embed_in.weight": sd["wte.weight"]}
    for i in range(cfg.n_layer):
        src, dst = f"blocks.{i}.", f"gpt_neox.layers.{i}."
        _norm(sd, src + "ln_1", dst + "input_layernorm", out)
        _norm(sd, src + "ln_2", dst + "post_attention_layernorm", out)
        # minigpt's rows are [q of every head, k of every head, v of every head]; NeoX's are per head [q, k, v]
        w = sd[src + "attn.c_attn.weight"].view(3, nh, hs, C).transpose(0, 1).reshape(3 * C, C)
        b = _bias(sd, src + "attn.c_attn.bias", 3 * C).view(3, nh, hs).transpose(0, 1).reshape(3 * C)
        out[dst + "attention.query_key_value.weight"] = w.contiguous()
        out[dst + "attention.query_key_value.bias"] = b.contiguous()
        _linear(sd, src + "attn.c_proj", dst + "attention.dense", out)
        _linear(sd, src + "mlp.c_fc", dst + "mlp.dense_h_to_4h", out)
        _linear(sd, src + "mlp.c_proj", dst + "mlp.dense_4h_to_h", out)
    _norm(sd, "ln_f", "gpt_neox.final_layer_norm", out)
    return out


def _gpt2(cfg: ModelConfig, sd: Weights) -> Weights:
    out: Weights = {"transformer.wte.weight": sd["wte.weight"], "transformer.wpe.weight": position_table(cfg, sd)}
    for i in range(cfg.n_layer):
        src, dst = f"blocks.{i}.", f"transformer.h.{i}."
        _norm(sd, src + "ln_1", dst + "ln_1", out)
        _norm(sd, src + "ln_2", dst + "ln_2", out)
        for name in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):  # the same names, as Conv1D
            _linear(sd, src + name, dst + name, out, conv1d=True)
    _norm(sd, "ln_f", "transformer.ln_f", out)
    return out


def _opt(cfg: ModelConfig, sd: Weights) -> Weights:
    C = cfg.n_embd
    table = position_table(cfg, sd)
    # OPT's position ids start at 2 (its two first rows are never read)
    positions = torch.cat([torch.zeros(2, C, dtype=table.dtype), table])
    out: Weights = {
        "model.decoder.embed_tokens.weight": sd["wte.weight"],
        "model.decoder.embed_positions.weight": positions,
    }
    for i in range(cfg.n_layer):
        src, dst = f"blocks.{i}.", f"model.decoder.layers.{i}."
        w = sd[src + "attn.c_attn.weight"]
        b = _bias(sd, src + "attn.c_attn.bias", 3 * C)
        for k, name in enumerate(("q_proj", "k_proj", "v_proj")):
            out[dst + f"self_attn.{name}.weight"] = w[k * C : (k + 1) * C].contiguous()
            out[dst + f"self_attn.{name}.bias"] = b[k * C : (k + 1) * C].contiguous()
        _linear(sd, src + "attn.c_proj", dst + "self_attn.out_proj", out)
        _norm(sd, src + "ln_1", dst + "self_attn_layer_norm", out)
        _linear(sd, src + "mlp.c_fc", dst + "fc1", out)
        _linear(sd, src + "mlp.c_proj", dst + "fc2", out)
        _norm(sd, src + "ln_2", dst + "final_layer_norm", out)
    return out


def hf_weights(cfg: ModelConfig, state_dict: Weights, dtype: torch.dtype) -> Weights:
    """minigpt's state dict as the architecture's weights, in `dtype`: every tensor its own
    contiguous copy (safetensors refuses shared storage; the tied head is stored once, as the
    embedding, and transformers ties it back)."""
    sd = {k: v.detach().float().cpu() for k, v in state_dict.items() if k != "lm_head.weight"}
    mapped = {"gpt_neox": _neox, "gpt2": _gpt2, "opt": _opt}[architecture_for(cfg)](cfg, sd)
    return {k: v.to(dtype).contiguous().clone() for k, v in mapped.items()}
