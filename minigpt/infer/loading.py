"""Using a trained model: load it from a run or checkpoint, sample from it, evaluate it."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from minigpt.cli.interactive import repl
from minigpt.config.schema import Config, DataConfig, SampleOptions, config_from_dict
from minigpt.data.corpus import encode_corpus, load_corpus
from minigpt.data.tokenizer import Tokenizer, tokenizer_from_dict
from minigpt.errors import UserError, first_line
from minigpt.infer.checkpoint import BEST, Checkpoint, resolve_checkpoint
from minigpt.infer.evaluate import EvalResult, evaluate_ids
from minigpt.infer.sample import OrderedOutput, Sample, check_stops, generate_samples, requests_for
from minigpt.model import GPT
from minigpt.runtime.device import sampling_dtype


@dataclass
class Loaded:
    model: GPT
    tokenizer: Tokenizer
    config: Config
    path: Path
    checkpoint: Checkpoint


def load_model(target: Path, device: torch.device) -> Loaded:
    """The model of a run directory (its best.pt, else last.pt) or of a checkpoint file, in eval mode."""
    path = resolve_checkpoint(target, prefer=BEST)
    ckpt = Checkpoint.load(path)
    try:
        cfg = config_from_dict(ckpt.config, str(path))
        tok = tokenizer_from_dict(ckpt.tokenizer)
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


def sample_records(loaded: Loaded, prompts: str | Sequence[str], opts: SampleOptions,
                   write: Callable[[str], None] | None = None, stops: Sequence[str] = (),
                   what: str = "--prompt") -> list[Sample]:  # fmt: skip
    """`opts.num_samples` samples for each prompt, generated in batches (generation.py), seeds
    opts.seed, opts.seed + 1, ... in order. With `write`, stdout's form: prompt + continuation
    per sample, a single sample streamed, several separated by a blank line and '---', each
    written once it and those before it are complete. An empty prompt starts from a newline."""
    tok = loaded.tokenizer
    check_stops(tok, stops)
    requests = requests_for(tok, [prompts] if isinstance(prompts, str) else prompts, opts.num_samples, opts.seed,
                            opts.unknown, what)  # fmt: skip
    output = OrderedOutput(len(requests), write) if write is not None else None
    samples = generate_samples(loaded.model, tok, requests, opts.max_new_tokens, opts.temperature, opts.top_k,
                               opts.top_p, stops, output)  # fmt: skip
    if write is not None:
        write("\n")
    return samples


def sample_command(loaded: Loaded, prompts: list[str], what: str, opts: SampleOptions, stops: Sequence[str],
                   as_json: bool, interactive: bool, write: Callable[[str], None]) -> int:  # fmt: skip
    """`minigpt sample` after its flags are read: the interactive loop, JSON records, or the samples
    as text. Every prompt and stop string is checked before anything is generated."""
    tok = loaded.tokenizer
    if interactive and (what != "--prompt" or prompts != [""] or as_json or opts.num_samples != 1):
        raise UserError("--interactive reads its prompts from the terminal; leave out --prompt, --prompt-file, "
                        "--prompts-file, --json and --num-samples")  # fmt: skip
    check_stops(tok, stops)
    requests_for(tok, prompts, 1, 0, opts.unknown, what)  # unknown characters: refused before any output
    step, val = loaded.checkpoint.step, loaded.checkpoint.val_loss
    val_text = f", val loss {val:.4f}" if isinstance(val, float) else ""
    print(f"sampling from {loaded.path} (step {step}{val_text})", file=sys.stderr)
    if interactive:

        def run(prompt: str, o: SampleOptions, s: Sequence[str]) -> None:
            sample_records(loaded, prompt, o, write, s)  # a prompt's unknown characters: an error line, as always

        return repl(run, opts, stops, lambda s: check_stops(tok, s))
    if as_json:
        for s in sample_records(loaded, prompts, opts, None, stops, what):
            write(s.to_json() + "\n")
    else:
        sample_records(loaded, prompts, opts, write, stops, what)
    return 0


def sample(loaded: Loaded, prompt: str, opts: SampleOptions, write: Callable[[str], None]) -> list[str]:
    """`sample_records` for one prompt, written through `write`: the samples' texts."""
    return [s.text for s in sample_records(loaded, prompt, opts, write)]


