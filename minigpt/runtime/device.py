"""Where and how computation runs, for training and inference: rank-0 status lines, the device, the
precision policy (bf16 / fp16 / fp32), autocast, and torch.compile with a fallback to eager."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from minigpt.runtime import distributed

if TYPE_CHECKING:
    from minigpt.config.schema import Config
    from minigpt.runtime.precision import Choice
from minigpt.config import DEVICE_NAMES, MPS_PROCESSES, is_device_name
from minigpt.errors import UserError, first_line

_sink: Callable[[str], None] | None = None  # set by training/progress.py while a bar is on screen


def log(msg: str) -> None:
    """Status for the person at the terminal: stderr, clear of any progress bar; rank 0 only."""
    if not distributed.launched().is_main:
        return
    if _sink is not None:
        _sink(msg)
    else:
        print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def log_sink(sink: Callable[[str], None]):
    """Route `log` through `sink` (e.g. tqdm.write, which keeps a progress bar intact) for a while."""
    global _sink
    previous, _sink = _sink, sink
    try:
        yield
    finally:
        _sink = previous


def resolve_device(name: str, dist: distributed.Dist | None = None) -> torch.device:
    """'auto' -> cuda > mps > cpu; an explicit device must exist; under torchrun CUDA is cuda:LOCAL_RANK."""
    if not is_device_name(name):
        raise UserError(f"unknown device '{name}': use {DEVICE_NAMES}")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"device '{name}' requested but CUDA is not available here; use --device cpu or auto")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise UserError(f"device '{name}' requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError("device 'mps' requested but Apple MPS is not available here; use --device cpu or auto")
    if name == "auto":
        if torch.cuda.is_available():
            name = "cuda"
        elif torch.backends.mps.is_available() and not (dist and dist.enabled):
            name = "mps"
        else:
            name = "cpu"
    if dist is None or not dist.enabled:
        return torch.device(name)
    if name == "mps":
        raise UserError(MPS_PROCESSES)
    if name.startswith("cuda"):
        if dist.local_rank >= torch.cuda.device_count():
            raise UserError(
                f"LOCAL_RANK {dist.local_rank} but only {torch.cuda.device_count()} CUDA device(s): "
                "lower --nproc_per_node"
            )
        return torch.device("cuda", dist.local_rank)
    return torch.device("cpu")


def configure_threads(requested: int = 0, busy: float | None = None, kept: int | None = None) -> int:
    """Set and return torch's intra-op thread count: `requested`; else (0) OMP_NUM_THREADS (the user's, or
    under `--nproc` the launcher's share of the cores, `runtime/torchrun.py`), else a resumed run's `kept`
    count, else the cores this process may run on less those other processes keep `busy`."""
    if requested > 0:
        count = requested
    elif os.environ.get("OMP_NUM_THREADS", "").isdigit() and int(os.environ["OMP_NUM_THREADS"]) > 0:
        count = int(os.environ["OMP_NUM_THREADS"])
    elif kept:
        count = kept
    else:
        from minigpt.runtime.cores import allowed_cores, cores_left

        cores = allowed_cores()
        count = cores_left(cores, busy) if busy is not None else cores
    torch.set_num_threads(count)
    return count


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX); elsewhere bf16 is emulated."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def cuda_has_native_bf16(device: torch.device) -> bool:
    """bf16 in hardware (Ampere and later, or ROCm), unlike torch's check, which counts emulated bf16 (T4, V100)."""
    if torch.version.hip:
        return torch.cuda.is_bf16_supported()
    return torch.cuda.get_device_capability(device)[0] >= 8


def cpu_bf16_choice(shape: tuple[int, int] | None = None) -> Choice | None:
    """The cached, measured bf16 choice for `shape` (rows, width) on a CPU with bf16 hardware; None without."""
    if not cpu_has_native_bf16():
        return None
    from minigpt.runtime.precision import cached_choice, measure

    rows, width = shape or PROBE_SHAPE  # whether bf16 pays for rows x width products: cached, else measured
    return cached_choice(f"{rows}x{width}", lambda: measure(rows, width))


