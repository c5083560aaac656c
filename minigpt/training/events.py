"""A run's TensorBoard event files read back with TensorBoard's own reader, imported only when a page
is made: what `minigpt runs --html` draws."""

from __future__ import annotations

from pathlib import Path

EVENTS = "events.out.tfevents.*"
# keep every scalar; parse one of everything else (images, embeddings, text): nothing here shows them
_SIZES = {"scalars": 0, "images": 1, "audio": 1, "histograms": 1, "compressedHistograms": 1, "tensors": 1}


def scalar_curve(run_dir: Path, *tags: str) -> dict[str, list[float]] | None:
    """The points of the first of `tags` (the val estimate's when none: val/loss before it was renamed) in
    the run's event files: {"step", "seconds" (from the first event), "value"} lists; None without event
    files, an empty curve without the tags."""
    if not any(run_dir.glob(EVENTS)):
        return None
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance=_SIZES)
    acc.Reload()
    curve: dict[str, list[float]] = {"step": [], "seconds": [], "value": []}
    tag = next((t for t in tags or ("val/loss_est", "val/loss") if t in acc.Tags().get("scalars", [])), None)
    if tag is None:
        return curve
    start = acc.FirstEventTimestamp()
    for event in acc.Scalars(tag):
        curve["step"].append(event.step)
        curve["seconds"].append(round(event.wall_time - start, 3))
        curve["value"].append(event.value)
    return curve
