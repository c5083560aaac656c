"""`minigpt train`, from its flags to `train.launch.start_run`: the CONFIG and KEY=VALUE arguments,
the config checked before torch is imported (a mistyped key costs no start-up), and `--nproc N`,
which checks what can be checked once and then becomes torchrun running N processes of
`minigpt train`. Registered in app.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from minigpt.cli import help as cli_help
from minigpt.cli.options import AutoOpt, DataOpt, InitFromOpt, TrainDeviceOpt, flag_overrides
from minigpt.errors import UserError


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
            help="Run directory (default: runs/<config name>).",
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
        typer.Option("--dry-run", help="Print the resolved config (after --auto) and the advice; train nothing."),
    ] = False,
) -> None:
    """Train a model. Writes config.yaml, last.pt, best.pt and TensorBoard events to the run directory."""
    started = time.perf_counter()  # train.max_time counts from here: torch's import is in it
    args, mode = resume_mode(args or [], resume)
    config_path, overrides = split_args(args)
    if init_from is not None and mode is True:  # --resume auto may start a fine-tuning run
        raise UserError("--init-from starts a new run and --resume continues one; give only one of them")
    if nproc is not None:
        flags = {"--out": out, "--data": data, "--device": device, "--init-from": init_from}
        launch_processes(nproc, args, flags, mode, config_path, overrides)
    extra: list[str | tuple[str, object]] = [*overrides, *flag_overrides(data, device, init_from, auto)]
    check_config_first(config_path, extra)  # a mistyped key is told before torch is imported
    from minigpt.train.launch import start_run

    start_run(config_path, extra, out, mode, started, dry_run=dry_run)


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


def resume_mode(args: list[str], resume: bool) -> tuple[list[str], bool | str]:
    """`--resume auto`: the word after the flag reaches Typer as an argument; take it out."""
    if resume and "auto" in args:
        return [a for a in args if a != "auto"], "auto"
    return args, resume


def check_config_first(config_path: Path | None, overrides: list) -> None:
    """The CONFIG file and each override on its own, in the config layer alone (no torch): the
    whole config again once the run is known (a resumed run's is its checkpoint's)."""
    from minigpt.config.files import check_overrides, read_yaml

    if config_path is not None:
        read_yaml(config_path)
    check_overrides(overrides)


def launch_processes(
    nproc: int,
    args: list[str],
    flags: dict[str, object],
    resume: bool | str,
    config_path: Path | None,
    overrides: list[str],
) -> None:
    """`--nproc N`: check what can be checked once, here, then become torchrun running `minigpt train`."""
    from minigpt.config import MPS_PROCESSES
    from minigpt.config.files import load_config
    from minigpt.config.schema import batch_split_error

    if flags["--device"] == "mps":
        raise UserError(MPS_PROCESSES)
    if not resume:  # say what is wrong once, here, rather than from every process
        cfg = load_config(config_path, overrides)
        split = batch_split_error(cfg.train, nproc, "--nproc")
        if split:
            raise UserError(split)
        if cfg.train.device == "mps" and flags["--device"] is None:
            raise UserError(MPS_PROCESSES)
    argv = ["train", *args]
    for flag, value in flags.items():
        if value is not None:
            argv += [flag, str(value)]
    launch_local(nproc, argv + (["--resume"] if resume else []) + (["auto"] if resume == "auto" else []))


def launch_local(nproc: int, argv: list[str]) -> NoReturn:
    """Replace this process with torchrun's elastic launcher running `minigpt ARGV` on `nproc` local
    processes (standalone rendezvous on a free port), through `runtime/torchrun.py`: SIGUSR1 reaches
    the workers like SIGTERM, and a planned stop's exit code (143, 138, 74, ...) comes back. Nothing
    here imports torch: this process only becomes the launcher (a faster launch)."""
    command = [
        sys.executable,
        "-m",
        "minigpt.runtime.torchrun",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "minigpt",
        *argv,
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
