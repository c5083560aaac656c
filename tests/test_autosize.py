"""--auto and the advisor: the choice is a function of the text and the probe's speed, explicit keys
win, the run's config.yaml and resume repeat it, the advisor speaks up only when a run is set up to
waste its time, --dry-run trains nothing, and each mistake is one error line."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from minigpt.config.schema import Config
from minigpt.data.corpus import Corpus
from minigpt.data.tokenizer import CharTokenizer
from minigpt.training import autosize
from minigpt.training.autosize import AUTO_KEYS, PROBE, Probe, advice, choose, model_of, step_flops
from tests.helpers import TINY, make_text

VOCAB = 65
MB = 1_000_000


def _speed(anchor_step_s: float) -> Probe:
    """A CPU-like machine: a step of the anchor shape takes `anchor_step_s`, a small shape's half
    of that, a large one's in proportion to its work."""
    cfg = Config().model
    small, anchor, large = (step_flops(model_of(r, cfg), VOCAB, r[4]) for r in PROBE)
    large_s = anchor_step_s * large / anchor
    return Probe(((small, anchor_step_s / 2), (anchor, anchor_step_s), (large, large_s)), anchor_step_s)


def test_the_choice_follows_the_budget_and_is_deterministic() -> None:
    cfg = Config()
    shapes = {}
    for minutes in (1, 4, 15, 60):
        a = choose(cfg, VOCAB, int(0.9 * MB), int(0.1 * MB), minutes * 60, _speed(0.07))
        b = choose(cfg, VOCAB, int(0.9 * MB), int(0.1 * MB), minutes * 60, _speed(0.07))
        assert a == b
        assert set(a.values) == set(AUTO_KEYS)  # what a resume takes back from the saved run
        shapes[minutes] = (a.values["model.n_layer"], a.values["model.n_embd"])
    # four minutes at the speed where cpu_4min.yaml's old 3 x 128 took ~3,300 steps: that shape
    assert shapes[4] == (3, 128)
    sizes = [layers * width**2 for layers, width in shapes.values()]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]  # more time, a bigger model


def test_a_small_text_gets_dropout_and_patience() -> None:
    big = choose(Config(), VOCAB, int(0.9 * MB), int(0.1 * MB), 15 * 60, _speed(0.02))
    small = choose(Config(), VOCAB, 90_000, 10_000, 15 * 60, _speed(0.02))
    assert big.values["model.dropout"] < small.values["model.dropout"]
    assert small.values["train.patience"] > 0 and "patience stops it" in small.why


def test_dropout_only_where_its_slower_steps_still_overfit() -> None:
    # a CPU where a step with dropout takes twice as long (measured: docs/training.md)
    cpu = dataclasses.replace(_speed(0.1), dropout_cost=2.0)
    short = choose(Config(), VOCAB, 90_000, 10_000, 60, cpu)  # ~1.5x past its turn: twice the steps win
    assert short.values["model.dropout"] == 0.0
    long = choose(Config(), VOCAB, 90_000, 10_000, 4 * 60, cpu)
    assert long.values["model.dropout"] > 0
    free = choose(Config(), VOCAB, 90_000, 10_000, 4 * 60, _speed(0.1))  # a GPU: dropout costs nothing
    assert free.values["model.dropout"] > 0 and free.steps > 1.5 * long.steps


def _corpus(n: int, documents: int = 1) -> Corpus:
    tok = CharTokenizer([chr(32 + i) for i in range(VOCAB)])
    ids = np.zeros(n, dtype=np.uint8)
    return Corpus("text", "sha", tok, ids, int(n * 0.9), documents)


def test_the_advisor_warns_an_overfitting_run_and_not_the_default() -> None:
    default = advice(Config(), VOCAB, _corpus(1_115_394), "char")
    assert len(default) == 1 and default[0].startswith(
        "plan: 0.60M parameters; 300 steps see 0.6M chars, 1 char per block parameter"
    )
    overfit = Config().replace(**{"train.max_steps": 5000})
    lines = advice(overfit, VOCAB, _corpus(100_000), "char")
    assert len(lines) == 2 and "val loss will likely stop falling near step" in lines[1]
    assert "model.dropout=0.1" in lines[1] and "train.patience=3" in lines[1]
    short_docs = advice(Config(), VOCAB, _corpus(1_000_000, documents=50_000), "char")
    assert "documents average 20 chars" in short_docs[-1]


