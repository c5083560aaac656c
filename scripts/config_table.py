#!/usr/bin/env python3
"""Print the table of config keys for docs/configuration.md from the config dataclasses (the single source).

    uv run python scripts/config_table.py
A test (tests/test_docs.py) checks that docs/configuration.md contains exactly this table.
"""

from __future__ import annotations

from minigpt.config.schema import Config, all_keys


def config_table() -> str:
    defaults = Config().flat()
    rows = ["| key | default | meaning |", "| --- | --- | --- |"]
    for key, f in all_keys().items():
        value = defaults[key]
        if value is None:
            shown = "null"
        elif isinstance(value, bool):
            shown = str(value).lower()
        else:
            shown = repr(value)  # strings quoted, floats as written in YAML
        rows.append(f"| `{key}` | `{shown}` | {f.metadata['help']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(config_table())
