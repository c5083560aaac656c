"""What a training run is asked for, before torch is imported: the CONFIG file (or
minigpt.train()'s dict), KEY=VALUE overrides and the flags that are shortcuts for keys, each
checked in the config layer alone, so a mistyped key costs no start-up. `minigpt train` and
`minigpt.train()` both start here."""

from __future__ import annotations

import enum
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from minigpt.errors import UserError

Override = str | tuple[str, Any]  # 'KEY=VALUE' as typed, or a (key, value) pair


class Resume(enum.Enum):
    """--resume: NO starts a new run, YES continues the one in --out, AUTO (--resume auto) starts,
    continues or finds it finished. `Resume(False)`, `Resume(True)`, `Resume("auto")`."""

    NO = False
    YES = True
    AUTO = "auto"


def flag_items(
    data: str | Path | None, device: str | None, init_from: str | Path | None, auto: bool
) -> list[tuple[str, Any]]:
    """The flags `train` and `sweep` share (--data, --device, --init-from, --auto) as the config keys
    they stand for, those given."""
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
    """(the CONFIG file, the overrides): a dict config becomes overrides (after the defaults,
    before `overrides`), then the flags' keys (--data is data.path, ...); each checked on its own
    (the whole config is checked once the run is known: a resumed run's is its checkpoint's).
    An error names where the key came from: the command line, or (`python`, for minigpt.train())
    its `config`, its `overrides` or its keyword arguments."""
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
    """`--nproc`: the request as a file every worker reads whole (`read_request`), so each rank runs
    exactly what the launcher checked. A temporary file, not one in the run folder: that folder may
    not exist yet, and nothing is written there before the workers have checked every input."""
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
    """What `write_request` wrote: (CONFIG, overrides, --out, --resume). Anything else (a missing
    file, other JSON: `--request` is the launcher's, not a user's) is one `UserError`."""
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
