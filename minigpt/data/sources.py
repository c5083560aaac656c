"""Which files a training text is made of: `data.path` (and `data.val_path`) as a file, a folder (walked
as git and ripgrep would: docs/training.md#folders), a glob or a list of these; and which are validation."""

from __future__ import annotations

import errno
import functools
import glob
import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pathspec import GitIgnoreSpec
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

from minigpt.config import shipped
from minigpt.config.schema import DEFAULT_DATA_PATH
from minigpt.errors import UserError
from minigpt.io.textfiles import not_a_file

GLOB_CHARS = frozenset("*?[")
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
CACHE_FOLDERS = frozenset({"__pycache__"})  # besides any folder that holds a CACHEDIR.TAG file


@dataclass(frozen=True)
class SourceFile:
    """One document of the corpus."""

    path: str  # absolute, as found (symlinks not resolved); a str: a Path each slows a cached start
    name: str  # relative name, stable when the folder moves: the manifest's key and the val choice's input
    size: int
    mtime_ns: int
    documents: int = 1  # a record file's extract holds one per record
    found: str = "named"  # "named" (or matched by a glob naming an extension), "walked" in a folder,
    # or "globbed" (a glob that names no extension): a named file is read as its extension says; a
    # found one as records only when it is records, and a walked one is passed over when binary


def entries(spec: str | Sequence[str]) -> list[str]:
    """A data.path's entries; the default, where this folder has no such file, is the shipped copy."""
    return [
        shipped_text() if item == DEFAULT_DATA_PATH and not os.path.lexists(item) else item
        for item in ([spec] if isinstance(spec, str) else spec)
    ]


@functools.cache
def shipped_text() -> str:
    """Tiny Shakespeare as minigpt ships it, its SHA-256 checked once a process."""
    path = shipped(DEFAULT_DATA_PATH)
    if not path.is_file():
        return DEFAULT_DATA_PATH  # not installed whole: the missing file is the error
    if (digest := hashlib.sha256(path.read_bytes()).hexdigest()) != TINY_SHAKESPEARE_SHA256:
        raise UserError(f"{path} is damaged (SHA-256 {digest}): reinstall minigpt, or give your own text with --data")
    return str(path)


def is_glob(item: str) -> bool:
    return any(c in GLOB_CHARS for c in item)


def absolute_spec(spec: str | Sequence[str]) -> str | list[str]:
    """The same sources written from the root (a run resumes and evaluates from any directory)."""
    items = [os.path.abspath(os.path.expanduser(item)) for item in entries(spec)]
    return items[0] if isinstance(spec, str) else items


def describe(spec: str | Sequence[str]) -> str:
    items = entries(spec)
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


@dataclass
class Skipped:
    """What a folder walk passed over, by reason (relative names, walk order), for its one line (`summary`)."""

    hidden: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # by a .gitignore
    caches: list[str] = field(default_factory=list)  # __pycache__, folders tagged CACHEDIR.TAG
    binary: list[str] = field(default_factory=list)  # a NUL byte near the start (found while hashing)
    special: list[str] = field(default_factory=list)  # FIFOs, sockets, devices

    def summary(self, key: str) -> str | None:
        groups = [
            (self.hidden, "hidden"),
            (self.ignored, "ignored by .gitignore"),
            (self.caches, "cache folder(s)"),
            (self.binary, "binary file(s)"),
            (self.special, "not regular file(s)"),
        ]
        parts = [f"{len(names)} {why} ({shown(names)})" for names, why in groups if names]
        if not parts:
            return None
        total = sum(len(names) for names, _ in groups)
        return (
            f"note: {key}: skipped {total} file(s) and folder(s) in the folder walk: {', '.join(parts)}; "
            "name one, or a glob, to read it (docs/training.md#folders)"
        )


