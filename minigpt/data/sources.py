"""Which files a training text is made of: `data.path` (and `data.val_path`) as a file, a folder
(every file under it, recursively, in sorted path order; hidden files and folders skipped), a
glob pattern, or a list of these; and which whole files are held out for validation."""

from __future__ import annotations

import errno
import glob
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from minigpt.errors import UserError

GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class SourceFile:
    """One document of the corpus."""

    path: str  # absolute, as found (symlinks not resolved: the name a user recognises); a str, not a
    # Path: building a Path for each of tens of thousands of files slowed a cached start (docs/benchmarks.md)
    name: str  # relative name, stable when the folder moves: the manifest's key and the val choice's input
    size: int
    mtime_ns: int
    documents: int = 1  # a record file's extract holds one per record


def as_list(spec: str | Sequence[str]) -> list[str]:
    return [spec] if isinstance(spec, str) else list(spec)


def is_glob(item: str) -> bool:
    return any(c in GLOB_CHARS for c in item)


def absolute_spec(spec: str | Sequence[str]) -> str | list[str]:
    """The same sources written from the root (a run resumes and evaluates from any directory)."""
    items = [os.path.abspath(os.path.expanduser(item)) for item in as_list(spec)]
    return items[0] if isinstance(spec, str) else items


def describe(spec: str | Sequence[str]) -> str:
    items = as_list(spec)
    return items[0] if len(items) == 1 else f"{items[0]} and {len(items) - 1} more"


def _stat_file(path: str | Path, key: str) -> os.stat_result:
    """os.stat with each way it can fail as one clear error."""
    try:
        return os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(f"{key}: {path} is a symlink loop (it points back to itself); remove or fix it") from None
        if e.errno == errno.ENOENT and os.path.islink(path):
            target = os.readlink(path)
            raise UserError(f"{key}: {path} is a broken symlink (to {target}); remove or fix it") from None
        raise UserError(f"{key}: cannot read {path}: {e.strerror}") from None


def _walk(root: str, key: str) -> list[tuple[str, str, os.stat_result]]:
    """Every regular file under `root` (symlinks followed), sorted by relative path, hidden names
    skipped. A folder symlink that leads back to one of its own parents is a loop: an error."""
    found: list[tuple[str, str, os.stat_result]] = []

    def visit(folder: str, rel: str, parents: tuple[tuple[int, int], ...]) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            raise UserError(f"{key}: cannot list the folder {folder}: {e.strerror}") from None
        for entry in entries:
            if entry.name.startswith("."):
                continue
            try:
                st = entry.stat()  # follows symlinks
            except OSError:
                st = _stat_file(entry.path, key)  # raises the clear error
            name = f"{rel}{entry.name}"
            if stat.S_ISDIR(st.st_mode):
                ident = (st.st_dev, st.st_ino)
                if ident in parents:
                    raise UserError(
                        f"{key}: {entry.path} is a symlink loop (it leads back to {os.readlink(entry.path)}, a folder "
                        "it is in); remove the link or point data.path below it"
                    )
                visit(entry.path, name + "/", (*parents, ident))
            elif stat.S_ISREG(st.st_mode):
                found.append((entry.path, name, st))
            # sockets, pipes and devices are not text: passed over

    st = os.stat(root)
    visit(root, "", ((st.st_dev, st.st_ino),))
    return found


