"""Positional encodings (learned / sinusoidal / rope), LayerNorm placement (pre / post), and the
attention weights that come out of the same forward pass as training."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from minigpt.checkpoint import load_checkpoint
from minigpt.infer.decode import generate
from minigpt.model import GPT, KVCache, apply_rope, rope_tables, sinusoidal_table
from minigpt.training.optim import AdamW

from .helpers import TINY, tiny_model

V = 20
OPTIONS = list(itertools.product(["learned", "sinusoidal", "rope"], ["pre", "post"]))


def model(pos_emb: str, norm: str, seed: int = 0) -> GPT:
    return tiny_model(V, seed, pos_emb=pos_emb, norm=norm)


@pytest.mark.parametrize(("pos_emb", "norm"), OPTIONS)
def test_every_option_is_causal_and_cacheable(pos_emb: str, norm: str) -> None:
    m = model(pos_emb, norm)
    idx = torch.randint(V, (2, 16))
    full, _ = m(idx)
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 1) % V
    assert torch.allclose(m(changed)[0][:, :9], full[:, :9], atol=1e-6)  # the future never leaks back
    cache = KVCache(m.cfg, 2, 16, torch.device("cpu"), torch.float32)
    with torch.no_grad():
        first, _ = m(idx[:, :6], cache=cache)
        assert torch.allclose(first[:, 0], full[:, 5], atol=1e-5)
        for t in range(6, 16):
            step, _ = m(idx[:, t : t + 1], cache=cache)
            assert torch.allclose(step[:, 0], full[:, t], atol=1e-5)
    out = generate(m, [1, 2], 40, generator=torch.Generator().manual_seed(0))  # past block_size too
    assert len(out) == 40


@pytest.mark.parametrize(("pos_emb", "norm"), OPTIONS)
def test_every_option_learns(pos_emb: str, norm: str) -> None:
    torch.manual_seed(0)
    m = model(pos_emb, norm).train()
    idx = torch.randint(V, (4, 16))
    opt = AdamW([{"params": list(m.parameters()), "weight_decay": 0.0}], lr=3e-3)
    first = None
    for _ in range(60):
        _, loss = m(idx, idx.roll(-1, dims=1))
        first = loss.item() if first is None else first
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert loss.item() < 0.5 * first


def test_positions_are_what_they_claim() -> None:
    assert not hasattr(model("rope", "pre"), "pos_table") and model("rope", "pre").wpe is None
    table = sinusoidal_table(8, 6)
    assert torch.allclose(table[0], torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0]))
    assert torch.allclose(table[3, 0], torch.sin(torch.tensor(3.0)))
    # fixed tables are not parameters and not saved: a checkpoint holds only what was learned
    assert "pos_table" not in model("sinusoidal", "pre").state_dict()
    # rotary: the score between a query at position a and a key at b depends only on b - a
    cos, sin = rope_tables(32, 8)
    q, k = torch.randn(8), torch.randn(8)

    def score(a: int, b: int) -> float:
        qa = apply_rope(q.view(1, 1, 1, 8), cos[a : a + 1], sin[a : a + 1])
        kb = apply_rope(k.view(1, 1, 1, 8), cos[b : b + 1], sin[b : b + 1])
        return float((qa * kb).sum())

    assert score(3, 1) == pytest.approx(score(20, 18), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_post_norm_blocks_end_in_layernorm() -> None:
    m = model("learned", "post")
    assert isinstance(m.ln_f, torch.nn.Identity)
    x = m.blocks[0](torch.randn(2, 16, 32))
    assert torch.allclose(x.mean(-1), torch.zeros(2, 16), atol=1e-5)  # the block's output is normalised


@pytest.mark.parametrize(("pos_emb", "norm"), [("learned", "pre"), ("rope", "post")])
def test_attention_maps_are_causal_distributions_from_the_same_forward(pos_emb: str, norm: str) -> None:
    m = model(pos_emb, norm)
    idx = torch.randint(V, (3, 16))
    maps = m.attention_maps(idx)
    assert not any(b.attn.pattern.hooked() or b.attn.head_out.hooked() for b in m.blocks)  # back to normal
    assert maps.shape == (2, 3, 2, 16, 16)  # (layers, batch, heads, query, key)
    assert torch.all(maps.triu(diagonal=1) == 0)  # nothing above the diagonal: no peeking ahead
    assert torch.allclose(maps.sum(-1), torch.ones(2, 3, 2, 16), atol=1e-6)  # each row is a distribution
    assert torch.allclose(maps[:, :, :, 0, 0], torch.ones(2, 3, 2))  # the first character sees only itself
    # the weights come from the same computation the model uses: keeping them changes nothing
    plain, _ = m(idx)
    hooks = [b.attn.pattern.register_forward_hook(lambda *_: None) for b in m.blocks]
    kept, _ = m(idx)
    assert torch.allclose(plain, kept, atol=1e-5)
    for h in hooks:
        h.remove()
    # a hook on head_out edits a head: zeroing head 1 of layer 0 is zeroing its columns of the projection
    hook = m.blocks[0].attn.head_out.register_forward_hook(
        lambda _m, _x, y: y * torch.tensor([1.0, 0.0])[:, None, None]
    )
    edited, _ = m(idx)
    hook.remove()
    with torch.no_grad():
        m.blocks[0].attn.c_proj.weight[:, 16:] = 0  # head size 16
    assert not torch.allclose(edited, plain, atol=1e-3) and torch.allclose(edited, m(idx)[0], atol=1e-5)


def test_options_train_sample_evaluate_and_resume_from_the_cli(text_file: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "rope_post"
    args = ["--data", text_file, "--out", out, *TINY, "model.pos_emb=rope", "model.norm=post", "train.max_steps=10"]
    assert cli("train", *args).code == 0
    assert load_checkpoint(out / "last.pt")["config"]["model"]["pos_emb"] == "rope"
    r = cli("sample", out, "--max-new-tokens", "40")
    assert r.code == 0 and len(r.out) >= 40
    assert cli("eval", out, "--json").code == 0
    assert cli("train", "--out", out, "--resume", "train.max_steps=14").code == 0
    line = cli("train", "--out", out, "--resume", "model.pos_emb=learned").err
    assert "model.pos_emb: 'rope' -> 'learned'" in line


def test_rope_needs_an_even_head_size() -> None:
    from minigpt.config.files import load_config
    from minigpt.errors import UserError

    with pytest.raises(UserError, match="rope needs an even head size"):
        load_config(None, ["model.pos_emb=rope", "model.n_embd=30", "model.n_head=2"])


def test_score_per_character_surprise(trained_run: Path, tmp_path: Path, cli) -> None:
    import json
    import math

    import torch.nn.functional as F

    from minigpt.infer.loading import load_model
    from minigpt.infer.score import score_text

    loaded = load_model(trained_run, torch.device("cpu"))
    short = "KING:\nSpeak now."  # 16 predictions: one window of block_size
    result = score_text(loaded, short)
    ids = torch.tensor([loaded.tokenizer.encode(short)])
    logits, _ = loaded.model(ids[:, :-1])
    direct = F.cross_entropy(logits[0], ids[0, 1:], reduction="none") / math.log(2)
    assert torch.allclose(torch.tensor(result.bits), direct, atol=1e-4)  # bits = -log2 p, per character
    long = (short + " ") * 6  # longer than block_size (16): windows advance by half a window
    scores = score_text(loaded, long)
    assert len(scores.bits) == len(long) - 1 and all(b >= 0 for b in scores.bits)
    head = score_text(loaded, long[:16])
    assert torch.allclose(torch.tensor(scores.bits[:15]), torch.tensor(head.bits), atol=1e-4)

    r = cli("score", trained_run, "--text", short, "--json")
    assert r.code == 0
    out = json.loads(r.out)
    assert out["scored"] == len(short) - 1 and len(out["per_char"]) == len(short) - 1
    assert out["bits_per_char"] == pytest.approx(sum(result.bits) / len(result.bits), rel=1e-4)
    plain = cli("score", trained_run, "--text", short, "--no-color")
    assert plain.out.splitlines()[0] == "pos\tchar\tbits" and "\x1b[" not in plain.out
    assert f"bits/char over {len(short) - 1} characters" in plain.out
    f = tmp_path / "t.txt"
    f.write_text(short)
    assert json.loads(cli("score", trained_run, "--file", f, "--json").out)["scored"] == len(short) - 1
    assert "exactly one of --text" in cli("score", trained_run).err
    assert "never saw" in cli("score", trained_run, "--text", "KING~").err


def test_attention_command_writes_a_real_picture(trained_run: Path, tmp_path: Path, cli) -> None:
    out = tmp_path / "att.png"
    r = cli("attention", trained_run, "--text", "KING:\nSpeak now.", "--out", out)
    assert r.code == 0, r
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 2 * 16 * 16 and height > 2 * 16 * 16  # a 2 x 2 grid, 16 pixels a character, with labels
    one = tmp_path / "one.png"
    assert cli("attention", trained_run, "--text", "KING:", "--layer", "1", "--head", "0", "--out", one).code == 0
    assert 5 * 16 < int.from_bytes(one.read_bytes()[16:20], "big") < width / 2  # one map of five characters
    assert (
        "--layer must be in 0..1" in cli("attention", trained_run, "--text", "KING", "--layer", "2", "--out", one).err
    )
    assert "--head must be in 0..1" in cli("attention", trained_run, "--text", "KING", "--head", "5", "--out", one).err
    assert "does not exist" in cli("attention", trained_run, "--text", "KING", "--out", tmp_path / "no" / "a.png").err
    assert "never saw" in cli("attention", trained_run, "--text", "KING~", "--out", one).err


def test_visible_whitespace_labels() -> None:
    from minigpt.inspect.attention import visible

    assert [visible(c) for c in "a \n\t"] == ["a", "\u2423", "\u21b5", "\u2192"]


@pytest.mark.parametrize("T", [64])  # a label every few characters, none overlapping
def test_the_attention_picture_is_legible_at_its_natural_size(T: int) -> None:
    """A 3 x 4 grid of maps fits about a screen's width, and the characters down its left side, past
    what fits labelled every few, do not run into each other: each is a run of dark rows of its own."""
    from minigpt.inspect.attention import attention_grid

    chars = list(itertools.islice(itertools.cycle("First Citizen:\n"), T))
    picture = attention_grid(torch.rand(3, 4, T, T), chars, "step 1")
    height, width = picture.shape[:2]
    assert width <= 2600 and height <= 2000, (width, height)
    dark = picture[30:, :20].min(axis=(1, 2)) < 128  # the label strip left of the first column, below the title
    runs = [len(list(group)) for is_dark, group in itertools.groupby(dark) if is_dark]
    assert len(runs) >= 3 * T // 3 and max(runs) <= 12, runs  # a label every 3 characters at most, each apart


def test_attention_images_in_tensorboard(trained_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(trained_run), size_guidance={"images": 0})
    acc.Reload()
    assert "attention" in acc.Tags()["images"]
    images = acc.Images("attention")
    assert [i.step for i in images] == [30, 60] and images[0].width > 300


def test_a_training_draws_its_attention_pictures_without_matplotlib(text_file: Path, tmp_path: Path) -> None:
    """TensorBoard's attention picture is drawn with Pillow: matplotlib's import costs a run seconds."""
    import subprocess
    import sys

    out = tmp_path / "r"
    args = ["train", "--data", str(text_file), "--out", str(out), *TINY, "train.max_steps=4", "train.eval_interval=2"]
    args.append("log.attention_probe=the king, now")
    code = f"import sys; from minigpt.cli.app import main; main({args!r})"
    code += "; print(sorted(m for m in sys.modules if m.startswith('matplotlib')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "[]", r.stdout + r.stderr
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(out), size_guidance={"images": 0})
    acc.Reload()
    assert [i.step for i in acc.Images("attention")] == [2, 4] and acc.Images("attention")[0].width > 300
