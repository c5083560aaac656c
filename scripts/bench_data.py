#!/usr/bin/env python3
"""Data at scale: peak memory, encoding throughput and time to the first step on large corpora.

    uv run python scripts/bench_data.py                      # 2 GB file, 1 GB folder of 50,000 files,
                                                             # 1.4 GB source tree of 80,000 files
    uv run python scripts/bench_data.py --only tree          # the source tree alone
    uv run python scripts/bench_data.py --file-mb 300 --folder-mb 100 --files 5000 --tree-mb 350 --tree-files 20000

Builds the corpora on disk (from tiny Shakespeare, shifted so no two files are identical), then
runs `minigpt train` for a few steps on each, twice: first with an empty encoding cache, then
cached. For each run it prints the child's peak resident memory (ru_maxrss from wait4), the
encoding throughput (the corpus's bytes over the hashing and encoding time that train reports),
and the time from process start to the end of the first training step, less the time `import
torch` takes in the same environment. One JSON line at the end holds every number.

Before a corpus's first run its files are read once, so the first run finds them in the page
cache, as right after building or copying them, and measures minigpt rather than the disk (the
read's own rate is printed: a slow one says the corpus had left memory). --cold skips that.

Run it alone: anything else on the machine's two cores distorts every figure.
"""

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

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_common import BARE_RUN, DEFAULT_DATA, REPO, child_env, minigpt_train  # noqa: E402

SOURCE = DEFAULT_DATA  # the text every corpus is built from
STEPS = 100  # enough random windows that pages left mapped would show in the peak
TRAIN_ARGS = [
    f"train.max_steps={STEPS}", f"train.eval_interval={STEPS}", "train.eval_steps=2", *BARE_RUN,
    "log.interval=1", "log.progress=lines", "log.progress_seconds=0.001",
]  # fmt: skip


def _variant(text: str, i: int) -> str:
    """The text rotated by a different amount each time: same characters, different content."""
    k = (i * 7919) % len(text)
    return text[k:] + text[:k]


def build_file(path: Path, mb: int) -> int:
    text = SOURCE.read_text(encoding="utf-8")
    target = mb * 1_000_000
    with open(path, "w", encoding="utf-8") as f:
        written, i = 0, 0
        while written < target:
            chunk = _variant(text, i)[: target - written]
            f.write(chunk)
            written += len(chunk.encode("utf-8"))
            i += 1
    return path.stat().st_size


def build_folder(root: Path, mb: int, files: int) -> int:
    text = SOURCE.read_text(encoding="utf-8")
    each = mb * 1_000_000 // files
    for i in range(files):
        folder = root / f"{i // 1000:03d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        start = (i * 104_729) % (len(text) - each)
        (folder / f"doc{i:06d}.txt").write_text(text[start : start + each], encoding="utf-8")
    return sum(p.stat().st_size for p in root.rglob("*.txt"))


# code points a real tree's comments and strings hold: accents, Greek, Cyrillic, CJK, symbols, emoji
FOREIGN = [
    *range(0xC0, 0x180), *range(0x391, 0x3CA), *range(0x410, 0x450), *range(0x2010, 0x2030), *range(0x2190, 0x21A0),
    *range(0x4E00, 0x4E00 + 2900), *range(0x1F600, 0x1F640),
]  # fmt: skip


def build_tree(root: Path, mb: int, files: int, seed: int = 0) -> int:
    """A source tree as a user brings one: many small files of uneven size in nested folders, about
    a third with non-ASCII comments (~3,500 distinct characters in all), and one file in 2,000 in
    Latin-1 (not UTF-8: char mode skips it with a warning)."""
    import random

    rng = random.Random(seed)
    text = SOURCE.read_text(encoding="utf-8")
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


