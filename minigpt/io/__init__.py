"""Files, safely: atomic writes (atomic), the one lock between processes (lock), and reading a text
file a user named (textfiles), and where minigpt keeps its caches. Standard library (and filelock) only."""

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """$MINIGPT_CACHE_DIR, else $XDG_CACHE_HOME/minigpt, else ~/.cache/minigpt."""
    if os.environ.get("MINIGPT_CACHE_DIR"):
        return Path(os.environ["MINIGPT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minigpt"
