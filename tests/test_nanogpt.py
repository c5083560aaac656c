"""`minigpt import nanogpt`: a checkpoint in nanoGPT's format (its key names, model_args, meta.pkl), made
here with random weights, computes the same logits after import as a forward pass written below from the
same tensors with plain tensor operations; the imported run samples, evaluates, shows its heads, exports
and fine-tunes; every bad input is one error line."""

from __future__ import annotations

import argparse
import collections
import json
import math
import pickle
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from minigpt.checkpoint import load_checkpoint
from minigpt.infer.loading import load_model

from .helpers import make_text, one_error_line

C, N_HEAD, N_LAYER, BLOCK = 32, 4, 2, 16


def nanogpt_state(vocab: int, bias: bool, seed: int = 0) -> dict[str, torch.Tensor]:
    """nanoGPT's GPT.state_dict() names and shapes, every weight random (LayerNorms and biases too), the head
    the token embedding itself as nanoGPT ties it."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"transformer.wte.weight": (vocab, C), "transformer.wpe.weight": (BLOCK, C)}
    for i in range(N_LAYER):
        for name, (rows, cols) in {
            "attn.c_attn": (3 * C, C),
            "attn.c_proj": (C, C),
            "mlp.c_fc": (4 * C, C),
            "mlp.c_proj": (C, 4 * C),
        }.items():
            shapes[f"transformer.h.{i}.{name}.weight"] = (rows, cols)
            shapes |= {f"transformer.h.{i}.{name}.bias": (rows,)} if bias else {}
        for ln in ("ln_1", "ln_2"):
            shapes[f"transformer.h.{i}.{ln}.weight"] = (C,)
            shapes |= {f"transformer.h.{i}.{ln}.bias": (C,)} if bias else {}
    shapes["transformer.ln_f.weight"] = (C,)
    shapes |= {"transformer.ln_f.bias": (C,)} if bias else {}
    state = {
        k: torch.randn(s, generator=g) * 0.3 + (1.0 if k.endswith("ln_1.weight") else 0.0) for k, s in shapes.items()
    }
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def write_nanogpt(
    folder: Path, bias: bool = False, compiled: bool = False, vocab_text: str | None = None, **changes
) -> tuple[Path, Path]:
    """ckpt.pt in out-x/ and meta.pkl plus input.txt in data/x/, as nanoGPT's prepare.py and train.py leave them."""
    text = vocab_text or make_text(3000)
    chars = sorted(set(text))
    data = folder / "data" / "x"
    data.mkdir(parents=True)
    (data / "input.txt").write_text(text, encoding="utf-8")
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    (data / "meta.pkl").write_bytes(pickle.dumps(meta))
    state = nanogpt_state(len(chars), bias)
    if compiled:  # torch.compile's wrapper prefixes every key
        state = {f"_orig_mod.{k}": v for k, v in state.items()}
    args = dict(n_layer=N_LAYER, n_head=N_HEAD, n_embd=C, block_size=BLOCK, bias=bias, vocab_size=len(chars))
    ckpt = {
        "model": state,
        "optimizer": {"state": {}, "param_groups": []},
        "model_args": {**args, "dropout": 0.1},
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.2345),
        "config": {"dataset": "x", "learning_rate": 1e-3, "compile": compiled},
        **changes,
    }
    (folder / "out-x").mkdir()
    torch.save(ckpt, folder / "out-x" / "ckpt.pt")
    return folder / "out-x" / "ckpt.pt", data / "meta.pkl"


