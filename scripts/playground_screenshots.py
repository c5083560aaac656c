#!/usr/bin/env python3
"""Screenshots of the playground page for docs/playground.md, taken in headless Chromium as a user
would see it: one mid-generation (a hover on a generated character shows its top guesses), one
with a clicked character's attention shown.

    uv run python scripts/playground_screenshots.py runs/default            # docs/img/playground_*.png
    uv run python scripts/playground_screenshots.py runs/default --out /tmp  # elsewhere

Needs /usr/bin/chromium (apt-get install chromium) and the dev dependencies (playwright).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from page_screenshots import ARGS, screenshot_args  # noqa: E402

PROMPT = "JULIET:\nO Romeo, Romeo! wherefore art thou Romeo?\n"


def main(argv: list[str] | None = None) -> int:
    args = screenshot_args(__doc__, argv)
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
