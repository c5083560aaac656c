"""The formats an export writes: the Hugging Face folder (a `transformers` architecture that computes
exactly what the model computes, its config, weights, tokenizer.json and card) and the ONNX file with
tokenizer.json and minigpt.json; the mapping and what each refuses are in docs/export.md."""

from __future__ import annotations

import copy
import io
import json
import logging
import math
import warnings
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import yaml

from minigpt.config.schema import ModelConfig, SampleOptions
from minigpt.data.sources import resolve_sources
from minigpt.data.tokenizer import ByteTokenizer, CharTokenizer, Tokenizer
from minigpt.errors import UserError
from minigpt.infer.decode import half_window
from minigpt.infer.loading import LoadedModel
from minigpt.io.textfiles import read_json_dict
from minigpt.model import GPT, SINUSOIDAL_SCALE, parameter_count, sinusoidal_table
from minigpt.runtime.device import DTYPES


def sampling_defaults() -> dict[str, Any]:
    """minigpt sample's defaults (temperature, top_k, top_p), as they read in every format."""
    d = SampleOptions()
    return {"temperature": d.temperature, "top_k": d.top_k, "top_p": d.top_p}


def generation_config(block_size: int) -> dict[str, Any]:
    """generation_config.json: minigpt sample's defaults; top_k 0 and top_p 1.0 switch off
    transformers' own defaults (top_k 50), and max_length stops generate() at the context."""
    s = sampling_defaults()
    return {
        "do_sample": s["temperature"] > 0,
        "temperature": s["temperature"],
        "top_k": s["top_k"] or 0,
        "top_p": s["top_p"] or 1.0,
        "max_length": block_size,
        "bos_token_id": None,
        "eos_token_id": None,
        "pad_token_id": None,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_hf(loaded: LoadedModel, folder: Path, dtype: str) -> list[str]:
    """Write the Hugging Face files into `folder` (a fresh staging folder); returns their names."""
    from safetensors.torch import save_file

    cfg, tok = loaded.config.model, loaded.tokenizer
    arch = architecture_for(cfg)
    write_json(folder / "config.json", hf_config(cfg, tok.vocab_size, dtype))
    weights = hf_weights(cfg, loaded.model.state_dict(), DTYPES[dtype])
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    build_tokenizer(tok).save(str(folder / "tokenizer.json"))
    write_json(folder / "tokenizer_config.json", tokenizer_config(cfg.block_size))
    write_json(folder / "generation_config.json", generation_config(cfg.block_size))
    card = model_card(model_facts(loaded), ARCHITECTURES[arch], UNKNOWN_RULE[tok.kind], sampling_defaults())
    (folder / "README.md").write_text(card, encoding="utf-8")
    return sorted(p.name for p in folder.iterdir())


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


UNKNOWN_RULE = {
    "char": "characters the model never saw are dropped (as `minigpt sample --unknown skip`)",
    "byte": "none: every text is UTF-8 bytes, and every byte value has an id",
}


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in character for each byte value 0..255 (what ByteLevel maps bytes to)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _char_class(chars: list[str]) -> str:
    """A regex class of exactly these characters, each written as \\x{HEX} (no escaping rules to get wrong)."""
    return "".join(f"\\x{{{ord(c):X}}}" for c in chars)


def build_tokenizer(tok: Tokenizer) -> Any:
    """The `tokenizers.Tokenizer` giving the same ids as `tok` (see the module docstring)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    if isinstance(tok, ByteTokenizer):
        vocab = {c: b for b, c in enumerate(byte_alphabet())}
        out = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        out.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        out.decoder = decoders.ByteLevel()
        return out
    assert isinstance(tok, CharTokenizer)
    # BPE without merges: each character is its own token
    out = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(tok.chars)}, merges=[]))
    out.normalizer = normalizers.Replace(Regex(f"[^{_char_class(tok.chars)}]"), "")
    out.decoder = decoders.Fuse()  # join the characters, no spaces between them
    return out


def tokenizer_config(block_size: int) -> dict[str, Any]:
    """tokenizer_config.json: the plain fast tokenizer (no model-specific class, no special tokens)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": block_size,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {},
    }


