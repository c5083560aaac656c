"""Sampling for real use: many samples in one batch, many prompts, stop strings, and records for
scripts. Shared by `minigpt sample`, its interactive loop and the Python API.

Seeds: sample k of a run (counting every prompt's samples in order) draws from its own generator
seeded `seed + k`, so `--num-samples 1 --seed S` with S = seed + k reproduces it alone.

Prompts of different lengths are batched by length (one batch per length), so no row is padded
and each row computes exactly what it would alone, up to the last bits of batched matrix products.

A stop string ends its sample and is not part of it (as in the OpenAI API, llama.cpp and vLLM).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from minigpt.config.schema import SampleOptions
from minigpt.data.tokenizer import Tokenizer, name_chars
from minigpt.errors import UserError
from minigpt.infer.decode import generate_batch
from minigpt.infer.loading import LoadedModel
from minigpt.model import GPT
from minigpt.runtime import memory

SEPARATOR = "\n\n---\n"  # between samples on stdout


@dataclass
class Request:
    prompt: str  # as given
    ids: list[int]  # what the model continues (an empty prompt: the start id, shown as "")
    shown: str  # the prompt as the model reads it (unknown characters dropped with --unknown skip)
    seed: int


@dataclass
class Sample:
    prompt: str
    text: str  # the shown prompt + the continuation, as written to stdout
    chars: int  # characters generated (without a stop string)
    stopped: str  # "length", or the stop string that ended it
    seed: int  # `--num-samples 1 --seed SEED` reproduces this sample alone

    def to_json(self) -> str:
        return json.dumps(
            {"prompt": self.prompt, "text": self.text, "chars": self.chars, "stopped": self.stopped, "seed": self.seed},
            ensure_ascii=False,
        )


def check_stops(tok: Tokenizer, stops: Sequence[str]) -> None:
    """Stop strings that could end a sample: none empty, none with a character the model never saw."""
    for s in stops:
        if not s:
            raise UserError("--stop must not be empty (an empty stop string would end every sample at once)")
        missing = tok.unknown(s)
        if missing:
            names = name_chars(missing, most=len(missing))
            raise UserError(f"--stop {s!r} has characters the model never saw ({names}): it could never match")


@dataclass
class SamplePlan:
    """One sampling call with its inputs checked: `opts.num_samples` requests per prompt, seeds
    opts.seed, opts.seed + 1, ... in order, and the stop strings."""

    requests: list[Request]
    opts: SampleOptions
    stops: Sequence[str]


def plan_samples(
    tok: Tokenizer, prompts: Sequence[str], opts: SampleOptions, stops: Sequence[str] = (), label: str = "--prompt"
) -> SamplePlan:
    """The one check of a sampling call's inputs, made before anything is generated: the stop
    strings, then every prompt's characters (`opts.unknown`: an error, or skipped). `label` is how
    errors name the prompts (--prompt, --prompts-file, ...)."""
    check_stops(tok, stops)
    requests = []
    for prompt in prompts:
        ids = tok.encode_checked(prompt, label, opts.unknown).tolist()
        shown = tok.decode(ids)
        if not ids:
            ids, shown = [tok.start_id], ""
        for _ in range(opts.num_samples):
            requests.append(Request(prompt, ids, shown, opts.seed + len(requests)))
    return SamplePlan(requests, opts, list(stops))


@dataclass
class _Row:
    """One sample being generated: its text so far, how much of it is out, and why it ended."""

    request: Request
    stream: Callable[[int], str]
    text: str = ""
    out: int = 0  # characters of `text` already written
    stopped: str = "length"
    done: bool = False

    def add(self, piece: str, stops: Sequence[str]) -> bool:
        """Append a generated piece; True when a stop string has ended the sample."""
        before = len(self.text)
        self.text += piece
        for s in stops:
            at = self.text.find(s, max(0, before - len(s) + 1))
            if at >= 0:
                self.text, self.stopped = self.text[:at], s
                return True
        return False

    def ready(self, stops: Sequence[str]) -> str:
        """The text that can be written now: all of it once done, else what no stop string could
        still claim (a tail that may begin one is held back)."""
        end = len(self.text)
        if not self.done:
            for s in stops:
                for k in range(min(len(s) - 1, end), 0, -1):
                    if self.text.endswith(s[:k]):
                        end = min(end, len(self.text) - k)
                        break
        piece, self.out = self.text[self.out : end], max(self.out, end)
        return piece


def batch_memory_error(model: GPT, batch: int) -> str | None:
    """A batch whose KV cache and logits would not fit in memory: the error, with a batch that fits."""
    cfg = model.cfg
    per_row = (
        2 * cfg.n_layer * cfg.block_size * cfg.n_embd * 4 + cfg.block_size * (8 * cfg.n_embd + model.vocab_size) * 4
    )
    device = model.device
    available, where = memory.available_bytes(device)
    if available is None or batch * per_row <= 0.8 * available:
        return None
    fits = max(1, int(0.8 * available // per_row))
    need = memory.gb(batch * per_row)
    return (
        f"sampling {batch:,} samples at once needs about {need} for their key/value cache, more than the "
        f"{memory.gb(available)} available ({where}); use --num-samples {fits} or fewer"
    )


def generate_samples(
    model: GPT,
    tok: Tokenizer,
    requests: Sequence[Request],
    max_new_tokens: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    stops: Sequence[str] = (),
    output: OrderedOutput | None = None,
) -> list[Sample]:
    """Every request's sample; requests with prompts of the same length share one batch.

    `output` receives each sample's text as it becomes final (the shown prompt, then the
    continuation piece by piece; a tail that may begin a stop string is held back until it is
    clear) and is told when each sample is complete.
    """
    device = model.device
    rows = [_Row(r, tok.streamer()) for r in requests]
    groups: dict[int, list[int]] = {}
    for k, r in enumerate(requests):
        groups.setdefault(len(r.ids), []).append(k)
    too_big = batch_memory_error(model, max(len(g) for g in groups.values())) if groups else None
    if too_big:
        raise UserError(too_big)

    def settle(k: int) -> None:
        if output is not None:
            output.piece(k, rows[k].ready(stops))
            if rows[k].done:
                output.done(k)

    for members in groups.values():
        if output is not None:
            for k in members:
                output.piece(k, rows[k].request.shown)

        def on_token(i: int, tid: int, members: list[int] = members) -> bool:
            row = rows[members[i]]
            row.done = row.add(row.stream(tid), stops)
            settle(members[i])
            return row.done

        generators = [torch.Generator(device=device).manual_seed(rows[k].request.seed) for k in members]
        ids = [rows[k].request.ids for k in members]
        generate_batch(model, ids, max_new_tokens, temperature, top_k, top_p, generators, on_token)
        for k in members:
            if not rows[k].done:
                rows[k].done = True
                settle(k)
    return [Sample(r.request.prompt, r.request.shown + r.text, len(r.text), r.stopped, r.request.seed) for r in rows]


class OrderedOutput:
    """What stdout shows: a single sample streams as it is generated; several are written in
    order, each once it and those before it are complete, separated by SEPARATOR."""

    def __init__(self, n: int, emit: Callable[[str], Any]) -> None:
        self.n, self.emit, self.next = n, emit, 0
        self.buffers: list[list[str]] = [[] for _ in range(n)]
        self.finished = [False] * n

    def piece(self, k: int, text: str) -> None:
        if not text:
            return
        if self.n == 1:
            self.emit(text)
        else:
            self.buffers[k].append(text)

    def done(self, k: int) -> None:
        self.finished[k] = True
        while self.next < self.n and self.finished[self.next]:
            if self.n > 1:
                self.emit((SEPARATOR if self.next else "") + "".join(self.buffers[self.next]))
                self.buffers[self.next] = []
            self.next += 1


def run_plan(loaded: LoadedModel, plan: SamplePlan, write: Callable[[str], None] | None = None) -> list[Sample]:
    """The plan's samples, generated in batches (generate_samples). With `write`, stdout's form:
    prompt + continuation per sample, a single sample streamed, several separated by a blank line
    and '---', each written once it and those before it are complete."""
    o = plan.opts
    output = OrderedOutput(len(plan.requests), write) if write is not None else None
    samples = generate_samples(
        loaded.model,
        loaded.tokenizer,
        plan.requests,
        o.max_new_tokens,
        o.temperature,
        o.top_k,
        o.top_p,
        plan.stops,
        output,
    )
    if write is not None:
        write("\n")
    return samples


def sample_records(
    loaded: LoadedModel,
    prompts: str | Sequence[str],
    opts: SampleOptions,
    write: Callable[[str], None] | None = None,
    stops: Sequence[str] = (),
    label: str = "--prompt",
) -> list[Sample]:
    """`opts.num_samples` samples for each prompt: plan_samples, then run_plan. An empty prompt
    starts from a newline."""
    prompts = [prompts] if isinstance(prompts, str) else prompts
    return run_plan(loaded, plan_samples(loaded.tokenizer, prompts, opts, stops, label), write)


def sample(loaded: LoadedModel, prompt: str, opts: SampleOptions, write: Callable[[str], None]) -> list[str]:
    """`sample_records` for one prompt, written through `write`: the samples' texts."""
    return [s.text for s in sample_records(loaded, prompt, opts, write)]
