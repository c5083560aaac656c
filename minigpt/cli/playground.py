"""`minigpt playground`: the command's options; the page itself is built in export/playground.py."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from minigpt.cli import help as cli_help
from minigpt.cli.help import PlaygroundDtype


def playground_cmd(
    target: Annotated[Path, typer.Argument(metavar="RUN_DIR|CHECKPOINT", help="A run directory or a .pt file.",
                                           autocompletion=cli_help.complete_run_or_checkpoint)],
    out: Annotated[Path, typer.Argument(metavar="OUT.html", help="The page to write (replaced if it exists).")],
    dtype: Annotated[PlaygroundDtype, typer.Option("--dtype", help="The weights' precision in the page: float16 "
                     "halves its size.")] = "float32",
) -> None:  # fmt: skip
    """Write one HTML page that runs the model in the browser, offline (docs/playground.md).

    It samples (temperature, top-k, top-p, seed) and shows each character's probability and attention.
    """
    from minigpt.export.playground import playground_run

    print(playground_run(target, out, dtype), file=sys.stderr)
