"""`minigpt heads` and `eval --by-position`: a hand-set model whose heads are known exactly, a
trained two-layer attention-only model that forms an induction head, and a one-layer control."""

from __future__ import annotations

import json
import random
import re
import string
from pathlib import Path

import numpy as np
import pytest
import torch

import minigpt
from minigpt.config.schema import ModelConfig
from minigpt.infer.evaluate import eval_ids_for, icl_score
from minigpt.infer.loading import load_model
from minigpt.inspect.heads import (
    EXACT_ALL_FLOPS,
    ROLE_MIN,
    analyze_heads,
    evidence,
    exact_choice,
    head_patterns,
    head_role,
    pattern_scores,
    pattern_sums,
    probe_scores,
    repeated_tokens,
)
from minigpt.model import GPT

from .fake_device import fake_device  # noqa: F401 (a fixture)


def hand_set_model(block: int = 16, vocab: int = 10) -> GPT:
    """One layer, two heads of 32 channels, learned positions and no token information: head 0
    attends (almost only) to the previous position, head 1 uniformly to every earlier one."""
    cfg = ModelConfig(n_layer=1, n_head=2, n_embd=64, block_size=block, pos_emb="learned", attn_only=True)
    model = GPT(cfg, vocab).eval()
    C, hs, a = cfg.n_embd, cfg.n_embd // cfg.n_head, 4.0
    with torch.no_grad():
        model.wte.weight.zero_()
        model.wpe.weight.copy_(torch.eye(block, C))  # position p: the unit vector e_p
        w = model.blocks[0].attn.c_attn.weight  # (3C, C): q, k, v rows
        w.zero_()
        for p in range(block):
            w[p, p] = a  # head 0's query of position p: e_p
            if p + 1 < hs:
                w[C + p + 1, p] = a  # head 0's key of position p: e_{p+1}, so query p matches key p-1
        # head 1: zero query rows, so every score is 0 and the softmax uniform over the visible keys
    return model


def expected_text_scores(ids: np.ndarray, T: int) -> dict[str, dict[str, float]]:
    """What the exact previous head and the uniform head score on the whole windows of `ids`, counted
    position by position: each pattern's share of the head's weight on its targets, averaged over
    the positions (1..T-1 of each window) that have a target."""
    totals = {head: dict.fromkeys(("previous", "duplicate", "induction", "first", "distance"), 0.0) for head in "pu"}
    counts = dict.fromkeys(("previous", "duplicate", "induction", "first"), 0)
    for start in range(0, len(ids) - T, T):
        w = [int(v) for v in ids[start : start + T]]
        for t in range(1, T):
            hits = {
                "previous": [t - 1],
                "duplicate": [s for s in range(t) if w[s] == w[t]],
                # on text, induction asks for a repeat of the last two tokens
                "induction": [s for s in range(2, t + 1) if w[s - 1] == w[t] and w[s - 2] == w[t - 1]],
                "first": [0],
            }
            for name, keys in hits.items():
                if keys:
                    counts[name] += 1
                    totals["p"][name] += float(t - 1 in keys)  # all its weight on key t - 1
                    totals["u"][name] += len(keys) / (t + 1)  # 1 / (t + 1) on every key up to t
            totals["p"]["distance"] += 1.0
            totals["u"]["distance"] += t / 2
    rows = (len(ids) - 1) // T * (T - 1)
    return {
        head: {name: v / (rows if name == "distance" else counts[name]) for name, v in got.items()}
        for head, got in totals.items()
    }


