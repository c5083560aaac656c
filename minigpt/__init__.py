"""minigpt: character-level GPT training from the command line, and a small Python API.

    import minigpt
    m = minigpt.load("runs/default")     # a run directory or a .pt file
    m.sample("ROMEO:", max_new_tokens=200)
    m.show_attention("ROMEO: But, soft!")   # in Jupyter: the interactive explorer

See minigpt.api.Model for every method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from minigpt.api import Model

__version__ = "0.1.0"
__all__ = ["__version__", "load"]


def load(target: str | Path = "runs/default", device: str = "auto") -> Model:
    """Load a trained model (a run directory or a .pt file) for sampling, scoring and looking at
    its attention: see minigpt.api.Model. torch is imported here, not by `import minigpt`, so the
    command line starts fast."""
    from minigpt.api import load as load_model

    return load_model(target, device)
