#!/usr/bin/env python3
"""The package's shape in numbers: lines per module, the longest functions, and which minigpt
modules each module imports (at any depth of the file, lazy imports included).

    uv run python scripts/code_shape.py              # table + the limits of docs/design.md
    uv run python scripts/code_shape.py --check      # exit 1 if a module passes 400 lines or a function 60

A function's length is its span in the file (`def` line to last line, decorators, docstring and
comments included), as a reader meets it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "minigpt"
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def functions(tree: ast.AST) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                out.append((prefix + child.name, child.end_lineno - start + 1))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def minigpt_imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("minigpt"):
            if node.module == "minigpt":
                names.update(a.name for a in node.names)
            else:
                names.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("minigpt."))
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when a limit is passed")
    args = ap.parse_args(argv)
    problems = []
    print(f"{'module':<16} {'lines':>5}  longest function              imports")
    for path in sorted(PACKAGE.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        n_lines = len(text.splitlines())
        funcs = sorted(functions(tree), key=lambda f: -f[1])
        longest = f"{funcs[0][0]} ({funcs[0][1]})" if funcs else "-"
        print(f"{path.stem:<16} {n_lines:>5}  {longest:<29} {', '.join(sorted(minigpt_imports(tree))) or '-'}")
        if n_lines > MAX_MODULE_LINES:
            problems.append(f"{path.name}: {n_lines} lines (limit {MAX_MODULE_LINES})")
        problems += [f"{path.name}: {n} is {k} lines (limit {MAX_FUNCTION_LINES})" for n, k in funcs
                     if k > MAX_FUNCTION_LINES]  # fmt: skip
    print("\n".join(problems) if problems else f"no module over {MAX_MODULE_LINES} lines, no function over "
          f"{MAX_FUNCTION_LINES}")  # fmt: skip
    return 1 if problems and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
