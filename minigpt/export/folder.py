"""`minigpt export` / `Model.export`: check everything, write into a staging folder beside OUT, rename it into
place: a failure at any point leaves OUT as it was and no staging folder behind."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from minigpt.config import EXPORT_DTYPES, EXPORT_FORMATS
from minigpt.errors import UserError, first_line
from minigpt.export.formats import ARCHITECTURES, architecture_for, write_hf, write_onnx
from minigpt.infer.loading import LoadedModel

ONNX_DTYPES = ("float32", "float16")  # onnxruntime's CPU kernels have no bfloat16 matrix multiply
EXTRA = {"hf": ("safetensors", "tokenizers"), "onnx": ("onnx", "onnxscript", "tokenizers")}
INSTALL = "pip install 'minigpt[export]' (in a minigpt checkout: uv sync --extra export)"


def check_request(out: Path, fmt: str, dtype: str, force: bool) -> None:
    """Everything about the request that needs no model: the format, the dtype, OUT, the libraries."""
    if fmt not in EXPORT_FORMATS:
        raise UserError(f"--format {fmt!r} is not one of: {', '.join(EXPORT_FORMATS)}")
    if dtype not in EXPORT_DTYPES:
        raise UserError(f"--dtype {dtype!r} is not one of: {', '.join(EXPORT_DTYPES)}")
    if fmt == "onnx" and dtype not in ONNX_DTYPES:
        raise UserError(
            f"--format onnx supports --dtype {' or '.join(ONNX_DTYPES)}: onnxruntime has no "
            f"{dtype} kernels for the CPU; --format hf keeps {dtype}"
        )
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UserError(f"{out} exists and is not a folder; give a new or empty folder for the export")
    try:
        holds_files = out.is_dir() and any(out.iterdir())
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or first_line(e)}") from None
    if holds_files and not force:
        raise UserError(f"{out} already holds files; pass --force to replace its contents, or give another folder")
    missing = []
    for name in EXTRA[fmt]:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise UserError(f"--format {fmt} needs {', '.join(missing)} (the export extra): {INSTALL}")


@contextlib.contextmanager
def staging_folder(out: Path) -> Iterator[Path]:
    """A fresh folder beside `out`: renamed over `out` when the block ends, removed on any exception."""
    created = [p for p in reversed([out.parent, *out.parent.parents]) if not p.exists()]
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".partial"))
    except OSError as e:
        _remove_created(created)
        raise UserError(f"cannot write {out}: {e.strerror or first_line(e)}") from None
    try:
        yield stage
        _swap_in(stage, out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        _remove_created(created)
        raise


def _remove_created(created: list[Path]) -> None:
    """Remove the (empty) parent folders this export created, deepest first."""
    for p in reversed(created):
        with contextlib.suppress(OSError):
            p.rmdir()


def _swap_in(stage: Path, out: Path) -> None:
    """Rename the finished staging folder to `out`; an old `out` is moved aside first and deleted
    only once the new one is in place (put back if the rename fails)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in stage.iterdir():  # safetensors writes 0600: give every file the mode open() would
        path.chmod(0o666 & ~umask)
    stage.chmod(0o777 & ~umask)  # and the folder mkdir's, not mkdtemp's 0700
    old = None
    if out.exists():
        old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
        os.replace(out, old / "previous")
    try:
        os.replace(stage, out)
    except BaseException:
        if old is not None:
            os.replace(old / "previous", out)
            old.rmdir()
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_loaded(loaded: LoadedModel, out: Path, fmt: str = "hf", dtype: str = "float32", force: bool = False) -> str:
    """Export a loaded model to `out` in `fmt` ('hf' or 'onnx'); returns the line that says what was written."""
    from minigpt.data.encoding import file_sha256

    check_request(out, fmt, dtype, force)
    ckpt, target = loaded.path.resolve(), out.resolve()
    if ckpt == target or target in ckpt.parents:  # --force would delete the run
        raise UserError(f"{out} holds the checkpoint being exported ({loaded.path}); give another folder")
    if fmt == "hf":  # the architecture refuses a model with no exact mapping
        write, format_name = write_hf, ARCHITECTURES[architecture_for(loaded.config.model)]
    else:
        write, format_name = write_onnx, "ONNX"
    try:
        with staging_folder(out) as stage:
            names = write(loaded, stage, dtype)
            sums = [f"{file_sha256(stage / name)}  {name}\n" for name in sorted(names)]  # for sha256sum -c
            (stage / "SHA256SUMS").write_text("".join(sums), encoding="utf-8")
            names.append("SHA256SUMS")
    except OSError as e:
        raise UserError(f"cannot write {out}: {e.strerror or first_line(e)}; nothing was written") from None
    return f"wrote {out}: {', '.join(names)} ({format_name}, {dtype}, from {loaded.path})"


def export_run(target: Path, out: Path, fmt: str = "hf", dtype: str = "float32", force: bool = False) -> str:
    """`minigpt export`: the request checked before the model is loaded (on the CPU, in float32), then exported."""
    import torch

    from minigpt.infer.loading import load_model

    check_request(out, fmt, dtype, force)
    return export_loaded(load_model(target, torch.device("cpu")), out, fmt, dtype, force)
