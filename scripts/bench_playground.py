#!/usr/bin/env python3
"""How fast the playground page runs, in headless Chromium: characters per second generated in the
page (after its prompt is read), and how long the page takes to open (navigation start to the
model ready, weights decoded), for the default model and for a 6x384 context-256 model.

    uv run python scripts/bench_playground.py                    # random weights, both models
    uv run python scripts/bench_playground.py --run runs/default # a trained default model instead
    uv run python scripts/bench_playground.py --repeats 5 --chars 2000

Speed does not depend on what the weights are, so random ones are measured unless --run is given.
Each figure is the median of --repeats; run it with nothing else on the machine (docs/playground.md).
Needs /usr/bin/chromium and the dev dependencies (playwright).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
MODELS = {  # name: model overrides of the default config
    "default (3x128, context 64)": {},
    "6x384, context 256": {"n_layer": 6, "n_head": 6, "n_embd": 384, "block_size": 256},
}


def random_model(overrides: dict, name: str):
    """A LoadedModel with the default config (and `overrides`), random weights, tiny Shakespeare's 65 characters."""
    import dataclasses

    import torch

    from minigpt.config.schema import config_from_dict
    from minigpt.data.tokenizer import CharTokenizer
    from minigpt.infer.loading import LoadedModel
    from minigpt.model import GPT

    cfg = config_from_dict({}, "defaults")
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, **overrides))
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")
    tok = CharTokenizer.from_text(text)
    torch.manual_seed(0)
    model = GPT(cfg.model, tok.vocab_size).eval()
    ckpt = SimpleNamespace(step=0, val_loss=None)
    return LoadedModel(model, tok, cfg, Path(f"random-{name.split()[0]}.pt"), ckpt)


def measure(browser, page_path: Path, chars: int, repeats: int) -> tuple[float, float]:
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", help="a trained run or checkpoint to measure as the default model")
    ap.add_argument("--chars", type=int, default=1000, help="characters generated per measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from playwright.sync_api import sync_playwright

    from minigpt.export.playground import playground_page

    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
        for name, overrides in MODELS.items():
            if args.run and not overrides:
                import minigpt

                loaded = minigpt.load(args.run, device="cpu").loaded
            else:
                loaded = random_model(overrides, name)
            path = Path(tmp) / "page.html"
            page = playground_page(loaded, "float32")
            page.save(path)
            rate, opened = measure(browser, path, args.chars, args.repeats)
            rows.append((name, path.stat().st_size, rate, opened))
            print(f"{name}: {rate:,.0f} chars/s, opens in {opened:.2f} s, page {path.stat().st_size / 1e6:.1f} MB",
                  file=sys.stderr, flush=True)  # fmt: skip
        browser.close()
    print("| model | page | characters/s | page opens in |")
    print("|---|---:|---:|---:|")
    for name, size, rate, opened in rows:
        print(f"| {name} | {size / 1e6:.1f} MB | {rate:,.0f} | {opened:.2f} s |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
