"""The README's promises that can drift: the key table and the Quick start commands."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_readme_config_table_is_current() -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        from config_table import config_table
    finally:
        sys.path.pop(0)
    block = README.split("<!-- config-table:start -->")[1].split("<!-- config-table:end -->")[0]
    assert block.strip() == config_table(), "run: uv run python scripts/config_table.py, and paste it into README.md"


def test_quick_start_is_two_commands_and_ci_runs_the_test_one() -> None:
    quick = README.split("## Quick start")[1].split("```bash")[1].split("```")[0]
    commands = [re.sub(r"\s+#.*", "", line).strip() for line in quick.strip().splitlines()]
    assert commands == ["uv run minigpt train", "uv run pytest"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^uv run pytest$", ci, re.M)