def vocabulary(tok: Tokenizer) -> dict[str, Any]:
    """The vocabulary as plain data, for minigpt.json (a reader needs no tokenizers library)."""
    if isinstance(tok, ByteTokenizer):
        return {"kind": "byte", "vocab_size": 256, "ids": "the UTF-8 byte values"}
    return {"kind": "char", "vocab_size": tok.vocab_size, "chars": list(tok.chars)}


def training_data(loaded: LoadedModel) -> dict[str, Any]:
    """Files and bytes the model was trained on (training and validation), counted where they are now, else None."""
    data = loaded.config.data
    count = total = 0
    try:
        for spec in (data.path, data.val_path):
            if spec:
                files = resolve_sources(spec)
                count, total = count + len(files), total + sum(f.size for f in files)
    except UserError:
        count = total = None
    return {
        "files": count,
        "bytes": total,
        "sha256": loaded.checkpoint.data.get("sha256"),
        "tokenizer": loaded.tokenizer.kind,
    }


def validation_loss(loaded: LoadedModel) -> dict[str, Any]:
    """The exported checkpoint's validation loss: the whole-split number from the run's
    results.json when it scored this checkpoint (same step), else the checkpoint's fixed-batch estimate."""
    ckpt, unit = loaded.checkpoint, loaded.tokenizer.unit
    loss, how = None, None
    results = read_json_dict(loaded.path.parent / "results.json")
    if isinstance(results.get("val_loss_full"), (int, float)) and results.get("best_step") == ckpt.step:
        loss, how = float(results["val_loss_full"]), "whole validation split"
    if loss is None and isinstance(ckpt.val_loss, float) and math.isfinite(ckpt.val_loss):
        loss, how = ckpt.val_loss, "estimate from fixed validation batches"
    if loss is None:
        return {"nats": None, f"bits_per_{unit}": None, "measured_on": None}
    return {"nats": round(loss, 4), f"bits_per_{unit}": round(loss / math.log(2), 4), "measured_on": how}


def model_facts(loaded: LoadedModel) -> dict[str, Any]:
    """What the card and minigpt.json say about the model, as plain data."""
    cfg = loaded.config.model
    return {
        "parameters": parameter_count(cfg, loaded.tokenizer.vocab_size),
        "steps": loaded.checkpoint.step,
        "tokens_seen": loaded.checkpoint.tokens_seen,
        "trained_on": training_data(loaded),
        "val_loss": validation_loss(loaded),
        "model": {k: getattr(cfg, k) for k in ("n_layer", "n_head", "n_embd", "block_size", "bias", "pos_emb", "norm")},
    }


def model_card(facts: dict[str, Any], architecture: str, unknown_rule: str, sampling: dict[str, Any]) -> str:
    """README.md: YAML front matter (library, tags, the numbers) and how to load and sample the model."""
    data, val, m = facts["trained_on"], facts["val_loss"], facts["model"]
    unit = "char" if data["tokenizer"] == "char" else "byte"
    front = {
        "library_name": "transformers",
        "pipeline_tag": "text-generation",
        "tags": ["minigpt", f"{data['tokenizer']}-level", architecture],
        "parameters": facts["parameters"],
        "training_steps": facts["steps"],
        "training_files": data["files"],
        "training_bytes": data["bytes"],
        "val_loss_nats": val["nats"],
        f"val_bits_per_{unit}": val[f"bits_per_{unit}"],
    }
    size = "unknown (the files have moved)"
    if data["files"] is not None:
        size = f"{data['files']:,} file(s), {data['bytes']:,} bytes"
    loss = "not recorded"
    if val["nats"] is not None:
        loss = f"{val['nats']} nats, {val[f'bits_per_{unit}']} bits per {unit} ({val['measured_on']})"
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False).rstrip("\n"),
        "---",
        "",
        f"# A {data['tokenizer']}-level GPT trained with minigpt",
        "",
        f"- Architecture: `{architecture}`, {m['n_layer']} layers, {m['n_head']} heads, width {m['n_embd']}, "
        f"context {m['block_size']} tokens (minigpt options: pos_emb {m['pos_emb']}, norm {m['norm']}, "
        f"bias {str(m['bias']).lower()})",
        f"- Parameters: {facts['parameters']:,}",
        f"- Trained on: {size}; {facts['steps']} steps",
        f"- Validation loss: {loss}",
        f"- Tokenizer: one token per {unit}; unseen characters: {unknown_rule}",
        f"- Sampling defaults (generation_config.json): {json.dumps(sampling)}",
        "",
        "## Use",
        "",
        "```python",
        "from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline",
        "",
        'tok = AutoTokenizer.from_pretrained("PATH")',
        'model = AutoModelForCausalLM.from_pretrained("PATH")',
        'ids = tok("ROMEO:", return_tensors="pt").input_ids',
        "out = model.generate(ids, max_new_tokens=40)  # prompt + new tokens <= the context",
        "print(tok.decode(out[0]))",
        'print(pipeline("text-generation", model="PATH")("ROMEO:", max_new_tokens=40)[0]["generated_text"])',
        "```",
        "",
        f"The context is {m['block_size']} tokens (`max_position_embeddings`). minigpt's own sampler slides "
        "its window past it and goes on; transformers does not, so keep prompt plus new tokens within it.",
        "",
    ]
    return "\n".join(lines)


