"""The facts an export states about its model (data, steps, validation loss, size) and the Hugging Face model
card; only what travels: counts and sizes of the training files, never their paths."""

from __future__ import annotations

import json
import math
from typing import Any

from minigpt.data.sources import resolve_sources
from minigpt.errors import UserError
from minigpt.infer.loading import LoadedModel
from minigpt.io.textfiles import read_json_dict
from minigpt.model import parameter_count


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
    lines = ["---"]
    for key, value in front.items():
        if isinstance(value, list):
            lines += [f"{key}:", *(f"  - {json.dumps(v)}" for v in value)]  # JSON scalars are YAML scalars
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    size = "unknown (the files have moved)"
    if data["files"] is not None:
        size = f"{data['files']:,} file(s), {data['bytes']:,} bytes"
    loss = "not recorded"
    if val["nats"] is not None:
        loss = f"{val['nats']} nats, {val[f'bits_per_{unit}']} bits per {unit} ({val['measured_on']})"
    lines += [
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
