#!/usr/bin/env python3
"""What checkpoint checksums cost: save and load of a full training checkpoint (weights, AdamW
state, random streams) with and without them, in this process, median of several repeats.

    uv run python scripts/checksum_bench.py                          # 6x384 and a 100M model
    uv run python scripts/checksum_bench.py --shape 6x384 --repeats 9 --dir /path/on/the/real/disk
    uv run python scripts/checksum_bench.py --hash-threads 1         # the hash on one thread
    uv run python scripts/checksum_bench.py --zip-crc off            # and without torch's zip CRC32
    uv run python scripts/checksum_bench.py --device cuda            # saved from the GPU, as a GPU run does

save: `Checkpoint.save` (torch.save to a temporary file, fsync, rename). load_resume: what a
resume reads (`resumable_checkpoint`: checked whole, then every tensor into a model and an
optimizer). resume_step: the same, then one optimizer step, as the resumed run's first: torch.load
maps the file, so without checksums the optimizer state's bytes (two thirds of the file) are read
only at that step, and load_resume compares reading all of them with reading a third.
load_model: what `sample`, `eval`, `score` and the exports do (`load_model`: the checkpoint, a
model built from its config on the meta device, the weights assigned).
load_sample: the weights alone copied into a model built beforehand (as the final evaluation
reloads best.pt), where nothing hides the check. "without" runs the same code with the checksum
computation and verification replaced by nothing. The file is in the page cache when it is
loaded (it was just written): the checksum's share of a load from a cold disk is smaller. Prints
a table and one JSON line; the issue's target is a cost of at most 5% of save time and of load
time on the 6x384 model. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minigpt import checkpoint  # noqa: E402
from minigpt.checkpoint import Checkpoint  # noqa: E402
from minigpt.config.schema import Config, ModelConfig  # noqa: E402
from minigpt.infer.loading import load_model  # noqa: E402
from minigpt.model import GPT  # noqa: E402

VOCAB = 65  # tinyshakespeare's characters
WHAT = ("save", "load_resume", "resume_step", "load_model", "load_sample")
SHAPES = {"6x384": (6, 6, 384, 256), "100M": (14, 12, 768, 1024)}  # n_layer, n_head, n_embd, block_size


def parse_shape(text: str) -> tuple[str, tuple[int, int, int, int]]:
    """'6x384' (heads: n_embd / 64, block 256), '100M', or 'LxExHxB' in full; with its name."""
    if text in SHAPES:
        return text, SHAPES[text]
    parts = [int(p) for p in text.lower().split("x") if p.isdigit()]
    if len(parts) == 2:
        return text, (parts[0], max(1, parts[1] // 64), parts[1], 256)
    if len(parts) == 4:
        return text, (parts[0], parts[2], parts[1], parts[3])
    raise argparse.ArgumentTypeError(f"--shape {text!r}: give 6x384, 100M or LAYERSxEMBDxHEADSxBLOCK")


def training_checkpoint(shape: tuple[int, int, int, int], device: str) -> tuple[Checkpoint, ModelConfig]:
    """A checkpoint as training writes it: the weights and a stepped AdamW's state, on `device`."""
    n_layer, n_head, n_embd, block = shape
    cfg = ModelConfig(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block)
    model = GPT(cfg, VOCAB).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    optimizer.step()
    rng = {"torch_cpu": torch.get_rng_state(), "batcher": {"generator": torch.Generator().get_state()}}
    ckpt = Checkpoint(
        model=model.state_dict(),
        config=Config(model=cfg).to_dict(),
        tokenizer={"kind": "char", "chars": [chr(32 + i) for i in range(VOCAB)]},
        data={},
        step=1,
        tokens_seen=0,
        best_val_loss=1.0,
        optimizer=optimizer.state_dict(),
        rng=rng,
    )
    return ckpt, cfg


