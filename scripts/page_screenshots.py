#!/usr/bin/env python3
"""Screenshots of the two HTML pages for docs/attention.md, taken in headless Chromium as a user
would see them (a character pinned, another hovered, its tooltip open).

    uv run python scripts/page_screenshots.py runs/default            # docs/img/explorer_*.png
    uv run python scripts/page_screenshots.py runs/default --out /tmp  # elsewhere

Needs /usr/bin/chromium (apt-get install chromium) and the dev dependencies (playwright).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEXT = """JULIET:
O Romeo, Romeo! wherefore art thou Romeo?
Deny thy father and refuse thy name;
Or, if thou wilt not, be but sworn my love,
And I'll no longer be a Capulet.
"""
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def screenshot_args(doc: str | None, argv: list[str] | None) -> argparse.Namespace:
    """RUN [--out FOLDER] [--chromium PATH]: what every screenshot script takes."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a run directory or checkpoint")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for the PNG files")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = screenshot_args(__doc__, argv)
    from playwright.sync_api import sync_playwright

    import minigpt

    m = minigpt.load(args.run, device="cpu")
    pages = {"attention": m.show_attention(TEXT), "score": m.show_score(TEXT)}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 760}, device_scale_factor=1)
        for kind, html in pages.items():
            path = args.out / f"explorer_{kind}.html"
            html.save(path)
            page.goto(path.as_uri())
            spans = page.locator("#text .t")
            if kind == "attention":
                page.click("#layers button:text-is('1')")
                spans.nth(TEXT.index("Capulet") + 6).click()  # pin its 't', then hover an earlier character
                spans.nth(TEXT.index("I'll")).hover()
            else:
                spans.nth(TEXT.index("wherefore") + 5).hover()
            shot = args.out / f"explorer_{kind}.png"
            page.screenshot(path=shot)
            path.unlink()
            print(f"wrote {shot}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