def test_the_advisor_says_what_the_time_budget_does_to_the_schedule() -> None:
    text = _corpus(1_115_394)
    budget = Config().replace(**{"train.max_time": "2m", "train.max_steps": 5000})
    cut = advice(budget, VOCAB, text, "char", allowed=1400)
    assert "allows about 1,400 of train.max_steps 5,000" in cut[1] and "28% into its cosine decay" in cut[1]
    assert "optim.schedule_by=time" in cut[1] and "plan: 0.60M parameters; 1,400 steps" in cut[0]
    by_time = budget.replace(**{"optim.schedule_by": "time"})
    assert len(advice(by_time, VOCAB, text, "char", allowed=1400)) == 1  # the decay follows the clock
    capped = advice(by_time, VOCAB, text, "char", allowed=20_000)
    assert "train.max_steps (5,000) ends the run before train.max_time (2m) does, about 25%" in capped[1]
    warm = advice(by_time.replace(**{"optim.warmup_steps": 500}), VOCAB, text, "char", allowed=1400)
    assert "warm-up, optim.warmup_steps 500, is 36% of the ~1,400 steps" in warm[1]
    assert len(advice(budget, VOCAB, text, "char")) == 1  # no time budget known: nothing to say
    crowded = budget.replace(**{"train.max_steps": 50_000})
    assert len(advice(crowded, VOCAB, _corpus(100_000, documents=10_000), "char", allowed=20_000)) == 3


@pytest.mark.slow  # --auto's probe timed three times (15 s on 2 cores): CI runs it in its slow step
def test_auto_dry_run_keeps_explicit_keys_and_trains_nothing(tmp_path: Path, cli) -> None:
    data = tmp_path / "text.txt"
    data.write_text(make_text(60_000), encoding="utf-8")
    out = tmp_path / "run"
    r = cli(
        "train", "--data", str(data), "--out", str(out), "--auto", "--dry-run", "train.max_time=5m", "model.n_embd=48"
    )
    assert r.code == 0, r.err
    chosen = yaml.safe_load(r.out)
    assert chosen["model"]["n_embd"] == 48 and chosen["optim"]["optimizer"] == "muon"
    assert chosen["optim"]["schedule_by"] == "time" and chosen["train"]["auto"] is True
    assert "--auto: kept yours: model.n_embd; the other keys are set for the time (its own shape: " in r.err
    assert "plan: " in r.err
    assert not out.exists()
    # a bigger shape of yours: the plan counts its own (timed) steps, not those of --auto's choice
    r = cli(
        "train", "--data", str(data), "--auto", "--dry-run", "train.max_time=5m", "model.n_layer=6", "model.n_embd=256"
    )
    assert r.code == 0, r.err
    chosen_steps = int(re.search(r"~([\d,]+) steps in", r.err)[1].replace(",", ""))
    planned = int(re.search(r"plan: [^;]+; ([\d,]+) steps", r.err)[1].replace(",", ""))
    assert planned < chosen_steps / 2
    # without --auto, a time budget is measured with one timed step of the run's own shape
    r = cli(
        "train",
        "--data",
        str(data),
        "--out",
        str(out),
        "--dry-run",
        "train.max_time=20s",
        *TINY,
        "train.max_steps=100000",
    )
    assert r.code == 0, r.err
    assert "allows about" in r.err and "into its cosine decay" in r.err and not out.exists()


@pytest.mark.slow  # two --auto runs (10 s on 2 cores): CI runs it in its slow step
def test_auto_run_resumes_as_it_was_chosen(tmp_path: Path, cli) -> None:
    data = tmp_path / "text.txt"
    data.write_text(make_text(60_000), encoding="utf-8")
    out = tmp_path / "run"
    args = ["train", "--data", str(data), "--out", str(out), "--auto", "train.max_time=10m", *TINY[4:]]
    r = cli(*args, "train.max_steps=4", "train.eval_interval=2", "train.threads=1")
    assert r.code == 0, r.err
    saved = yaml.safe_load((out / "config.yaml").read_text())
    assert saved["optim"]["optimizer"] == "muon" and saved["train"]["max_steps"] == 4
    r = cli(*args, "train.max_steps=6", "train.eval_interval=2", "train.threads=1", "--resume")
    assert r.code == 0, r.err
    assert "resuming" in r.err and "--auto: " not in r.err  # the choice is not made again
    again = yaml.safe_load((out / "config.yaml").read_text())
    assert again["model"] == saved["model"] and again["train"]["max_steps"] == 6


