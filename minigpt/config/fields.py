"""Config fields with their rules in the metadata (help, choices, bounds, durations, path lists), and `field_error`."""

from __future__ import annotations

import difflib
import math
from dataclasses import field
from decimal import Decimal, InvalidOperation
from typing import Any

SEED_LIMIT = 2**63  # seeds are in [0, 2**63): what torch.Generator.manual_seed accepts
INT_LIMIT = 2**63  # every integer key fits a signed 64-bit int: train.max_steps=1e30 is a typo, not a plan


def config_field(
    default: Any,
    help: str,
    choices: tuple[str, ...] | None = None,
    ge: float | None = None,
    gt: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    duration: bool = False,
    paths: bool = False,
    on_resume: bool = False,
    auto: bool = False,
) -> Any:
    """A dataclass field with its rules in the metadata; `on_resume`: may change on resume; `auto`: --auto sets it."""
    bounds = {k: v for k, v in (("ge", ge), ("gt", gt), ("lt", lt), ("le", le)) if v is not None}
    meta = {"help": help, "choices": choices, "duration": duration, "paths": paths, **bounds}
    meta |= {"on_resume": on_resume, "auto": auto}
    return field(default=default, metadata=meta)


def parse_duration(text: str) -> float | None:
    """'90', '90s', '10m', '1.5h' -> seconds (> 0); None if it is not such a duration."""
    text = text.strip().lower()
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:], None)
    number = text[:-1] if scale else text
    try:
        seconds = float(number) * (scale or 1)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def whole_number(value: Any) -> int | None:
    """An integer key's value (5000, 5_000, "5000", exact 5e3) as an int; else, or past 2**63, None."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    if isinstance(value, int):
        return value if -INT_LIMIT <= value < INT_LIMIT else None
    try:
        exact = Decimal(value if isinstance(value, str) else repr(value))
    except InvalidOperation:
        return None
    if not exact.is_finite() or not -INT_LIMIT <= exact < INT_LIMIT or exact != exact.to_integral_value():
        return None  # the bound first: int(Decimal("1e999999999")) would build a billion-digit number
    return int(exact)


def whole_number_error(name: str, value: Any) -> str:
    """Why `value` is not a whole number for the integer key `name` (`whole_number` gave None)."""
    try:
        exact = None if isinstance(value, bool) else Decimal(value if isinstance(value, str) else repr(value))
    except (InvalidOperation, TypeError):
        exact = None
    if exact is None or not exact.is_finite():
        return f"{name} must be a whole number, got {value!r}"
    written = value.strip() if isinstance(value, str) else repr(value)  # as the user wrote it: 1e30, not 10**30
    if exact == exact.to_integral_value():
        side = "below 2**63" if exact > 0 else "above -2**63"
        return f"{name} must be a whole number {side}, got {written}"
    return f"{name} must be a whole number, got {written}"


def _number(x: float) -> str:
    return "2**63" if x == SEED_LIMIT else f"{x:g}"


def field_error(name: str, value: Any, meta: Any, flag: bool = False) -> str | None:
    """What is wrong with `value` for these metadata, or None; `flag` words it for a command-line option."""
    choices = meta.get("choices")
    if choices and value not in choices:
        if flag:
            return f"{name} must be {', '.join(choices[:-1])} or {choices[-1]}, got '{value}'"
        close = difflib.get_close_matches(str(value), choices, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"{name} must be one of {', '.join(choices)}, got '{value}'{hint}"
    if meta.get("duration") and value is not None and parse_duration(value) is None:
        return f"{name} must be a duration such as 90 (seconds), 90s, 10m or 1.5h, got '{value}'"
    if value is None or not any(b in meta for b in ("ge", "gt", "lt", "le")):
        return None
    lo, hi = meta.get("ge", meta.get("gt")), meta.get("lt", meta.get("le"))
    if hi is not None:  # an interval: [0, 1), (0, 1], [0, 2**63)
        inside = (lo <= value if "ge" in meta else lo < value) and (value < hi if "lt" in meta else value <= hi)
        if not (isinstance(value, float) and not math.isfinite(value)) and inside:
            return None
        left, right = "[" if "ge" in meta else "(", ")" if "lt" in meta else "]"
        return f"{name} must be in {left}{_number(lo)}, {_number(hi)}{right}, got {value}"
    op = ">=" if "ge" in meta else ">"
    ok = value >= lo if "ge" in meta else value > lo
    if isinstance(value, float):
        if ok and math.isfinite(value):
            return None
        return f"{name} must be a finite number {op} {_number(lo)}, got {value}"
    return None if ok else f"{name} must be {op} {_number(lo)}, got {value}"
