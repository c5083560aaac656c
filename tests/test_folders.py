"""A folder walk reads what a user expects (issue 52): it passes over what git and ripgrep pass
over (hidden names, .gitignore'd files, cache folders, binary files) and says so in one line; a
record-format file met in the tree is read as records only when it is one; non-regular files are
one error line at once, never a read that does not end."""

from __future__ import annotations

import email
import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.config.schema import DataConfig
from minigpt.data.corpus import load_corpus
from minigpt.data.sources import gitignore, ignored
from minigpt.errors import UserError

from .helpers import TINY, make_text

ROOT = Path(__file__).resolve().parents[1]
PYC = b"\xa7\r\r\n\x00\x00\x00\x00" + bytes(range(256)) * 4  # a bytecode header: NUL bytes, not UTF-8


def write(path: Path, data: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


def a_source_tree(root: Path) -> Path:
    """Code, prose, a .csv without the field, a .json that is not records, a .jsonl with it, a
    __pycache__ of .pyc files, a .git folder, a .gitignore'd file and a binary image."""
    write(root / "src" / "app.py", "def main():\n    print('hello from the code')\n" + make_text(3000, seed=1))
    write(root / "src" / "__pycache__" / "app.cpython-311.pyc", PYC)
    write(root / "notes" / "story.txt", "Once upon a time, the prose.\n" + make_text(3000, seed=2))
    write(root / "tables" / "products.csv", "Product Name,Code Reference\nWidget,W-1\nGadget,G-2\n")
    write(root / "package.json", json.dumps({"name": "demo", "version": 1}))
    records = [{"id": i, "text": f"record number {i} of the shards"} for i in range(40)]
    write(root / "shards" / "part-0.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")
    write(root / ".git" / "objects" / "ab" / "cdef", b"x\x9c\x00\x01blob")
    write(root / ".gitignore", "# build output\n*.log\n/build/\n")
    write(root / "debug.log", "SECRET LOG LINE\n")
    write(root / "build" / "out.txt", "BUILT FILE\n")
    write(root / "logo.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(200))
    return root


@pytest.mark.parametrize("tokenizer", ["char", "byte"])
def test_a_source_tree_reads_what_git_would_and_says_what_it_skipped(
    tmp_path: Path, tokenizer: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = a_source_tree(tmp_path / "tree")
    cfg = DataConfig(path=str(root), tokenizer=tokenizer)
    corpus = load_corpus(cfg, 16)
    text = corpus.tokenizer.decode([int(i) for i in corpus.ids])
    assert "hello from the code" in text and "the prose" in text
    assert "Product Name,Code Reference\nWidget,W-1" in text  # the .csv has no field 'text': read as text
    assert '"version": 1' in text  # not records: read as text
    assert "record number 7 of the shards" in text and '"id": 7' not in text  # records: their field alone
    for absent in ("refs/heads", "SECRET LOG LINE", "BUILT FILE", "IHDR", "blob"):
        assert absent not in text, absent
    assert "\x00" not in text  # no byte of the .pyc files or the image
    err = capsys.readouterr().err
    lines = err.splitlines()
    walk = [line for line in lines if "in the folder walk" in line]
    assert walk == [
        "note: data.path: skipped 6 file(s) and folder(s) in the folder walk: 2 hidden (.git, .gitignore), "
        "2 ignored by .gitignore (build/, debug.log), 1 cache folder(s) (src/__pycache__/), "
        "1 binary file(s) (logo.png); name one, or a glob, to read it (docs/training.md#folders)"
    ], err
    as_text = [line for line in lines if "read as text" in line]
    assert as_text == [
        "note: 2 .csv/.json file(s) in the tree were read as text: they hold no records with the field 'text' "
        "(package.json, tables/products.csv); name a file, or a glob such as '*.csv', to read it as records"
    ], err
    again = load_corpus(cfg, 16)  # a cached start: the same corpus, and the same lines
    assert again.sha256 == corpus.sha256 and capsys.readouterr().err.count("note: ") == 2


def test_a_glob_or_a_named_file_reaches_what_a_walk_passes_over(tmp_path: Path) -> None:
    root = a_source_tree(tmp_path / "tree")
    with pytest.raises(UserError, match=r"products\.csv, line 1 has no field 'text'"):
        load_corpus(DataConfig(path=str(root / "tables" / "products.csv")), 16)  # named: the record reader
    with pytest.raises(UserError, match=r"products\.csv, line 1 has no field 'text'"):
        load_corpus(DataConfig(path=str(root / "**" / "*.csv")), 16)  # a glob naming the extension, too
    logs = load_corpus(DataConfig(path=[str(root / "*.log"), str(root / "notes")]), 16)
    assert "SECRET LOG LINE" in logs.tokenizer.decode([int(i) for i in logs.ids])  # .gitignore'd, but named
    binary = DataConfig(path=str(root), format="text", tokenizer="byte")  # format=text: binary files too
    everything = load_corpus(binary, 16)
    assert b"IHDR" in bytes(int(i) for i in everything.ids)


def test_a_folder_of_record_shards_trains_on_the_field(tmp_path: Path) -> None:
    for n in range(3):
        rows = [{"text": f"shard {n} row {i}", "meta": "m"} for i in range(30)]
        write(tmp_path / "set" / f"part-{n}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    corpus = load_corpus(DataConfig(path=str(tmp_path / "set")), 8)
    text = corpus.tokenizer.decode([int(i) for i in corpus.ids])
    assert "shard 2 row 29" in text and "meta" not in text
    write(tmp_path / "set" / "part-3.jsonl", '{"text": "fine"}\nnot json at all\n')
    with pytest.raises(UserError, match=r"part-3\.jsonl, line 2 is not JSON"):  # a damaged shard is an error
        load_corpus(DataConfig(path=str(tmp_path / "set")), 8)


def test_an_installed_python_package_folder_trains(tmp_path: Path, cli) -> None:
    """The standard library's email package with its bytecode beside it, as an installed one has."""
    package = Path(shutil.copytree(Path(email.__file__).parent, tmp_path / "email"))
    sources = sorted(package.rglob("*.py"))
    others = [p for p in package.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")]  # architecture.rst
    for src in sources:
        py_compile.compile(str(src), cfile=str(src.parent / "__pycache__" / f"{src.stem}.cpython-311.pyc"))
    r = cli("train", "--data", package, "--out", tmp_path / "run", *TINY, "train.max_steps=3", "train.eval_interval=3")
    assert r.code == 0, r
    assert f"({len(sources) + len(others):,} files)" in r.err  # every .py file and its docs, no .pyc
    assert "cache folder(s) (__pycache__/, mime/__pycache__/)" in r.err, r.err


def _minigpt(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command in a process of its own, with a time limit: a regression fails instead of hanging."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "minigpt", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow  # a real process per special file (8 s on 2 cores): CI runs it in its slow step
def test_a_fifo_or_a_device_is_one_error_line_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    cases = {fifo: "a FIFO (a named pipe)", Path("/dev/zero"): "a character device"}
    for path, kind in cases.items():
        r = _minigpt("train", "--data", path, "--out", tmp_path / "run", *TINY)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r
        assert r.stderr.startswith(f"error: data.path: {path} is {kind}, not a file"), r.stderr
        assert not (tmp_path / "run").exists()
    r = _minigpt("train", "--data", tmp_path / "*pe", "--out", tmp_path / "run", *TINY)  # a glob's match
    assert r.returncode == 2 and f"{fifo} is a FIFO (a named pipe), not a file" in r.stderr, r
    r = _minigpt("train", "/dev/zero", "--out", tmp_path / "run")  # as the config file
    assert r.returncode == 2 and "config file /dev/zero is not a regular file" in r.stderr, r


def test_score_refuses_a_device_named_as_its_file(trained_run: Path, cli) -> None:
    r = cli("score", trained_run, "--file", "/dev/urandom")
    assert r.code == 2 and r.err == "error: --file /dev/urandom is a character device, not a file; give a text file\n"


def test_a_fifo_or_a_tagged_cache_in_a_folder_is_passed_over_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(tmp_path / "tree" / "a.txt", make_text(2000))
    os.mkfifo(tmp_path / "tree" / "pipe")
    write(tmp_path / "tree" / "cache" / "CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n")
    write(tmp_path / "tree" / "cache" / "entry.txt", "CACHED TEXT\n")
    corpus = load_corpus(DataConfig(path=str(tmp_path / "tree")), 16)
    assert "CACHED" not in corpus.tokenizer.decode([int(i) for i in corpus.ids])
    err = capsys.readouterr().err
    assert "1 cache folder(s) (cache/), 1 not regular file(s) (pipe)" in err, err


def test_the_gitignore_subset() -> None:
    rules = gitignore(
        "# comment\n\n*.log\n!keep.log\n/build/\ndocs/*.md\n**/tmp\nout/\nlogs/**\nname\\ with\\ space \n[ab].txt\n"
    )
    cases = {
        ("x.log", False): True,
        ("deep/er/x.log", False): True,
        ("keep.log", False): False,  # re-included
        ("build", True): True,
        ("sub/build", True): None,  # anchored by its leading slash
        ("docs/a.md", False): True,
        ("docs/sub/a.md", False): None,  # * stays within a name
        ("a/b/tmp", True): True,
        ("out", False): None,  # folders only
        ("out", True): True,
        ("logs/a/b.txt", False): True,
        ("name with space", False): True,
        ("a.txt", False): True,
        ("c.txt", False): None,
    }
    for (rel, is_folder), expected in cases.items():
        assert rules.check_file(rel + "/" * is_folder).include is expected, rel
    nested = [("", gitignore("*.tmp\n")), ("sub/", gitignore("!x.tmp\n"))]
    assert ignored(nested, "sub/x.tmp", False) is False and ignored(nested, "y.tmp", False) is True
    assert ignored(nested, "sub/y.tmp", False) is True
    assert gitignore("!\n\\\n*.log\n").check_file("x.log").include is True  # malformed lines are passed over