@contextmanager
def checksums(on: bool, zip_crc: bool = True):
    """The checkpoint code as it is (on), or with no checksum computed or verified (off). With
    `zip_crc` False, "on" also saves without torch's CRC32 of each zip record, which torch.load
    never reads (torch.serialization.set_crc32_options): what dropping that pass would buy."""
    if on:
        torch.serialization.set_crc32_options(zip_crc)
        try:
            yield
        finally:
            torch.serialization.set_crc32_options(True)
        return
    with (
        mock.patch.object(checkpoint, "tensor_checksums", lambda payload: {}),
        mock.patch.object(checkpoint, "verify_tensors", lambda raw, path, sections: None),
    ):
        yield


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(
    shape: tuple[int, int, int, int], repeats: int, folder: Path, device: str, zip_crc: bool
) -> dict[str, object]:
    ckpt, cfg = training_checkpoint(shape, device)
    cpu_model = GPT(cfg, VOCAB)
    optimizer = torch.optim.AdamW(cpu_model.parameters(), lr=1e-4, fused=True)  # the trainer's kernel
    path = folder / "last.pt"
    for p in cpu_model.parameters():  # the first step's gradients, made once
        p.grad = torch.zeros_like(p)

    def load_for_resume() -> None:
        _, loaded = checkpoint.resumable_checkpoint(path, print)
        cpu_model.load_state_dict(loaded.model)
        optimizer.load_state_dict(loaded.optimizer)

    def resume_and_step() -> None:
        load_for_resume()
        optimizer.step()  # reads and writes every moment of the loaded state

    def load_for_sampling() -> None:
        cpu_model.load_state_dict(Checkpoint.load(path).model)

    def load_as_commands_do() -> None:
        load_model(path, torch.device("cpu"))

    times: dict[str, list[float]] = {}
    for rep in range(repeats + 1):  # the first round warms up the allocator and the page cache
        for on in (True, False) if rep % 2 else (False, True):  # alternate the order: drift falls on both
            tag = "with" if on else "without"
            with checksums(on, zip_crc):
                row = {
                    "save": timed(lambda: ckpt.save(path)),
                    "load_resume": timed(load_for_resume),
                    "resume_step": timed(resume_and_step),
                    "load_sample": timed(load_for_sampling),
                    "load_model": timed(load_as_commands_do),
                }
            if rep:
                for what, seconds in row.items():
                    times.setdefault(f"{what}_{tag}", []).append(seconds)
    result: dict[str, object] = {"params": cpu_model.num_params(non_embedding=False), "bytes": path.stat().st_size}
    for what in WHAT:
        with_s, without_s = (statistics.median(times[f"{what}_{t}"]) for t in ("with", "without"))
        result[what] = {"with_s": with_s, "without_s": without_s, "cost": with_s / without_s - 1}
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", type=parse_shape, action="append", help="6x384, 100M or LxExHxB (repeatable)")
    ap.add_argument("--repeats", type=int, default=7, help="timed rounds of each (median; default 7)")
    ap.add_argument("--dir", type=Path, default=None, help="where to write the file (default: a temporary folder)")
    ap.add_argument("--device", default="cpu", help="where the model lives when it is saved (cpu, cuda)")
    ap.add_argument("--hash-threads", type=int, default=checkpoint.HASH_THREADS, help="threads that hash, at most")
    ap.add_argument(
        "--zip-crc",
        choices=("on", "off"),
        default="on",
        help="off: the runs with checksums save without torch's zip CRC32 (an idea, not what minigpt does)",
    )
    a = ap.parse_args(argv)
    if a.repeats < 1 or a.hash_threads < 1:
        ap.error("--repeats and --hash-threads must be at least 1")
    checkpoint.HASH_THREADS = a.hash_threads
    shapes = a.shape or [parse_shape("6x384"), parse_shape("100M")]
    torch.manual_seed(0)
    results = {}
    print(f"{'shape':>8} {'params':>8} {'file MB':>8}  {'what':<12} {'with s':>8} {'without s':>9} {'cost':>7}")
    for name, shape in shapes:
        with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
            r = measure(shape, a.repeats, Path(tmp), a.device, a.zip_crc == "on")
        results[name] = r
        for what in WHAT:
            m = r[what]
            print(
                f"{name:>8} {r['params'] / 1e6:>7.1f}M {r['bytes'] / 1e6:>8.1f}  {what:<12} "
                f"{m['with_s']:>8.4f} {m['without_s']:>9.4f} {m['cost']:>+7.1%}"
            )
    machine = {"python": platform.python_version(), "torch": torch.__version__, "cpu": platform.processor()}
    threads = min(a.hash_threads, torch.get_num_threads())
    print(
        json.dumps(
            {"checksum_bench": results, "repeats": a.repeats, "device": a.device, "hash_threads": threads}
            | {"zip_crc": a.zip_crc, "machine": machine}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
