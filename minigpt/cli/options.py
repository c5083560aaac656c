"""Options several commands share, and the device an inference command runs on."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from minigpt.cli import help as cli_help
from minigpt.cli.help import UnknownChars
from minigpt.config import DEVICE_METAVAR


def device_option(help: str):
    return typer.Option("--device", metavar=DEVICE_METAVAR, autocompletion=cli_help.complete_device, help=help)


DeviceOpt = Annotated[str, device_option("The device: auto is cuda, else mps, else cpu.")]

# the flags `train` and `sweep` share, each a shortcut for a config key (training/plan.py flag_items)
DataOpt = Annotated[
    Path | None, typer.Option("--data", help="A file, folder or 'glob' to train on (shortcut for data.path=PATH).")
]
TrainDeviceOpt = Annotated[
    str | None, device_option("The device (shortcut for train.device): auto is cuda, else mps, else cpu.")
]
InitFromOpt = Annotated[
    Path | None,
    typer.Option(
        "--init-from",
        metavar="RUN_DIR|CHECKPOINT",
        autocompletion=cli_help.complete_run_or_checkpoint,
        help="Start a new run from these weights (a run directory's best.pt): fine-tuning. Shortcut for "
        "train.init_from; the model section is the checkpoint's.",
    ),
]
AutoOpt = Annotated[
    bool,
    typer.Option(
        "--auto",
        help="Choose the model and optimizer for train.max_time from the text and a short speed probe "
        "(shortcut for train.auto=true; keys you set win).",
    ),
]
ThreadsOpt = Annotated[
    int,
    typer.Option(
        "--threads",
        min=0,
        show_default=False,
        help="CPU threads (0 = the cores this process may use, less those busy).",
    ),
]
TargetArg = Annotated[
    Path,
    typer.Argument(
        metavar="RUN_DIR|CHECKPOINT",
        help="A run directory or a .pt file.",
        autocompletion=cli_help.complete_run_or_checkpoint,
    ),
]
HtmlOpt = Annotated[
    Path | None, typer.Option("--html", help="Write one self-contained HTML page (opens offline), e.g. page.html.")
]
UnknownOpt = Annotated[UnknownChars, typer.Option("--unknown", help="What to do with characters the model never saw.")]


def start_load():
    """The cores others keep busy, measured from now to their use (docs/runs.md)."""
    from minigpt.runtime.cores import CoreLoad

    return CoreLoad()


def inference_device(name: str, threads: int):
    """The device an inference command runs on, with the CPU thread count set first."""
    from minigpt.runtime.device import configure_threads, resolve_device

    configure_threads(threads, start_load().others())  # cores a training beside us keeps busy are left to it
    return resolve_device(name)


def wants_colour(no_color: bool) -> bool:
    """Colour on a terminal, or where FORCE_COLOR is set, unless --no-color."""
    return not no_color and (sys.stdout.isatty() or os.environ.get("FORCE_COLOR") is not None)
