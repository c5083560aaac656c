#!/usr/bin/env python3
"""The screenshots under docs/img, taken in headless Chromium as a user would see the pages.

    uv run python scripts/screenshots.py explorer runs/default     # docs/img/explorer_*.png (docs/inside.md)
    uv run python scripts/screenshots.py playground runs/default   # docs/img/playground_*.png (docs/inside.md)
    uv run python scripts/screenshots.py playground runs/default --out /tmp   # elsewhere
    uv run python scripts/screenshots.py explain runs/default      # docs/img/explain_*.png (docs/model.md)
    uv run python scripts/screenshots.py tensorboard runs/sweep    # docs/img/tensorboard_*.png (docs/runs.md)

explorer: the attention explorer (layer 1, a character pinned, another hovered, its tooltip open) and
the surprise page (a character hovered). playground: the playground mid-generation (a hovered
generated character shows its top guesses) and with a clicked character's attention shown.
explain: `minigpt explain`'s page on one prediction, the whole page, each of its seven stages, and stage 3
in the numbers view.
tensorboard: TensorBoard served on localhost over a folder of runs (docs/runs.md says how
the docs' four were trained): the HParams table, and the projector with the last embeddings of
the run with the lowest val/loss_full in 2-D, the character e selected: every point labelled, its
nearest neighbours listed.
Needs /usr/bin/chromium (apt-get install chromium) and the dev dependencies (playwright).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
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


def explain(m: Any, page: Any, out: Path) -> None:
    from minigpt.export.playground import playground_page

    text = PROMPT.rstrip("\n")
    page.set_viewport_size({"width": 1280, "height": 900})
    with tempfile.TemporaryDirectory() as tmp:
        at = len(m.tokenizer.encode(text)) - 3  # the 'e' of the last "Romeo?": what comes after it
        path = playground_page(m.loaded, "float32", {"text": text, "at": at}).save(Path(tmp) / "explain.html")
        page.goto(path.as_uri())
        page.wait_for_function(
            "window.playground && window.playground.ready && !document.getElementById('explain').hidden"
        )
        page.click("#ex-layers button:text-is('1')")
        page.evaluate("document.getElementById('explain').scrollIntoView()")
        shots = [(out / "explain_page.png", page.screenshot)]
        page.add_style_tag(content=".extools { position: static; }")  # the stages' own shots: no toolbar over them
        shots += [(out / f"explain_stage{n}.png", page.locator(f"#stage-{n}").screenshot) for n in range(1, 8)]
        for shot, take in shots:
            take(path=shot)
            print(f"wrote {shot}")
        page.click("#ex-view button:text-is('numbers')")  # the same stage as text
        shot = out / "explain_numbers.png"
        page.locator("#stage-3").screenshot(path=shot)
        print(f"wrote {shot}")


def serve_tensorboard(logdir: Path) -> tuple[subprocess.Popen, str]:
    """TensorBoard on a free localhost port, once it lists the runs under `logdir`."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/data/runs") as r:
                if json.load(r):
                    return server, url
        except OSError:
            pass
        time.sleep(0.5)
    server.terminate()
    raise SystemExit(f"TensorBoard listed no runs under {logdir} within 2 minutes")


def best_run(logdir: Path) -> str:
    """The run (its folder's name under `logdir`) with the lowest whole-split val loss."""
    scored = {p.parent: json.loads(p.read_text())["val_loss_full"] for p in logdir.glob("*/results.json")}
    return min((v, k.relative_to(logdir).as_posix()) for k, v in scored.items() if v is not None)[1]


def tensorboard(logdir: Path, page: Any, out: Path) -> None:
    server, url = serve_tensorboard(logdir)
    try:
        page.set_viewport_size({"width": 1600, "height": 480})
        page.goto(f"{url}/#hparams")
        page.wait_for_selector("text=Trial ID", timeout=60_000)
        page.wait_for_timeout(1500)  # the metric columns fill in after the rows
        shot = out / "tensorboard_hparams.png"
        page.screenshot(path=shot)
        print(f"wrote {shot}")

        page.set_viewport_size({"width": 1280, "height": 860})
        page.goto(f"{url}/#projector")
        while not any("projector_binary" in f.url for f in page.frames):
            page.wait_for_timeout(200)  # the projector is a page in a frame in a frame
        frame = next(f for f in page.frames if "projector_binary" in f.url)
        dropdowns = frame.locator("vz-projector-data-panel paper-dropdown-menu")
        frame.wait_for_selector("vz-projector-data-panel paper-dropdown-menu")
        # the run, the tensor (None: the last step's) and what colours the points
        for index, choice in ((0, best_run(logdir)), (1, None), (3, "class")):
            dropdowns.nth(index).click()
            items = dropdowns.nth(index).locator("paper-item")
            (items.last if choice is None else items.filter(has_text=choice).first).click()
            page.wait_for_timeout(1500)
        frame.locator("#z-checkbox").click()  # 2-D
        page.wait_for_timeout(1000)
        # select 'e' as a click on its point would (its place on the canvas is not in the page):
        # every point is then labelled, shaded by its distance to e, and the nearest are listed
        select = "p => p.notifySelectionChanged([p.dataSet.points.findIndex(q => q.metadata.token === 'e')])"
        frame.locator("vz-projector").evaluate(select)
        page.wait_for_timeout(2000)
        shot = out / "tensorboard_projector.png"
        page.screenshot(path=shot)
        print(f"wrote {shot}")
    finally:
        server.terminate()
        server.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "pages", choices=["explorer", "playground", "explain", "tensorboard"], help="which pages to photograph"
    )
    ap.add_argument("run", help="a run directory or checkpoint (tensorboard: a folder of runs)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img", help="folder for the PNG files")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args(argv)
    from playwright.sync_api import sync_playwright

    import minigpt

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=args.chromium, args=ARGS)
        page = browser.new_page(device_scale_factor=1)
        if args.pages == "tensorboard":
            tensorboard(Path(args.run), page, args.out)
        else:
            m = minigpt.load(args.run, device="cpu")
            {"explorer": explorer, "playground": playground, "explain": explain}[args.pages](m, page, args.out)
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
