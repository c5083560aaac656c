"""Sampling for `minigpt sample`, its interactive loop and the Python API (docs/sampling.md): many samples
in one batch, prompts batched by length (none padded), stop strings (not part of the sample), records.
Sample k of a call, counting every prompt's in order, draws from a generator seeded `seed + k`."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import NamedTuple

import torch

from minigpt.config.schema import SampleOptions
from minigpt.data.tokenizer import Tokenizer, name_chars
from minigpt.errors import UserError
from minigpt.infer.decode import generate_steps
from minigpt.infer.loading import LoadedModel
from minigpt.model import GPT
from minigpt.runtime import memory


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
        return json.dumps(asdict(self), ensure_ascii=False)  # prompt, text, chars, stopped, seed


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
    """One sampling call, checked: `opts.num_samples` requests a prompt, seeds opts.seed, opts.seed + 1, ..., stops."""

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


class Piece(NamedTuple):
    """More of sample `row`'s text, final: the shown prompt, then the continuation as no stop string
    can claim it any more. A sample's last piece carries its `Sample`."""

    row: int  # the request's index in the plan
    text: str
    sample: Sample | None = None


@dataclass
class _Row:
    """One sample being generated: its text so far, how much of it is out, and its stop strings."""

    k: int
    request: Request
    stops: Sequence[str]
    stream: Callable[[int], str]
    text: str = ""
    out: int = 0  # characters of `text` already given out
    done: bool = False

    def add(self, tid: int) -> Piece:
        """The piece token `tid` makes final: the text no stop string could still claim (a tail that
        may begin one is held back), or the sample's last piece when a stop string ends it."""
        before = len(self.text)
        self.text += self.stream(tid)
        for s in self.stops:
            at = self.text.find(s, max(0, before - len(s) + 1))
            if at >= 0:
                self.text = self.text[:at]
                return self.end(s)
        end = len(self.text)
        for s in self.stops:
            for n in range(min(len(s) - 1, end), 0, -1):
                if self.text.endswith(s[:n]):
                    end = min(end, len(self.text) - n)
                    break
        piece, self.out = self.text[self.out : end], max(self.out, end)
        return Piece(self.k, piece)

    def end(self, stopped: str = "length") -> Piece:
        """The sample's last piece (all that is held back) and its record."""
        r, self.done = self.request, True
        sample = Sample(r.prompt, r.shown + self.text, len(self.text), stopped, r.seed)
        return Piece(self.k, self.text[self.out :], sample)


def batch_memory_error(model: GPT, batch: int) -> str | None:
    """A batch whose KV cache and logits would not fit in memory: the error, with a batch that fits."""
    cfg = model.cfg
    per_row = 4 * cfg.block_size * (2 * cfg.n_layer * cfg.n_embd + 8 * cfg.n_embd + model.vocab_size)  # float32 bytes
    available, where = memory.available_bytes(model.device)
    if available is None or batch * per_row <= 0.8 * available:
        return None
    fits = max(1, int(0.8 * available // per_row))
    need = memory.gb(batch * per_row)
    return (
        f"sampling {batch:,} samples at once needs about {need} for their key/value cache, more than the "
        f"{memory.gb(available)} available ({where}); use --num-samples {fits} or fewer"
    )


def run_plan(loaded: LoadedModel, plan: SamplePlan) -> Iterator[Piece]:
    """Every request's sample, as pieces of text the moment they are final; requests with prompts of
    the same length share one batch (in the order of their first request)."""
    model, tok, requests, o = loaded.model, loaded.tokenizer, plan.requests, plan.opts
    groups: dict[int, list[int]] = {}
    for k, r in enumerate(requests):
        groups.setdefault(len(r.ids), []).append(k)
    too_big = batch_memory_error(model, max(len(g) for g in groups.values())) if groups else None
    if too_big:
        raise UserError(too_big)
    for members in groups.values():
        rows = [_Row(k, requests[k], plan.stops, tok.streamer()) for k in members]
        yield from (Piece(row.k, row.request.shown) for row in rows)
        generators = [torch.Generator(device=model.device).manual_seed(row.request.seed) for row in rows]
        ids = [row.request.ids for row in rows]
        for tokens in generate_steps(model, ids, o.max_new_tokens, o.temperature, o.top_k, o.top_p, generators):
            yield from (row.add(tid) for row, tid in zip(rows, tokens) if not row.done)
            if all(row.done for row in rows):
                break
        yield from (row.end() for row in rows if not row.done)


def samples_of(pieces: Iterable[Piece]) -> list[Sample]:
    """The samples the pieces end with, in the plan's order."""
    done = {p.row: p.sample for p in pieces if p.sample is not None}
    return [done[k] for k in sorted(done)]


def sample_records(
    loaded: LoadedModel,
    prompts: str | Sequence[str],
    opts: SampleOptions,
    stops: Sequence[str] = (),
) -> list[Sample]:
    """`opts.num_samples` samples a prompt (plan_samples, then run_plan); an empty prompt starts from a newline."""
    prompts = [prompts] if isinstance(prompts, str) else prompts
    return samples_of(run_plan(loaded, plan_samples(loaded.tokenizer, prompts, opts, stops)))
