"""MFU: the FLOPs count, the peak table, and what the trainer logs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from minigpt.checkpoint import load_checkpoint
from minigpt.config.schema import ModelConfig
from minigpt.runtime.mfu import device_peak, flops_per_token, mfu_percent, peak_entry

from .helpers import TRAINED_RUN_PEAK_TFLOPS


def test_flops_per_token_counts_every_matmul() -> None:
    cfg = ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=8)
    # per block: qkv 16x48, proj 16x16, MLP 16x64 and 64x16 weights; the LM head 16x10
    weights = 2 * (16 * 48 + 16 * 16 + 16 * 64 + 64 * 16) + 16 * 10
    assert flops_per_token(cfg, vocab_size=10) == 6 * weights + 12 * 2 * 16 * 8
    # the published figure for the 6-layer 384-channel context-256 Shakespeare recipe: ~10.6M weights
    big = ModelConfig(n_layer=6, n_head=6, n_embd=384, block_size=256)
    assert flops_per_token(big, 65) == pytest.approx(6 * 10.64e6 + 12 * 6 * 384 * 256, rel=1e-3)


@pytest.mark.parametrize(
    ("name", "tflops"),
    [
        ("NVIDIA H200", 989.0),
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),  # not the SXM part's 989
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA H800 PCIe", 756.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A10", 125.0),
        ("NVIDIA L4", 121.0),
        ("NVIDIA L40S", 362.0),
        ("Tesla T4", 65.0),
        ("NVIDIA GeForce RTX 4090", 165.0),
        ("NVIDIA A10G", None),  # not "A10": whole words only
        ("Some Future GPU", None),
    ],
)
def test_peak_table_matches_whole_names(name: str, tflops: float | None) -> None:
    entry = peak_entry(name)
    assert (entry[1] if entry else None) == tflops


def test_peak_override_and_cpu() -> None:
    peak, source = device_peak(torch.device("cpu"), 0.0)
    assert peak is None and "log.peak_tflops" in source  # a CPU has no table entry: the message says what to set
    peak, source = device_peak(torch.device("cpu"), 2.5)
    assert peak == 2.5e12 and "log.peak_tflops" in source
    # 1000 tokens/s of a 1 GFLOP-per-token model on two 1-TFLOPS devices use half of them
    assert mfu_percent(1000, 10**9, 1e12, n_devices=2) == pytest.approx(50.0)


def test_trainer_logs_mfu_consistent_with_tokens_per_sec(trained_run: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(trained_run))
    acc.Reload()
    tps = {e.step: e.value for e in acc.Scalars("tokens_per_sec")}
    mfu = {e.step: e.value for e in acc.Scalars("mfu")}
    assert set(mfu) == set(tps) and len(mfu) >= 2
    ckpt = load_checkpoint(trained_run / "last.pt")
    flops = flops_per_token(ModelConfig(**ckpt["config"]["model"]), len(ckpt["tokenizer"]["chars"]))
    for step, value in mfu.items():
        expected = 100 * tps[step] * flops / (TRAINED_RUN_PEAK_TFLOPS * 1e12)
        assert value == pytest.approx(expected, rel=1e-4)
        assert 0 < value < 100


@pytest.mark.parametrize(("name", "kind"), [("Tesla T4", "dense fp16"), ("NVIDIA H100 NVL", "dense bf16")])
def test_gpu_peak_names_the_type_its_figure_is_for(name: str, kind: str, monkeypatch) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    peak, source = device_peak(torch.device("cuda"), 0.0)
    assert peak == peak_entry(name)[1] * 1e12 and f"{name} {kind}" in source