def test_a_hand_set_previous_head_and_a_uniform_head_score_on_the_text_as_counted():
    model = hand_set_model()
    T = 16
    ids = np.random.default_rng(0).integers(0, 10, size=40 * T + 1)  # 40 whole windows
    report = analyze_heads(model, ids, ablation="none")
    prev, uniform = report.heads
    want = expected_text_scores(ids, T)
    assert report.positions["previous"] == 40 * (T - 1)
    for name in ("previous", "duplicate", "induction", "first", "distance"):
        assert prev.scores[name] == pytest.approx(want["p"][name], abs=2e-3), name
        assert uniform.scores[name] == pytest.approx(want["u"][name], abs=1e-5), name
    # the documented closed forms: a uniform head scores (H_T - 1) / (T - 1) previous and first, T/4 distance
    harmonic = sum(1 / (t + 1) for t in range(T))
    assert uniform.scores["previous"] == pytest.approx((harmonic - 1) / (T - 1), abs=1e-5)
    assert uniform.scores["distance"] == pytest.approx(T / 4, abs=1e-4) == report.uniform["distance"]
    for name in ("previous", "duplicate", "induction", "first"):  # the uniform head is the header's uniform head
        assert report.uniform[name] == pytest.approx(uniform.scores[name], abs=1e-5)
        assert uniform.evidence[name] == pytest.approx(0.0, abs=1e-4)
    assert prev.scores["previous"] == pytest.approx(1.0, abs=1e-3) and prev.evidence["previous"] > 0.99
    assert (prev.role, uniform.role) == ("previous", "mixed")


def test_a_hand_set_previous_head_and_a_uniform_head_score_on_the_probe_as_documented():
    model = hand_set_model()
    ids = np.random.default_rng(0).integers(0, 10, size=400)
    report = analyze_heads(model, ids, ablation="none")
    prev, uniform = report.heads
    c = report.ceilings
    T = 16
    assert c["previous"] == pytest.approx((T - 1) / T)
    # the exact previous head: its whole weight off the first row is on t-1
    assert prev.probe["previous"] == pytest.approx(c["previous"], abs=1e-3)
    assert prev.probe["distance"] == pytest.approx((T - 1) / T, abs=1e-2)
    # the uniform head: row t puts 1/(t+1) on each key, so previous = (H_T - 1) / T and first = H_T / T
    harmonic = sum(1 / (t + 1) for t in range(T))
    assert uniform.probe["previous"] == pytest.approx((harmonic - 1) / T, abs=1e-5)
    assert uniform.probe["first"] == pytest.approx(harmonic / T, abs=1e-5)
    assert uniform.probe["distance"] == pytest.approx(sum(t / 2 for t in range(T)) / T, abs=1e-4)
    for name in ("previous", "duplicate", "induction", "first"):
        assert report.probe_uniform[name] == pytest.approx(uniform.probe[name], abs=1e-5)


def test_pattern_scores_of_a_perfect_induction_pattern_reach_the_ceiling():
    tokens = repeated_tokens(50, 32, n_seq=3, seed=1)  # (3, 32)
    T, n = 32, 16
    weights = torch.zeros(1, 3, 1, T, T)
    for b in range(3):
        for t in range(T):
            weights[0, b, 0, t, t - n + 1 if t >= n else 0] = 1.0  # the key after the earlier copy
    scores = pattern_scores(weights, tokens)
    # every second-half row's whole weight is on its target: half the rows (a first-half row's
    # target exists only where a character repeats by chance, and this head does not use it)
    assert float(scores["induction"][0, 0]) == pytest.approx(0.5, abs=0.02)
    ceiling = probe_scores(pattern_sums([(weights, tokens)]))[1]  # a perfect head's: the rows with a target
    assert float(scores["induction"][0, 0]) <= ceiling["induction"]


def test_a_context_too_short_for_the_repeated_sequences_is_one_error_line(cli, tmp_path: Path):
    text = tmp_path / "t.txt"
    text.write_text("abcdefgh\n" * 300, encoding="utf-8")
    run = tmp_path / "run"
    assert (
        cli(
            "train",
            "--data",
            text,
            "--out",
            run,
            "model.n_layer=1",
            "model.n_head=1",
            "model.n_embd=8",
            "model.block_size=6",
            "train.max_steps=2",
            "train.eval_interval=2",
            "log.tensorboard=false",
            "log.attention_probe=",
        ).code
        == 0
    )
    result = cli("heads", run)
    assert result.code == 2
    assert result.err.strip().count("\n") == 0 and "block_size 6 is too short" in result.err


