"""Mixed precision on the CPU: when bf16 autocast is chosen, and attention kept in float32 under it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minigpt import trainer
from minigpt.model import causal_attention

CPU = torch.device("cpu")


@pytest.mark.parametrize("native", [True, False])
def test_auto_dtype_on_the_cpu_is_bf16_only_where_the_cpu_has_it(native: bool, monkeypatch) -> None:
    monkeypatch.setattr(trainer, "cpu_has_native_bf16", lambda: native)
    assert trainer.resolve_dtype("auto", CPU) == (torch.bfloat16 if native else torch.float32)
    # an explicit choice is kept either way
    assert trainer.resolve_dtype("float32", CPU) == torch.float32
    assert trainer.resolve_dtype("bfloat16", CPU) == torch.bfloat16


def test_native_bf16_check_reads_the_cpu_flags(monkeypatch) -> None:
    for avx512_bf16, amx, expected in [(True, False, True), (False, True, True), (False, False, False)]:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda v=avx512_bf16: v, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda v=amx: v, raising=False)
        assert trainer.cpu_has_native_bf16() is expected


def test_attention_under_cpu_autocast_runs_in_float32() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 16, 8).bfloat16().requires_grad_() for _ in range(3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = causal_attention(q, k, v, 0.0)
    assert y.dtype == torch.bfloat16  # the blocks around it stay in bf16
    # the float32 attention of the same (bf16-rounded) inputs, rounded once at the end
    expected = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True).bfloat16()
    assert torch.equal(y, expected)
    y.float().sum().backward()
    assert all(t.grad is not None and t.grad.dtype == torch.bfloat16 for t in (q, k, v))
