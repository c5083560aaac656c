"""What an installed minigpt needs beyond the checkout: every third-party import declared, the
default corpus shipped inside the package. (scripts/wheel_check.sh installs the built wheel in a
clean virtual environment and runs every command from an empty folder, offline.)"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from importlib.metadata import packages_distributions
from pathlib import Path

from .helpers import ROOT


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group()).lower()


def third_party_imports() -> dict[str, list[tuple[Path, bool]]]:
    """Each third-party top-level module minigpt/ imports: (file, whether the import is not at module level:
    inside a function, a try or an `if TYPE_CHECKING`) for each import."""
    found: dict[str, list[tuple[Path, bool]]] = defaultdict(list)
    for path in sorted((ROOT / "minigpt").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        at_top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for top in {name.split(".")[0] for name in names} - set(sys.stdlib_module_names) - {"minigpt"}:
                found[top].append((path, id(node) not in at_top))
    return found


def test_every_third_party_import_is_a_declared_dependency_or_behind_its_extra() -> None:
    import tomllib  # Python 3.11+

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    required = {_name(r) for r in project["dependencies"]}
    extras = {extra: {_name(r) for r in reqs} for extra, reqs in project["optional-dependencies"].items()}
    owners = packages_distributions()
    imports = third_party_imports()
    assert {"torch", "typer", "yaml", "numpy", "pyarrow", "safetensors"} <= set(imports)  # the walk finds them
    for module, places in imports.items():
        dists = {_name(d) for d in owners.get(module, [])}
        assert dists, f"{module} (imported by {places[0][0]}) is not installed here: which package provides it?"
        if dists & required:
            continue
        guarding = [extra for extra, names in extras.items() if dists & names]
        assert guarding, f"{module} ({', '.join(sorted(dists))}) is imported by {places[0][0]} but not declared"
        for path, in_function in places:  # without the extra, importing minigpt still works ...
            assert in_function, f"{path} imports {module} (extra {guarding[0]}) at module level"
            folder = path.parent  # ... and its subpackage says how to install the extra
            hint = any(f"minigpt[{guarding[0]}]" in p.read_text(encoding="utf-8") for p in folder.glob("*.py"))
            assert hint, f"nothing in {folder} tells the user to install minigpt[{guarding[0]}] for {module}"


def test_result_objects_show_a_short_table_in_a_notebook(trained_run: Path) -> None:
    """Model.heads(), .lens() and .score() are a cell's value in Jupyter: a table, not a screen of lists."""
    import minigpt

    m = minigpt.load(trained_run)
    heads = repr(m.heads(ablation="none")).splitlines()
    assert heads[0].split()[:3] == ["layer", "head", "prev"] and len(heads) == 1 + 2 * 2  # TINY: 2 layers x 2 heads
    assert heads[4].split()[:2] == ["1", "1"] and heads[4].split()[-1] in ("local", "mixed", "previous", "first")
    text = "KING: Speak now"
    lens = repr(m.lens(text)).splitlines()
    assert len(lens) == 1 + 3 and lens[0].endswith(text) and lens[-1].startswith("after block 1")
    assert len(lens[-1]) == len(lens[0])  # one guess under each character
    assert repr(m.score(text)) == f"<Scores: 14 chars scored, {m.score(text).bits_per_char:.3f} bits per char>"


def test_lessons_copies_the_shipped_notebooks_once(tmp_path: Path, cli, monkeypatch) -> None:
    import shutil

    import tomllib

    shipped = sorted((ROOT / "lessons").glob("*.ipynb"))
    monkeypatch.setattr(shutil, "which", lambda name: None)  # a machine without Jupyter: says how to get it
    r = cli("lessons", tmp_path / "mine")
    assert r.code == 0 and f"6 lessons in {tmp_path / 'mine'}" in r.err, r
    assert "Jupyter is not installed here: pip install jupyterlab" in r.err, r
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/jupyter")
    r = cli("lessons", tmp_path / "theirs")
    assert r.code == 0 and r.err.strip().endswith(f"open them with: jupyter lab {tmp_path / 'theirs'}"), r
    assert [(tmp_path / "mine" / p.name).read_bytes() for p in shipped] == [p.read_bytes() for p in shipped]
    again = cli("lessons", tmp_path / "mine")
    assert again.code == 2 and again.err.startswith(f"error: {tmp_path / 'mine' / shipped[0].name} exists"), again
    hatch = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert hatch["force-include"]["lessons"] == "minigpt/lessons"  # the wheel carries them
    assert hatch["force-include"]["data/tinyshakespeare.txt"] == "minigpt/data/tinyshakespeare.txt"


def test_the_names_docs_inside_md_gives_are_what_the_objects_have() -> None:
    """Each `m.name`, `m.tokenizer.name`, `trainer.name` and `run.name` there exists, and is written
    called (`pieces(ids)`) exactly when it is a method."""
    import inspect

    from minigpt.api import Model, Run
    from minigpt.data.tokenizer import CharTokenizer
    from minigpt.training.trainer import Trainer

    text = (ROOT / "docs" / "inside.md").read_text(encoding="utf-8")
    owners = {"m": Model, "m.tokenizer": CharTokenizer, "trainer": Trainer, "run": Run}
    checked = set()
    for owner, cls in owners.items():
        for name, called in re.findall(rf"(?<![\w.]){re.escape(owner)}\.(\w+)(\(?)", text):
            attr = inspect.getattr_static(cls, name, None)
            sources = [inspect.getsource(c) for c in cls.__mro__ if c.__module__.startswith("minigpt")]
            assigned = name in getattr(cls, "__dataclass_fields__", {}) or any(f"self.{name} " in s for s in sources)
            assert attr is not None or assigned, f"docs/inside.md names {owner}.{name}: {cls.__name__} has none"
            assert inspect.isfunction(attr) == bool(called), f"docs/inside.md: {owner}.{name} is written wrongly"
            checked.add(f"{owner}.{name}")
    assert {"m.heads", "m.tokenizer.pieces", "trainer.request_stop", "run.model"} <= checked
