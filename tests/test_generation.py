"""Sampling for real use: batched samples equal batch-1 ones, stop strings per sample, prompts of
mixed lengths, JSON records, the interactive loop, and each bad input."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from minigpt import memory
from minigpt.config import SampleOptions
from minigpt.errors import UserError
from minigpt.generation import OrderedOutput, parse_prompts_file
from minigpt.inference import load_model, sample_records

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def loaded(trained_run: Path):
    return load_model(trained_run, torch.device("cpu"))  # float32


def alone(loaded, prompt: str, seed: int, n: int = 60, **kw) -> str:
    opts = SampleOptions(num_samples=1, max_new_tokens=n, seed=seed, **kw)
    return sample_records(loaded, prompt, opts)[0].text


def test_a_batch_gives_each_sample_what_batch_1_gives_with_its_seed(loaded) -> None:
    for kw in ({}, {"top_k": 5}, {"top_p": 0.9, "temperature": 1.2}):
        batch = sample_records(loaded, "KING:", SampleOptions(num_samples=6, max_new_tokens=60, seed=40, **kw))
        assert [s.seed for s in batch] == list(range(40, 46))
        assert [s.text for s in batch] == [alone(loaded, "KING:", 40 + i, **kw) for i in range(6)]
        assert len({s.text for s in batch}) == 6  # and they differ from each other


def test_sampling_past_block_size_in_a_batch(loaded) -> None:
    block = loaded.model.cfg.block_size
    batch = sample_records(loaded, "", SampleOptions(num_samples=3, max_new_tokens=3 * block, seed=1))
    assert all(s.chars == 3 * block for s in batch)
    assert [s.text for s in batch] == [alone(loaded, "", 1 + i, n=3 * block) for i in range(3)]


def test_stop_strings_end_each_sample_on_its_own(loaded) -> None:
    stops = ["\n", "e "]
    free = [alone(loaded, "JULIET:", 7 + i, n=80) for i in range(5)]
    got = sample_records(loaded, "JULIET:", SampleOptions(num_samples=5, max_new_tokens=80, seed=7), stops=stops)
    for text, s in zip(free, got):
        cont = text[len("JULIET:") :]
        hits = [(cont.find(x), x) for x in stops if cont.find(x) >= 0]
        at, which = min(hits) if hits else (len(cont), "length")
        assert s.text == "JULIET:" + cont[:at] and s.stopped == which and s.chars == at  # the stop string left out
    assert len({s.stopped for s in got}) > 1 or len({s.chars for s in got}) > 1  # they ended differently


def test_prompts_of_mixed_lengths_share_batches_correctly(loaded) -> None:
    prompts = ["K", "KING:", "ROMEO:\nWhat", "the", "QUEEN"]
    got = sample_records(loaded, prompts, SampleOptions(num_samples=2, max_new_tokens=40, seed=100))
    assert [s.prompt for s in got] == [p for p in prompts for _ in range(2)]
    assert [s.text for s in got] == [alone(loaded, s.prompt, s.seed, n=40) for s in got]
    assert [s.seed for s in got] == list(range(100, 110))


def test_records_serialise_as_json_lines(loaded) -> None:
    (s,) = sample_records(loaded, "KING:", SampleOptions(max_new_tokens=30, seed=3), stops=["::::"])
    record = json.loads(s.to_json())
    assert record == {"prompt": "KING:", "text": s.text, "chars": 30, "stopped": "length", "seed": 3}


def test_a_single_sample_streams_and_holds_back_a_possible_stop() -> None:
    out = []
    stream = OrderedOutput(1, out.append)
    stream.piece(0, "abc")
    assert out == ["abc"]  # a single sample is written as it comes
    several = []
    ordered = OrderedOutput(3, several.append)
    for k, text in ((1, "one"), (0, "zero"), (2, "two")):
        ordered.piece(k, text)
    ordered.done(1)
    assert several == []  # sample 1 waits for sample 0
    ordered.done(0)
    ordered.done(2)
    assert "".join(several) == "zero\n\n---\none\n\n---\ntwo"


def test_streamed_output_never_shows_a_stop_string(loaded) -> None:
    written: list[str] = []
    opts = SampleOptions(max_new_tokens=200, seed=11)
    (s,) = sample_records(loaded, "KING:", opts, written.append, stops=["\n\n"])
    assert "".join(written) == s.text + "\n" and "\n\n" not in s.text


def test_bad_sampling_inputs(loaded, monkeypatch) -> None:
    opts = SampleOptions(max_new_tokens=5)
    with pytest.raises(UserError, match="--stop must not be empty"):
        sample_records(loaded, "KING", opts, stops=[""])
    with pytest.raises(UserError, match="--stop 'été' has characters the model never saw \\('é'\\): it could never"):
        sample_records(loaded, "KING", opts, stops=["\u00e9t\u00e9"])
    with pytest.raises(UserError, match=r"--prompts-file p\.txt has no prompts"):
        parse_prompts_file("\n  \n", "p.txt")
    assert parse_prompts_file("a\\nb\nc\\\\n\n\n", "p.txt") == ["a\nb", "c\\n"]
    monkeypatch.setattr(memory, "available_bytes", lambda device: (50 * 2**20, "MemAvailable"))
    with pytest.raises(UserError, match=r"sampling 5,000 samples at once needs about .* use --num-samples \d+ or fewer"):
        sample_records(loaded, "KING", SampleOptions(num_samples=5000, max_new_tokens=5))