def train_once(data: Path, out: Path, cache: Path) -> dict:
    """One `minigpt train`: peak RSS, reported hashing/encoding seconds, time to the first step."""
    env = child_env(cache, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, *minigpt_train(data, out, *TRAIN_ARGS, device=None)]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    first_step, lines, prep_s = None, [], 0.0
    for line in proc.stderr:
        lines.append(line.rstrip())
        if first_step is None and line.startswith("step 1/"):
            first_step = time.perf_counter() - start
        m = re.match(r"(hashing|encoding) .*: ([\d,]+) MB in ([\d.]+) s", line)
        if m:
            prep_s += float(m.group(3))
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        print("\n".join(lines[-20:]), file=sys.stderr)
        raise SystemExit(f"minigpt train failed on {data}")
    return {"peak_rss_mb": usage.ru_maxrss / 1024, "first_step_s": first_step, "prep_s": prep_s, "wall_s": wall,
            "log": [ln for ln in lines if ln.startswith(("data:", "hashing", "encoding", "warning"))]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--file-mb", type=int, default=2000, help="size of the single file (MB)")
    ap.add_argument("--folder-mb", type=int, default=1000, help="size of the folder (MB)")
    ap.add_argument("--files", type=int, default=50_000, help="files in the folder")
    ap.add_argument("--tree-mb", type=int, default=1400, help="size of the source tree (MB)")
    ap.add_argument("--tree-files", type=int, default=80_000, help="files in the source tree")
    ap.add_argument("--only", nargs="+", choices=["file", "folder", "tree"], default=["file", "folder", "tree"])
    ap.add_argument("--workdir", type=Path, default=None, help="where to build (default: a temporary folder)")
    ap.add_argument("--keep", action="store_true", help="keep the corpora and caches")
    ap.add_argument("--reuse", action="store_true", help="with --workdir: use the corpora already built there")
    ap.add_argument("--cold", action="store_true", help="do not read a corpus once before its first run")
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="minigpt-bench-data-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        builders = {
            "file": lambda: build_file(work / "big.txt", args.file_mb),
            "folder": lambda: build_folder(work / "folder", args.folder_mb, args.files),
            "tree": lambda: build_tree(work / "tree", args.tree_mb, args.tree_files),
        }
        corpora = {"file": work / "big.txt", "folder": work / "folder", "tree": work / "tree"}

        def size_of(name: str) -> int:
            path = corpora[name]
            if not (args.reuse and path.exists()):
                return builders[name]()
            return path.stat().st_size if path.is_file() else sum(p.stat().st_size for p in path.rglob("*.*"))

        sizes = {name: size_of(name) for name in args.only}
        print(f"built {', '.join(f'{n} {sizes[n] / 1e6:,.0f} MB' for n in args.only)} "
              f"in {time.perf_counter() - t:.0f} s", file=sys.stderr)  # fmt: skip
        torch_s = torch_import_seconds()
        print(f"import torch: {torch_s:.2f} s (median of 3; subtracted from the time to the first step)")
        results = {"torch_import_s": torch_s}
        for name, size in sizes.items():
            data = corpora[name]
            cache = work / f"cache-{name}"
            shutil.rmtree(cache, ignore_errors=True)
            if not args.cold:
                print(f"{name:6s} {read_once(data)}")
            for phase in ("first", "cached"):
                out = work / f"run-{name}-{phase}"
                shutil.rmtree(out, ignore_errors=True)
                r = train_once(data, out, cache)
                r["encode_mb_s"] = size / 1e6 / r["prep_s"] if phase == "first" and r["prep_s"] else None
                r["first_step_less_torch_s"] = r["first_step_s"] - torch_s
                r["corpus_mb"] = size / 1e6
                results[f"{name}_{phase}"] = r
                enc = f" | encode {r['encode_mb_s']:,.0f} MB/s" if r["encode_mb_s"] else ""
                print(f"{name:6s} {phase:6s} | {size / 1e6:7,.0f} MB | peak RSS {r['peak_rss_mb']:7,.0f} MB{enc} | "
                      f"first step at {r['first_step_s']:6.2f} s ({r['first_step_less_torch_s']:.2f} s without "
                      f"torch's import) | wall {r['wall_s']:.1f} s")  # fmt: skip
                for line in r["log"]:
                    print(f"    {line}")
        print(json.dumps({k: ({kk: vv for kk, vv in v.items() if kk != "log"} if isinstance(v, dict) else v)
                          for k, v in results.items()}))  # fmt: skip
    finally:
        if not args.keep and args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
