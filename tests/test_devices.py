"""Every tensor the package makes is made on the device it is used on: a call to a torch factory names
its device, or is on the CPU on purpose (CPU_ON_PURPOSE, with the reason). A CPU tensor meeting a
GPU's weights fails only on a GPU, which the test machines rarely have; this scan fails anywhere."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "minigpt"
# torch.from_numpy has no device (always the CPU): a `.to(device)` follows where one is needed
FACTORIES = {
    "zeros", "ones", "empty", "full", "arange", "rand", "randn", "randint", "randperm",
    "tensor", "as_tensor", "linspace", "logspace", "eye", "empty_strided",
}  # fmt: skip

# (file under minigpt/, the call as written) -> why the CPU is right there
CPU_ON_PURPOSE = {
    ("data/corpus.py", "torch.randint(self.high, (self.batch_size,), generator=self.generator)"): (
        "window starts from a CPU generator, to index the memory-mapped text"
    ),
    ("export/formats.py", 'torch.zeros(size, dtype=sd["wte.weight"].dtype)'): "hf_weights moved the weights to the CPU",
    ("export/formats.py", "torch.zeros(2, C, dtype=table.dtype)"): "hf_weights moved the weights to the CPU",
    ("infer/evaluate.py", "torch.zeros(block, dtype=torch.float64)"): "float64 sums (MPS has no float64)",
    ("infer/score.py", "torch.empty(len(ids) - 1)"): "the scores returned to the caller, on the CPU",
    ("inspect/heads.py", "torch.zeros(model.vocab_size, dtype=torch.int64)"): "character counts, made on the CPU",
    ("inspect/heads.py", "torch.as_tensor(np.asarray(freqs, dtype=np.float64))"): "sampled with a CPU generator",
    ("inspect/heads.py", "torch.randint(low, high, (n_seq, half), generator=gen)"): "drawn from a CPU generator",
    **{
        ("inspect/heads.py", f"torch.zeros({shape}, dtype=torch.float64)"): "float64 sums (MPS has no float64)"
        for shape in ("L, nh, hs", "L, nh", "L, nh, hs, hs")
    },
    ("inspect/hooked.py", "torch.arange(hs // 2)"): "a channel order: CPU indices index any device's tensor",
    **{
        ("model.py", call): "a constant table built once, a buffer that moves with the module"
        for call in (
            "torch.arange(n_pos, dtype=torch.float32)",
            "torch.arange(0, dim, 2, dtype=torch.float32)",
            "torch.zeros(n_pos, dim)",
            "torch.arange(0, head_size, 2, dtype=torch.float32)",
        )
    },
    ("model.py", "torch.tensor(0.5)"): "a parameter: moves with the module",
    ("runtime/attention.py", "torch.randn(1, heads, context, head_size, generator=gen)"): "a CPU speed probe",
    ("runtime/precision.py", "torch.full((1, width), 0.01)"): "the CPU's decoding speed probe",
    ("runtime/precision.py", "torch.full((12 * width, width), 0.01)"): "the CPU's decoding speed probe",
    ("runtime/precision.py", "torch.randn(*s, generator=gen, requires_grad=True)"): "a CPU speed probe",
    ("runtime/precision.py", "torch.randn(width, 4 * width, generator=gen, requires_grad=True)"): "a CPU speed probe",
    ("training/optim.py", 'torch.as_tensor(s["step"], dtype=torch.float32)'): "moved to the parameter's device at once",
}


def unplaced_calls(source: str) -> list[str]:
    """The torch factory calls in `source` that name no device, each as written (whitespace collapsed)."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in FACTORIES
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "torch"
            and not any(k.arg == "device" for k in node.keywords)
        ):
            calls.append(re.sub(r"\s+", " ", ast.get_source_segment(source, node) or ""))
    return calls


def test_the_scan_flags_a_call_without_a_device() -> None:
    # the ONNX export's example input, as it was when it failed for a model on a GPU
    assert unplaced_calls("example = torch.zeros((2, block), dtype=torch.long)") == [
        "torch.zeros((2, block), dtype=torch.long)"
    ]
    assert unplaced_calls("x = torch.zeros((2, block), dtype=torch.long, device=model.device)") == []
    assert unplaced_calls("x = y.new_zeros(3) + torch.zeros_like(y)") == []  # these follow their tensor


def test_every_tensor_factory_call_names_its_device_or_is_on_the_cpu_on_purpose() -> None:
    found = {
        (path.relative_to(PACKAGE).as_posix(), call)
        for path in sorted(PACKAGE.rglob("*.py"))
        for call in unplaced_calls(path.read_text(encoding="utf-8"))
    }
    unexplained = sorted(found - CPU_ON_PURPOSE.keys())
    assert not unexplained, f"name the device (device=...), or add the call to CPU_ON_PURPOSE with why: {unexplained}"
    stale = sorted(CPU_ON_PURPOSE.keys() - found)
    assert not stale, f"CPU_ON_PURPOSE lists calls the package no longer makes: {stale}"
