"""The fuzzer's property (scripts/fuzz.py): a command run in this process, its outcome checked
(exit 0, or exit 2 with one `error:` line; nothing outside its folder changed), and `Reader`, one
kind of input with its counters."""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import shutil
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from minigpt.cli.app import main  # noqa: E402

TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "model.block_size=16",
    "train.batch_size=8",
    "train.eval_steps=2",
    "train.device=cpu",
    "log.sample_length=0",
    "log.attention_probe=",
    "log.tensorboard=false",
]
BASE_TEXT = "".join(f"KING {i}:\nSpeak now, good lord, what say you?\n\n" for i in range(60))
CONFIG = REPO / "configs" / "default.yaml"


@dataclass
class Outcome:
    code: int | None
    out: str
    err: str
    crash: str | None = None  # the traceback of an exception main() let through


def run_cli(argv: list[str], cwd: Path) -> Outcome:
    """`minigpt ARGV` in this process, in `cwd`, with stdout and stderr captured."""
    out, err = io.StringIO(), io.StringIO()
    before = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:  # noqa: B036  (a crash of any kind is what the fuzzer looks for)
                return Outcome(None, out.getvalue(), err.getvalue(), traceback.format_exc())
    finally:
        os.chdir(before)
    return Outcome(code, out.getvalue(), err.getvalue())


def tree(root: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under `root` (but the top-level names in `skip`) with its content's hash."""
    found = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if rel.parts[0] in skip or not path.is_file():
            continue
        found[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


class Broken(AssertionError):
    """The property failed: `kind` names how (crash, exit code, lines, a file changed)."""

    def __init__(self, kind: str, detail: str):
        super().__init__(f"{kind}: {detail}")
        self.kind = kind


def check(outcome: Outcome, argv: list[str]) -> None:
    shown = " ".join(repr(a)[:80] for a in argv)
    if outcome.crash is not None:
        last = outcome.crash.strip().splitlines()[-1]
        raise Broken(f"crash {last[:120]}", f"minigpt {shown}\n{outcome.crash[-3000:]}")
    if outcome.code not in (0, 2):
        raise Broken(f"exit {outcome.code}", f"minigpt {shown}\n{outcome.err[-2000:]}")
    if "Traceback" in outcome.err:
        raise Broken("traceback", f"minigpt {shown}\n{outcome.err[-2000:]}")
    if outcome.code == 2:
        errors = [line for line in outcome.err.splitlines() if line.startswith("error:")]
        if len(errors) != 1:
            raise Broken(f"{len(errors)} error lines", f"minigpt {shown}\n{outcome.err[-2000:]}")


@dataclass
class Reader:
    name: str
    strategy: st.SearchStrategy[Any]
    make: Callable[[Any, Path, Path], list[str]]  # (value, work folder, existing run) -> argv
    tried: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # kind -> the first example's detail


def run_case(reader: Reader, value: Any, run: Path, scratch: Path) -> None:
    """One input through `reader`, in a fresh work folder under `scratch`; raises `Broken`."""
    reader.tried += 1
    work = Path(tempfile.mkdtemp(dir=scratch, prefix=f"{reader.name}-"))
    try:
        (work / "in").mkdir()
        argv = reader.make(value, work, run)
        inputs, kept = tree(work, skip=("out", "cache")), tree(run)
        check(run_cli(argv, work), argv)
        if tree(work, skip=("out", "cache")) != inputs:
            raise Broken("changed a file outside its output", f"minigpt {argv}")
        if tree(run) != kept:
            raise Broken("changed the existing run", f"minigpt {argv}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def train_dry(work: Path, data: Path | str, *extra: str) -> list[str]:
    return ["train", "--dry-run", "--data", str(data), "--out", str(work / "out" / "run"), *TINY, *extra]


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path
