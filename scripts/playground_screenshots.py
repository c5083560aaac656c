#!/usr/bin/env python3
"""Screenshots of the playground page for docs/playground.md, taken in headless Chromium as a user
would see it: one mid-generation (a hover on a generated character shows its top guesses), one
with a clicked character's attention shown.

    uv run python scripts/playground_screenshots.py runs/default            # docs/img/playground_*.png
    uv run python scripts/playground_screenshots.py runs/default --out /tmp  # elsewhere

Needs /usr/bin/chromium (apt-get install chromium) and the dev dependencies (playwright).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip
PROMPT = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run directory or checkpoint")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for the PNG files")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    import minigpt

    page_html = minigpt.load(args.run, device="cpu").playground()
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        path = page_html.save(Path(tmp) / "playground.html")
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
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
        shot = args.out / "playground_generating.png"
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
        shot = args.out / "playground_attention.png"
        page.screenshot(path=shot)
        print(f"wrote {shot}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
