"""`minigpt sweep`: the grid checked before torch, the runs, the sorted table."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from minigpt.cli import help as cli_help
from minigpt.cli.options import AutoOpt, DataOpt, InitFromOpt, TrainDeviceOpt
from minigpt.cli.train import split_args
from minigpt.errors import UserError


def sweep_cmd(
    args: Annotated[
        list[str],
        typer.Argument(
            metavar="CONFIG KEY=V1,V2",
            help="A YAML config (default: the built-in one), then keys with the values to try, comma-separated "
            "(model.n_layer=2,4 optim.lr=1e-3,3e-3); a key with one value is fixed for every run. Only top-level "
            "commas separate: one inside [...], {...} or a quoted value stays in it.",
        ),
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            autocompletion=cli_help.complete_directory,
            help="The sweep's folder, one run directory per point in it (default: runs/<config name>-sweep; with "
            "--data, runs/<data name>-sweep).",
        ),
    ] = None,
    draw: Annotated[
        int | None, typer.Option("--random", min=1, help="Train N distinct points of the grid, drawn by --seed.")
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="The seed of --random's draw.")] = 0,
    data: DataOpt = None,
    device: TrainDeviceOpt = None,
    init_from: InitFromOpt = None,
    auto: AutoOpt = False,
    max_total_time: Annotated[
        str | None,
        typer.Option(
            "--max-total-time",
            metavar="DURATION",
            help="A budget for the whole command (90s, 30m, 2h): a run gets at most what is left as its "
            "train.max_time, and runs with nothing left are not started.",
        ),
    ] = None,
) -> None:
    """Train one run per combination of values, one after another, and print them sorted by val loss.

    Each run is an ordinary run in OUT/<its values> (e.g. runs/x-sweep/n_layer=2,lr=1e-3). Run the same command
    again after an interruption: finished runs are skipped and an interrupted one resumes (docs/runs.md).
    """
    from minigpt.config.fields import parse_duration
    from minigpt.config.files import default_run_dir
    from minigpt.training.plan import flag_items
    from minigpt.training.sweep import plan_sweep

    started = time.perf_counter()  # --max-total-time counts from here: torch's import is in it
    budget = parse_duration(max_total_time) if max_total_time is not None else None
    if max_total_time is not None and budget is None:
        raise UserError(f"--max-total-time must be a duration such as 90s, 30m or 2h, got {max_total_time!r}")
    config_path, items = split_args(args)
    for key, value in flag_items(data, device, init_from, auto):  # as items KEY=VALUE (a comma quoted: one value)
        if any(item.partition("=")[0].strip() == key for item in items):
            raise UserError(f"{key} is set twice, by its flag and by {key}=...; give one of them")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        items.append(f"{key}='{text}'" if "," in text else f"{key}={text}")
    if out is None:
        run_dir = default_run_dir(config_path, items)
        out = run_dir.with_name(f"{run_dir.name}-sweep")
    sweep = plan_sweep(config_path, items, out, draw, seed)  # every point checked: before torch, before any run
    from minigpt.cli.runs_table import format_sweep, sweep_rows
    from minigpt.training.sweep import run_sweep

    notes = {o.point.name: o.note for o in run_sweep(sweep, budget, started)}
    print(format_sweep(sweep_rows(sweep, notes)))
