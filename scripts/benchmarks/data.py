"""data: large corpora built from tiny Shakespeare (a file, a folder, a source tree, JSON Lines),
then `minigpt train` on each: peak memory, encoding throughput, time to the first step."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.harness import BARE_RUN, DEFAULT_DATA, REPO, child_env, machine_info, minigpt_train, progress

DATA_STEPS = 100  # enough random windows that pages left mapped would show in the peak
DATA_TRAIN_ARGS = [
    f"train.max_steps={DATA_STEPS}",
    f"train.eval_interval={DATA_STEPS}",
    "train.eval_steps=2",
    *BARE_RUN,
    "log.interval=1",
    "log.progress=lines",
    "log.progress_seconds=0.001",
]
# code points a real tree's comments and strings hold: accents, Greek, Cyrillic, CJK, symbols, emoji
FOREIGN = [
    *range(0xC0, 0x180),
    *range(0x391, 0x3CA),
    *range(0x410, 0x450),
    *range(0x2010, 0x2030),
    *range(0x2190, 0x21A0),
    *range(0x4E00, 0x4E00 + 2900),
    *range(0x1F600, 0x1F640),
]


def build_file(path: Path, mb: int) -> int:
    """One file of `mb` MB: tiny Shakespeare rotated by a different amount each time it repeats."""
    text = DEFAULT_DATA.read_text(encoding="utf-8")
    target = mb * 1_000_000
    with open(path, "w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < target:
            k = (i * 7919) % len(text)
            chunk = (text[k:] + text[:k])[: target - written]
            f.write(chunk)
            written += len(chunk.encode("utf-8"))
            i += 1
    return path.stat().st_size


def build_jsonl(path: Path, mb: int) -> int:
    """JSON Lines of `mb` MB: tiny Shakespeare's paragraphs as records {"id", "title", "text"}, the
    play rotated each time it repeats, as a dataset tool writes them."""
    paragraphs = DEFAULT_DATA.read_text(encoding="utf-8").split("\n\n")
    target = mb * 1_000_000
    with open(path, "w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < target:
            k = (i * 7919) % len(paragraphs)
            for n, text in enumerate(paragraphs[k:] + paragraphs[:k]):
                line = json.dumps({"id": i * len(paragraphs) + n, "title": text[:20], "text": text}) + "\n"
                f.write(line)
                written += len(line.encode("utf-8"))
                if written >= target:
                    break
            i += 1
    return path.stat().st_size


def build_folder(root: Path, mb: int, files: int) -> int:
    """`files` files of equal size, each a different slice of tiny Shakespeare, 1,000 to a folder."""
    text = DEFAULT_DATA.read_text(encoding="utf-8")
    each = mb * 1_000_000 // files
    for i in range(files):
        folder = root / f"{i // 1000:03d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        start = (i * 104_729) % (len(text) - each)
        (folder / f"doc{i:06d}.txt").write_text(text[start : start + each], encoding="utf-8")
    return sum(p.stat().st_size for p in root.rglob("*.txt"))


def build_tree(root: Path, mb: int, files: int, seed: int = 0) -> int:
    """A source tree as a user brings one: many small files of uneven size in nested folders, about
    a third with non-ASCII comments (~3,500 distinct characters in all), and one file in 2,000 in
    Latin-1 (not UTF-8: char mode skips it with a warning)."""
    import random

    rng = random.Random(seed)
    text = DEFAULT_DATA.read_text(encoding="utf-8")
    mean = mb * 1_000_000 / files
    for i in range(files):
        folder = root / f"pkg{i // 2000:02d}" / f"mod{i // 100 % 20:02d}"
        if i % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        size = max(64, min(int(rng.lognormvariate(0, 0.8) * mean * 0.73), len(text) // 2))
        start = rng.randrange(len(text) - size)
        body = text[start : start + size]
        if i % 2000 == 1999:
            (folder / f"legacy{i:06d}.txt").write_bytes(body.encode("ascii", "replace") + b"\n# caf\xe9\n")
            continue
        if i % 3 == 0:  # comments with foreign characters, every ~40 lines
            lines = body.split("\n")
            for k in range(0, len(lines), 40):
                lines[k] += "  # " + "".join(chr(rng.choice(FOREIGN)) for _ in range(rng.randint(3, 20)))
            body = "\n".join(lines)
        (folder / f"file{i:06d}.py").write_text(body, encoding="utf-8")
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def read_once(root: Path) -> str:
    """Read every file of a corpus (into the page cache): how long it took, as a line."""
    start, size = time.perf_counter(), 0
    for p in [root] if root.is_file() else sorted(root.rglob("*")):
        if p.is_file():
            with open(p, "rb", buffering=0) as f:
                while chunk := f.read(16 << 20):
                    size += len(chunk)
    took = time.perf_counter() - start
    return f"read once beforehand: {size / 1e6:,.0f} MB in {took:.2f} s ({size / 1e6 / max(took, 1e-9):,.0f} MB/s)"


def torch_import_seconds() -> float:
    code = "import time; t = time.perf_counter(); import torch; print(time.perf_counter() - t)"
    runs = [float(subprocess.check_output([sys.executable, "-c", code], text=True)) for _ in range(3)]
    return statistics.median(runs)


def train_on_corpus(data: Path, out: Path, cache: Path) -> dict[str, Any]:
    """One `minigpt train`: peak RSS (ru_maxrss from wait4), the hashing and encoding seconds it
    reports, and the time from process start to its first step's progress line."""
    env = child_env(cache, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, *minigpt_train(data, out, *DATA_TRAIN_ARGS, device=None)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    first_step, lines, prep_s = None, [], 0.0
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(line.rstrip())
        if first_step is None and line.startswith("step 1/"):
            first_step = time.perf_counter() - start
        m = re.match(r"(hashing|encoding|reading the records of) .*: ([\d,]+) MB in ([\d.]+) s", line)
        if m:
            prep_s += float(m.group(3))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0 or first_step is None:
        print("\n".join(lines[-20:]), file=sys.stderr)
        raise SystemExit(f"minigpt train failed on {data}")
    return {
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "first_step_s": first_step,
        "prep_s": prep_s,
        "wall_s": wall,
        "log": [ln for ln in lines if ln.startswith(("data:", "hashing", "encoding", "reading", "warning"))],
    }


def run(a: argparse.Namespace) -> int:
    """Data at scale: peak memory, encoding throughput and time to the first step on large corpora.

    Builds the corpora (from tiny Shakespeare, shifted so no two files are identical): by default a
    2 GB file, a 1 GB folder of 50,000 files, a 1.4 GB source tree of 80,000 files and 2 GB of
    JSON Lines (--file-mb sets both single files' size). Then runs
    `minigpt train` for 100 steps on each, twice: with an empty encoding cache, then cached. Each run:
    the child's peak RSS, the encoding throughput (the corpus's bytes over the hashing and encoding
    time train reports), and the time from process start to the first step less `import torch`'s.
    Before a corpus's first run its files are read once, so that run finds them in the page cache,
    as right after building or copying them (the read's rate is printed; --cold skips it)."""
    work = a.workdir or Path(tempfile.mkdtemp(prefix="minigpt-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        builders = {
            "file": lambda: build_file(work / "big.txt", a.file_mb),
            "folder": lambda: build_folder(work / "folder", a.folder_mb, a.files),
            "tree": lambda: build_tree(work / "tree", a.tree_mb, a.tree_files),
            "jsonl": lambda: build_jsonl(work / "big.jsonl", a.file_mb),
        }
        corpora = {
            "file": work / "big.txt",
            "folder": work / "folder",
            "tree": work / "tree",
            "jsonl": work / "big.jsonl",
        }

        def size_of(name: str) -> int:
            path = corpora[name]
            if not (a.reuse and path.exists()):
                return builders[name]()
            return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*.*"))

        sizes = {name: size_of(name) for name in a.only}
        progress(
            f"built {', '.join(f'{n} {sizes[n] / 1e6:,.0f} MB' for n in a.only)} in {time.perf_counter() - t:.0f} s"
        )
        torch_s = torch_import_seconds()
        print(f"import torch: {torch_s:.2f} s (median of 3; subtracted from the time to the first step)")
        results: dict[str, Any] = {"torch_import_s": torch_s}
        for name, size in sizes.items():
            data, cache = corpora[name], work / f"cache-{name}"
            shutil.rmtree(cache, ignore_errors=True)
            if not a.cold:
                print(f"{name:6s} {read_once(data)}")
            for phase in ("first", "cached"):
                out = work / f"run-{name}-{phase}"
                shutil.rmtree(out, ignore_errors=True)
                r = train_on_corpus(data, out, cache)
                r["encode_mb_s"] = size / 1e6 / r["prep_s"] if phase == "first" and r["prep_s"] else None
                r["first_step_less_torch_s"] = r["first_step_s"] - torch_s
                r["corpus_mb"] = size / 1e6
                results[f"{name}_{phase}"] = r
                enc = f" | encode {r['encode_mb_s']:,.0f} MB/s" if r["encode_mb_s"] else ""
                print(
                    f"{name:6s} {phase:6s} | {size / 1e6:7,.0f} MB | peak RSS {r['peak_rss_mb']:7,.0f} MB{enc} | "
                    f"first step at {r['first_step_s']:6.2f} s ({r['first_step_less_torch_s']:.2f} s without "
                    f"torch's import) | wall {r['wall_s']:.1f} s"
                )
                for line in r.pop("log"):
                    print(f"    {line}")
        print(json.dumps({**results, "machine": machine_info()}))
    finally:
        if not a.keep and a.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--file-mb", type=int, default=2000, help="size of the single file (MB)")
    ap.add_argument("--folder-mb", type=int, default=1000, help="size of the folder (MB)")
    ap.add_argument("--files", type=int, default=50_000, help="files in the folder")
    ap.add_argument("--tree-mb", type=int, default=1400, help="size of the source tree (MB)")
    ap.add_argument("--tree-files", type=int, default=80_000, help="files in the source tree")
    ap.add_argument(
        "--only", nargs="+", choices=["file", "folder", "tree", "jsonl"], default=["file", "folder", "tree", "jsonl"]
    )
    ap.add_argument("--workdir", type=Path, default=None, help="where to build (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the corpora and caches")
    ap.add_argument("--reuse", action="store_true", help="with --workdir: use the corpora already built there")
    ap.add_argument("--cold", action="store_true", help="do not read a corpus once before its first run")
