"""`minigpt runs`: the run directories under a folder, one row each from their checkpoints (no weights
read) and results.json, a sweep's sorted by loss; and `--html`'s data: configs, results, val-loss curves."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from minigpt.checkpoint import LAST, Checkpoint, find_checkpoint, list_snapshots, runs_inside
from minigpt.config.files import value_text
from minigpt.config.schema import config_from_dict
from minigpt.errors import UserError
from minigpt.io.textfiles import read_json_dict
from minigpt.model import parameter_count
from minigpt.training.sweep import Sweep, short_keys


@dataclass
class RunInfo:
    run: str  # the directory, relative to the folder listed
    steps: int | None
    best_val_loss: float | None  # the final evaluation's number when results.json has it, else the estimate
    best_val_loss_is_full: bool
    params: int | None
    wall_s: float | None
    started_from: str | None  # a fine-tuned run's starting checkpoint
    problem: str | None = None  # why the run could not be read
    snapshots: int = 0  # weights-only step_NNNNNNN.pt files (train.keep_every)
    config: dict[str, Any] | None = field(default=None, repr=False)  # flat: {'model.n_layer': 4, ...}
    results: dict[str, Any] | None = field(default=None, repr=False)  # results.json, when there is one

    def to_dict(self) -> dict[str, Any]:
        row = asdict(self)
        del row["config"], row["results"]
        return row


def read_run(run_dir: Path, name: str) -> RunInfo:
    results = read_json_dict(run_dir / "results.json")
    try:
        ckpt = Checkpoint.load(find_checkpoint(run_dir, prefer=LAST), verify=())  # a table reads no weights
        cfg = config_from_dict(ckpt.config, name)
        params = parameter_count(cfg.model, ckpt.model["wte.weight"].shape[0])
    except UserError as e:
        return RunInfo(name, None, None, False, None, None, None, problem=str(e))
    full = results.get("val_loss_full")
    best = full if isinstance(full, (int, float)) else ckpt.best_val_loss
    if best is not None and not math.isfinite(best):
        best = None
    started = (ckpt.init_from or {}).get("path")
    # a final evaluation past train.final_eval_tokens scored a sample: an estimate too (marked ~)
    exact = isinstance(full, (int, float)) and results.get("val_tokens_scored") == results.get("val_tokens")
    return RunInfo(
        name,
        ckpt.step,
        best,
        exact,
        params,
        results.get("wall_s"),
        started,
        snapshots=len(list_snapshots(run_dir)),
        config=cfg.flat(),
        results=results or None,
    )


def run_dirs(root: Path) -> list[Path]:
    """Every run directory under `root` (at any depth; `root` itself too), in path order."""
    if not root.is_dir():
        raise UserError(f"{root} is not a directory of runs (train one with: minigpt train --out {root}/NAME)")
    return runs_inside(root)


def run_name(root: Path, run_dir: Path) -> str:
    return str(run_dir.relative_to(root)) if run_dir != root else "."


def list_runs(root: Path) -> list[RunInfo]:
    return [read_run(d, run_name(root, d)) for d in run_dirs(root)]


def format_runs(runs: list[RunInfo]) -> str:
    """The table of runs (a data column when their texts differ: losses compare only on one) and what a ~ marks."""
    data = {r.run: data_name(r.config["data.path"]) for r in runs if r.config}
    with_data = len(set(data.values())) > 1
    rows = [
        ("run", *(["data"] if with_data else []), "steps", "best val", "params", "wall", "snapshots", "started from")
    ]
    for r in runs:
        first = (r.run, data.get(r.run, "-")) if with_data else (r.run,)
        if r.problem:
            rows.append((*first, "-", "-", "-", "-", "-", f"unreadable: {r.problem}"))
            continue
        rows.append((*first, *run_cells(r), str(r.snapshots), r.started_from or "-"))
    n = len(rows[0]) - 1
    widths = [max(len(row[i]) for row in rows) for i in range(n)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:n], widths)) + "  " + row[n] for row in rows]
    return "\n".join([*(line.rstrip() for line in lines), *estimate_legend(runs)])


ESTIMATE_LEGEND = (
    "~: an estimate (the in-training loss, or a sample of the split); without it, the whole validation split"
)


def estimate_legend(runs: list[RunInfo]) -> list[str]:
    """The line under a table that explains its ~, when a loss carries one."""
    marked = any(r.best_val_loss is not None and not r.best_val_loss_is_full and not r.problem for r in runs)
    return [ESTIMATE_LEGEND] if marked else []


def data_name(path: str | list[str]) -> str:
    """A run's data.path, short: the file or folder name ('notes.txt', 'books/ +2' for a list)."""
    items = [path] if isinstance(path, str) else list(path)
    first = Path(items[0])
    name = first.name + ("/" if first.is_dir() else "")
    return name + (f" +{len(items) - 1}" if len(items) > 1 else "")


