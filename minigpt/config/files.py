"""Config from YAML files and `KEY=VALUE` overrides (defaults < file < overrides), and back to YAML."""

from __future__ import annotations

import contextlib
import json
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from minigpt.config.schema import SECTIONS, Config, all_keys, check_value, config_from_dict, set_dotted, validate
from minigpt.errors import UserError


def parse_override(item: str | tuple[str, Any], source: str = "command line") -> tuple[str, Any]:
    """'optim.lr=3e-4' -> ('optim.lr', '3e-4' parsed as a YAML scalar); a (key, value) pair as it is."""
    if not isinstance(item, str):
        return item
    key, eq, text = item.partition("=")
    key = key.strip()
    if not eq or not key:
        raise UserError(f"{source}: override '{item}' must look like KEY=VALUE, e.g. train.max_steps=500")
    typ = _field_type(key)
    if takes_list(key) and text.strip().startswith("[") and text.strip().endswith("]"):
        text = text.strip()  # a list, as docs/training.md writes it: data.text_field=[title,body]
    elif typ is str or (typing.get_origin(typ) in (typing.Union, types.UnionType) and str in typing.get_args(typ)):
        if text.strip() in ("null", "~") and all_keys()[key].default is None:
            return key, None  # clears an optional string key
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":  # quoted: YAML's escapes
            with contextlib.suppress(yaml.YAMLError):
                parsed = yaml.safe_load(text)
                if isinstance(parsed, str):
                    return key, parsed
        return key, text  # a string key's override as written
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except (yaml.YAMLError, ValueError):  # PyYAML raises ValueError on some scalars, e.g. 0x_
        value = text  # not YAML: keep the raw string and let the type check decide
    if isinstance(value, dict) or isinstance(value, list) and not takes_list(key):
        raise UserError(f"{source}: override '{item}' must have a single value, not a YAML collection")
    return key, value


def _field_type(key: str) -> Any:
    """A dotted key's declared type (`int`, `str | None`, ...), or None for an unknown key."""
    if key.count(".") != 1 or key not in all_keys():
        return None
    section, name = key.split(".")
    return typing.get_type_hints(SECTIONS[section])[name]


def takes_list(key: str) -> bool:
    """Whether a key's value may be a list (data.path, data.text_field, log.hparam_keys, ...)."""
    return list[str] in typing.get_args(_field_type(key))


def read_yaml(path: Path) -> Any:
    """Read YAML with the safe loader; errors name the file, line and column."""
    if not path.exists():
        from minigpt.config import shipped_configs

        names = ", ".join(shipped_configs()) or "none found"
        raise UserError(f"config file {path} does not exist (the shipped configs, usable by name: {names})")
    if path.is_dir():
        raise UserError(f"config file {path} is a directory, not a YAML file")
    if not path.is_file():  # reading a device or a FIFO might never end
        raise UserError(f"config file {path} is not a regular file (a device, a FIFO or a socket); give a YAML file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"config file {path} is not UTF-8 text (bad byte at offset {e.start})") from None
    except OSError as e:
        raise UserError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = e.problem or e.context or "malformed YAML"
        raise UserError(f"{where}: malformed YAML: {problem}") from None
    except yaml.YAMLError as e:
        raise UserError(f"{path}: malformed YAML: {e}") from None
    except ValueError as e:  # PyYAML's own int() of a scalar it took for a number, e.g. 0x_
        raise UserError(f"{path}: malformed YAML: a value it cannot read ({e})") from None


def load_config(path: str | Path | None = None, overrides: Sequence[str | tuple[str, Any]] = ()) -> Config:
    """defaults < YAML file (if given) < overrides ('KEY=VALUE' or (key, value)), validated once."""
    return with_overrides(file_config(path), overrides, path)


def file_config(path: str | Path | None) -> Config:
    """defaults < the YAML file, keys and types checked; values wait for the overrides (`with_overrides`)."""
    source = str(path) if path is not None else "default config"
    raw = read_yaml(Path(path)) if path is not None else {}
    return config_from_dict(raw, source, check=False)  # an empty file is the defaults


def with_overrides(
    filed: Config, overrides: Sequence[str | tuple[str, Any]], path: str | Path | None, origin: str = "command line"
) -> Config:
    """`file_config(path)` with the overrides on top, validated; errors name the overrides by their `origin`."""
    source = str(path) if path is not None else "default config"
    if not overrides:
        validate(filed, source)
        return filed
    merged = filed.to_dict()
    for item in overrides:
        set_dotted(merged, *parse_override(item, origin), origin)
    both = f"{source} with the {origin.replace(' ', '-')} overrides" if path is not None else origin
    return config_from_dict(merged, both)


class _ReadableDumper(yaml.SafeDumper):
    """Strings with line breaks or tabs double-quoted: YAML's default folds them over lines, which reads as broken."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if any(c in value for c in "\n\r\t") else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ReadableDumper.add_representer(str, _str)


def default_run_dir(config_path: Path | None, overrides: Sequence[str | tuple[str, Any]]) -> Path:
    """Where a run goes without --out: runs/<CONFIG>, runs/<data>, runs/<CONFIG>-<data> or runs/default."""
    data = None
    for item in overrides:
        key, value = parse_override(item)
        if key == "data.path" and value:
            data = value if isinstance(value, str) else value[0]
    parts = [config_path.stem] if config_path is not None else []
    if data is not None:
        parts.append(data_name(data))
    return Path("runs") / ("-".join(parts) or "default")


def data_name(path: str) -> str:
    """'my_text.txt' -> 'my_text', '~/books/' -> 'books', 'notes/*.md' -> 'notes': a run folder's name."""
    fixed = re.split(r"[*?\[]", path, maxsplit=1)[0]  # a glob: the folder before its first wildcard
    p = Path(fixed).expanduser()
    name = p.name if fixed != path or fixed.endswith("/") else p.stem
    return name or p.resolve().name or "data"


def config_text(cfg: Config) -> str:
    """The resolved config as YAML (the run directory's config.yaml)."""
    text = yaml.dump(cfg.to_dict(), Dumper=_ReadableDumper, sort_keys=False, allow_unicode=True)
    return "# resolved minigpt config of this run\n" + text


def value_text(value: Any) -> str:
    """A config value as YAML and the command line spell it (true, null, "\\n" quoted, else str())."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str) and (not value.isprintable() or value != value.strip()):
        return json.dumps(value)  # YAML's double-quoted form: "\n" stays a newline
    return str(value)


def check_overrides(overrides: Sequence[str | tuple[str, Any]], source: str = "command line") -> None:
    """Each override's key and value on its own (unknown keys, types, bounds, choices), before the rest is known."""
    for item in overrides:
        check_value(*parse_override(item, source), source)