PROBE_SHAPE = (512, 384)  # rows x width, where the caller has no shape of its own
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(
    name: str, device: torch.device, shape: tuple[int, int] | None = None, trained: dict | None = None
) -> tuple[torch.dtype, str]:
    """The training autocast dtype (float32: no autocast) and why, for the run's one precision line.
    `auto` keeps a resumed run's dtype (`trained`: the checkpoint's {"device", "dtype"}) on the same kind
    of device, bf16 only where it is in hardware there; else bf16 on a GPU with it (fp16 without), bf16
    on a CPU with it where products of `shape` (rows, width) measure faster, float32 elsewhere."""
    if name != "auto":
        if name == "float16" and device.type == "cpu":
            raise UserError("train.dtype float16 is not supported on the CPU; use bfloat16 or float32")
        return DTYPES[name], "set by train.dtype"
    kept = (trained or {}).get("dtype") if (trained or {}).get("device") == device.type else None
    native = cuda_has_native_bf16(device) if device.type == "cuda" else device.type == "cpu" and cpu_has_native_bf16()
    if kept in DTYPES and (kept != "bfloat16" or native):
        return DTYPES[kept], "train.dtype auto, kept on resume: the run trained in it so far"
    dropped = f"; not the {kept} the run trained in so far" if kept in DTYPES else ""
    if device.type == "cuda":
        return (
            torch.bfloat16 if native else torch.float16
        ), f"auto: bf16 {'in' if native else 'not in'} this GPU's hardware{dropped}"
    choice = cpu_bf16_choice(shape) if native else None
    if choice is None:
        return torch.float32, f"auto: no bf16 in this {device.type.upper()}'s hardware{dropped}"
    how = "cached" if choice.cached else "measured"
    return choice.dtype, f"auto, {how}: bf16 products at {choice.ratio:.2f}x float32's speed on this CPU{dropped}"


