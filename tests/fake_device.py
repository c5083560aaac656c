"""A device the tests control, for the code paths no CPU test reaches otherwise: tensors that say
they live on an accelerator (device "meta", the one non-CPU device every torch build can run
autograd on) while their numbers live in a CPU tensor inside, so the real computation runs.

It refuses what a GPU or a Mac refuses: float64 on the device (MPS has none: `.double()`,
`.to(torch.float64)`, a float64 factory or reduction there raise `TypeError`, as
"Cannot convert a MPS Tensor to float64" does), `.numpy()` of a device tensor, and a CPU tensor
(not a 0-d one) in an operation with device tensors. Moving to the CPU (`.cpu()`, `.to("cpu")`,
`.item()`, `.tolist()`) gives plain CPU tensors and numbers, and checkpoints save CPU tensors, as
`torch.load(map_location="cpu")` reads them back.

Stand-ins make the rest of torch work on it: `torch.tensor` / `as_tensor` / `new_tensor` (which
copy in C++, past the dispatcher), `torch.Generator(device=...)` (a CPU generator), inference mode
(no_grad: a wrapper tensor cannot be a view in inference mode) and `module.to(device)` (swapping
parameters in place, so that tied weights stay tied). Attention takes torch's math kernel there
(its choice is by device), equal to the CPU's up to rounding."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("meta")
aten = torch.ops.aten
# operations that take CPU tensors beside device ones on a real GPU: copies, and CPU indices
CROSS_DEVICE = {aten.copy_.default, aten._to_copy.default, aten.index.Tensor, aten.index_put_.default}


class OnDevice(torch.Tensor):
    """A CPU tensor that says it is on DEVICE."""

    inner: torch.Tensor

    @staticmethod
    def __new__(cls, inner: torch.Tensor) -> OnDevice:
        return torch.Tensor._make_wrapper_subclass(
            cls,
            inner.shape,
            strides=inner.stride(),
            storage_offset=inner.storage_offset(),
            dtype=inner.dtype,
            device=DEVICE,
            requires_grad=inner.requires_grad,
        )

    def __init__(self, inner: torch.Tensor) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"OnDevice({self.inner!r})"

    def __reduce_ex__(self, protocol):  # torch.save writes the CPU tensor
        return self.inner.detach().__reduce_ex__(protocol)

    @property
    def is_meta(self) -> bool:  # a device with data: nn.Module.load_state_dict copies into it
        return False

    def tolist(self):
        return self.inner.tolist()

    def numpy(self, *, force: bool = False):
        raise TypeError(f"can't convert {DEVICE.type} device type tensor to numpy: use Tensor.cpu() first")

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return run_op(func, args, kwargs or {})


def run_op(func, args, kwargs):
    """`func` on the CPU tensors inside; its results on DEVICE when an input was there or
    device=DEVICE asked for them, where a float64 result is refused."""
    on_device = False

    def unwrap(t):
        nonlocal on_device
        if isinstance(t, OnDevice):
            on_device = True
            return t.inner
        return t

    cpu_args, cpu_kwargs = tree_map(unwrap, (args, kwargs))
    if on_device and func not in CROSS_DEVICE:
        for t in tree_flatten((args, kwargs))[0]:
            if isinstance(t, torch.Tensor) and not isinstance(t, OnDevice) and t.dim() > 0:
                raise RuntimeError(
                    f"Expected all tensors to be on the same device: a CPU tensor {tuple(t.shape)} in {func}"
                )
    target = cpu_kwargs.get("device")
    if target is not None:
        on_device = torch.device(target).type == DEVICE.type
        if on_device:
            cpu_kwargs["device"] = torch.device("cpu")
    out = func(*cpu_args, **cpu_kwargs)
    if not on_device:
        return out
    if "out" in kwargs:
        return kwargs["out"]  # the wrapper of the tensor it wrote
    if func._schema.is_mutable and args and isinstance(args[0], torch.Tensor):
        return args[0]  # in place: the wrapper of the tensor it changed

    def wrap(t):
        if not isinstance(t, torch.Tensor) or isinstance(t, OnDevice):
            return t
        if t.dtype == torch.float64:
            raise TypeError(f"Cannot convert a {DEVICE.type} tensor to float64 ({func}): the device has none, as MPS")
        return OnDevice(t)

    return tree_map(wrap, out)


class _Factories(TorchDispatchMode):
    """Factories with device=DEVICE (torch.zeros(..., device=...)) make OnDevice tensors."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return run_op(func, args, kwargs or {})


class _Constructors(TorchFunctionMode):
    """torch.tensor, as_tensor and Tensor.new_tensor copy their data in C++ past the dispatcher:
    made on the CPU here, then moved."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in (torch.tensor, torch.as_tensor, torch.Tensor.new_tensor):
            if func is torch.Tensor.new_tensor:
                source, args = args[0], args[1:]
                kwargs.setdefault("device", source.device)
                kwargs.setdefault("dtype", source.dtype)
                func = torch.tensor
            device = kwargs.get("device")
            if device is not None and torch.device(device).type == DEVICE.type:
                kwargs["device"] = "cpu"
                with _Factories():
                    return func(*args, **kwargs).to(DEVICE)
        return func(*args, **kwargs)


_RealGenerator = torch.Generator


class _Generator(_RealGenerator):
    """torch.Generator(device=DEVICE) is a CPU generator (what the tensors inside use)."""

    def __new__(cls, device="cpu"):
        device = torch.device(device)
        return _RealGenerator.__new__(cls, "cpu" if device.type == DEVICE.type else device)

    def __init__(self, device="cpu") -> None:
        pass


class _NoGradForInference:
    """Stands in for torch._C._InferenceMode: no_grad."""

    def __init__(self, mode: bool = True) -> None:
        self.mode = mode

    def __enter__(self) -> None:
        self.before = torch.is_grad_enabled()
        if self.mode:
            torch._C._set_grad_enabled(False)

    def __exit__(self, *exc) -> None:
        torch._C._set_grad_enabled(self.before)


@pytest.fixture
def fake_device(monkeypatch: pytest.MonkeyPatch) -> Iterator[torch.device]:
    """DEVICE, working for the test's duration: `model.to(fake_device)`, `torch.zeros(..., device=...)`."""
    monkeypatch.setattr(torch, "Generator", _Generator)
    monkeypatch.setattr(torch._C, "_InferenceMode", _NoGradForInference)
    # module.to(device) swaps each parameter in place, as it sets .data on a real device: a tied
    # weight (wte and lm_head) stays one parameter
    monkeypatch.setattr(torch.__future__, "get_swap_module_params_on_conversion", lambda: True)
    with _Factories(), _Constructors():
        yield DEVICE