def eval_ids_for(loaded: Loaded, data: str | None) -> tuple[np.ndarray, np.ndarray | None, str]:
    """The ids to evaluate (a memory map), the table into the model's vocabulary, and what they
    are: the run's validation split, or all of `data` (a file, folder or glob, joined as in
    training)."""
    tok = loaded.tokenizer
    dcfg = loaded.config.data
    if data is not None:
        cfg = DataConfig(path=data, val_path=None, doc_separator=dcfg.doc_separator, tokenizer=tok.kind,
                         cache_dir=dcfg.cache_dir)  # fmt: skip
        enc, _, desc = encode_corpus(cfg)
        unseen = enc.tokenizer.unknown_to(tok)
        if unseen:
            names = ", ".join(repr(c) for c in unseen[:10]) + (", ..." if len(unseen) > 10 else "")
            raise UserError(f"data {desc} has characters the model never saw in training: {names}")
        table = None if enc.tokenizer.same_as(tok) else tok.ids_of(enc.tokenizer)
        return enc.ids, table, f"all of {desc}"
    info = loaded.checkpoint.data
    recorded = DataConfig(**{**dataclasses.asdict(dcfg), "path": info.get("path", dcfg.path)})
    try:
        corpus = load_corpus(recorded, loaded.config.model.block_size)
    except UserError as e:
        raise UserError(f"cannot read the run's data ({e}); pass --data FILE|FOLDER to evaluate other text") from None
    if info.get("sha256") and corpus.sha256 != info["sha256"] or corpus.tokenizer.unknown_to(tok):
        raise UserError(
            f"{corpus.description} changed since this run was trained; pass --data FILE|FOLDER to evaluate on it anyway"
        )
    table = None if corpus.tokenizer.same_as(tok) else tok.ids_of(corpus.tokenizer)
    return corpus.val, table, f"validation split of {corpus.description}"


def evaluate(loaded: Loaded, data: str | Path | None) -> tuple[EvalResult, str]:
    ids, table, what = eval_ids_for(loaded, str(data) if data is not None else None)
    result = evaluate_ids(loaded.model, ids, table)
    result.unit = loaded.tokenizer.unit
    return result, what


@dataclass
class Scores:
    """The model's surprise at each token of a text: bits[i] = -log2 p(token i+1 | tokens up to i).
    `text` holds what each token shows as: the characters (char models), or for a byte model each
    character on its last byte and '' on the bytes before it."""

    text: list[str]
    bits: list[float]  # one per token after the first (the first has no context to predict it)
    unit: str = "char"
    ids: list[int] = dataclasses.field(default_factory=list)  # the text's token ids
    # with score_text(top=k): the model's k likeliest tokens at each scored position, and their probabilities
    top_ids: list[list[int]] = dataclasses.field(default_factory=list)
    top_probs: list[list[float]] = dataclasses.field(default_factory=list)

    @property
    def probs(self) -> list[float]:
        """The probability the model gave each scored token (2 ** -bits)."""
        return [2.0**-b for b in self.bits]

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
def score_text(loaded: Loaded, text: str, top: int = 0) -> Scores:
    """Surprise per character. Text longer than the context is scored in windows of block_size that
    advance by half a window, each character scored once, with at least half a window of context
    (all of it before the first window is full). `top` > 0 also keeps the model's `top` likeliest
    tokens at each position."""
    tok = loaded.tokenizer
    ids = torch.from_numpy(tok.encode_checked(text, "the text", skip_hint=False))
    if len(ids) < 2:
        raise UserError("the text to score needs at least 2 characters (the first one has no context)")
    model = loaded.model
    device = next(model.parameters()).device
    block = model.cfg.block_size
    stride = max(1, block // 2)
    bits = torch.empty(len(ids) - 1)
    top_ids: list[list[int]] = []
    top_probs: list[list[float]] = []
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
        if top:
            probs, guesses = logits[0, first_new:].float().softmax(-1).topk(min(top, logits.size(-1)), dim=-1)
            top_probs += probs.tolist()
            top_ids += guesses.tolist()
        done = end
        start = max(0, end - block + stride) if end < len(ids) - 1 else end
    return Scores(tok.pieces(ids.tolist()), bits.tolist(), tok.unit, ids.tolist(), top_ids, top_probs)
