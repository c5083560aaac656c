"""The playground page (`minigpt playground`) in a real browser: headless Chromium driven by
Playwright, offline, every request recorded. The page's JavaScript GPT is held to PyTorch's
numbers: logits for every model option, greedy text past the context, attention; and the
command's errors are one line, exit 2, with nothing written.

Needs /usr/bin/chromium (or MINIGPT_CHROMIUM=PATH); under CI=true a missing browser fails."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minigpt.cli.app import main
from tests.helpers import TINY, make_text

from .helpers import one_error_line

MODELS = {  # the model options the page must cover, each in one tiny model
    "rope_char": ["model.pos_emb=rope"],
    "learned_post_bias": ["model.pos_emb=learned", "model.norm=post", "model.bias=true"],
    "sinusoidal_byte": ["model.pos_emb=sinusoidal", "data.tokenizer=byte"],
    "all_options": [
        "model.qk_norm=true",
        "model.mlp_act=relu2",
        "model.zero_init_proj=true",
        "model.value_embeds=true",
        "model.logit_softcap=3",
    ],
    "attn_only": ["model.attn_only=true"],
    "attn_only_post": ["model.attn_only=true", "model.norm=post", "model.pos_emb=learned"],
}
BYTE_TEXT = "héllo wörld — ünïcode ∑ ok\n"  # multi-byte characters for the byte model


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny runs, trained once for the module, and each one's playground page."""
    folder = tmp_path_factory.mktemp("playground")
    data = folder / "text.txt"
    data.write_text(make_text(6_000) + BYTE_TEXT * 20, encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINIGPT_CACHE_DIR", str(folder / "cache"))
    out = {}
    try:
        for name, options in MODELS.items():
            run = folder / name
            args = [
                "train",
                "--data",
                str(data),
                "--out",
                str(run),
                *TINY,
                *options,
                "train.max_steps=40",
                "train.eval_interval=40",
                "log.tensorboard=false",
                "log.progress=off",
                "train.final_eval=false",
            ]
            assert main(args) == 0
            assert main(["playground", str(run), str(folder / f"{name}.html")]) == 0
            out[name] = run
    finally:
        mp.undo()
    return out


VIEWPORT = (1280, 860)  # conftest's page


@pytest.fixture
def page(page):
    """conftest's offline page, checked at the end: no script error, and no request left file://."""
    yield page
    assert page.errors == []
    assert page.requests and all(url.startswith("file://") for url in page.requests), page.requests


def open_page(pg, runs: dict[str, Path], name: str) -> None:
    pg.goto((runs[name].parent / f"{name}.html").as_uri())
    pg.wait_for_function("window.playground && window.playground.ready")


def load(run: Path):
    import minigpt

    return minigpt.load(run, device="cpu")


def generate(
    pg, prompt: str, length: int, temperature: float, seed: int = 1, top_k: int = 0, top_p: float = 1.0
) -> str:
    """Fill the controls and press Generate, as a person would; the page's text when it is done."""
    pg.fill("#prompt", prompt)
    for sel, value in (
        ("#temperature", temperature),
        ("#length", length),
        ("#seed", seed),
        ("#topk", top_k),
        ("#topp", top_p),
    ):
        pg.fill(sel, str(value))
    pg.click("#generate")
    pg.wait_for_function("!window.playground.run.active && window.playground.run.chars > 0")
    return pg.evaluate("window.playground.text()")


@pytest.mark.parametrize("name", list(MODELS))
def test_logits_equal_pytorch_over_a_full_context(page, runs, name: str) -> None:
    m = load(runs[name])
    block = m.config.model.block_size
    text = (BYTE_TEXT if "byte" in name else make_text(200, seed=5))[: block + 4]
    ids = m.tokenizer.encode(text)[:block]
    assert len(ids) == block
    open_page(page, runs, name)
    got = torch.tensor(page.evaluate("(t) => window.playground.logits(t)", text)).view(block, -1)
    with torch.no_grad():
        want = m.loaded.model(torch.tensor([ids]))[0][0]  # (T, V)
    assert got.shape == want.shape
    assert torch.allclose(got, want, atol=1e-4, rtol=0), (got - want).abs().max()


def test_greedy_text_past_the_context_equals_minigpt_sample(page, runs, cli) -> None:
    run = runs["rope_char"]
    expected = cli(
        "sample",
        run,
        "--prompt",
        "KING:\n",
        "--temperature",
        "0",
        "--dtype",
        "float32",
        "--max-new-tokens",
        "300",
        "--device",
        "cpu",
    )
    assert expected.code == 0, expected
    open_page(page, runs, "rope_char")
    got = generate(page, "KING:\n", 300, 0)
    assert got == expected.out[:-1]  # sample ends with a newline of its own
    assert page.evaluate("window.playground.run.chars") == 300  # 300 past a context of 16: the window slid
    # an empty prompt starts from a line break that the text does not show, as `minigpt sample` does
    expected = cli(
        "sample", run, "--temperature", "0", "--dtype", "float32", "--max-new-tokens", "40", "--device", "cpu"
    )
    assert generate(page, "", 40, 0) == expected.out[:-1]


def test_byte_model_greedy_text_equals_minigpt_sample(page, runs, cli) -> None:
    run = runs["sinusoidal_byte"]
    expected = cli(
        "sample",
        run,
        "--prompt",
        "héllo",
        "--temperature",
        "0",
        "--dtype",
        "float32",
        "--max-new-tokens",
        "120",
        "--device",
        "cpu",
    )
    assert expected.code == 0, expected
    open_page(page, runs, "sinusoidal_byte")
    assert generate(page, "héllo", 120, 0) == expected.out[:-1]


def test_the_same_seed_gives_the_same_text(page, runs) -> None:
    open_page(page, runs, "rope_char")
    first = generate(page, "ROMEO:", 200, 1.0, seed=7, top_k=10, top_p=0.95)
    again = generate(page, "ROMEO:", 200, 1.0, seed=7, top_k=10, top_p=0.95)
    other = generate(page, "ROMEO:", 200, 1.0, seed=8, top_k=10, top_p=0.95)
    assert first == again and len(first) == len("ROMEO:") + 200
    assert other != first
    # each generated character is coloured by the probability the model gave it
    assert page.locator("#text .t.gen.b0, #text .t.gen.b1, #text .t.gen.b2").count() > 0


def test_clicked_character_shows_the_attention_minigpt_attention_computes(page, runs) -> None:
    from minigpt.inspect.attention import attention_maps_for

    m = load(runs["learned_post_bias"])
    block, half = 16, 8
    open_page(page, runs, "learned_post_bias")
    text = generate(page, "KING:\nSpeak", 30, 0)
    ids = m.tokenizer.encode(text)
    for i in (5, len(ids) - 1):  # in the first window, and past it (its window starts at a multiple of half)
        page.locator("#text .t").nth(i).click()
        shown = page.evaluate("window.playground.attention()")
        start = 0 if i < block else ((i - block) // half + 1) * half
        assert (shown["index"], shown["start"]) == (i, start)
        maps, _ = attention_maps_for(m.loaded.model, m.tokenizer, text[start : i + 1])  # as `minigpt attention`
        want = maps[:, :, -1, :]  # (L, nh, keys)
        got = torch.tensor(shown["weights"]).view(want.shape)
        assert torch.allclose(got, want, atol=1e-4, rtol=0)
    assert page.locator("#attn table tr").count() == 2  # one row per head of the shown layer
    assert page.locator("#strips").is_visible()
    page.focus("#text")  # the keyboard alone: arrows move the character, up/down the layer
    page.keyboard.press("ArrowLeft")
    assert page.evaluate("window.playground.attention().index") == len(ids) - 2
    page.keyboard.press("ArrowDown")
    assert page.evaluate("window.playground.sel.layer") == 1


def test_typing_updates_the_top_ten_next_characters(page, runs) -> None:
    m = load(runs["rope_char"])
    open_page(page, runs, "rope_char")
    page.focus("#prompt")
    page.keyboard.type("ROMEO:\nThe ki")
    page.wait_for_function("window.playground.next.text === 'ROMEO:\\nThe ki'")
    shown = page.evaluate("window.playground.next.rows")
    assert len(shown) == 10 and page.locator("#bars .row").count() == 10
    with torch.no_grad():
        logits = m.loaded.model(torch.tensor([m.tokenizer.encode("ROMEO:\nThe ki")]))[0][0, -1]
    probs = logits.softmax(-1)
    top = probs.topk(10)
    assert [r["id"] for r in shown][:3] == top.indices.tolist()[:3]
    assert abs(shown[0]["p"] - float(top.values[0])) < 1e-4
    before = page.inner_text("#bars")
    page.keyboard.type("n")
    page.wait_for_function("window.playground.next.text.endsWith('kin')")
    assert page.inner_text("#bars") != before


def test_the_command_prints_the_size_and_float16_halves_it(page, runs, cli, tmp_path: Path) -> None:
    r32 = cli("playground", runs["rope_char"], tmp_path / "a.html")
    r16 = cli("playground", runs["rope_char"], tmp_path / "b.html", "--dtype", "float16")
    assert r32.code == 0 and r16.code == 0
    assert " MB" in r32.err and "float32" in r32.err and "float16" in r16.err
    assert (tmp_path / "b.html").stat().st_size < (tmp_path / "a.html").stat().st_size
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.html", "b.html"]  # no temporary file left
    # the float16 page runs the same model, its weights rounded to float16
    m = load(runs["rope_char"])
    text = make_text(200, seed=5)[:16]
    page.goto((tmp_path / "b.html").as_uri())
    page.wait_for_function("window.playground && window.playground.ready")
    got = torch.tensor(page.evaluate("(t) => window.playground.logits(t)", text)).view(16, -1)
    with torch.no_grad():
        want = m.loaded.model(torch.tensor([m.tokenizer.encode(text)]))[0][0]
    assert 0 < (got - want).abs().max() < 0.05


def test_python_api_writes_the_page_and_shows_inline(runs, tmp_path: Path) -> None:
    page = load(runs["rope_char"]).playground(tmp_path / "p.html")
    assert (tmp_path / "p.html").read_text(encoding="utf-8") == page.html
    assert page._repr_html_().startswith("<iframe srcdoc=")


def test_a_page_past_the_limit_is_refused_with_one_line(runs, cli, tmp_path: Path, monkeypatch) -> None:
    import minigpt.export.playground as playground

    out = tmp_path / "big.html"
    monkeypatch.setattr(playground, "MAX_PAGE_BYTES", 50_000)  # the tiny model's page is ~0.1 MB
    line = one_error_line(cli("playground", runs["rope_char"], out))
    assert "MB" in line and "--dtype float16" in line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("case", ["folder", "no_parent", "no_run", "bad_dtype"])
def test_user_errors_are_one_line_and_write_nothing(runs, cli, tmp_path: Path, case: str) -> None:
    run, out, extra = runs["rope_char"], tmp_path / "p.html", []
    if case == "folder":
        out = tmp_path
    elif case == "no_parent":
        out = tmp_path / "missing" / "p.html"
    elif case == "no_run":
        run = tmp_path / "no_such_run"
    else:
        extra = ["--dtype", "bfloat16"]
    one_error_line(cli("playground", run, out, *extra))
    assert list(tmp_path.iterdir()) == []