def run_cells(r: RunInfo) -> tuple[str, str, str, str]:
    """steps, best val (~: an estimate), params and wall time as the tables show them."""
    val = "-" if r.best_val_loss is None else f"{r.best_val_loss:.4f}" + ("" if r.best_val_loss_is_full else "~")
    params = "-" if r.params is None else f"{r.params / 1e6:.2f}M"
    wall = "-" if r.wall_s is None else f"{r.wall_s:.0f}s"
    return str(r.steps), val, params, wall


@dataclass
class SweepRow:
    """One point of a sweep: its run (None before it starts), its values of the keys that vary, and a note."""

    run: str
    info: RunInfo | None
    values: dict[str, Any]
    note: str

    def to_dict(self) -> dict[str, Any]:
        return {**(self.info.to_dict() if self.info else {"run": self.run}), "values": self.values, "note": self.note}


def sweep_rows(sweep: Sweep, notes: dict[str, str] | None = None) -> list[SweepRow]:
    """The sweep's runs, best whole-split val loss first (estimates, marked ~, among them by
    their value), then the runs with no loss yet, then the points of its last draw not run.
    `notes`: what the command that just ran did with each run."""
    notes = notes or {}
    drawn = {point.name for point in sweep.points()}
    rows = []
    for point in replace(sweep, random=None).points():  # runs of an earlier --random draw too
        run_dir = sweep.out / point.name
        info = read_run(run_dir, point.name) if find_checkpoint(run_dir, prefer=LAST) else None
        if info is None and point.name not in drawn:
            continue
        config = info.config if info is not None and info.config else sweep.config_of(point).flat()
        values = {k: config.get(k) for k in sweep.varying}
        rows.append(SweepRow(point.name, info, values, notes.get(point.name, "" if info else "not run")))

    def order(row: SweepRow) -> tuple[int, float]:
        if row.info is None:
            return (2, 0.0)
        loss = row.info.best_val_loss
        return (0, loss) if loss is not None else (1, 0.0)

    return sorted(rows, key=order)


def format_sweep(rows: list[SweepRow]) -> str:
    keys = list(rows[0].values) if rows else []
    short = short_keys(keys)
    table = [("run", *(short[k] for k in keys), "steps", "best val", "params", "wall", "")]
    for row in rows:
        r, values = row.info, [value_text(row.values[k]) for k in keys]
        if r is None or r.problem:
            note = row.note if r is None else f"unreadable: {r.problem}"
            table.append((row.run, *values, "-", "-", "-", "-", note))
            continue
        table.append((row.run, *values, *run_cells(r), row.note))
    widths = [max(len(line[i]) for line in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in table]
    return "\n".join(lines + estimate_legend([row.info for row in rows if row.info is not None]))


def runs_page(folder: Path, out: Path) -> str:
    """`minigpt runs DIR --html PAGE`: every run's config, results and val loss curve (from its
    TensorBoard events, or results.json's last point without them) on one page; the line to print."""
    from minigpt.inspect.pages import check_output
    from minigpt.inspect.runs_page import runs_html
    from minigpt.training.events import scalar_curve

    check_output(out)
    runs = []
    for run_dir in run_dirs(folder):
        info = read_run(run_dir, run_name(folder, run_dir))
        curve = scalar_curve(run_dir) if info.problem is None else None
        runs.append({**info.to_dict(), "config": info.config, "results": info.results, "curve": curve})
    if not runs:
        raise UserError(f"no runs under {folder} (train one with: minigpt train --out {folder}/NAME)")
    page = runs_html(str(folder), runs)
    return f"wrote {page.save(out)}: {page.summary}"
