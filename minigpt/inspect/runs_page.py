"""`minigpt runs DIR --html PAGE`: the runs of a folder on one offline page (docs/runs.md), built from
plain data read by cli/runs_table.py; the page itself is web/runs.*."""

from __future__ import annotations

import math
from typing import Any

from minigpt.inspect.pages import HtmlPage, render


def differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    """The config keys whose value is not the same in every config (one missing counts as differing)."""
    keys = list(dict.fromkeys(k for config in configs for k in config))
    return [k for k in keys if len({repr(config.get(k, "<none>")) for config in configs}) > 1]


def finite(value: Any) -> Any:
    """`value` with every non-finite float as None: JSON has no NaN or Infinity."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def runs_html(folder: str, runs: list[dict[str, Any]]) -> HtmlPage:
    """The page of `runs`: one dict each with `run`, `config` (flat, or None), `results`, `steps`,
    `best_val_loss`, `best_val_loss_is_full`, `params`, `wall_s`, `problem` and `curve` (or None)."""
    differ = differing_keys([r["config"] for r in runs if r.get("config")])
    data = {"folder": folder, "runs": finite(runs), "differ": differ}
    curves = sum(1 for r in runs if r.get("curve") and r["curve"]["step"])
    keys = "every config key is the same"
    if differ:
        keys = "1 config key differs" if len(differ) == 1 else f"{len(differ)} config keys differ"
    summary = f"{len(runs)} run{'' if len(runs) == 1 else 's'}, {curves} with a val loss curve; {keys}"
    return HtmlPage(render("runs", f"runs: {folder}", data), "runs", summary, height=900)