def saved_dataset(folder: str, key: str) -> list[tuple[str, str, os.stat_result]] | None:
    """The Arrow files of a folder written by the `datasets` library's save_to_disk, in its order
    (state.json lists them); None for any other folder."""
    if os.path.isfile(os.path.join(folder, "dataset_dict.json")):
        splits = sorted(e.name for e in os.scandir(folder) if e.is_dir() and not e.name.startswith("."))
        first = os.path.join(folder, splits[0]) if splits else folder
        raise UserError(
            f"{key}: {folder} holds a saved DatasetDict with the splits {', '.join(splits)}; name one, such as "
            f"{key}={first} (and data.val_path for another)"
        )
    state = os.path.join(folder, "state.json")
    if not os.path.isfile(state):
        return None
    try:
        with open(state, encoding="utf-8") as f:
            names = [entry["filename"] for entry in json.load(f)["_data_files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # not the datasets library's: an ordinary folder
    found = []
    for name in names:
        path = os.path.join(folder, name)
        found.append((path, name, _stat_file(path, key)))
    return found


def _glob_root(pattern: str) -> str:
    """The folder a pattern's matches are named relative to: its part before the first wildcard."""
    parts = Path(pattern).parts
    fixed = [p for p in parts[: next(i for i, p in enumerate(parts) if is_glob(p))]]
    return os.path.join(*fixed) if fixed else "."


def _expand(item: str, key: str) -> list[tuple[str, str, os.stat_result]]:
    """One entry of data.path: a file, a folder or a glob pattern (paths made absolute)."""
    path = os.path.abspath(os.path.expanduser(item))
    if os.path.lexists(path):
        st = _stat_file(path, key)
        if stat.S_ISDIR(st.st_mode):
            saved = saved_dataset(path, key)
            if saved is not None:
                return saved
            files = _walk(path, key)
            if not files:
                raise UserError(f"{key}: the folder {item} holds no files (hidden files and folders are skipped)")
            return files
        return [(path, os.path.basename(path), st)]
    if not is_glob(item):
        raise UserError(f"{key}: {item} does not exist (pass --data FILE|FOLDER|'GLOB' or set {key})")
    pattern = os.path.abspath(os.path.expanduser(item))
    root = _glob_root(pattern)
    files = []
    for match in sorted(glob.glob(pattern, recursive=True)):
        rel = os.path.relpath(match, root)
        st = _stat_file(match, key)
        if stat.S_ISDIR(st.st_mode):
            files += [(p, f"{rel}/{n}", s) for p, n, s in _walk(match, key)]
        elif stat.S_ISREG(st.st_mode):
            files.append((match, rel, st))
    if not files:
        raise UserError(f"{key}: the pattern {item} matches no files (quote it so the shell leaves it to minigpt)")
    return files


def resolve_sources(spec: str | Sequence[str], key: str = "data.path") -> list[SourceFile]:
    """The documents `spec` names, in order: each entry's files in sorted path order. With several
    entries a file's name is prefixed with its entry's number (two folders may both hold a
    README); a file named twice is read once."""
    items = as_list(spec)
    if not items or any(not isinstance(i, str) or not i for i in items):
        raise UserError(f"{key} must be a path, a folder, a glob pattern or a list of them, got {spec!r}")
    seen: set[tuple[int, int]] = set()
    out = []
    for n, item in enumerate(items):
        for path, name, st in _expand(item, key):
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            name = name.replace(os.sep, "/")
            out.append(SourceFile(path, f"{n}:{name}" if len(items) > 1 else name, st.st_size, st.st_mtime_ns))
    return out


def _rank(name: str) -> bytes:
    return hashlib.sha256(name.encode("utf-8")).digest()


def choose_val_files(files: Sequence[SourceFile], val_fraction: float) -> list[bool] | None:
    """Which whole files are validation: taken in an order set by a hash of each file's relative
    name (deterministic, and unrelated to how the files are sorted or named), each one that still
    fits under val_fraction of the bytes. None when whole files cannot come near the target (a
    single file, or a few large ones): the caller then holds out the tail of the joined text."""
    target = val_fraction * sum(f.size for f in files)
    chosen = [False] * len(files)
    total = 0
    for i in sorted(range(len(files)), key=lambda i: _rank(files[i].name)):
        if files[i].size and total + files[i].size <= target:
            chosen[i] = True
            total += files[i].size
    if len(files) < 2 or total < target / 2 or all(chosen):
        return None
    return chosen
