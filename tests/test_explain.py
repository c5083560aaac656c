"""`minigpt explain` and the playground's explanation of one prediction, in a real browser (Debian's
Chromium through Playwright, offline): every stage's numbers, read from the page's "numbers" view, equal
PyTorch's within 1e-4 in float32, taken from the model through forward hooks on its modules (and plain
tensor operations where a tutorial computes something the model does not keep: LayerNorm's mean,
rotary angles, the masked scores). Learned, sinusoidal and rotary positions, pre and post LayerNorm, a
byte-level model and an imported nanoGPT checkpoint.

Needs /usr/bin/chromium (or MINIGPT_CHROMIUM=PATH); under CI=true a missing browser fails."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from minigpt.cli.app import main
from minigpt.export.playground import model_places
from minigpt.infer.decode import next_token_probs
from tests.helpers import ROOT, TINY, make_text

from .helpers import one_error_line
from .test_nanogpt import write_nanogpt

# one worker runs the module: its runs are trained once and one browser serves every case
pytestmark = pytest.mark.xdist_group("explain")
MODELS = {  # name: (training options, text, position explained)
    "rope_pre": (["model.pos_emb=rope"], "KING:\nSpeak the", 9),
    "learned_post_bias": (["model.pos_emb=learned", "model.norm=post", "model.bias=true"], "ROMEO:\nGood lord", 12),
    "sinusoidal_byte": (["model.pos_emb=sinusoidal", "data.tokenizer=byte"], "héllo wörld", 8),
    "nanogpt": (None, "JULIET:\nHear me", 10),
}
# the options the page computes but does not draw step by step: it says so, and shows the rest
OPTIONS = ["model.qk_norm=true", "model.value_embeds=true", "model.logit_softcap=3", "model.attn_only=true"]
TEMPERATURE, TOP_K, TOP_P = 0.7, 5, 0.9
VIEWPORT = (1280, 900)  # conftest's page


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny runs (a few steps each) and an imported nanoGPT checkpoint, each with its explain page
    written by the command."""
    folder = tmp_path_factory.mktemp("explain")
    data = folder / "text.txt"
    data.write_text(make_text(4_000) + "héllo wörld\n" * 20, encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINIGPT_CACHE_DIR", str(folder / "cache"))
    out = {}
    try:
        for name, (options, text, at) in MODELS.items():
            run = folder / name
            if options is None:
                ckpt, meta = write_nanogpt(folder / "nanogpt_files", bias=True)
                assert main(["import", "nanogpt", str(ckpt), "--meta", str(meta), "--out", str(run)]) == 0
            else:
                train = ["train", "--data", str(data), "--out", str(run), *TINY, *options, "train.max_steps=10"]
                quiet = [
                    "train.eval_interval=10",
                    "log.tensorboard=false",
                    "log.progress=off",
                    "train.final_eval=false",
                ]
                assert main([*train, *quiet]) == 0
            page = folder / f"{name}.html"
            assert main(["explain", str(run), str(page), "--text", text, "--at", str(at)]) == 0
            out[name] = run
        run = folder / "options"
        assert main(["train", "--data", str(data), "--out", str(run), *TINY, *OPTIONS, "train.max_steps=1"]) == 0
        assert main(["explain", str(run), str(folder / "options.html"), "--text", "KING:"]) == 0
        out["options"] = run
    finally:
        mp.undo()
    return out


@pytest.fixture
def page(page):
    """conftest's offline page, checked at the end: no script error, and no request left file://."""
    yield page
    assert page.errors == []
    assert page.requests and all(url.startswith("file://") for url in page.requests), page.requests


def read_numbers(pg) -> dict[str, torch.Tensor]:
    """Every figure's numbers as the numbers view lists them: one line a row, after the row's label."""
    texts = pg.eval_on_selector_all("#explain [data-name]", "es => es.map(e => [e.dataset.name, e.innerText])")
    out = {}
    for name, text in texts:
        rows = [line.rsplit(": ", 1)[-1].split() for line in text.strip().split("\n")]
        numbers = torch.tensor([[float(v) for v in row] for row in rows])
        out[name] = numbers[0] if len(rows) == 1 else numbers
    return {name: t[0] if t.shape == (1,) else t for name, t in out.items()}


def rotate(x: torch.Tensor, hs: int) -> torch.Tensor:
    """Rotary positions by hand: channel pairs (i, i + hs/2) of x (T, hs) turned by t * 10000^(-2i/hs)."""
    angles = torch.arange(x.size(0))[:, None] * 10000.0 ** (-torch.arange(0, hs, 2) / hs)  # (T, hs/2)
    x1, x2 = x[:, : hs // 2], x[:, hs // 2 :]
    return torch.cat((x1 * angles.cos() - x2 * angles.sin(), x2 * angles.cos() + x1 * angles.sin()), dim=-1)


def pytorch_numbers(gpt, ids: list[int], layer: int, head: int) -> dict[str, torch.Tensor]:
    """The page's numbers, from PyTorch: forward hooks on the model's modules, then plain tensor operations."""
    seen: dict[str, torch.Tensor] = {}

    def output(name):
        return lambda _m, _args, out: seen.__setitem__(name, out.detach()[0])

    def given(name):
        return lambda _m, args: seen.__setitem__(name, args[0].detach()[0])

    b = gpt.blocks[layer]
    hooks = [
        gpt.wte.register_forward_hook(output("tok")),
        gpt.blocks[0].register_forward_pre_hook(given("embed")),
        b.register_forward_pre_hook(given("in")),
        b.register_forward_hook(output("out")),
        b.ln_1.register_forward_pre_hook(given("ln1_in")),
        b.ln_1.register_forward_hook(output("ln1")),
        b.attn.c_attn.register_forward_hook(output("c_attn")),
        b.attn.pattern.register_forward_hook(output("pattern")),  # (nh, T, T)
        b.attn.head_out.register_forward_hook(output("head_out")),  # (nh, T, hs)
        b.attn.c_proj.register_forward_hook(output("attn_out")),
        b.ln_2.register_forward_pre_hook(given("ln2_in")),
        b.ln_2.register_forward_hook(output("ln2")),
        b.mlp.register_forward_pre_hook(given("mlp_in")),
        b.mlp.c_fc.register_forward_hook(output("up")),
        b.mlp.c_proj.register_forward_pre_hook(given("gelu")),
        b.mlp.c_proj.register_forward_hook(output("down")),
        gpt.ln_f.register_forward_hook(output("ln_f")),
        gpt.lm_head.register_forward_hook(output("logits")),
    ]
    try:
        with torch.no_grad():
            gpt(torch.tensor([ids]))
    finally:
        for h in hooks:
            h.remove()
    cfg, T, p = gpt.cfg, len(ids), len(ids) - 1
    C, nh = cfg.n_embd, cfg.n_head
    hs = C // nh
    w = {k: v for k, v in gpt.state_dict().items() if k.startswith(f"blocks.{layer}.ln_1.")}
    q, k, v = (part[:, head * hs : (head + 1) * hs] for part in seen["c_attn"].split(C, dim=-1))  # (T, hs)
    if cfg.pos_emb == "rope":
        q, k = rotate(q, hs), rotate(k, hs)
    future = torch.ones(T, T).tril() == 0
    x = seen["ln1_in"][p]
    mean, var = x.mean(), x.var(unbiased=False)
    pre = cfg.norm == "pre"
    want = {
        "ids": torch.tensor(ids, dtype=torch.float32),
        "tok": seen["tok"][p],
        "embed": seen["embed"][p],
        "ln.x": x,
        "ln.mean": mean,
        "ln.var": var,
        "ln.xhat": (x - mean) / torch.sqrt(var + 1e-5),
        "ln.gain": w[f"blocks.{layer}.ln_1.weight"],
        "ln.out": seen["ln1"][p],
        "q": q,
        "k": k,
        "v": v,
        "scores": (q @ k.T / math.sqrt(hs)).masked_fill(future, float("-inf")),
        "weights": seen["pattern"][head],
        "head_out": seen["head_out"][head, p],
        "heads_weights": seen["pattern"][:, p],
        "merged": seen["head_out"][:, p].reshape(C),
        "attn_out": seen["attn_out"][p],
        "resid_before": seen["in"][p],
        "resid_after": seen["in"][p] + seen["attn_out"][p],
        "mlp_in": seen["mlp_in"][p],
        "up": seen["up"][p],
        "gelu": seen["gelu"][p],
        "down": seen["down"][p],
        "mlp_after": seen["out"][p] if pre else seen["ln2_in"][p],
        "ln_f": seen["ln_f"][p],
        "logits": seen["logits"][p],
        "probs_t": next_token_probs(seen["logits"][p][None], TEMPERATURE)[0],
        "probs_kept": next_token_probs(seen["logits"][p][None], TEMPERATURE, TOP_K, TOP_P)[0],
    }
    if cfg.bias:
        want["ln.bias"] = w[f"blocks.{layer}.ln_1.bias"]
    if cfg.pos_emb == "rope":
        angles = p * 10000.0 ** (-torch.arange(0, hs, 2) / hs)
        want |= {"rope_angles": angles, "rope_cos": angles.cos(), "rope_sin": angles.sin()}
        want["q_raw"] = seen["c_attn"][p, head * hs : (head + 1) * hs]
    else:
        want["pos"] = seen["embed"][p] - seen["tok"][p]
    if not pre:
        want["resid_norm"] = seen["ln1"][p]
        want["mlp_norm"] = seen["out"][p]
    else:  # the final LayerNorm's own numbers, from the last block's output (`layer` is the last)
        xf = seen["out"][p]
        mf, vf = xf.mean(), xf.var(unbiased=False)
        want |= {"lnf.x": xf, "lnf.mean": mf, "lnf.var": vf, "lnf.xhat": (xf - mf) / torch.sqrt(vf + 1e-5)}
        want["lnf.gain"] = gpt.ln_f.weight.detach()
        if cfg.bias:
            want["lnf.bias"] = gpt.ln_f.bias.detach()
    return want


def open_explained(pg, runs: dict[str, Path], name: str):
    pg.goto((runs[name].parent / f"{name}.html").as_uri())
    pg.wait_for_function("window.playground && window.playground.ready && !document.getElementById('explain').hidden")


@pytest.mark.parametrize("name", list(MODELS))
def test_every_stage_equals_pytorch(page, runs, name: str) -> None:
    import minigpt

    m = minigpt.load(runs[name], device="cpu")
    _, text, at = MODELS[name]
    ids = m.tokenizer.encode(text)[: at + 1]
    open_explained(page, runs, name)
    assert f"#{at} " in page.inner_text("#ex-where")
    assert "the matrix products in WebAssembly SIMD" in page.inner_text("#ex-where")  # the kernel, checked below
    cfg = m.config.model
    layer, head = cfg.n_layer - 1, cfg.n_head - 1  # the pickers, as a person clicks them
    page.click(f"#ex-layers button:text-is('{layer}')")
    page.click(f"#ex-heads button:text-is('{head}')")
    for sel, value in (("#temperature", TEMPERATURE), ("#topk", TOP_K), ("#topp", TOP_P)):
        page.fill(sel, str(value))
        page.dispatch_event(sel, "change")
    page.click("#ex-view button:text-is('numbers')")
    assert page.locator("#explain pre.nums[data-name='q']").is_visible()
    got = read_numbers(page)
    want = pytorch_numbers(m.loaded.model, ids, layer, head)
    assert set(got) == set(want), set(got) ^ set(want)
    for key, expected in want.items():
        assert got[key].shape == expected.shape, key
        torch.testing.assert_close(got[key], expected.float(), atol=1e-4, rtol=0, msg=lambda s, k=key: f"{k}: {s}")
    chosen = int(page.get_attribute("#ex-choice", "data-id"))
    assert want["probs_kept"][chosen] > 0  # drawn from what the cuts kept


def test_greedy_choice_keyboard_and_layer_zero(page, runs) -> None:
    """Temperature 0 chooses the largest logit; the arrows in the text move the explained position and
    E explains the selected character; layer 0's numbers equal PyTorch's too."""
    import minigpt

    m = minigpt.load(runs["rope_pre"], device="cpu")
    _, text, at = MODELS["rope_pre"]
    open_explained(page, runs, "rope_pre")
    page.fill("#temperature", "0")
    page.dispatch_event("#temperature", "change")
    ids = m.tokenizer.encode(text)
    want = pytorch_numbers(m.loaded.model, ids[: at + 1], 0, 0)
    assert int(page.get_attribute("#ex-choice", "data-id")) == int(want["logits"].argmax())
    page.focus("#text")
    page.keyboard.press("ArrowLeft")
    assert f"#{at - 1} " in page.inner_text("#ex-where")
    page.click("#ex-close")
    assert page.locator("#explain").is_hidden()
    page.focus("#text")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("e")
    assert f"#{at} " in page.inner_text("#ex-where")
    got = read_numbers(page)
    for key in ("q", "scores", "weights", "up", "logits"):
        torch.testing.assert_close(got[key], want[key].float(), atol=1e-4, rtol=0)


def test_explain_errors_are_one_line(runs, cli, tmp_path: Path) -> None:
    run = runs["rope_pre"]
    assert "--at 40 is outside the text's 5 characters" in one_error_line(
        cli("explain", run, tmp_path / "x.html", "--text", "KING:", "--at", "40")
    )
    assert "€" in one_error_line(cli("explain", run, tmp_path / "x.html", "--text", "KING €"))
    assert not (tmp_path / "x.html").exists()


def test_the_model_page_is_current() -> None:
    """docs/model.md's tables and its architecture picture are what scripts/model_picture.py draws from
    the default model and model.py's source now (rerun the script when model.py's lines move)."""
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "scripts/model_picture.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    places = model_places()
    assert {p["stage"] for p in places} == set(range(1, 8))  # every stage has a place in the code
    assert all(p["line"] > 1 for p in places)


def test_options_not_drawn_are_named_and_the_rest_shown(page, runs) -> None:
    import minigpt

    m = minigpt.load(runs["options"], device="cpu")
    open_explained(page, runs, "options")
    limits = page.inner_text("#ex-limits")
    assert all(o in limits for o in ("qk_norm", "value_embeds", "logit_softcap", "attn_only")), limits
    assert "no feed-forward layer" in page.inner_text("#stage-6")
    got = read_numbers(page)
    assert "up" not in got  # no MLP to show
    ids = m.tokenizer.encode("KING:")
    with torch.no_grad():
        logits = m.loaded.model(torch.tensor([ids]))[0][0, -1]
        weights = m.loaded.model.attention_maps(torch.tensor([ids]))[0, 0, 0]  # layer 0, head 0: (T, T)
    torch.testing.assert_close(got["logits"], logits, atol=1e-4, rtol=0)
    torch.testing.assert_close(got["weights"], weights, atol=1e-4, rtol=0)


def test_the_pages_webassembly_is_matmul_wat() -> None:
    """gpt.js's MATMUL_WASM is matmul.wat assembled (by wasmtime): neither is edited without the other."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("wasm_kernel", ROOT / "scripts" / "wasm_kernel.py")
    assert spec is not None and spec.loader is not None
    kernel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernel)
    assert kernel.embedded_base64() == kernel.kernel_base64(), "run: uv run python scripts/wasm_kernel.py"