def test_a_text_of_one_character_is_one_error_line(cli, trained_run: Path, tmp_path: Path):
    """No position of a 1-character text has a key before it (the fuzzer found the traceback)."""
    one = tmp_path / "one.txt"
    one.write_text("a", encoding="utf-8")
    for args, what in ((["--data", one], f"all of {one}"), (["--text", "a"], "--text")):
        result = cli("heads", trained_run, *args, "--ablation", "none")
        assert result.code == 2 and result.err == f"error: {what} has 1 char; heads needs a text of 2 or more\n"


def repeated_strings(path: Path, lines: int = 8000, seed: int = 0) -> Path:
    """Lines of a random string of 6 to 15 letters written twice: only induction predicts the second copy."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        s = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(6, 15)))
        out.append(s + s)
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


CIRCUIT = [
    "model.attn_only=true",
    "model.n_head=2",
    "model.n_embd=64",
    "model.block_size=32",
    "train.max_steps=800",
    "train.eval_interval=800",
    "log.tensorboard=false",
    "log.attention_probe=",
    "train.final_eval=false",
    # what the model learns depends on these: pinned, the same run on every CPU, busy or quiet
    "train.dtype=float32",
    "train.threads=1",
    "optim.optimizer=adamw",  # the recipe these circuits were found with (not the default's Muon)
    "optim.warmup_steps=50",
]


# the separator model: 52 letters make copying worth more than with 26, and its induction head
# forms within the 800 steps
SEPARATED = CIRCUIT


@pytest.mark.early
def test_a_two_layer_attention_only_model_forms_an_induction_head_in_layer_1(cli, tmp_path: Path):
    data = repeated_strings(tmp_path / "rep.txt")
    run = tmp_path / "two"
    assert cli("train", "--data", data, "--out", run, "model.n_layer=2", *CIRCUIT).code == 0
    result = cli("heads", run, "--json", "--exact", "all")
    assert result.code == 0, result
    heads = [json.loads(line) for line in result.out.splitlines()]
    assert [(h["layer"], h["head"]) for h in heads] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    induction = [h for h in heads if h["role"] == "induction"]
    assert induction and all(h["layer"] == 1 for h in induction), heads
    # the data's second halves are predictable only by induction: removing the induction head costs
    # more than removing the other layer-1 head
    best = max(induction, key=lambda h: h["scores"]["induction"])
    other = next(h for h in heads if h["layer"] == 1 and h["head"] != best["head"])
    assert best["ablation"]["exact"] and other["ablation"]["exact"]
    assert best["ablation"]["loss_delta"] > other["ablation"]["loss_delta"] + 3 * best["ablation"]["stderr"]
    # in-context learning: later positions are predicted much better than early ones
    by_pos = cli("eval", run, "--by-position", "--json")
    assert by_pos.code == 0
    curve = json.loads(by_pos.out)
    assert len(curve["by_position"]) == 32
    assert curve["icl_score"] == pytest.approx(icl_score(torch.tensor(curve["by_position"]).numpy())[0], abs=1e-5)
    assert curve["icl_score"] < -0.3


@pytest.mark.early
def test_a_one_layer_attention_only_model_has_no_induction_head(cli, tmp_path: Path):
    data = repeated_strings(tmp_path / "rep.txt")
    run = tmp_path / "one"
    assert cli("train", "--data", data, "--out", run, "model.n_layer=1", *CIRCUIT).code == 0
    result = cli("heads", run, "--json", "--ablation", "none")
    heads = [json.loads(line) for line in result.out.splitlines()]
    assert len(heads) == 2 and all(h["role"] != "induction" for h in heads), heads
    assert all(h["ablation"] is None for h in heads)


def separated_repeats(path: Path, lines: int = 8000, seed: int = 0) -> Path:
    """Lines of a random string of 6 to 12 letters (a-z, A-Z), a '|', and the same string again: the
    copy is at most 13 positions back, where the probe of a context of 32 repeats at 16."""
    rng = random.Random(seed)
    out = []
    for _ in range(lines):
        s = "".join(rng.choice(string.ascii_letters) for _ in range(rng.randint(6, 12)))
        out.append(f"{s}|{s}")
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow  # trains a separator model (9 s on 2 cores): CI runs it in its slow step
def test_the_copying_head_of_a_separator_model_is_found_on_its_text_and_missed_by_the_bare_probe(cli, tmp_path):
    """Issue 50: on text written around a separator the bare-repeat probe asks the model to copy what it
    never saw copied; the scores on its own text name the head, and exact ablation ranks it first."""
    data = separated_repeats(tmp_path / "sep.txt")
    run = tmp_path / "sep"
    assert cli("train", "--data", data, "--out", run, "model.n_layer=2", *SEPARATED).code == 0
    result = cli("heads", run, "--json")  # --exact auto: a model this small has every head measured
    assert result.code == 0, result
    heads = [json.loads(line) for line in result.out.splitlines()]
    assert all(h["ablation"]["exact"] for h in heads), heads
    top = max(heads, key=lambda h: h["ablation"]["loss_delta"])
    assert (top["layer"], top["role"]) == (1, "induction"), heads
    assert top["scores"]["induction"] > 0.5
    # the bare probe (uniform random characters repeated, no separator) on its own misses it
    model = minigpt.load(run, device="cpu").loaded.model
    probe, perfect, uniform, _, _ = head_patterns(model)
    bare = {name: float(v[top["layer"], top["head"]]) for name, v in probe.items()}
    assert evidence(bare, perfect, uniform)["induction"] < ROLE_MIN
    assert head_role(evidence(bare, perfect, uniform), bare["distance"]) != "induction"


def test_icl_score_is_the_papers_500_minus_50_for_long_contexts():
    curve = torch.arange(600, dtype=torch.float64).numpy()
    assert icl_score(curve) == (499 - 49, 499, 49)
    short = torch.arange(64, dtype=torch.float64).numpy()
    score, late, early = icl_score(short)
    assert (late, early) == (61, 5) and score == 56


def test_the_heads_table_marks_estimates_and_shows_every_head(cli, trained_run: Path):
    result = cli("heads", trained_run, "--exact", "1", "--no-color")
    assert result.code == 0, result
    rows = [line for line in result.out.splitlines() if line[:5].strip().isdigit()]
    assert len(rows) == 4  # 2 layers x 2 heads (conftest.TINY)
    assert sum("~" in row for row in rows) == 3  # one exact, three estimates
    assert "±" in "".join(rows)
    # the table explains itself: every column, and a uniform head's scores beside a perfect head's
    head = result.out.split("\nlayer head")[0]
    for column in ("prev:", "dup:", "induct:", "first:", "dist:", "probe ind:", "~ marks an estimate"):
        assert column in head, column
    assert "a perfect head scores 1.00; a uniform head" in head
    assert re.search(r"a uniform head \(its weight spread evenly\) prev 0\.\d\d, dup 0\.\d\d, induct 0\.\d\d", head)
    assert re.search(r"dist: .*\(a uniform head: \d+\.\d\)", head)
    assert result.out.rstrip().splitlines()[-1].startswith("roles: ")


@pytest.mark.parametrize("kind", ["char", "byte"])
def test_runs_written_by_an_earlier_release_are_measured(cli, kind: str):
    fixtures = Path(__file__).resolve().parent / "fixtures" / "v0_1_runs"
    result = cli("heads", fixtures / kind, "--data", fixtures / "tiny.txt", "--json", "--exact", "all")
    assert result.code == 0, result
    heads = [json.loads(line) for line in result.out.splitlines()]
    assert len(heads) == 2
    for h in heads:
        assert 0 <= h["scores"]["previous"] <= 1 and h["scores"]["distance"] >= 0
        assert h["ablation"]["exact"] and h["ablation"]["stderr"] >= 0


def test_exact_auto_measures_every_head_when_cheap_else_the_top_estimates_and_every_pattern_candidate():
    estimate = torch.tensor([[0.50, 0.01, 0.20], [0.02, 0.13, 0.00]])  # (L, nh)
    everything = [(0, 0), (0, 2), (1, 1), (1, 0), (0, 1), (1, 2)]  # largest estimate first
    assert exact_choice(estimate, "auto", [], rerun_flops=EXACT_ALL_FLOPS) == everything
    # too costly for all: the estimates of at least a quarter of the largest, and the candidates
    assert exact_choice(estimate, "auto", [], rerun_flops=2 * EXACT_ALL_FLOPS) == [(0, 0), (0, 2), (1, 1)]
    assert exact_choice(estimate, "auto", [(1, 2)], rerun_flops=2 * EXACT_ALL_FLOPS) == [(0, 0), (0, 2), (1, 1), (1, 2)]
    assert exact_choice(estimate, 2, [(1, 2)], rerun_flops=0) == [(0, 0), (0, 2)]
    assert exact_choice(estimate, None, [], rerun_flops=1e30) == everything
    assert exact_choice(estimate, "all", [], rerun_flops=1e30) == everything  # Model.heads(exact="all"), as the CLI


def test_the_scores_at_every_evaluation_read_bounded_batches_and_match_one_big_batch(monkeypatch):
    """score_point (the TensorBoard head scores, --over-training) holds at most MAP_FLOATS attention
    weights at once and windows of at most SCORE_CONTEXT, and the sums come out as from one batch."""
    from minigpt.inspect import heads as heads_module
    from minigpt.inspect.formation import score_point

    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=64), 12)
    ids = np.random.default_rng(1).integers(0, 12, size=3000)
    whole = heads_module.score_text(model, ids)
    shapes = []
    real = GPT.attention_maps

    def recorded(self, idx):
        shapes.append(tuple(idx.shape))
        return real(self, idx)

    monkeypatch.setattr(GPT, "attention_maps", recorded)
    bound = 3 * 2 * 2 * 64 * 64  # three windows of 64 a batch
    monkeypatch.setattr(heads_module, "MAP_FLOATS", bound)
    monkeypatch.setattr(heads_module, "SCORE_CONTEXT", 32)
    point = score_point(model, ids, None)
    assert shapes and all(2 * 2 * b * t * t <= bound and t <= 32 for b, t in shapes), shapes
    bounded = heads_module.score_text(model, ids)
    assert bounded.context == 32 and whole.context == 64
    assert point.induction == bounded.scores["induction"] and point.previous == bounded.scores["previous"]
    monkeypatch.setattr(heads_module, "SCORE_CONTEXT", 64)
    again = heads_module.score_text(model, ids)
    for name in ("previous", "duplicate", "induction", "first", "distance"):
        assert np.allclose(again.scores[name], whole.scores[name], atol=1e-6), name
    assert again.positions == whole.positions


def test_heads_scores_and_ablation_run_on_a_device_without_float64(trained_run: Path, fake_device) -> None:  # noqa: F811
    """Issue 54: the ablation's sums are reduced on the device in float32 (a Mac has no float64) and
    the text and probe scores are reduced there too; the numbers are the CPU's."""
    on_cpu, on_device = load_model(trained_run, torch.device("cpu")), load_model(trained_run, fake_device)
    ids, table, _ = eval_ids_for(on_cpu, None)
    want = analyze_heads(on_cpu.model, ids, table, exact=1)
    got = analyze_heads(on_device.model, ids, table, exact=1)
    for a, b in zip(got.heads, want.heads, strict=True):
        for name in ("previous", "duplicate", "induction", "first", "distance"):
            assert a.scores[name] == pytest.approx(b.scores[name], abs=1e-5)
            assert a.probe[name] == pytest.approx(b.probe[name], abs=1e-5)
        assert a.ablation["exact"] == b.ablation["exact"]
        assert a.ablation["loss_delta"] == pytest.approx(b.ablation["loss_delta"], abs=1e-4)
