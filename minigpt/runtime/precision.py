"""Whether bf16 pays on this CPU, measured rather than read from its flags: the run's own MLP products
timed in float32 and bf16, the answer cached per machine (why: docs/gpu.md)."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from minigpt.io import default_cache_dir
from minigpt.io.atomic import atomic_write
from minigpt.io.textfiles import read_json_dict
from minigpt.runtime.cores import cpu_model_and_flags

MARGIN = 1.1  # bf16 must beat float32 by this factor: the probe times products, a step has more in it
CACHE_NAME = "precision.json"

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Choice:
    """The probe's answer: bf16's speed over float32's (`ratio`), and whether it came from the cache."""

    bf16: bool
    ratio: float
    cached: bool = False

    @property
    def dtype(self) -> torch.dtype:
        import torch

        return torch.bfloat16 if self.bf16 else torch.float32


def machine_key(shape: str) -> str:
    """What the answer depends on: the CPU and its bf16 flags, torch, oneDNN's ISA limit, minigpt, threads, shape."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    try:
        minigpt = version("minigpt")  # the distribution's: this layer does not import the package root
    except PackageNotFoundError:
        minigpt = "?"
    model, flags = cpu_model_and_flags()
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
    threads = torch.get_num_threads()
    return f"{model}|{','.join(flags)}|torch {torch.__version__}|isa {isa}|minigpt {minigpt}|{threads} threads|{shape}"


def interleaved_medians(runs: Sequence[Callable[[], object]], repeats: int = 3) -> list[float]:
    """Median seconds of each of `runs` after a warm-up each, interleaved so another process's load weighs alike."""
    times: list[list[float]] = [[] for _ in runs]
    for i in range(repeats + 1):
        for run, kept in zip(runs, times):
            start = time.perf_counter()
            run()
            if i:
                kept.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def _median_times(rows: int, width: int) -> list[float]:
    """Median seconds of float32 and of bf16 for a forward and backward through a block's MLP products."""
    import torch

    gen = torch.Generator().manual_seed(0)
    x, up = (torch.randn(*s, generator=gen, requires_grad=True) for s in ((rows, width), (4 * width, width)))
    down = torch.randn(width, 4 * width, generator=gen, requires_grad=True)

    def products(dtype: torch.dtype) -> None:
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            y = torch.nn.functional.linear(torch.nn.functional.linear(x, up), down)
        y.float().sum().backward()

    return interleaved_medians([lambda: products(torch.float32), lambda: products(torch.bfloat16)])


def measure(rows: int, width: int) -> float:
    """bf16's speed over float32's for these products, on rows growing 256, 2048 up to the run's own;
    it stops early when bf16 is clearly slower or the next size would take seconds. Not from 32 rows: there
    the products take well under a millisecond, and a fresh process on an AMX host once measured bf16 at
    0.48x (0.6-0.8x usually; 3-4x at the run's 2,048), which cached float32 for every later run."""
    ratio = 1.0
    for level in (256, 2048):
        n = min(rows, level)
        t32, t16 = _median_times(n, width)
        ratio = t32 / t16
        if n == rows or ratio < 0.5 or 8 * 4 * (t32 + t16) > 2.0:
            break
    return ratio


def decode_speed(layers: int, width: int) -> float:
    """bf16's speed over float32's decoding one row through a model's block weights, stored in each dtype as `sample`
    casts them: whether they fit in the CPU's caches decides it, which `measure` (training's products) misses."""
    import torch

    x, w = torch.full((1, width), 0.01), torch.full((12 * width, width), 0.01)  # a block's 12 width² weights

    def products(dtype: torch.dtype) -> Callable[[], object]:
        xs, ws = x.to(dtype), [w.to(dtype, copy=True) for _ in range(layers)]  # the values do not change the time
        return lambda: [torch.nn.functional.linear(xs, layer) for layer in ws]

    t32, t16 = interleaved_medians([products(torch.float32), products(torch.bfloat16)])
    return t32 / t16


def machine_busy() -> bool:
    """Whether more processes wanted to run over the last minute than this process may use cores."""
    try:
        return os.getloadavg()[0] > len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no load average or affinity (Windows, macOS): assume quiet
        return False


def cached_choice(
    shape: str, measure_ratio: Callable[[], float], cache_dir: Path | None = None, kind: str = ""
) -> Choice:
    """The cached answer for `shape` and `kind` ("" products, "attention" its form) on this machine, else
    `measure_ratio()` (the faster form's speed over the slower's), cached unless the machine was busy."""
    import torch

    path = (cache_dir or default_cache_dir()) / CACHE_NAME
    key = machine_key(f"{kind} {shape}" if kind else shape)
    entry = read_json_dict(path).get(key)
    if isinstance(entry, dict) and isinstance(entry.get("ratio"), (int, float)):
        return Choice(bool(entry.get("bf16")), float(entry["ratio"]), cached=True)
    with torch.random.fork_rng(devices=[]):
        ratio = measure_ratio()
    choice = Choice(ratio >= MARGIN, round(ratio, 3))
    if machine_busy():  # other processes' load skews the ratio: good for this run, not for every later one
        return choice
    entries = read_json_dict(path)
    entries[key] = {"bf16": choice.bf16, "ratio": choice.ratio, "shape": shape, "threads": torch.get_num_threads()}
    if kind:
        entries[key]["kind"] = kind
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda f: f.write(json.dumps(entries, indent=1).encode()))
    except OSError:
        pass
    return choice


def cached_lines(cache_dir: Path | None = None) -> list[str]:
    """The cached answers, one line each (for `minigpt --version`, without importing torch)."""
    lines = []
    for key, entry in read_json_dict((cache_dir or default_cache_dir()) / CACHE_NAME).items():
        if isinstance(entry, dict) and {"bf16", "ratio", "shape", "threads"} <= entry.keys():
            parts = key.split("|") + [""] * 4  # machine_key's: the torch and oneDNN ISA limit it was measured under
            isa = parts[3].removeprefix("isa ") and f"ONEDNN_MAX_CPU_ISA={parts[3].removeprefix('isa ')}"
            on = ", ".join(part for part in (f"{entry['threads']} thread(s)", parts[2], isa) if part)
            shape, ratio = entry["shape"], entry["ratio"]
            if entry.get("kind") == "attention":
                form = "bf16 products" if entry["bf16"] else "float32 flash kernel"
                lines.append(f"attention for {shape} on {on}: {form} (products at {ratio}x flash)")
                continue
            name, what = "bfloat16" if entry["bf16"] else "float32", entry.get("kind") or "products"
            lines.append(f"precision for {shape} {what} on {on}: {name} (bf16 at {ratio}x float32)")
    return lines
