"""`minigpt train`: arguments checked before torch, then `start_run`, or torchrun with `--nproc N`."""

from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from minigpt.cli import help as cli_help
from minigpt.cli.options import AutoOpt, DataOpt, InitFromOpt, TrainDeviceOpt, start_load
from minigpt.errors import UserError
from minigpt.training.plan import (
    AUTO_PROCESSES,
    Resume,
    check_process_layout,
    read_request,
    train_request,
    write_request,
)


def train_cmd(
    args: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="CONFIG KEY=VALUE",
            help="A YAML config (default: the built-in configs/default.yaml) and dotted overrides such as "
            "model.n_layer=6 optim.lr=3e-4 train.max_steps=500.",
            show_default=False,
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            autocompletion=cli_help.complete_directory,
            show_default=False,
            help="Run directory (default: runs/<config name>, or runs/<data name> with --data).",
        ),
    ] = None,
    data: DataOpt = None,
    device: TrainDeviceOpt = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue the run in --out from its last.pt. "
            "--resume auto: start, resume or (exit 0) say it finished, for job scripts.",
        ),
    ] = False,
    init_from: InitFromOpt = None,
    nproc: Annotated[
        int | None,
        typer.Option("--nproc", help="Train with N local processes (DDP), launched through torchrun.", min=1),
    ] = None,
    auto: AutoOpt = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the plan, the resolved config (after --auto) and the advice; train nothing."
        ),
    ] = False,
    request: Annotated[Path | None, typer.Option("--request", hidden=True)] = None,
) -> None:
    """Train a model. Writes config.yaml, last.pt, best.pt and TensorBoard events to the run directory."""
    started = time.perf_counter()  # train.max_time counts from here: torch's import is in it
    if request is not None:  # a worker of --nproc: the launcher's checked request, whole
        path, items, out, mode = read_request(request)
    else:
        args, mode = resume_mode(args or [], resume)
        config_path, overrides = split_args(args)
        path, items = train_request(
            config_path, overrides, data=data, device=device, init_from=init_from, auto=auto, resume=mode
        )
    if nproc is not None:
        launch_processes(nproc, path, items, out, mode, dry_run)
    from minigpt.training.launch import start_run

    start_run(path, items, out, mode, started, dry_run=dry_run, load=start_load(), processes=nproc or 1)


def split_args(args: list[str]) -> tuple[Path | None, list[str]]:
    """[CONFIG] [KEY=VALUE ...] -> (config path, overrides)."""
    configs = [a for a in args if "=" not in a]
    overrides = [a for a in args if "=" in a]
    if len(configs) > 1:
        raise UserError(
            f"expected at most one CONFIG file, got {', '.join(configs)}; overrides are written KEY=VALUE "
            "(e.g. model.n_layer=6)"
        )
    from minigpt.config import config_file

    return (config_file(configs[0]) if configs else None), overrides


def resume_mode(args: list[str], resume: bool) -> tuple[list[str], Resume]:
    """`--resume auto`: the word after the flag reaches Typer as an argument; take it out."""
    if resume and "auto" in args:
        return [a for a in args if a != "auto"], Resume.AUTO
    return args, Resume(resume)


def launch_processes(
    nproc: int, path: Path | None, items: list, out: Path | None, resume: Resume, dry_run: bool
) -> None:
    """`--nproc N`: the batch split checked once, before torch loads (each worker then makes the plan,
    `plan_run`), then torchrun with N workers; --dry-run launches nothing."""
    from minigpt.config import MPS_PROCESSES
    from minigpt.config.files import load_config, parse_override

    pairs = [parse_override(item) for item in items]
    if resume is Resume.NO:  # say what is wrong once, here, rather than from every process
        check_process_layout(load_config(path, items), nproc, resuming=False, label="--nproc")
    elif ("train.device", "mps") in pairs:  # a resume's config is the checkpoint's: what the flags say
        raise UserError(MPS_PROCESSES)
    elif ("train.auto", True) in pairs and resume is Resume.AUTO:
        raise UserError(AUTO_PROCESSES)
    if dry_run:
        return
    launch_local(nproc, write_request(path, items, out, resume))


def launch_local(nproc: int, request: Path) -> NoReturn:
    """Become torchrun (`runtime/torchrun.py`) running `minigpt train --request FILE` on `nproc` processes."""
    command = [
        sys.executable,
        "-m",
        "minigpt.runtime.torchrun",
        f"--remove={request}",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "minigpt",
        "train",
        f"--request={request}",
    ]
    os.environ["MINIGPT_COMMAND"] = shlex.join(["minigpt", *sys.argv[1:]])  # the command the workers' done line names
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(sys.executable, command)
    except OSError:
        request.unlink(missing_ok=True)
        raise
