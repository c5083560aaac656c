"""`minigpt lens`, the logit lens: its last layer is the model's own output, its JSON, its terminal
view, its page in a real browser (offline), and each bad input as one `error:` line with exit 2."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from minigpt.cli.lens import detail_positions, lens_terminal
from minigpt.config.schema import ModelConfig
from minigpt.data.tokenizer import CharTokenizer
from minigpt.inspect.lens import logit_lens
from minigpt.model import GPT
from tests.helpers import make_text, page_data

BLOCK, LAYERS = 16, 2  # the tiny trained run's context and blocks
TEXT = "KING:\nSpeak now"  # 15 characters, inside the context


@pytest.fixture(scope="module")
def model(trained_run: Path):
    import minigpt

    return minigpt.load(trained_run, device="cpu")


def assert_last_layer_is_the_output(lens, gpt: GPT, ids: list[int]) -> None:
    """The lens's last layer against the model's own forward pass: top 5, probabilities, losses."""
    idx = torch.tensor([ids])
    with torch.no_grad():
        logits, _ = gpt(idx)
    probs = F.softmax(logits[0].float(), dim=-1)
    top_p, top_i = probs.topk(5, dim=-1)
    assert lens.top_ids[-1] == top_i.tolist()
    assert torch.allclose(torch.tensor(lens.top_probs[-1]), top_p, atol=1e-5, rtol=0)
    nats = F.cross_entropy(logits[0, :-1].float(), idx[0, 1:], reduction="none")
    assert torch.allclose(torch.tensor(lens.loss[-1]), nats, atol=1e-5, rtol=0)


def test_the_last_layer_is_the_models_own_prediction(model) -> None:
    lens = model.lens(TEXT)
    ids = model.tokenizer.encode(TEXT)
    assert lens.chars == list(TEXT) and lens.ids == ids and lens.dropped == 0
    assert lens.layers == ["embeddings", "after block 0", "after block 1"]
    assert_last_layer_is_the_output(lens, model.loaded.model, ids)
    assert lens.bits_per_char[-1] == pytest.approx(model.score(TEXT).bits_per_char, abs=1e-5)
    # the layers below differ from the output, and the lens of a longer text reads its first block_size
    assert lens.top_probs[0] != lens.top_probs[-1]
    long = make_text(40, seed=1)
    cut = model.lens(long)
    assert cut.dropped == 40 - BLOCK and cut.chars == list(long[:BLOCK])
    assert_last_layer_is_the_output(cut, model.loaded.model, model.tokenizer.encode(long)[:BLOCK])


def test_post_norm_and_every_option_read_the_same_head() -> None:
    """A post-norm model has no final LayerNorm (each block ends in one): the lens applies the same
    head, so its last layer is still the output, with value embeddings, soft-cap and learned positions."""
    tok = CharTokenizer(sorted(set(make_text(2000))))
    text = make_text(30, seed=4)
    for options in ({"norm": "post", "pos_emb": "learned"}, {"value_embeds": True, "logit_softcap": 15.0}):
        torch.manual_seed(0)
        cfg = ModelConfig(n_layer=3, n_head=2, n_embd=32, block_size=32, dropout=0.0, **options)
        gpt = GPT(cfg, tok.vocab_size).eval()
        lens = logit_lens(gpt, tok, text)
        assert lens.norm == cfg.norm and len(lens.layers) == 4
        assert_last_layer_is_the_output(lens, gpt, tok.encode(text))


def test_json_has_every_layer_and_position(trained_run: Path, cli) -> None:
    r = cli("lens", trained_run, "--text", TEXT, "--json")
    assert r.code == 0 and r.err == "", r
    data = json.loads(r.out)
    assert data["chars"] == list(TEXT) and data["unit"] == "char" and data["dropped"] == 0
    assert [layer["name"] for layer in data["layers"]] == ["embeddings", "after block 0", "after block 1"]
    assert [layer["output"] for layer in data["layers"]] == [False, False, True]
    for layer in data["layers"]:
        assert len(layer["top"]) == len(TEXT) and len(layer["loss"]) == len(TEXT) - 1
        for guesses in layer["top"]:
            probs = [g["p"] for g in guesses]
            assert len(guesses) == 5 and probs == sorted(probs, reverse=True) and sum(probs) <= 1 + 1e-6
            assert all(isinstance(g["char"], str) and len(g["char"]) == 1 for g in guesses)
        assert layer["mean_loss"] == pytest.approx(sum(layer["loss"]) / len(layer["loss"]))
        assert layer["bits_per_char"] == pytest.approx(layer["mean_loss"] / math.log(2))


def test_terminal_view(trained_run: Path, model, cli, monkeypatch) -> None:
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    r = cli("lens", trained_run, "--text", TEXT, "--top")
    assert r.code == 0 and r.err == "" and "\x1b[" not in r.out, r
    lines = r.out.splitlines()
    assert "after block 1 = output" in r.out and "[x] is the character that came" in r.out
    grid = {line.split("  ")[0]: line for line in lines if line.startswith(("text ", "came "))}
    assert grid["text"].endswith("KING:\u21b5Speak\u2423now")
    assert grid["came"].endswith("ING:\u21b5Speak\u2423now\u2026")  # … : after the text
    assert sum(line.startswith("#") for line in lines) == len(TEXT)  # a short text: every position's top 5
    assert lines.count("#14 'w' -> what comes after the text") == 1
    monkeypatch.setenv("FORCE_COLOR", "1")
    coloured = cli("lens", trained_run, "--text", TEXT, "--at", "3", "--at", "-1")
    assert coloured.code == 0 and "\x1b[48;5;" in coloured.out
    assert [line.split()[0] for line in coloured.out.splitlines() if line.startswith("#")] == ["#3", "#14"]
    long = cli("lens", trained_run, "--text", make_text(40, seed=1), "--no-color", "--top")
    assert (
        long.code == 0 and long.err == "note: the lens reads the first 16 characters (block_size); 24 more not read\n"
    )
    assert sum(line.startswith("#") for line in long.out.splitlines()) == BLOCK and "\x1b[" not in long.out
    assert detail_positions(64, None) == list(range(56, 64))  # a long text: the last few positions' top 5
    assert detail_positions(10, [-1, 3, 3]) == [3, 9]
    shown = lens_terminal(model.lens(make_text(40, seed=1)), False, "run", [0, 1, 2, 9], width=34)
    assert "(positions 0-2, 9 of 0..15; --at POS for others, --json or --html for all)" in shown
    assert sum(line.startswith("text ") for line in shown.splitlines()) == 2  # 16 positions, 10 a row beside the names


def test_bad_input_is_one_error_line(trained_run: Path, tmp_path: Path, cli) -> None:
    page = tmp_path / "lens.html"
    cases = {
        ("--text", "KING~", "--html", page): "--text has characters the model never saw in training: '~'",
        ("--text", "", "--html", page): "--text is empty",
        ("--text", "K"): "the text needs at least 2 characters",
        ("--text", "KING", "--html", tmp_path / "no" / "lens.html"): f"the folder {tmp_path / 'no'} does not exist",
        ("--text", "KING", "--html", tmp_path): "it is a folder",
        ("--text", "KING", "--at", "4"): "--at 4 is not a position of the text: it has 4 (0..3, or -4..-1)",
        (
            "--html",
            page,
        ): "give exactly one of --text TEXT or --file FILE",
    }
    for args, message in cases.items():
        r = cli("lens", trained_run, *args)
        assert r.code == 2 and r.out == "" and r.err.startswith("error: ") and r.err.count("\n") == 1, (args, r)
        assert message in r.err, (args, r)
    assert not page.exists() and list(tmp_path.iterdir()) == []
    skipped = cli("lens", trained_run, "--text", "KI~NG", "--unknown", "skip", "--json")
    assert skipped.code == 0 and json.loads(skipped.out)["chars"] == list("KING")


def test_page_opens_offline_with_one_row_per_layer(trained_run: Path, model, page, tmp_path: Path, cli) -> None:
    console = []
    page.on("console", lambda m: console.append(m.text) if m.type in ("error", "warning") else None)
    path = tmp_path / "lens.html"
    r = cli("lens", trained_run, "--text", TEXT, "--html", path)
    assert r.code == 0 and r.out == "" and f"wrote {path}: 3 layers over 15 characters" in r.err, r
    assert page_data(path)["layers"] == ["embeddings", "after block 0", "after block 1"]
    page.goto(path.as_uri())
    assert page.errors == [] and console == []
    assert all(url.startswith("file://") for url in page.requests), page.requests  # nothing from a CDN
    rows = page.locator(".text.lens")
    assert rows.count() == LAYERS + 1
    names = page.locator(".name").all_inner_texts()
    assert names[-1].startswith("after block 1") and "= the model's output" in names[-1] and "output" not in names[0]
    lens = model.lens(TEXT)
    for layer in range(LAYERS + 1):  # each row: the text (and the '?' after it), coloured by that layer's surprise
        cells = rows.nth(layer).locator(".t")
        assert cells.count() == len(TEXT) + 1
        steps = cells.evaluate_all("es => es.map(e => [...e.classList].find(c => /^b\\d$/.test(c)) || null)")
        assert steps[1:-1] == [f"b{min(8, int(n / math.log(2)))}" for n in lens.loss[layer]]
    k, layer = 6, 1  # hover 'S' in the middle row: the top 5 after block 0, guessed after the line break
    rows.nth(layer).locator(".t").nth(k).hover()
    tip = page.inner_text("#tip")
    assert "after block 0" in tip and f"#{k}" in tip
    guesses = page.eval_on_selector_all("#tip tr", "rs => rs.map(r => [r.cells[0].innerText, +r.cells[1].innerText])")
    labels = [
        model.tokenizer.pieces([i])[0].replace(" ", "\u2423").replace("\n", "\u21b5")
        for i in lens.top_ids[layer][k - 1]
    ]
    assert [g[0] for g in guesses] == labels
    assert [g[1] for g in guesses] == pytest.approx(lens.top_probs[layer][k - 1], abs=0.0006)
    rows.nth(0).locator(".t").nth(k).click()  # every layer's guesses at that position, in the side panel
    panel = page.locator("#focus .layer")
    assert panel.count() == LAYERS + 1 and "#6" in page.inner_text("#focus")
    pinned = page.eval_on_selector_all(".t.pin", "es => es.map(e => e._i)")
    assert pinned == [k] * (LAYERS + 1)
    page.mouse.move(5, 5)
    page.screenshot(path=tmp_path / "lens.png")
    assert (tmp_path / "lens.png").stat().st_size > 20_000
