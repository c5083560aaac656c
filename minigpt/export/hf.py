"""The Hugging Face folder (weights, config, tokenizer, generation config, card), loaded without remote code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from minigpt.config.schema import SampleOptions
from minigpt.export.architectures import ARCHITECTURES, architecture_for, hf_config, hf_weights
from minigpt.export.card import model_card, model_facts
from minigpt.export.tokenizer_json import UNKNOWN_RULE, build_tokenizer, tokenizer_config
from minigpt.infer.loading import LoadedModel
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


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_hf(loaded: LoadedModel, folder: Path, dtype: str) -> list[str]:
    """Write the Hugging Face files into `folder` (a fresh staging folder); returns their names."""
    from safetensors.torch import save_file

    cfg, tok = loaded.config.model, loaded.tokenizer
    arch = architecture_for(cfg)
    _write_json(folder / "config.json", hf_config(cfg, tok.vocab_size, dtype))
    weights = hf_weights(cfg, loaded.model.state_dict(), DTYPES[dtype])
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    build_tokenizer(tok).save(str(folder / "tokenizer.json"))
    _write_json(folder / "tokenizer_config.json", tokenizer_config(cfg.block_size))
    _write_json(folder / "generation_config.json", generation_config(cfg.block_size))
    card = model_card(model_facts(loaded), ARCHITECTURES[arch], UNKNOWN_RULE[tok.kind], sampling_defaults())
    (folder / "README.md").write_text(card, encoding="utf-8")
    return sorted(p.name for p in folder.iterdir())
