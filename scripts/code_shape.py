#!/usr/bin/env python3
"""The package's shape, checked: its layers, the imports between them, and the size of its modules
and functions.

    uv run python scripts/code_shape.py              # the layer diagram, a table, and what breaks a rule
    uv run python scripts/code_shape.py --check      # the same; exit 1 when a rule is broken

The rules (docs/design.md):
- every import points down the layer order below, or stays inside its own subpackage;
- no cycle between modules, counting imports inside functions and under `TYPE_CHECKING`;
- `typer` only in `cli/`; `tqdm` and `tensorboard` only in `training/`; `IPython` nowhere;
- no function body over 80 lines (GUIDE.md: past that a function usually hides a seam). A body
  runs from the line after the signature to the function's last line, docstring and comments
  included; the signature is left out, since a command's options live there. Modules have no line
  cap: a module is split when it gains a second responsibility, which no count can see, so the
  table shows each module's size for a reader to judge.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "minigpt"
MAX_FUNCTION_LINES = 80
# Bottom first. A unit is a subpackage or a top-level module; "minigpt" is the package's own
# __init__ (version and the lazy `minigpt.load`). A unit may import its own modules and the units
# of lower layers, never one of its own layer or above.
LAYERS: list[tuple[str, ...]] = [
    ("errors",),
    ("config", "io"),
    ("runtime",),
    ("data", "model", "checkpoint"),
    ("infer",),
    ("inspect",),
    ("training", "export"),
    ("api",),
    ("minigpt",),
    ("cli",),
    ("__main__",),
]
ONLY_IN = {"typer": {"cli"}, "tqdm": {"training"}, "tensorboard": {"training"}, "IPython": set()}


def functions(tree: ast.AST) -> list[tuple[str, int]]:
    """(qualified name, body lines) of every function and method."""
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((prefix + child.name, child.end_lineno - child.body[0].lineno + 1))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def module_names(package: Path) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the package (a package is its __init__)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(tree: ast.AST, known: set[str]) -> tuple[set[str], set[str]]:
    """(the package's modules imported anywhere in the file, lazy and TYPE_CHECKING imports
    included; the top-level names of other packages imported)."""
    ours, others = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in known]
            names = names or [node.module]  # `from pkg import module`: the module, not (only) the package
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name.split(".")[0] != "minigpt":
                others.add(name.split(".")[0])
                continue
            while name not in known and "." in name:  # `import minigpt.a.b.thing` of a name, not a module
                name = name.rsplit(".", 1)[0]
            ours.add(name)
    return ours, others


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "minigpt"


def layer_of(name: str) -> int | None:
    return next((i for i, units in enumerate(LAYERS) if name in units), None)


def layer_problems(module: str, ours: set[str], others: set[str]) -> list[str]:
    """What breaks the layer order, the single-owner rules of third-party packages, or is unplaced."""
    problems = []
    own = unit(module)
    if layer_of(own) is None:
        return [f"{module}: {own} has no place in the layer order (LAYERS in scripts/code_shape.py)"]
    for target in sorted(ours):
        there = unit(target)
        if there == own:
            continue
        if layer_of(there) is None or layer_of(there) >= layer_of(own):
            problems.append(f"{module} imports {target}: {own} may not import {there} (layer order)")
    for name in sorted(others):
        if name in ONLY_IN and own not in ONLY_IN[name]:
            where = ", ".join(sorted(ONLY_IN[name])) or "nowhere"
            problems.append(f"{module} imports {name}: only {where} may")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in graph.get(v, ()):
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def diagram() -> str:
    rows = [" | ".join(units) for units in reversed(LAYERS)]
    return "layers, each importing only those below it:\n" + "\n".join(
        f"  {row}" + ("\n    v" if i < len(rows) - 1 else "") for i, row in enumerate(rows)
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 when a rule is broken")
    ap.add_argument("--package", type=Path, default=PACKAGE, help="the package folder (default: minigpt/)")
    args = ap.parse_args(argv)
    modules = module_names(args.package)
    problems: list[str] = []
    graph: dict[str, set[str]] = {}
    print(diagram())
    print(f"{'module':<26} {'lines':>5}  {'longest function':<34} imports")
    for name, path in modules.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        n_lines = len(text.splitlines())
        funcs = sorted(functions(tree), key=lambda f: -f[1])
        ours, others = imports(tree, set(modules))
        ours.discard(name)
        graph[name] = ours
        longest = f"{funcs[0][0]} ({funcs[0][1]})" if funcs else "-"
        shown = ", ".join(sorted(m.removeprefix("minigpt.") for m in ours)) or "-"
        print(f"{name.removeprefix('minigpt.'):<26} {n_lines:>5}  {longest:<34} {shown}")
        problems += layer_problems(name, ours, others)
        problems += [
            f"{path.relative_to(args.package.parent)}: {n} is {k} lines (limit {MAX_FUNCTION_LINES})"
            for n, k in funcs
            if k > MAX_FUNCTION_LINES
        ]
    problems += ["import cycle: " + " <-> ".join(group) for group in cycles(graph)]
    print()
    print(
        "\n".join(problems)
        if problems
        else f"every import points down the layers, no cycle, no function body over {MAX_FUNCTION_LINES} lines"
    )
    return 1 if problems and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
