"""`minigpt runs`: a folder's runs, one row each from their checkpoints (no weights read) and
results.json; `--html`: the runs on one offline page, curves, configs and differences."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from minigpt.checkpoint import LAST, Checkpoint, find_checkpoint, list_snapshots, runs_inside
from minigpt.config.files import value_text
from minigpt.config.schema import config_from_dict
from minigpt.errors import UserError
from minigpt.inspect.pages import HtmlPage, check_output, render
from minigpt.io.textfiles import read_json_dict
from minigpt.model import parameter_count
from minigpt.training.sweep import Sweep, short_keys


@dataclass
class RunInfo:
    run: str  # the directory, relative to the folder listed
    steps: int | None
    best_val_loss_est: float | None  # the best in-training estimate (train.eval_steps batches), the checkpoint's
    val_loss_full: float | None  # the final evaluation's, on the whole validation split (results.json)
    val_full_sampled: bool  # that evaluation scored a spread sample of the split (train.final_eval_tokens)
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
        return RunInfo(name, None, None, None, False, None, None, None, problem=str(e))
    full = results.get("val_loss_full")
    full = float(full) if isinstance(full, (int, float)) and math.isfinite(full) else None
    best = ckpt.best_val_loss if ckpt.best_val_loss is not None and math.isfinite(ckpt.best_val_loss) else None
    started = (ckpt.init_from or {}).get("path")
    sampled = full is not None and results.get("val_tokens_scored") != results.get("val_tokens")
    return RunInfo(
        name,
        ckpt.step,
        best,
        full,
        sampled,
        params,
        results.get("wall_s"),
        started,
        snapshots=len(list_snapshots(run_dir)),
        config=cfg.flat(),
        results=results or None,
    )


def list_runs(root: Path) -> list[RunInfo]:
    """Every run directory under `root` (at any depth; `root` itself too, named "."), in path order."""
    if not root.is_dir():
        raise UserError(f"{root} is not a directory of runs (train one with: minigpt train --out {root}/NAME)")
    return [read_run(d, str(d.relative_to(root)) if d != root else ".") for d in runs_inside(root)]


def format_runs(runs: list[RunInfo]) -> str:
    """The table of runs (a data column when their texts differ: losses compare only on one) and what a ~ marks."""
    data = {r.run: data_label(r.config["data.path"]) for r in runs if r.config}
    with_data = len(set(data.values())) > 1
    rows = [("run", *(["data"] if with_data else []), *HEADS, "snapshots", "started from")]
    for r in runs:
        first = (r.run, data.get(r.run, "-")) if with_data else (r.run,)
        if r.problem:
            rows.append((*first, *("-",) * 6, f"unreadable: {r.problem}"))
            continue
        rows.append((*first, *run_cells(r), str(r.snapshots), r.started_from or "-"))
    return "\n".join([*_aligned(rows), *estimate_legend(runs)])


def _aligned(rows: list[tuple[str, ...]]) -> list[str]:
    """A table's lines: each column padded to its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def estimate_legend(runs: list[RunInfo]) -> list[str]:
    """The line under a table that explains its ~, when a loss carries one."""
    if any(r.val_full_sampled and not r.problem for r in runs):
        return ["~: val full on a spread sample of the validation split (train.final_eval_tokens)"]
    return []


def data_label(path: str | list[str]) -> str:
    """A run's data.path, short: the file or folder name ('notes.txt', 'books/ +2' for a list)."""
    items = [path] if isinstance(path, str) else list(path)
    first = Path(items[0])
    name = first.name + ("/" if first.is_dir() else "")
    return name + (f" +{len(items) - 1}" if len(items) > 1 else "")


HEADS = ("steps", "val est", "val full", "params", "wall")  # run_cells'


def run_cells(r: RunInfo) -> tuple[str, ...]:
    """steps, the two val losses (val full ~: on a sample of the split), params and wall time, as shown."""
    est = "-" if r.best_val_loss_est is None else f"{r.best_val_loss_est:.4f}"
    full = "-" if r.val_loss_full is None else f"{r.val_loss_full:.4f}" + ("~" if r.val_full_sampled else "")
    params = "-" if r.params is None else f"{r.params / 1e6:.2f}M"
    wall = "-" if r.wall_s is None else f"{r.wall_s:.0f}s"
    return str(r.steps), est, full, params, wall


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
    """The sweep's runs, best whole-split val loss first (where there is none, the best estimate's),
    then the runs with no loss yet, then the points of its last draw not run.
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
        loss = row.info.val_loss_full if row.info.val_loss_full is not None else row.info.best_val_loss_est
        return (0, loss) if loss is not None else (1, 0.0)

    return sorted(rows, key=order)


def format_sweep(rows: list[SweepRow]) -> str:
    keys = list(rows[0].values) if rows else []
    short = short_keys(keys)
    table = [("run", *(short[k] for k in keys), *HEADS, "")]
    for row in rows:
        r, values = row.info, [value_text(row.values[k]) for k in keys]
        if r is None or r.problem:
            note = row.note if r is None else f"unreadable: {r.problem}"
            table.append((row.run, *values, *("-",) * 5, note))
            continue
        table.append((row.run, *values, *run_cells(r), row.note))
    return "\n".join(_aligned(table) + estimate_legend([row.info for row in rows if row.info is not None]))


def runs_page(folder: Path, out: Path) -> str:
    """`minigpt runs DIR --html PAGE`: every run's config, results and val loss curve (from its
    TensorBoard events, or results.json's last point without them) on one page; the line to print."""
    from minigpt.training.events import scalar_curve

    check_output(out)
    runs = []
    for info in list_runs(folder):
        curve = scalar_curve(folder / info.run) if info.problem is None else None
        runs.append({**info.to_dict(), "config": info.config, "results": info.results, "curve": curve})
    if not runs:
        raise UserError(f"no runs under {folder} (train one with: minigpt train --out {folder}/NAME)")
    page = runs_html(str(folder), runs)
    return f"wrote {page.save(out)}: {page.summary}"


def differing_keys(configs: list[dict[str, Any]]) -> list[str]:
    """The config keys whose value is not the same in every config (one missing counts as differing)."""
    keys = list(dict.fromkeys(k for config in configs for k in config))
    return [k for k in keys if len({repr(config.get(k, "<none>")) for config in configs}) > 1]


def finite(value: Any) -> Any:
    """`value` with every non-finite float as None: JSON has no NaN or Infinity."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def runs_html(folder: str, runs: list[dict[str, Any]]) -> HtmlPage:
    """The page of `runs`: one dict each with `run` (its name), `config` (flat, or None when the run
    could not be read), `results` (results.json or None), `steps`, `best_val_loss_est`, `val_loss_full`,
    `val_full_sampled`, `params`, `wall_s`, `problem` and `curve` ({step, seconds, value} lists, or None
    without event files)."""
    differ = differing_keys([r["config"] for r in runs if r.get("config")])
    data = {"folder": folder, "runs": finite(runs), "differ": differ}
    curves = sum(1 for r in runs if r.get("curve") and r["curve"]["step"])
    keys = "every config key is the same"
    if differ:
        keys = "1 config key differs" if len(differ) == 1 else f"{len(differ)} config keys differ"
    summary = f"{len(runs)} run{'' if len(runs) == 1 else 's'}, {curves} with a val loss curve; {keys}"
    return HtmlPage(render("runs", f"runs: {folder}", data), "runs", summary, height=900)