FORMAT = "minigpt-onnx"


class _Logits(nn.Module):
    """The GPT's full forward as a graph with one input and one output: logits at every position."""

    def __init__(self, model: GPT):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids)[0]


def export_onnx_graph(model: GPT, path: Path, dtype: torch.dtype) -> None:
    """Trace `model` (in `dtype`) with torch.export and write one self-contained .onnx file."""
    block = model.cfg.block_size
    copied = copy.deepcopy(model).to(dtype).eval()
    for blk in copied.blocks:
        # a hook on `pattern` writes the attention out (model.attention_maps' path, the same numbers): the
        # fused kernel's is_causal flag cannot depend on a dynamic sequence length in torch.export
        blk.attn.pattern.register_forward_hook(lambda *_: None)
    wrapped = _Logits(copied)
    example = torch.zeros((2, block), dtype=torch.long, device=model.device)
    batch, seq = torch.export.Dim("batch", min=1), torch.export.Dim("sequence", min=1, max=block)
    quiet = logging.getLogger("torch.onnx")  # e.g. "torchvision is not installed", once per process
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), redirect_stdout(io.StringIO()):  # the exporter's progress lines
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                wrapped,
                (example,),
                None,
                dynamo=True,
                input_names=["input_ids"],
                output_names=["logits"],
                dynamic_shapes={"input_ids": {0: batch, 1: seq}},
                optimize=True,
                verbose=False,
            )
    finally:
        quiet.setLevel(level)
    program.save(str(path), external_data=False)


def minigpt_json(loaded: LoadedModel, dtype: str) -> dict[str, Any]:
    """What a sampler needs besides the graph: the vocabulary, the context, the sampling rule."""
    tok, block = loaded.tokenizer, loaded.config.model.block_size
    return {
        "format": FORMAT,
        "version": 1,
        "dtype": dtype,
        "inputs": {"input_ids": f"int64 (batch, sequence), 1 <= sequence <= {block}"},
        "outputs": {"logits": f"{dtype} (batch, sequence, {tok.vocab_size}): the next token's scores at each position"},
        "block_size": block,
        "vocabulary": vocabulary(tok),
        "unknown_characters": UNKNOWN_RULE[tok.kind],
        "start_id": tok.start_id,
        "sampling": {
            **sampling_defaults(),
            "rule": "feed the last block_size ids; softmax(logits[:, -1] / temperature) gives the next id's "
            "probabilities (temperature 0: the argmax); append it and repeat",
            "minigpt": f"past block_size minigpt keeps the last {half_window(block)} ids and goes on (a KV cache); "
            "feeding the last block_size ids each step is the uncached equivalent",
        },
        **model_facts(loaded),
    }


def write_onnx(loaded: LoadedModel, folder: Path, dtype: str) -> list[str]:
    """Write model.onnx, tokenizer.json and minigpt.json into `folder`; returns their names."""
    export_onnx_graph(loaded.model, folder / "model.onnx", DTYPES[dtype])
    build_tokenizer(loaded.tokenizer).save(str(folder / "tokenizer.json"))
    write_json(folder / "minigpt.json", minigpt_json(loaded, dtype))
    return sorted(p.name for p in folder.iterdir())
