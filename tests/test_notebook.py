"""examples/attention.ipynb runs headless (nbclient, an ipykernel) from a trained model to its pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import make_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.early  # a kernel that loads torch and matplotlib
def test_attention_notebook_runs_and_shows_the_pages(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("MINIGPT_RUN", str(trained_run))
    monkeypatch.setenv("MINIGPT_RUN_LEARNED", str(trained_run))  # the comparison's cells run; a second training
    # would only cost time here (the notebook's own text says what learned positions change)
    monkeypatch.setenv("MINIGPT_TEXT", make_text(40, seed=3))  # characters the tiny models know
    nb = nbformat.read(ROOT / "examples" / "attention.ipynb", as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)  # every cell ran (an error would have raised)
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    pages = [o.data["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert len(pages) == 3  # the explorer, the surprise page, the learned model's explorer
    assert all(p.startswith("<iframe srcdoc=") and "minigpt-data" in p for p in pages)
    printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "largest weight on a future character: 0.0" in printed and "rows sum to 1: True" in printed
    assert "bits per character: rope" in printed