def reference_logits(state: dict[str, torch.Tensor], ids: torch.Tensor) -> torch.Tensor:
    """nanoGPT's forward pass from its tensors, by hand: (B, T) ids -> (B, T, V) logits."""
    w = {k.removeprefix("_orig_mod."): v for k, v in state.items()}

    def norm(x: torch.Tensor, name: str) -> torch.Tensor:
        mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
        return (x - mean) / torch.sqrt(var + 1e-5) * w[f"{name}.weight"] + w.get(f"{name}.bias", 0.0)

    def linear(x: torch.Tensor, name: str) -> torch.Tensor:
        return x @ w[f"{name}.weight"].T + w.get(f"{name}.bias", 0.0)

    B, T = ids.shape
    hs = C // N_HEAD
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]  # (B, T, C)
    mask = torch.ones(T, T).tril().bool()
    for i in range(N_LAYER):
        p = f"transformer.h.{i}"
        q, k, v = linear(norm(x, f"{p}.ln_1"), f"{p}.attn.c_attn").split(C, dim=-1)
        q, k, v = (t.view(B, T, N_HEAD, hs).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(hs)).masked_fill(~mask, float("-inf"))
        heads = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + linear(heads, f"{p}.attn.c_proj")
        h = linear(norm(x, f"{p}.ln_2"), f"{p}.mlp.c_fc")
        x = x + linear(0.5 * h * (1 + torch.erf(h / math.sqrt(2))), f"{p}.mlp.c_proj")  # exact GELU
    return norm(x, "transformer.ln_f") @ w["lm_head.weight"].T


