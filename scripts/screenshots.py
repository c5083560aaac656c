#!/usr/bin/env python3
"""The screenshots under docs/img, taken in headless Chromium as a user would see the pages.

    uv run python scripts/screenshots.py explorer runs/default     # docs/img/explorer_*.png (docs/attention.md)
    uv run python scripts/screenshots.py playground runs/default   # docs/img/playground_*.png (docs/playground.md)
    uv run python scripts/screenshots.py playground runs/default --out /tmp   # elsewhere

explorer: the attention explorer (layer 1, a character pinned, another hovered, its tooltip open) and
the surprise page (a character hovered). playground: the playground mid-generation (a hovered
generated character shows its top guesses) and with a clicked character's attention shown.
Needs /usr/bin/chromium (apt-get install chromium) and the dev dependencies (playwright).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TEXT = """JULIET:
O Romeo, Romeo! wherefore art thou Romeo?
Deny thy father and refuse thy name;
Or, if thou wilt not, be but sworn my love,
And I'll no longer be a Capulet.
"""
PROMPT = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def explorer(m: Any, page: Any, out: Path) -> None:
    pages = {"attention": m.show_attention(TEXT), "score": m.show_score(TEXT)}
    page.set_viewport_size({"width": 1280, "height": 760})
    for kind, html in pages.items():
        path = out / f"explorer_{kind}.html"
        html.save(path)
        page.goto(path.as_uri())
        spans = page.locator("#text .t")
        if kind == "attention":
            page.click("#layers button:text-is('1')")
            spans.nth(TEXT.index("Capulet") + 6).click()  # pin its 't', then hover an earlier character
            spans.nth(TEXT.index("I'll")).hover()
        else:
            spans.nth(TEXT.index("wherefore") + 5).hover()
        shot = out / f"explorer_{kind}.png"
        page.screenshot(path=shot)
        path.unlink()
        print(f"wrote {shot}")


def playground(m: Any, page: Any, out: Path) -> None:
    page.set_viewport_size({"width": 1280, "height": 900})
    with tempfile.TemporaryDirectory() as tmp:
        path = m.playground().save(Path(tmp) / "playground.html")
        page.goto(path.as_uri())
        page.wait_for_function("window.playground && window.playground.ready")
        page.fill("#prompt", PROMPT)
        page.fill("#length", "20000")
        page.fill("#seed", "7")
        page.click("#generate")
        time.sleep(0.8)  # several hundred characters in, still generating
        generated = page.locator("#text .t.gen")
        generated.nth(generated.count() - 45).hover()  # a character near the end, in view
        page.evaluate("window.scrollTo(0, 0)")  # hovering may have scrolled the page itself a little
        shot = out / "playground_generating.png"
        page.screenshot(path=shot)
        print(f"wrote {shot}")
        page.click("#stop")
        page.wait_for_function("!window.playground.run.active")
        page.fill("#length", "160")
        page.click("#generate")
        page.wait_for_function("!window.playground.run.active")
        spans = page.locator("#text .t")
        spans.nth(spans.count() - 25).click()
        page.click("#layers button:text-is('1')")
        page.mouse.move(0, 0)
        shot = out / "playground_attention.png"
        page.screenshot(path=shot)
        print(f"wrote {shot}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pages", choices=["explorer", "playground"], help="which pages to photograph")
    ap.add_argument("run", help="a run directory or checkpoint")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for the PNG files")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    import minigpt

    m = minigpt.load(args.run, device="cpu")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
        page = browser.new_page(device_scale_factor=1)
        {"explorer": explorer, "playground": playground}[args.pages](m, page, args.out)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
