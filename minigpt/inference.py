"""Using a trained model: load it from a run or checkpoint, sample from it, evaluate it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from minigpt.checkpoint import BEST, Checkpoint, resolve_checkpoint
from minigpt.config import Config, SampleOptions, config_from_dict
from minigpt.data import cache_dir_for, decode_utf8, encode_file, read_text_bytes, split_index
from minigpt.errors import UserError, first_line
from minigpt.evaluation import EvalResult, evaluate_ids
from minigpt.model import GPT
from minigpt.runtime import sampling_dtype
from minigpt.sampler import generate
from minigpt.tokenizer import CharTokenizer


@dataclass
class Loaded:
    model: GPT
    tokenizer: CharTokenizer
    config: Config
    path: Path
    checkpoint: Checkpoint


def load_model(target: Path, device: torch.device) -> Loaded:
    """The model of a run directory (its best.pt, else last.pt) or of a checkpoint file, in eval mode."""
    path = resolve_checkpoint(target, prefer=BEST)
    ckpt = Checkpoint.load(path)
    try:
        cfg = config_from_dict(ckpt.config, str(path))
        tok = CharTokenizer.from_dict(ckpt.tokenizer)
        model = GPT(cfg.model, tok.vocab_size)
        model.load_state_dict(ckpt.model)
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise UserError(f"{path} is a damaged minigpt checkpoint: {first_line(e)}") from None
    model.to(device).eval()
    return Loaded(model, tok, cfg, path, ckpt)


def cast_for_sampling(loaded: Loaded, dtype: str, device_name: str) -> None:
    """Put the weights in the sampling dtype (`runtime.sampling_dtype`: auto is bf16 where native)."""
    device = next(loaded.model.parameters()).device
    try:
        loaded.model.to(sampling_dtype(dtype, device))
    except (TypeError, RuntimeError):  # e.g. an MPS without bf16
        problem = f"--dtype {dtype} is not supported on device '{device_name}' here"
        raise UserError(f"{problem}; use --dtype float32") from None


def encode_prompt(tok: CharTokenizer, prompt: str, unknown: str) -> list[int]:
    """Encode a prompt; characters outside the vocabulary are an error, or dropped with unknown='skip'."""
    return tok.encode_checked(prompt, "--prompt", unknown).tolist()


def sample(loaded: Loaded, prompt: str, opts: SampleOptions, write: Callable[[str], None]) -> list[str]:
    """Generate `opts.num_samples` continuations, streaming each character through `write`.

    Output is prompt + continuation per sample, samples separated by a blank line and '---'.
    An empty prompt starts from a newline (or the first character of the vocabulary).
    """
    tok = loaded.tokenizer
    ids = encode_prompt(tok, prompt, opts.unknown)
    shown = tok.decode(ids)
    if not ids:
        start = tok.stoi.get("\n", 0)
        ids, shown = [start], ""
    device = next(loaded.model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(opts.seed)
    texts = []
    for i in range(opts.num_samples):
        if i:
            write("\n\n---\n")
        write(shown)
        new = generate(
            loaded.model, ids, opts.max_new_tokens, opts.temperature, opts.top_k, opts.top_p, generator,
            on_token=lambda t: write(tok.chars[t]),
        )  # fmt: skip
        texts.append(shown + tok.decode(new))
    write("\n")
    return texts


def eval_ids_for(loaded: Loaded, data: Path | None) -> tuple[torch.Tensor, str]:
    """The ids to evaluate and a description: the run's validation split, or all of `data`."""
    tok = loaded.tokenizer
    if data is not None:
        text = decode_utf8(read_text_bytes(data), data)
        return torch.from_numpy(tok.encode_checked(text, f"data file {data}", skip_hint=False)), f"all of {data}"
    info = loaded.checkpoint.data
    path = Path(info.get("path", loaded.config.data.path))
    if not path.exists():
        raise UserError(f"the run's data file {path} is gone; pass --data FILE to evaluate on a text file")
    sha, file_tok, ids = encode_file(path, cache_dir_for(loaded.config.data))  # cached: encoded once
    if info.get("sha256") and sha != info["sha256"] or file_tok.unknown_to(tok):
        raise UserError(f"{path} changed since this run was trained; pass --data FILE to evaluate on it anyway")
    split = split_index(len(ids), loaded.config.data.val_fraction)
    val = np.array(ids[split:], dtype=np.int64)
    if file_tok.chars != tok.chars:  # a fine-tuned model's vocabulary orders or holds more characters
        val = tok.ids_of(file_tok)[val]
    return torch.from_numpy(val), f"validation split of {path}"


def evaluate(loaded: Loaded, data: Path | None) -> tuple[EvalResult, str]:
    ids, what = eval_ids_for(loaded, data)
    return evaluate_ids(loaded.model, ids), what


@dataclass
class Scores:
    """The model's surprise at each character of a text: bits[i] = -log2 p(text[i+1] | text[:i+1])."""

    text: str
    bits: list[float]  # one per character after the first (the first has no context to predict it)

    @property
    def bits_per_char(self) -> float:
        return sum(self.bits) / len(self.bits)

    def to_dict(self) -> dict:
        return {
            "chars": len(self.text),
            "scored": len(self.bits),
            "bits_per_char": self.bits_per_char,
            "total_bits": sum(self.bits),
            "per_char": [{"char": c, "bits": b} for c, b in zip(self.text[1:], self.bits)],
        }


@torch.no_grad()
def score_text(loaded: Loaded, text: str) -> Scores:
    """Surprise per character. Text longer than the context is scored in windows of block_size that
    advance by half a window, each character scored once, with at least half a window of context
    (all of it before the first window is full)."""
    ids = torch.from_numpy(loaded.tokenizer.encode_checked(text, "the text", skip_hint=False))
    if len(text) < 2:
        raise UserError("the text to score needs at least 2 characters (the first one has no context)")
    model = loaded.model
    device = next(model.parameters()).device
    block = model.cfg.block_size
    stride = max(1, block // 2)
    bits = torch.empty(len(ids) - 1)
    done = 0  # predictions scored so far (prediction i is of ids[i + 1])
    start = 0
    while done < len(ids) - 1:
        end = min(start + block, len(ids) - 1)
        x = ids[start:end][None].to(device)
        y = ids[start + 1 : end + 1].to(device)
        logits, _ = model(x)
        nll = F.cross_entropy(logits[0].float(), y, reduction="none") / math.log(2)  # bits
        first_new = done - start  # positions before it were scored by the previous window
        bits[done:end] = nll[first_new:].cpu()
        done = end
        start = max(0, end - block + stride) if end < len(ids) - 1 else end
    return Scores(text, bits.tolist())
