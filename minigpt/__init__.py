"""minigpt: character-level GPT training from the command line, and a small Python API:
`minigpt.load(RUN)` gives a model (minigpt.api.Model), `minigpt.train(...)` a run."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minigpt.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from minigpt.api import Model, Run

__version__ = "0.1.0"
__all__ = ["Callback", "UserError", "__version__", "load", "train"]


def load(target: str | Path = "runs/default", device: str = "auto") -> Model:
    """Load a trained model (a run directory or a .pt file): see minigpt.api.Model. torch loads here, not on import."""
    from minigpt.api import load as load_model

    return load_model(target, device)


def train(
    config: str | Path | Mapping[str, Any] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    **options: Any,
) -> Run:
    """Train a model as `minigpt train` does and return the Run (see minigpt.api.train); a mistake
    raises minigpt.UserError with the command line's message."""
    from minigpt.api import train as train_run

    return train_run(config, overrides, **options)


def __getattr__(name: str) -> Any:
    """minigpt.Callback, the base of minigpt.train()'s callbacks, imported when first named."""
    if name == "Callback":
        from minigpt.training.callbacks import Callback

        return Callback
    raise AttributeError(f"module 'minigpt' has no attribute {name!r}")
