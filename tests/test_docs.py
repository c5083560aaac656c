"""The documentation's promises that can drift: the key table, the Quick start commands, the
README's length, and the relative links between the README and the pages under docs/."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIG_PAGE = ROOT / "docs" / "configuration.md"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_config_table_is_current() -> None:
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "scripts" / "config_table.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    config_table = script.config_table
    page = CONFIG_PAGE.read_text(encoding="utf-8")
    block = page.split("<!-- config-table:start -->")[1].split("<!-- config-table:end -->")[0]
    assert block.strip() == config_table(), (
        "run: uv run python scripts/config_table.py, and paste it into docs/configuration.md"
    )


def test_quick_start_is_two_commands_and_ci_runs_the_test_one() -> None:
    quick = README.split("## Quick start")[1].split("```bash")[1].split("```")[0]
    commands = [re.sub(r"\s+#.*", "", line).strip() for line in quick.strip().splitlines()]
    assert commands == ["uv run minigpt train", "uv run pytest"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^uv run pytest$", ci, re.M)


def test_readme_is_short() -> None:
    lines = len(README.splitlines())
    assert lines <= 250, f"README.md has {lines} lines; move detail into a page under docs/"


FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
# [text](target) and ![alt](target), an optional "title" after the target.
LINK = re.compile(r"!?\[[^\[\]]*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def outside_fences(text: str) -> list[str]:
    """The lines that are not in a fenced code block (nor its fence lines)."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and m.group(1) == fence:
            fence = None
        elif fence is None:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link markup dropped (its text kept), lower case, every
    character but letters, digits, '_', '-' and spaces removed, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in outside_fences(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if m:
            base = name = slug(m.group(1))
            n = 0
            while name in found:  # GitHub numbers a repeated heading: x, x-1, x-2, ...
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def relative_links(path: Path) -> list[str]:
    targets = []
    for line in outside_fences(path.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):  # not inside inline code
            if not re.match(r"^(https?:|mailto:)", target, re.I):
                targets.append(target)
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_link_checker_sees_links_and_headings(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## What `data.path` accepts\n\n## A, b (c) 2026-11-22\n\n## A, b (c) 2026-11-22\n\n"
        "See [x](other.md#part), ![img](img/a.png), [web](https://example.com), [self](#title).\n\n"
        "```bash\n# not a heading\necho '[no](link.md)'\n```\n\n`[no](code.md)`\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["other.md#part", "img/a.png", "#title"]
    assert anchors(page) == {"title", "what-datapath-accepts", "a-b-c-2026-11-22", "a-b-c-2026-11-22-1"}