def shown(names: Sequence[str], most: int = 3) -> str:
    """The first `most` names, comma-separated, as messages list them."""
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def _walk(root: str, key: str, skipped: Skipped) -> list[tuple[str, str, os.stat_result]]:
    """Every regular file under `root` (symlinks followed), sorted by relative path, passing over hidden
    names, what .gitignore files ignore and cache folders; a folder symlink back to a parent is an error."""
    found: list[tuple[str, str, os.stat_result]] = []

    def visit(folder: str, rel: str, parents: tuple[tuple[int, int], ...], rules: list) -> None:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            raise UserError(f"{key}: cannot list the folder {folder}: {e.strerror}") from None
        if rel and any(e.name == "CACHEDIR.TAG" for e in entries):
            skipped.caches.append(rel)
            return
        if any(e.name == ".gitignore" for e in entries):
            try:
                with open(os.path.join(folder, ".gitignore"), encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                text = ""  # unreadable: as git does, nothing ignored by it
            rules = [*rules, (rel, gitignore(text))]
        for entry in entries:
            name = f"{rel}{entry.name}"
            if entry.name.startswith("."):
                skipped.hidden.append(name)
                continue
            try:
                st = entry.stat()  # follows symlinks
            except OSError:
                st = _stat_file(entry.path, key)  # raises the clear error
            is_dir = stat.S_ISDIR(st.st_mode)
            if rules and ignored(rules, name, is_dir):
                skipped.ignored.append(name + "/" * is_dir)
            elif is_dir and entry.name in CACHE_FOLDERS:
                skipped.caches.append(name + "/")
            elif is_dir:
                ident = (st.st_dev, st.st_ino)
                if ident in parents:
                    raise UserError(
                        f"{key}: {entry.path} is a symlink loop (it leads back to {os.readlink(entry.path)}, a folder "
                        "it is in); remove the link or point data.path below it"
                    )
                visit(entry.path, name + "/", (*parents, ident), rules)
            elif stat.S_ISREG(st.st_mode):
                found.append((entry.path, name, st))
            else:  # sockets, pipes and devices are not text
                skipped.special.append(name)

    st = os.stat(root)
    visit(root, "", ((st.st_dev, st.st_ino),), [])
    return found


def gitignore(text: str) -> GitIgnoreSpec:
    """One .gitignore file's rules, for paths relative to its folder (a folder's with a trailing
    `/`). Not read: `.git/info/exclude`, the global excludes file, .gitignore files above the walk."""
    return GitIgnoreSpec.from_lines(text.splitlines(), pattern_factory=_pattern)


def _pattern(line: str) -> GitIgnoreSpecPattern:
    try:
        return GitIgnoreSpecPattern(line)
    except ValueError:
        return GitIgnoreSpecPattern("")  # a malformed line: git passes over it too


def ignored(rules: list[tuple[str, GitIgnoreSpec]], rel: str, is_folder: bool) -> bool:
    """Whether `rel` (relative to the walked folder) is ignored by the .gitignore files on its way,
    outermost first, each with its folder's relative path: a deeper file's last match decides."""
    verdict, path = False, rel + "/" * is_folder
    for base, rules_of in rules:
        include = rules_of.check_file(path[len(base) :]).include
        verdict = verdict if include is None else include
    return verdict


def saved_dataset(folder: str, key: str) -> list[tuple[str, str, os.stat_result]] | None:
    """The Arrow files of a `datasets` save_to_disk folder in state.json's order; None for any other folder."""
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


Found = tuple[str, str, os.stat_result, str]  # path, relative name, stat, how it was found (SourceFile.found)


def _special(path: str, st: os.stat_result, key: str) -> UserError:
    return UserError(
        f"{key}: {path} is {not_a_file(st.st_mode)}, not a file; reading it would not end (or would wait for input): "
        "give a text file, a folder or a glob"
    )


def _expand(item: str, key: str, skipped: Skipped) -> list[Found]:
    """One entry of data.path: a file, a folder or a glob pattern (paths made absolute)."""
    path = os.path.abspath(os.path.expanduser(item))
    if os.path.lexists(path):
        st = _stat_file(path, key)
        if stat.S_ISDIR(st.st_mode):
            saved = saved_dataset(path, key)
            if saved is not None:
                return [(p, n, s, "named") for p, n, s in saved]
            files = _walk(path, key, skipped)
            if not files:
                raise UserError(
                    f"{key}: the folder {item} holds no files to read (hidden files, files a .gitignore ignores and "
                    "cache folders are skipped); name them, or a glob"
                )
            return [(p, n, s, "walked") for p, n, s in files]
        if not stat.S_ISREG(st.st_mode):
            raise _special(path, st, key)
        return [(path, os.path.basename(path), st, "named")]
    if not is_glob(item):
        raise UserError(f"{key}: {item} does not exist (pass --data FILE|FOLDER|'GLOB' or set {key})")
    parts = Path(path).parts  # matches are named relative to the part before the first wildcard
    fixed = parts[: next(i for i, p in enumerate(parts) if is_glob(p))]
    root = os.path.join(*fixed) if fixed else "."
    ext = os.path.splitext(os.path.basename(path))[1]
    how = "named" if len(ext) > 1 and not is_glob(ext) else "globbed"  # `*.csv`: its files are named on purpose
    files: list[Found] = []
    for match in sorted(glob.glob(path, recursive=True)):
        rel = os.path.relpath(match, root)
        st = _stat_file(match, key)
        if stat.S_ISDIR(st.st_mode):
            files += [(p, f"{rel}/{n}", s, "walked") for p, n, s in _walk(match, key, skipped)]
        elif stat.S_ISREG(st.st_mode):
            files.append((match, rel, st, how))
        else:
            raise _special(match, st, key)
    if not files:
        raise UserError(f"{key}: the pattern {item} matches no files (quote it so the shell leaves it to minigpt)")
    return files


def resolve_sources(
    spec: str | Sequence[str], key: str = "data.path", skipped: Skipped | None = None
) -> list[SourceFile]:
    """The documents `spec` names, in order: each entry's files in sorted path order. With several
    entries a file's name is prefixed with its entry's number (two folders may both hold a
    README); a file named twice is read once. What a folder walk passed over goes to `skipped`."""
    items = entries(spec)
    if not items or any(not isinstance(i, str) or not i for i in items):
        raise UserError(f"{key} must be a path, a folder, a glob pattern or a list of them, got {spec!r}")
    skipped = skipped if skipped is not None else Skipped()
    seen: set[tuple[int, int]] = set()
    out = []
    for n, item in enumerate(items):
        for path, name, st, how in _expand(item, key, skipped):
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            name = name.replace(os.sep, "/")
            name = f"{n}:{name}" if len(items) > 1 else name
            out.append(SourceFile(path, name, st.st_size, st.st_mtime_ns, found=how))
    return out


def choose_val_files(files: Sequence[SourceFile], val_fraction: float) -> list[bool] | None:
    """Which whole files are validation: in an order set by a hash of each relative name, each that still
    fits under val_fraction of the bytes; None when whole files cannot come near it (the caller then holds
    out the tail of the joined text)."""
    target = val_fraction * sum(f.size for f in files)
    chosen = [False] * len(files)
    total = 0
    for i in sorted(range(len(files)), key=lambda i: hashlib.sha256(files[i].name.encode("utf-8")).digest()):
        if files[i].size and total + files[i].size <= target:
            chosen[i] = True
            total += files[i].size
    return None if len(files) < 2 or total < target / 2 or all(chosen) else chosen
