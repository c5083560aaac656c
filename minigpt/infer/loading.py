"""A trained model loaded for use: from a run directory or a checkpoint, in eval mode, in the sampling dtype."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from minigpt.checkpoint import BEST, Checkpoint, resolve_checkpoint, val_loss_text
from minigpt.config.schema import Config, config_from_dict
from minigpt.data.tokenizer import Tokenizer, tokenizer_from_dict
from minigpt.errors import UserError, first_line
from minigpt.model import GPT
from minigpt.runtime.device import sampling_dtype


@dataclass
class LoadedModel:
    """A model loaded for use, with its tokenizer, its config and the checkpoint (and its path) it came from."""

    model: GPT
    tokenizer: Tokenizer
    config: Config
    path: Path
    checkpoint: Checkpoint


def load_model(target: Path, device: torch.device) -> LoadedModel:
    """The model of a run directory (its best.pt, else last.pt) or of a checkpoint file, in eval mode."""
    path = resolve_checkpoint(target, prefer=BEST)
    ckpt = Checkpoint.load(path)  # the weights' checksums checked
    try:
        cfg = config_from_dict(ckpt.config, str(path))
        tok = tokenizer_from_dict(ckpt.tokenizer)
        with torch.random.fork_rng(devices=[]):  # not on "meta": drawing weights there imports torch._dynamo
            model = GPT(cfg.model, tok.vocab_size)
        model.load_state_dict(ckpt.model)  # copied in float32, whatever dtype the file holds
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"{path} is a damaged minigpt checkpoint: {first_line(e)}") from None
    model.to(device).eval()
    return LoadedModel(model, tok, cfg, path, ckpt)


def cast_for_sampling(loaded: LoadedModel, dtype: str, device_name: str) -> None:
    """Put the weights in the sampling dtype (`runtime.device.sampling_dtype`: auto is bf16 where it decodes faster)."""
    device = loaded.model.device
    try:
        loaded.model.to(sampling_dtype(dtype, device, (loaded.config.model.n_layer, loaded.config.model.n_embd)))
    except (TypeError, RuntimeError):  # e.g. an MPS without bf16
        problem = f"--dtype {dtype} is not supported on device '{device_name}' here"
        raise UserError(f"{problem}; use --dtype float32") from None
    column_major_for_decoding(loaded.model)


def column_major_for_decoding(model: GPT) -> None:
    """Store a float32 CPU model's Linear weights column-major (same values; sums differ in the last bits).
    Speed trick: decoding's matrix-vector products read the weights faster; benchmark `scripts/bench.py tricks`."""
    for module in model.blocks.modules():  # not the head: it is the token embedding, read by rows
        w = getattr(module, "weight", None)
        if isinstance(module, torch.nn.Linear) and w.device.type == "cpu" and w.dtype == torch.float32:
            if w.is_contiguous():
                module.weight.data = w.data.t().contiguous().t()


def source_line(loaded: LoadedModel) -> str:
    """Which model this is, for pages and reprs: its checkpoint, step and validation loss, and shape."""
    ckpt, cfg = loaded.checkpoint, loaded.config.model
    val = val_loss_text(ckpt.val_loss)
    shape = f"{cfg.n_layer} layers x {cfg.n_head} heads, context {cfg.block_size}, pos_emb {cfg.pos_emb}"
    return f"{loaded.path} (step {ckpt.step}{val}; {shape})"