def decide(
    cfg: Config, device: torch.device, rows: int, trained: dict | None, dist: distributed.Dist, busy: float | None
) -> tuple[dict[str, Any], list[str]]:
    """What the run's numbers depend on, decided once before it trains: train.threads (on a CPU),
    train.dtype and train.attention as concrete values for its config.yaml, and the lines that say
    why; `trained` (a resumed run's choices and where auto made them) keeps them. Under DDP rank 0 decides
    (the process group started) and every rank takes its choices."""
    t, kept = cfg.train, trained if (trained or {}).get("device") == device.type else {}
    # a count kept from processes that shared this machine's cores otherwise is not the user's: measured again
    same_share = kept.get("processes", 1) == dist.local_world_size
    threads = configure_threads(t.threads, busy, kept.get("threads") if device.type == "cpu" and same_share else None)
    choices: dict[str, Any] | None = None
    lines: list[str] = []
    if dist.is_main:
        from minigpt.runtime.attention import attention_form

        dtype, why = resolve_dtype(t.dtype, device, (rows, cfg.model.n_embd), trained)
        form, note = attention_form(cfg, device, dtype, rows // cfg.model.block_size, trained)
        choices = {"train.dtype": dtype_name(dtype), "train.attention": form}
        choices.update({"train.threads": threads} if device.type == "cpu" else {})
        lines = [f"precision: {choices['train.dtype']} ({why})", *([note] if note else [])]
    choices = distributed.all_gather(choices, dist)[0]
    torch.set_num_threads(choices.get("train.threads", threads))
    return choices, lines


def sampling_dtype(name: str, device: torch.device, shape: tuple[int, int] = (6, 384)) -> torch.dtype:
    """The weights' dtype for generation: `auto` is bfloat16 on a GPU with bf16 and on a CPU where a model of
    `shape` (layers, width) decodes faster in bf16 (`precision.decode_speed`), float32 elsewhere."""
    if name != "auto":
        return DTYPES[name]
    if device.type == "cuda":  # fp16 (an older GPU) samples in float32
        return torch.bfloat16 if cuda_has_native_bf16(device) else torch.float32
    if device.type != "cpu" or not cpu_has_native_bf16():
        return torch.float32
    from minigpt.runtime.precision import cached_choice, decode_speed  # not logged: `minigpt --version` lists it

    return cached_choice("x".join(map(str, shape)), lambda: decode_speed(*shape), kind="decode").dtype


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def enable_fast_matmul(device: torch.device) -> None:
    """TF32 matrix multiplies and convolutions on CUDA (no effect elsewhere), for the training's own
    products; `full_float32` turns it off where float32 must be float32."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


@contextlib.contextmanager
def full_float32():
    """float32 products in float32, not TF32, for a while (Muon's float32 iteration, the final evaluation,
    which must score as `minigpt eval` does); the settings before are restored. CUDA only: elsewhere no-op."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def synchronize(device: torch.device) -> None:
    """Wait for the work queued on `device` (CUDA: that GPU; MPS), so a timer measures the work; none on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def fork_rng(device: torch.device) -> contextlib.AbstractContextManager:
    """Fork the CPU random state and the training device's (CUDA or MPS), restored on exit."""
    if device.type in ("cuda", "mps"):
        return torch.random.fork_rng(devices=[device.index or 0], device_type=device.type)
    return torch.random.fork_rng(devices=[])


@contextlib.contextmanager
def without_cuda_home_notice():
    """Drop torch's "No CUDA runtime is found, using CUDA_HOME=..." log record; every other record still shows."""
    logger = logging.getLogger("torch.utils.cpp_extension")

    def drop(record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("No CUDA runtime is found")

    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


def forget_compiled() -> None:
    """Drop every graph torch.compile made in this process, before a sweep's next run (dynamo's recompile limit)."""
    dynamo = sys.modules.get("torch._dynamo")  # never imported: nothing was compiled
    if dynamo is not None:
        dynamo.reset()


def maybe_compile(
    model: torch.nn.Module,
    enabled: bool,
    wrap: Callable[[torch.nn.Module], torch.nn.Module],
    trial: Callable[[torch.nn.Module], Any],
    device: torch.device,
    dist: distributed.Dist | None = None,
) -> torch.nn.Module:
    """`wrap(torch.compile(model))` (wrap: DDP or nothing), else `wrap(model)` eager when no compiler works.
    `trial(wrapped)`, a step of the training's shapes under forked random state, compiles it here, so
    the first real step compiles nothing and the run is unchanged. Under DDP the ranks agree on the
    outcome (one rank's failure makes every rank train eagerly): each wraps the same model the same
    number of times, so DDP's start-up collectives pair up."""
    if not enabled:
        return wrap(model)
    dist = dist or distributed.launched()
    t0, failure = time.perf_counter(), None
    wrapped = None
    try:
        with without_cuda_home_notice():
            compiled = torch.compile(model)
    except Exception as e:  # any backend failure (no C++ compiler, unsupported op, ...)
        failure = f"torch.compile failed ({first_line(e)[:200]})"
    if distributed.all_agree(failure is None, dist):
        wrapped = wrap(compiled)
        failure = _trial_failure(wrapped, trial, device)
        model.zero_grad(set_to_none=True)
    if not distributed.all_agree(failure is None, dist):
        del wrapped  # its DDP hooks go with it
        log(f"warning: {failure or 'torch.compile failed on another process'}; training eagerly")
        return wrap(model)
    log(f"compiled the model in {time.perf_counter() - t0:.1f}s")
    return wrapped


def _trial_failure(
    wrapped: torch.nn.Module, trial: Callable[[torch.nn.Module], Any], device: torch.device
) -> str | None:
    """Why the compiled `wrapped` cannot train (its trial raised, or dynamo ran it eagerly), or None."""
    from torch._dynamo.utils import counters  # imported by torch.compile

    failed = counters["frames"]["total"] - counters["frames"]["ok"]
    try:
        with without_cuda_home_notice(), fork_rng(device):
            trial(wrapped)
    except Exception as e:  # any backend failure (no C++ compiler, unsupported op, out of memory, ...)
        return f"torch.compile failed ({first_line(e)[:200]})"
    if counters["frames"]["total"] - counters["frames"]["ok"] > failed:  # suppressed errors: dynamo ran it eagerly
        return "torch.compile fell back to eager (torch._dynamo suppressed its errors)"
    return None
