"""The ONNX export: model.onnx (ids (batch, sequence) -> logits (batch, sequence, vocab), both dynamic,
sequence at most block_size; every model option), tokenizer.json, and minigpt.json for onnxruntime."""

from __future__ import annotations

import io
import logging
import warnings
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from minigpt.export.hf import UNKNOWN_RULE, build_tokenizer, model_facts, sampling_defaults, vocabulary, write_json
from minigpt.infer.decode import half_window
from minigpt.infer.loading import LoadedModel
from minigpt.model import GPT

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
    import copy

    block = model.cfg.block_size
    copied = copy.deepcopy(model).to(dtype).eval()
    for blk in copied.blocks:
        # a hook on `pattern` writes the attention out (model.attention_maps' path, the same numbers): the
        # fused kernel's is_causal flag cannot depend on a dynamic sequence length in torch.export
        blk.attn.pattern.register_forward_hook(lambda *_: None)
    wrapped = _Logits(copied)
    example = torch.zeros((2, block), dtype=torch.long)
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
    from minigpt.runtime.device import DTYPES

    export_onnx_graph(loaded.model, folder / "model.onnx", DTYPES[dtype])
    build_tokenizer(loaded.tokenizer).save(str(folder / "tokenizer.json"))
    write_json(folder / "minigpt.json", minigpt_json(loaded, dtype))
    return sorted(p.name for p in folder.iterdir())