def test_auto_mistakes_are_one_line(tmp_path: Path, cli, trained_run: Path) -> None:
    r = cli("train", "--auto", "--out", str(tmp_path / "a"))
    assert r.code == 2 and r.err.count("\n") == 1 and "train.auto (--auto) sizes the run for a time budget" in r.err
    r = cli("train", "--auto", "train.max_time=5m", "--init-from", str(trained_run), "--out", str(tmp_path / "b"))
    assert r.code == 2 and "fine-tuning keeps the starting model's shape" in r.err
    data = tmp_path / "text.txt"
    data.write_text(make_text(60_000), encoding="utf-8")
    r = cli("train", "--data", str(data), "--auto", "train.max_time=0.01s", "--out", str(tmp_path / "c"))
    assert r.code == 2 and "is spent before training starts" in r.err
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


def test_the_advisor_counts_each_record_as_a_document(tmp_path: Path, cli) -> None:
    # 600 records of ~50 characters in one JSON Lines file: short documents for a context of 128
    data = tmp_path / "notes.jsonl"
    lines = (json.dumps({"text": make_text(50 + i % 7)}) for i in range(600))
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    r = cli("train", "--data", str(data), "--out", str(tmp_path / "run"), "--dry-run", *TINY, "model.block_size=128")
    assert r.code == 0, r.err
    assert "advice: the documents average 5" in r.err and "a context of 32" in r.err


def test_auto_fits_its_heads_to_an_explicit_width(monkeypatch) -> None:
    """A slow probe can pick a 768-wide rung of 12 heads; with model.n_embd=256 set, the run gets the
    most heads up to 12 that divide 256, not an error about 256 and 12."""
    rung = {"model.n_layer": 12, "model.n_embd": 768, "model.n_head": 12, "model.block_size": 64}
    monkeypatch.setattr(autosize, "probe", lambda *a, **k: _speed(0.05))
    monkeypatch.setattr(autosize, "choose", lambda *a, **k: autosize.Choice(rung, 100, "a big rung"))
    corpus = _corpus(20_000)
    cfg = Config().replace(**{"model.n_embd": 256, "train.max_time": "5m", "train.auto": True})
    sized, _ = autosize.auto_size(
        cfg, frozenset({"model.n_embd"}), corpus, corpus.tokenizer, torch.device("cpu"), None, time.perf_counter()
    )
    assert (sized.model.n_embd, sized.model.n_head, sized.model.n_layer) == (256, 8, 12)


def test_step_estimates_timed_under_load_say_so(tmp_path: Path, cli, monkeypatch) -> None:
    from minigpt.runtime.cores import CoreLoad

    data = tmp_path / "text.txt"
    data.write_text(make_text(60_000), encoding="utf-8")
    args = ["train", "--data", str(data), "--dry-run", "train.max_time=20s", "train.device=cpu", *TINY]
    for busy, said in ((1.5, True), (0.0, False), (None, False)):  # None: no /proc/stat to read
        monkeypatch.setattr(CoreLoad, "others", lambda self, busy=busy: busy)
        r = cli(*args)
        assert r.code == 0, r.err
        assert ("timed while other processes kept 1.5 of" in r.err) is said, r.err
        assert "allows about" in r.err or "plan: " in r.err  # the estimate itself is still given


@pytest.mark.parametrize("name", ["cpu_4min", "speedrun"])
def test_the_four_minute_recipe_is_autos_decision_and_follows_the_host(name: str) -> None:
    """The shipped recipe sets train.auto and leaves every key --auto chooses at its default, so
    `minigpt train cpu_4min` and `--auto train.max_time=232s` make one decision; a slower host gets a
    smaller shape from it (speedrun keeps its own eval interval, the time's resolution)."""
    from minigpt.config.files import load_config
    from minigpt.training.launch import explicit_keys

    recipe = load_config(Path(__file__).resolve().parents[1] / "configs" / f"{name}.yaml")
    assert recipe.train.auto and recipe.train.max_time == "232s"
    mine = explicit_keys(recipe, []) & set(AUTO_KEYS)
    assert mine == ({"train.eval_interval"} if name == "speedrun" else set())
    by_flag = Config().replace(**{"train.auto": True, "train.max_time": "232s"})
    fast, slow = _speed(0.03), _speed(0.12)
    for speed in (fast, slow):
        assert choose(recipe, VOCAB, int(0.9 * MB), int(0.1 * MB), 226, speed) == choose(
            by_flag, VOCAB, int(0.9 * MB), int(0.1 * MB), 226, speed
        )
    shape = {s: choose(recipe, VOCAB, int(0.9 * MB), int(0.1 * MB), 226, s).values for s in (fast, slow)}
    assert [shape[fast][k] for k in ("model.n_layer", "model.n_embd", "model.block_size", "train.batch_size")] == [
        3,
        192,
        256,
        8,
    ]
    assert shape[slow]["model.n_embd"] < 192
