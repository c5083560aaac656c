"""Model FLOPs utilisation (MFU): the model's training FLOPs per token (the PaLM convention), and the
device's dense 16-bit peak (docs/gpu.md says how both are counted); `Host`, what a timed run ran on."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

import torch

from minigpt.config.schema import ModelConfig
from minigpt.runtime.cores import cpu_model_and_flags

# dense tensor-core TFLOPS per device and its 16-bit type; names match whole words of the device
# name ("A10" is not "A100"), the more specific names (NVL, PCIe) first
PEAK_TFLOPS: tuple[tuple[str, float, str], ...] = (
    ("B200", 2250.0, "bf16"),
    ("H200 NVL", 835.0, "bf16"),
    ("H200", 989.0, "bf16"),
    ("H100 NVL", 835.0, "bf16"),
    ("H100 PCIe", 756.0, "bf16"),
    ("H100", 989.0, "bf16"),
    ("H800 PCIe", 756.0, "bf16"),
    ("H800", 989.0, "bf16"),
    ("A100", 312.0, "bf16"),
    ("A800", 312.0, "bf16"),
    ("L40S", 362.0, "bf16"),
    ("L40", 181.0, "bf16"),
    ("L4", 121.0, "bf16"),
    ("A10", 125.0, "bf16"),
    ("V100", 125.0, "fp16"),
    ("T4", 65.0, "fp16"),
    ("RTX 4090", 165.0, "bf16"),
    ("RTX 3090", 71.0, "bf16"),
    ("MI300X", 1307.0, "bf16"),
    ("MI250X", 383.0, "bf16"),
)


def flops_per_token(cfg: ModelConfig, vocab_size: int) -> int:
    """Training FLOPs (forward and backward) per token of this model."""
    C, L, T = cfg.n_embd, cfg.n_layer, cfg.block_size
    per_block = 4 if cfg.attn_only else 12  # qkv 3C^2, proj C^2, and the MLP's 8C^2 unless model.attn_only
    matmul_weights = L * per_block * C * C + vocab_size * C  # the blocks; the LM head
    return 6 * matmul_weights + 12 * L * C * T


def peak_entry(device_name: str) -> tuple[str, float, str] | None:
    """The table's (name, TFLOPS, kind) for a device name such as 'NVIDIA H100 80GB HBM3', or None."""
    return next((entry for entry in PEAK_TFLOPS if re.search(rf"\b{re.escape(entry[0])}\b", device_name)), None)


def device_peak(device: torch.device, override_tflops: float) -> tuple[float | None, str]:
    """(peak FLOP/s of one device, or None when unknown; a description of where the figure came from)."""
    if override_tflops > 0:
        return override_tflops * 1e12, f"{override_tflops:g} TFLOPS from log.peak_tflops"
    if device.type != "cuda":
        return None, f"no peak FLOPS known for a {device.type} device; set log.peak_tflops to report MFU"
    name = torch.cuda.get_device_name(device)
    entry = peak_entry(name)
    if entry is None:
        return None, f"no peak FLOPS known for {name}; set log.peak_tflops to report MFU"
    tflops, kind = entry[1], entry[2]
    return tflops * 1e12, f"{tflops:g} TFLOPS, {name} dense {kind} (override with log.peak_tflops)"


def mfu_percent(tokens_per_s: float, flops_tok: int, peak: float, n_devices: int = 1) -> float:
    """MFU in percent: tokens_per_s counts the tokens of all n_devices together."""
    return 100.0 * tokens_per_s * flops_tok / (peak * n_devices)


@dataclass(frozen=True)
class Host:
    """What a timed run ran on, for the figure beside its time: the GPU's name, or the CPU's model, its
    bf16 flags and the threads; the matmul peak where it is known (`device_peak`: the GPU table or
    log.peak_tflops, which is where `scripts/bench.py peak`'s figure for a CPU goes)."""

    device: str  # cpu, cuda or mps
    name: str
    flags: tuple[str, ...]  # a CPU's of cores.BF16_FLAGS
    threads: int
    peak_tflops: float | None
    peak: str  # where the peak came from, or why it is unknown

    def text(self) -> str:
        """One line: 'NVIDIA H100 80GB HBM3 (peak 989 TFLOPS)', 'Intel Xeon (amx_bf16, avx512_bf16; 2 threads)'
        (a CPU's peak where log.peak_tflops gives it)."""
        peak = [f"peak {self.peak_tflops:g} TFLOPS"] if self.peak_tflops else []
        if self.device != "cpu":
            return f"{self.name} ({'; '.join(peak)})" if peak else self.name
        flags = ", ".join(self.flags) or "no bf16 flags"
        threads = f"{self.threads} thread{'s' * (self.threads != 1)}"
        return f"{self.name or 'CPU'} ({'; '.join([flags, threads, *peak])})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "flags": list(self.flags)}


def host(device: torch.device, override_tflops: float) -> Host:
    """This process's `Host` on `device`."""
    peak, source = device_peak(device, override_tflops)
    tflops = peak / 1e12 if peak is not None else None
    if device.type == "cuda":
        return Host("cuda", torch.cuda.get_device_name(device), (), torch.get_num_threads(), tflops, source)
    name, flags = cpu_model_and_flags()
    return Host(
        device.type,
        name if device.type == "cpu" else f"{device.type} ({name})",
        flags,
        torch.get_num_threads(),
        tflops,
        source,
    )
