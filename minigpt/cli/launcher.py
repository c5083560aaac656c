"""`minigpt train` before any training: its CONFIG and KEY=VALUE arguments, and `--nproc N`, which
checks what can be checked once and then becomes torchrun running N processes of `minigpt train`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

from minigpt.errors import UserError


def split_args(args: list[str]) -> tuple[Path | None, list[str]]:
    """[CONFIG] [KEY=VALUE ...] -> (config path, overrides)."""
    configs = [a for a in args if "=" not in a]
    overrides = [a for a in args if "=" in a]
    if len(configs) > 1:
        raise UserError(
            f"expected at most one CONFIG file, got {', '.join(configs)}; overrides are written KEY=VALUE "
            "(e.g. model.n_layer=6)"
        )
    return (Path(configs[0]) if configs else None), overrides


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


def launch_processes(nproc: int, args: list[str], flags: dict[str, object], resume: bool | str,
                      config_path: Path | None, overrides: list[str]) -> None:  # fmt: skip
    """`--nproc N`: check what can be checked once, here, then become torchrun running `minigpt train`."""
    from minigpt.config.choices import MPS_PROCESSES
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
    here imports torch: this process only becomes the launcher (seconds saved a launch: docs/benchmarks.md)."""
    command = [sys.executable, "-m", "minigpt.runtime.torchrun", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "minigpt", *argv]  # fmt: skip
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)
