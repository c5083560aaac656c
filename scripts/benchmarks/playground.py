"""playground: how fast the playground page runs, and explains one prediction, in headless Chromium."""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from screenshots import ARGS as CHROMIUM_ARGS  # scripts/ is on the path: one list of the flags

from benchmarks.harness import DEFAULT_DATA, add_repeats_arg, machine_info, progress

PLAYGROUND_MODELS = {  # name: model overrides of the default config
    "default (3x128, context 64)": {},
    "6x384, context 256": {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256},
}


def random_model(overrides: dict[str, int], name: str) -> Any:
    """A LoadedModel with the default config (and `overrides`), random weights, tiny Shakespeare's 65 characters."""
    import dataclasses
    from types import SimpleNamespace

    import torch

    from minigpt.config.schema import config_from_dict
    from minigpt.data.tokenizer import CharTokenizer
    from minigpt.infer.loading import LoadedModel
    from minigpt.model import GPT

    cfg = config_from_dict({}, "defaults")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **overrides))
    tok = CharTokenizer.from_text(DEFAULT_DATA.read_text(encoding="utf-8"))
    torch.manual_seed(0)
    model = GPT(cfg.model, tok.vocab_size).eval()
    ckpt = SimpleNamespace(step=0, val_loss=None)
    return LoadedModel(model, tok, cfg, Path(f"random-{name.split()[0]}.pt"), ckpt)


def page_speed(browser: Any, page_path: Path, chars: int, repeats: int) -> tuple[float, float]:
    """Median characters/s and median open seconds over `repeats` fresh pages."""
    rates, opens = [], []
    for _ in range(repeats):
        context = browser.new_context(offline=True)
        pg = context.new_page()
        start = time.perf_counter()
        pg.goto(page_path.as_uri())
        pg.wait_for_function("window.playground && window.playground.ready")
        opens.append(time.perf_counter() - start)
        pg.fill("#prompt", "ROMEO:")
        pg.fill("#length", str(chars))
        pg.fill("#temperature", "0.8")
        pg.click("#generate")
        pg.wait_for_function("!window.playground.run.active && window.playground.run.chars > 0", timeout=600_000)
        run = pg.evaluate("({chars: window.playground.run.chars, ms: window.playground.run.ms})")
        rates.append(run["chars"] / (run["ms"] / 1000))
        context.close()
    return statistics.median(rates), statistics.median(opens)


def explain_speed(browser: Any, loaded: Any, folder: Path, repeats: int) -> tuple[float, float]:
    """Median ms to explain the last position of a full context (the whole view: the window's forward
    pass watched, every stage drawn) in the float16 page, and that page's MB."""
    from minigpt.export.playground import playground_page

    block = loaded.config.model.block_size
    text = DEFAULT_DATA.read_text(encoding="utf-8")[:block]
    path = playground_page(loaded, "float16", {"text": text, "at": block - 1}).save(folder / "explain.html")
    context = browser.new_context(offline=True)
    pg = context.new_page()
    pg.goto(path.as_uri())
    pg.wait_for_function("window.playground && window.playground.ready && !document.getElementById('explain').hidden")
    timed = "() => { const t0 = performance.now(); window.playground.explain(); return performance.now() - t0; }"
    ms = statistics.median(pg.evaluate(timed) for _ in range(repeats))
    context.close()
    return ms, path.stat().st_size / 1e6


def run(a: argparse.Namespace) -> int:
    """How fast the playground page runs, in headless Chromium.

    Characters per second generated in the page (after its prompt is read) and the time from
    navigation to the model ready (weights decoded), for the default model and a 6x384 context-256
    one; and the time to explain the last position of a full context (`minigpt explain`'s view, issue
    73's target: under 1 s) with that page's size in float16. Speed does not depend on the weights,
    so random ones are measured unless --run is given.
    Needs /usr/bin/chromium and the dev dependencies (playwright)."""
    from playwright.sync_api import sync_playwright

    from minigpt.export.playground import playground_page

    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=a.chromium, args=CHROMIUM_ARGS)
        for name, overrides in PLAYGROUND_MODELS.items():
            if a.run and not overrides:
                import minigpt

                loaded = minigpt.load(a.run, device="cpu").loaded
            else:
                loaded = random_model(overrides, name)
            path = Path(tmp) / "page.html"
            playground_page(loaded, "float32").save(path)
            rate, opened = page_speed(browser, path, a.chars, a.repeats)
            explain_ms, explain_mb = explain_speed(browser, loaded, Path(tmp), a.repeats)
            rows.append({"model": name, "page_mb": path.stat().st_size / 1e6, "chars_per_s": rate, "open_s": opened})
            rows[-1] |= {"explain_ms": explain_ms, "float16_page_mb": explain_mb}
            progress(f"{name}: {rate:,.0f} chars/s, opens in {opened:.2f} s, page {rows[-1]['page_mb']:.1f} MB")
        browser.close()
    print("| model | page | characters/s | page opens in | explain one position | page in float16 |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        explain = f"{r['explain_ms']:.0f} ms | {r['float16_page_mb']:.1f} MB"
        print(f"| {r['model']} | {r['page_mb']:.1f} MB | {r['chars_per_s']:,.0f} | {r['open_s']:.2f} s | {explain} |")
    print(json.dumps({"repeats": a.repeats, "chars": a.chars, "models": rows, "machine": machine_info()}))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--run", help="a trained run or checkpoint to measure as the default model")
    ap.add_argument("--chars", type=int, default=1000, help="characters generated per measurement")
    add_repeats_arg(ap, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
