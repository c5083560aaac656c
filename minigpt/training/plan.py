"""What `minigpt train` and `minigpt.train()` ask for, checked before torch is imported."""

from __future__ import annotations

import enum
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minigpt.errors import UserError

if TYPE_CHECKING:
    from minigpt.config.schema import Config

Override = str | tuple[str, Any]  # 'KEY=VALUE' as typed, or a (key, value) pair


class Resume(enum.Enum):
    """--resume: NO starts a run, YES continues --out's, AUTO starts, continues or finds it finished."""

    NO = False
    YES = True
    AUTO = "auto"


AUTO_PROCESSES = "--auto sizes a run for one process; with --nproc, set the model's keys (or leave out --nproc)"


def check_process_layout(cfg: Config, processes: int, resuming: bool, label: str = "the number of processes") -> None:
    """Refuse what `processes` processes (one, or --nproc's) cannot train: the one place these checks
    live. The --nproc launcher asks before torch loads, so that the error is said once; each process
    asks again before any work (its request may not have come through the launcher)."""
    from minigpt.config import MPS_PROCESSES
    from minigpt.config.schema import batch_split_error

    split = batch_split_error(cfg.train, processes, label)
    if split:
        raise UserError(split)
    if processes == 1:
        return
    if cfg.train.device == "mps":
        raise UserError(MPS_PROCESSES)
    if cfg.train.auto and not resuming:
        raise UserError(AUTO_PROCESSES)
    if cfg.optim.schedule_by == "time":
        raise UserError(
            "optim.schedule_by time trains on one process (each would read its own clock); "
            "use optim.schedule_by=steps with --nproc"
        )


def flag_items(
    data: str | Path | None, device: str | None, init_from: str | Path | None, auto: bool
) -> list[tuple[str, Any]]:
    """The given flags `train` and `sweep` share, as (config key, value) pairs."""
    pairs = [("data.path", data), ("train.device", device), ("train.init_from", init_from)]
    return [(key, str(value)) for key, value in pairs if value is not None] + ([("train.auto", True)] if auto else [])


def flat_items(config: Mapping[str, Any], source: str) -> list[tuple[str, Any]]:
    """{'model': {'n_layer': 2}} or {'model.n_layer': 2} -> [('model.n_layer', 2)]."""
    items: list[tuple[str, Any]] = []
    for key, value in config.items():
        if isinstance(value, Mapping):
            items += [(f"{key}.{k}", v) for k, v in value.items()]
        elif "." in key:
            items.append((key, value))
        else:
            raise UserError(f"{source}: {key!r} must be a section of keys (model, data, train, ...) or a dotted key")
    return items


def train_request(
    config: str | Path | Mapping[str, Any] | None,
    overrides: Sequence[Override] | Mapping[str, Any] = (),
    *,
    data: str | Path | None = None,
    device: str | None = None,
    init_from: str | Path | None = None,
    auto: bool = False,
    resume: Resume = Resume.NO,
    python: bool = False,
) -> tuple[Path | None, list[Override]]:
    """(CONFIG file, overrides): dict config, `overrides`, flags; each checked, errors naming its source."""
    from minigpt.config import config_file
    from minigpt.config.files import check_overrides, read_yaml

    if init_from is not None and resume is Resume.YES:  # --resume auto may start a fine-tuning run
        raise UserError("--init-from starts a new run and --resume continues one; give only one of them")
    path = None if config is None or isinstance(config, Mapping) else config_file(str(config))  # or a shipped name
    filed = flat_items(config, "config") if isinstance(config, Mapping) else []
    given = flat_items(overrides, "overrides") if isinstance(overrides, Mapping) else list(overrides)
    flags = flag_items(data, device, init_from, auto)
    if path is not None:
        read_yaml(path)
    sources = ("config", "overrides", "minigpt.train()") if python else ("command line",) * 3
    for items, source in zip((filed, given, flags), sources):
        check_overrides(items, source)
    return path, [*filed, *given, *flags]


def write_request(path: Path | None, items: Sequence[Override], out: Path | None, resume: Resume) -> Path:
    """`--nproc`: the checked request as a temporary file every worker reads (`read_request`)."""
    request = {
        "config": None if path is None else str(path),
        "overrides": [item if isinstance(item, str) else list(item) for item in items],
        "out": None if out is None else str(out),
        "resume": resume.value,
    }
    fd, name = tempfile.mkstemp(prefix="minigpt-train-", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(request, f)
    return Path(name)


def read_request(file: Path) -> tuple[Path | None, list[Override], Path | None, Resume]:
    """What `write_request` wrote: (CONFIG, overrides, --out, --resume); anything else is a `UserError`."""
    try:
        r = json.loads(file.read_text(encoding="utf-8"))
        items: list[Override] = [item if isinstance(item, str) else tuple(item) for item in r["overrides"]]
        if not all(isinstance(i, str) or len(i) == 2 and isinstance(i[0], str) for i in items):
            raise ValueError(items)
        config, out = r["config"], r["out"]
        return (Path(config) if config else None), items, (Path(out) if out else None), Resume(r["resume"])
    except (OSError, UnicodeError, ValueError, TypeError, KeyError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else "not a request --nproc wrote"
        raise UserError(
            f"--request {file}: {why}; it is --nproc's own option: run minigpt train CONFIG --nproc N instead"
        ) from None
