"""Closed sets the config and the CLI share, and the shipped configs; stdlib only (`--help` imports it)."""

from __future__ import annotations

from pathlib import Path

DEVICES = ("auto", "cpu", "cuda", "mps")  # and cuda:N
DEVICE_NAMES = "auto, cpu, cuda, cuda:N or mps"
DEVICE_METAVAR = "<auto|cpu|cuda|cuda:N|mps>"  # not a closed set (cuda:N), so not a Literal on the command line
SAMPLE_DTYPES = ("auto", "float32", "bfloat16")  # minigpt sample --dtype
UNKNOWN_CHARS = ("error", "skip")  # minigpt sample --unknown: prompt characters the model never saw
EXPORT_FORMATS = ("hf", "onnx")  # minigpt export --format
EXPORT_DTYPES = ("float32", "bfloat16", "float16")  # minigpt export --dtype
PLAYGROUND_DTYPES = ("float32", "float16")  # minigpt playground --dtype: what a browser's typed arrays can hold
MPS_PROCESSES = (
    "multi-process training (--nproc / torchrun) runs on CUDA or the CPU, not on mps; use --device cpu or one process"
)


def is_device_name(name: str) -> bool:
    """auto, cpu, mps, cuda or cuda:N (whether it exists here is the runtime's question)."""
    prefix, colon, index = name.partition(":")
    return name in DEVICES or (prefix == "cuda" and bool(colon) and index.isdigit())


def shipped(name: str) -> Path:
    """What ships with minigpt (configs, lessons, data/): inside the wheel's package, else the checkout's."""
    package = Path(__file__).resolve().parent.parent
    return package / name if (package / name).exists() else package.parent / name


def shipped_configs() -> dict[str, Path]:
    """The example configs that come with minigpt, by name (`cpu_4min`)."""
    return {p.stem: p for p in sorted(shipped("configs").glob("*.yaml"))}


def config_file(given: str) -> Path:
    """The CONFIG a command line names: the file at that path, else the shipped config of that name."""
    path = Path(given)
    if path.exists() or path.parent not in (Path("."), Path("configs")):
        return path
    name = path.stem if path.suffix in (".yaml", ".yml") else path.name
    return shipped_configs().get(name, path)
