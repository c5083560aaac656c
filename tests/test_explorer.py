"""The HTML pages and the Python API without a browser: the windowed attention is the model's own,
the pages hold what they should and nothing from the network, bad input is one clear error."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minigpt.errors import UserError
from tests.helpers import make_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model(trained_run: Path):
    import minigpt

    return minigpt.load(trained_run, device="cpu")


def page_data(html: str) -> dict:
    raw = html.split('<script type="application/json" id="minigpt-data">')[1].split("</script>")[0]
    return json.loads(raw)


def test_windowed_attention_is_each_windows_forward_pass(model) -> None:
    from minigpt.infer.score import window_count
    from minigpt.inspect.attention import windowed_attention

    tok, gpt = model.tokenizer, model.loaded.model
    text = make_text(75, seed=3)  # block_size 16: windows start every 8 characters
    ids = tok.encode(text)
    att = windowed_attention(gpt, tok.pieces(ids), ids, [0, 1], [1], batch=2)
    assert len(att.maps) == window_count(75, 16) == 9  # the last starts at 64 and holds 11
    assert att.maps[-1].shape == (2, 1, 11, 11)
    for i in range(75):
        start, row = att.row(i)
        assert start <= i and (i < 16 or 8 <= i - start < 16)  # at least half a window of context
        expected = gpt.attention_maps(torch.tensor([ids[start : i + 1]]))[:, 0, 1, -1]  # (L, keys)
        assert torch.allclose(row[:, 0], expected, atol=1e-5), i


def test_attention_page_holds_the_weights_and_nothing_from_the_network(model) -> None:
    page = model.show_attention(make_text(40, seed=3))
    html = page.html
    assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", html)  # no CDN, no remote file
    assert "http://" not in html and "https://" not in html and "@import" not in html
    data = page_data(html)
    assert data["block"] == 16 and data["stride"] == 8 and len(data["pieces"]) == 40
    weights = torch.frombuffer(bytearray(base64.b64decode(data["weights"])), dtype=torch.uint8)
    cells = 16 * 17 // 2 + 16 * 17 // 2 + 16 * 17 // 2 + 16 * 17 // 2  # windows at 0, 8, 16, 24
    assert weights.numel() == 2 * 2 * cells  # layers x heads x each window's lower triangle
    maps, _ = model.attention(make_text(40, seed=3)[:16])  # window 0
    rows, cols = torch.tril_indices(16, 16)
    assert torch.allclose(weights[: 16 * 17 // 2].float() / 255, maps[0, 0, rows, cols], atol=0.5 / 255 + 1e-6)


def test_pages_escape_text_that_looks_like_markup(tmp_path: Path) -> None:
    from minigpt.inspect.pages import render

    html = render("score", "a </title><b>", {"pieces": ["<", "/", "s", "c", "r", "i", "p", "t", ">"], "x": "</script>"})
    assert html.count("</script>") == 2 and "<\\/script>" in html and "&lt;/title&gt;" in html
    # the shell is filled in once: a title or a text that holds a placeholder stays as written
    html = render("score", "{{STYLE}}", {"x": "{{SCRIPT}} {{DATA}}"})
    assert "<title>minigpt {{STYLE}}</title>" in html and '{"x":"{{SCRIPT}} {{DATA}}"}' in html
    assert html.count("<style>") == 1 and html.count("const DATA") == 1


def test_api_matches_the_library_and_the_cli_numbers(model, trained_run: Path) -> None:
    from minigpt.infer.loading import load_model
    from minigpt.infer.score import score_text

    text = make_text(30, seed=4)
    loaded = load_model(trained_run, torch.device("cpu"))
    scores = model.score(text)
    assert scores.bits == score_text(loaded, text).bits
    assert len(scores.top_ids) == len(scores.bits) and all(len(r) == 5 for r in scores.top_ids)
    assert all(p == pytest.approx(2**-b) for p, b in zip(scores.probs, scores.bits))
    maps, chars = model.attention(text[:16])
    assert maps.shape == (2, 2, 16, 16) and "".join(chars) == text[:16]
    assert model.sample("KING:", max_new_tokens=20, seed=3) == model.sample("KING:", max_new_tokens=20, seed=3)
    assert model.sample("KING:", max_new_tokens=20, temperature=0).startswith("KING:")
    with pytest.raises(UserError, match=r"at most block_size \(16\)"):
        model.attention(text)
    page = model.show_score(text)
    assert page._repr_html_().startswith("<iframe srcdoc=") and "minigpt score page" in repr(page)
    data = page_data(page.html)
    assert data["bits"] == [round(b, 4) for b in scores.bits] and data["bitsPerChar"] == pytest.approx(
        scores.bits_per_char
    )


def test_bad_input_is_one_clear_error(model, tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is empty"):
        model.show_attention("")
    with pytest.raises(UserError, match=r"never saw in training: '~', '\u00e9'; .*unknown=\"skip\""):
        model.show_score("KING~ \u00e9")
    assert [c for c in page_data(model.show_score("KING~:", unknown="skip").html)["pieces"]] == list("KING:")
    with pytest.raises(UserError, match="no character the model saw"):
        model.show_attention("~~", unknown="skip")
    with pytest.raises(UserError, match=r"at most 50,000"):
        model.show_score("KING " * 10_001)
    page = model.show_score("KING:")
    with pytest.raises(UserError, match="the folder .*nowhere does not exist"):
        page.save(tmp_path / "nowhere" / "p.html")
    with pytest.raises(UserError, match="it is a folder"):
        page.save(tmp_path)
    assert page.save(tmp_path / "p.html").read_text(encoding="utf-8") == page.html
    with pytest.raises(UserError, match=r"--layer must be in 0..1"):
        model.show_attention("KING", layer=2)


def test_attention_page_limit_follows_the_model_size(model, monkeypatch: pytest.MonkeyPatch) -> None:
    import minigpt.inspect.attention as attention

    monkeypatch.setattr(attention, "MAX_PAGE_WEIGHTS", 2 * 2 * 16 * 100)  # 100 characters of 2 x 2 heads
    with pytest.raises(UserError, match=r"is 101 characters; a page holds at most 100 with this model's 2 layers"):
        model.show_attention(make_text(101, seed=1))
    assert len(page_data(model.show_attention(make_text(101, seed=1), layer=1).html)["pieces"]) == 101


def test_a_byte_model_page_labels_every_byte() -> None:
    from minigpt.config.schema import ModelConfig
    from minigpt.data.tokenizer import ByteTokenizer
    from minigpt.infer.score import Scores
    from minigpt.inspect.attention import attention_page
    from minigpt.inspect.pages import score_html, token_label
    from minigpt.model import GPT

    tok = ByteTokenizer()
    gpt = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=16, block_size=8), tok.vocab_size).eval()
    data = page_data(attention_page(gpt, tok, "caf\u00e9 \u20ac!").html)
    assert data["pieces"] == ["c", "a", "f", "", "\u00e9", " ", "", "", "\u20ac", "!"]  # a character on its last byte
    assert [token_label(tok, i) for i in (65, 32, 10, 0xE2)] == ["A", "\u2423", "\u21b5", "0xE2"]
    ids = tok.encode("\u00e9a")
    scores = Scores(tok.pieces(ids), [1.0, 2.0], "byte", ids, [[0xC3, 97], [97, 98]], [[0.5, 0.2], [0.25, 0.1]])
    data = page_data(score_html(scores, tok, "x").html)
    assert data["unit"] == "byte" and data["labels"]["195"] == "0xC3"


def test_import_minigpt_does_not_import_torch_or_ipython() -> None:
    code = (
        "import sys, minigpt, minigpt.inspect.pages\nprint(sorted(m for m in ('torch', 'IPython') if m in sys.modules))"  # noqa: E501
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