@pytest.mark.parametrize("bias, compiled", [(False, False), (True, False), (False, True), (True, True)])
def test_imported_logits_equal_a_hand_written_forward_pass(bias: bool, compiled: bool, tmp_path: Path, cli) -> None:
    ckpt, meta = write_nanogpt(tmp_path, bias=bias, compiled=compiled)
    r = cli("import", "nanogpt", ckpt, "--meta", meta, "--out", tmp_path / "run")
    assert r.code == 0 and "step 250" in r.err and "estimate 1.2345" in r.err, r
    loaded = load_model(tmp_path / "run", torch.device("cpu"))
    m = loaded.config.model
    assert (m.pos_emb, m.norm, m.bias, m.dropout, m.n_head, m.block_size) == (
        "learned",
        "pre",
        bias,
        0.1,
        N_HEAD,
        BLOCK,
    )
    assert loaded.checkpoint.step == 250 and loaded.checkpoint.best_val_loss == pytest.approx(1.2345)
    assert "".join(loaded.tokenizer.chars) == "".join(sorted(set(make_text(3000))))
    state = torch.load(ckpt, weights_only=True)["model"]
    ids = torch.randint(0, loaded.tokenizer.vocab_size, (3, BLOCK), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = loaded.model(ids)[0], reference_logits(state, ids)
    assert theirs.abs().max() > 1  # logits large enough that a wrong mapping shows
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_the_import_samples_evaluates_shows_heads_exports_and_fine_tunes(tmp_path: Path, cli) -> None:
    ckpt, meta = write_nanogpt(tmp_path, bias=True)
    run = tmp_path / "run"
    assert cli("import", "nanogpt", ckpt, "--meta", meta, "--out", run).code == 0
    r = cli("sample", run, "--prompt", "the", "--max-new-tokens", "20", "--seed", "1")
    assert r.code == 0 and r.out.startswith("the") and len(r.out) >= 23, r
    # eval's whole-split loss is the hand-written model's over the same windows (the last 10% of input.txt)
    ids = torch.tensor(load_model(run, torch.device("cpu")).tokenizer.encode((meta.parent / "input.txt").read_text()))
    val = ids[int(len(ids) * 0.9) :]
    state, total = torch.load(ckpt)["model"], 0.0
    for s in range(0, len(val) - 1, BLOCK):  # windows of BLOCK, the last one shorter: every prediction once
        x, y = val[s : s + BLOCK + 1][:-1], val[s + 1 : s + BLOCK + 1]
        total += torch.nn.functional.cross_entropy(reference_logits(state, x[None])[0], y, reduction="sum")
    result = json.loads(cli("eval", run, "--json").out)
    assert result["tokens"] == len(val) - 1 and result["loss"] == pytest.approx(total.item() / (len(val) - 1), abs=1e-5)
    heads = cli("heads", run)
    assert heads.code == 0 and "step 250" in heads.out, heads
    assert cli("export", run, tmp_path / "hf").code == 0
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    window = val[:BLOCK][None]
    with torch.no_grad():
        torch.testing.assert_close(hf(window).logits, reference_logits(state, window), atol=1e-4, rtol=0)
    ft = tmp_path / "ft"
    args = [
        "train.max_steps=1",
        "train.batch_size=4",
        "train.device=cpu",
        "log.sample_length=0",
        "log.tensorboard=false",
    ]
    r = cli("train", "--init-from", run, "--data", meta.parent / "input.txt", "--out", ft, *args)
    assert r.code == 0 and "starting from" in r.err, r
    assert load_checkpoint(ft / "last.pt")["init_from"]["step"] == 250


def one_import_error(cli, ckpt: Path, *args) -> str:
    return one_error_line(cli("import", "nanogpt", ckpt, *args, "--out", ckpt.parent.parent / "run"))


def test_bad_inputs_are_one_line_each(tmp_path: Path, cli, monkeypatch) -> None:
    ckpt, meta = write_nanogpt(tmp_path / "code", argv=argparse.Namespace(x=1))
    assert "would run code when loaded (argparse.Namespace)" in one_import_error(cli, ckpt, "--meta", meta)
    ckpt, meta = write_nanogpt(tmp_path / "bpe")
    meta.unlink()
    data = torch.load(ckpt)
    data["model_args"]["vocab_size"] = 50304
    torch.save(data, ckpt)
    assert "GPT-2 BPE model (vocabulary 50,304, no meta.pkl)" in one_import_error(cli, ckpt, "--meta", meta)
    ckpt, meta = write_nanogpt(tmp_path / "nometa")
    meta.unlink()
    monkeypatch.chdir(tmp_path / "nometa")  # nanoGPT's default place: data/DATASET/meta.pkl from here
    assert "no meta.pkl at data/x/meta.pkl; give --meta" in one_import_error(cli, ckpt)
    ckpt, meta = write_nanogpt(tmp_path / "evil")
    meta.write_bytes(pickle.dumps({"itos": {0: "a"}, "hook": collections.Counter("ab")}))
    assert "would run code when loaded (collections.Counter)" in one_import_error(cli, ckpt, "--meta", meta)
    ckpt, meta = write_nanogpt(tmp_path / "vocab")
    meta.write_bytes(pickle.dumps({"itos": {0: "a", 1: "b"}, "stoi": {"a": 0, "b": 1}}))
    line = one_import_error(cli, ckpt, "--meta", meta)
    assert "token ids but" in line and "2 characters; give the meta.pkl of the dataset" in line


def test_shapes_minigpt_cannot_express_are_one_line(tmp_path: Path, cli) -> None:
    ckpt, meta = write_nanogpt(tmp_path / "gate")
    data = torch.load(ckpt)
    data["model"]["transformer.h.0.mlp.c_gate.weight"] = torch.zeros(4 * C, C)  # a modified MLP
    torch.save(data, ckpt)
    line = one_import_error(cli, ckpt, "--meta", meta)
    assert "holds a model minigpt cannot express" in line and "blocks.0.mlp.c_gate.weight" in line
    ckpt, meta = write_nanogpt(tmp_path / "untied")
    data = torch.load(ckpt)
    data["model"]["lm_head.weight"] = torch.zeros_like(data["model"]["lm_head.weight"])
    torch.save(data, ckpt)
    assert "lm_head is not tied" in one_import_error(cli, ckpt, "--meta", meta)
    ckpt, meta = write_nanogpt(tmp_path / "heads")
    data = torch.load(ckpt)
    data["model_args"]["n_head"] = 5
    torch.save(data, ckpt)
    assert "model.n_embd (32) must be divisible by model.n_head (5)" in one_import_error(cli, ckpt, "--meta", meta)
    (tmp_path / "heads" / "run").mkdir()
    (tmp_path / "heads" / "run" / "notes.txt").write_text("mine")
    assert "is not an empty folder" in one_import_error(cli, ckpt, "--meta", meta)
