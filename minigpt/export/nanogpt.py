"""A character-level nanoGPT checkpoint (ckpt.pt and meta.pkl) written as a minigpt run: the same
layout, so weights are renamed, not copied; both files read as data, never run (docs/export.md)."""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path
from typing import Any

import torch

from minigpt.checkpoint import BEST, Checkpoint, _unreadable
from minigpt.config.files import config_text
from minigpt.config.schema import Config, config_from_dict
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import UserError
from minigpt.io import atomic
from minigpt.model import GPT

SHAPE_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size")  # nanoGPT's GPTConfig
GPT2_VOCABS = (50257, 50304)  # GPT-2's BPE vocabulary, and nanoGPT's padding of it


class _Code(Exception):
    """meta.pkl asked for a class or function: the name it asked for."""


class _PlainData(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers only: anything else needs find_class, which refuses."""

    def find_class(self, module: str, name: str) -> Any:
        raise _Code(f"{module}.{name}")


def read_meta(path: Path) -> list[str]:
    """The characters of meta.pkl's `itos`, in id order (checked against its `stoi`)."""
    try:
        meta = _PlainData(io.BytesIO(path.read_bytes())).load()
    except _Code as e:
        raise UserError(
            f"refusing to read {path}: it holds objects that would run code when loaded ({e}); "
            "nanoGPT's meta.pkl holds only dicts of characters and numbers"
        ) from None
    except Exception as e:  # a damaged pickle raises any of several types
        raise UserError(f"{path} is not a readable meta.pkl ({type(e).__name__}); give nanoGPT's own") from None
    itos = meta.get("itos") if isinstance(meta, dict) else None
    chars = [itos.get(i) for i in range(len(itos))] if isinstance(itos, dict) else []
    stoi = meta.get("stoi", {c: i for i, c in enumerate(chars)}) if isinstance(meta, dict) else None
    if not chars or not all(isinstance(c, str) and len(c) == 1 for c in chars) or len(set(chars)) != len(chars):
        raise UserError(f"{path} is not a character-level meta.pkl: its itos must map 0..N-1 to distinct characters")
    if stoi != {c: i for i, c in enumerate(chars)}:
        raise UserError(f"{path}: its stoi and itos disagree; give the meta.pkl that prepare.py wrote")
    return chars


def read_checkpoint(path: Path) -> dict[str, Any]:
    """nanoGPT's ckpt.pt as plain data (`weights_only`); its model, model_args and counters."""
    if not path.is_file():
        raise UserError(f"{path} is not a file; give nanoGPT's checkpoint, e.g. out-shakespeare-char/ckpt.pt")
    try:
        raw = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many kinds; say which code it refused, or that the file is damaged
        code = re.search(r"GLOBAL (\S+)", str(e))
        if code:
            raise UserError(
                f"refusing to load {path}: it holds objects that would run code when loaded ({code.group(1)}); "
                "nanoGPT's checkpoints hold only tensors and plain data"
            ) from None
        raise _unreadable(path, e) from None
    args = raw.get("model_args") if isinstance(raw, dict) else None
    if not isinstance(args, dict) or not isinstance(raw.get("model"), dict):
        raise UserError(f"{path} is not a nanoGPT checkpoint: it lacks model or model_args (train.py saves both)")
    missing = [k for k in SHAPE_KEYS if k not in args]
    if missing:
        raise UserError(f"{path}: its model_args lack {', '.join(missing)}; nanoGPT's train.py records them all")
    return raw


def minigpt_weights(state: dict[str, torch.Tensor], cfg: Config, vocab_size: int, path: Path) -> dict[str, Any]:
    """nanoGPT's state dict under minigpt's names, checked name for name and shape for shape."""
    weights = {}
    for key, tensor in state.items():
        key = key.removeprefix("_orig_mod.")  # torch.compile's wrapper, in a compiled run's keys
        if key.endswith(".attn.bias"):
            continue  # the causal mask nanoGPT keeps as a buffer without flash attention: not a weight
        weights[key.replace("transformer.h.", "blocks.").removeprefix("transformer.")] = tensor
    with torch.device("meta"):
        wanted = GPT(cfg.model, vocab_size).state_dict()
    odd = sorted(set(weights) ^ set(wanted)) or [k for k in wanted if weights[k].shape != wanted[k].shape]
    if odd:
        raise UserError(
            f"{path} holds a model minigpt cannot express ({len(odd)} weights differ from nanoGPT's own GPT, "
            f"e.g. {odd[0]}); only the model of nanoGPT's model.py imports"
        )
    if not torch.equal(weights["lm_head.weight"], weights["wte.weight"]):
        raise UserError(f"{path}: its lm_head is not tied to its token embedding, as minigpt's and nanoGPT's are")
    weights["lm_head.weight"] = weights["wte.weight"]  # one tensor, saved once
    return weights


def import_nanogpt(ckpt_path: Path, meta_path: Path | None, out: Path, text: Path | None = None) -> str:
    """Write the run `out` (best.pt, config.yaml) from nanoGPT's checkpoint and meta.pkl; the line to print.
    meta.pkl defaults to data/DATASET/meta.pkl, where nanoGPT's sample.py looks; the text to
    evaluate on, to the input.txt prepare.py leaves beside it."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already exists and is not an empty folder; give --out a new run folder")
    raw = read_checkpoint(ckpt_path)
    args = raw["model_args"]
    dataset = (raw.get("config") or {}).get("dataset", "DATASET")
    meta_path = meta_path or Path("data") / str(dataset) / "meta.pkl"
    if not meta_path.is_file():
        if args["vocab_size"] in GPT2_VOCABS:
            raise UserError(
                f"{ckpt_path} is a GPT-2 BPE model (vocabulary {args['vocab_size']:,}, no meta.pkl): minigpt "
                "models characters; import a character-level one such as shakespeare_char"
            )
        raise UserError(f"no meta.pkl at {meta_path}; give --meta, e.g. data/shakespeare_char/meta.pkl")
    chars = read_meta(meta_path)
    if args["vocab_size"] != len(chars):
        raise UserError(
            f"{ckpt_path} has {args['vocab_size']} token ids but {meta_path} {len(chars)} characters; "
            "give the meta.pkl of the dataset it trained on"
        )
    text = text or meta_path.parent / "input.txt"
    model = {k: args[k] for k in SHAPE_KEYS[:4]} | {"bias": bool(args["bias"]), "pos_emb": "learned", "norm": "pre"}
    model["dropout"] = float(args.get("dropout", 0.0))  # for fine-tuning; off at inference
    cfg = config_from_dict({"model": model, "data": {"path": str(text.resolve())}}, f"{ckpt_path}'s model_args")
    weights = minigpt_weights(raw["model"], cfg, len(chars), ckpt_path)
    best = raw.get("best_val_loss")
    best = float(best) if isinstance(best, (torch.Tensor, float, int)) else None  # its estimate on a few batches
    step = int(raw.get("iter_num", 0))
    out.mkdir(parents=True, exist_ok=True)
    Checkpoint(
        model=weights,
        config=cfg.to_dict(),
        tokenizer=CharTokenizer(chars).to_dict(),
        data={"path": cfg.data.path},
        step=step,
        best_val_loss=best,
        best_step=step,
        val_loss=best,
    ).save(out / BEST)
    atomic.atomic_write(out / "config.yaml", lambda f: f.write(config_text(cfg).encode("utf-8")))
    m = cfg.model
    loss = f", nanoGPT's val loss estimate {best:.4f}" if best is not None else ""
    return (
        f"wrote {out}: nanoGPT's model at step {step} ({m.n_layer} layers x {m.n_head} heads, context "
        f"{m.block_size}, {len(chars)} characters{loss}); try minigpt sample {out}"
    )
