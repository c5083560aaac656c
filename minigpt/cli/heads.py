"""`minigpt heads`: the options, and the table a terminal shows; the measuring is inspect/heads.py's."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Literal

import typer

from minigpt.cli.options import DeviceOpt, TargetArg, ThreadsOpt, inference_device, wants_colour
from minigpt.errors import UserError
from minigpt.inspect.pages import check_output

ROLES = (
    "a pattern's lift above a uniform head, as a share of a perfect head's, must reach 0.5 and beat every other "
    "pattern's by 0.2 (previous, duplicate, induction, first); else 'local' when the head looks fewer than 3 "
    "positions back on average; else 'mixed' (docs/inside.md)"
)
ROLE_HELP = (
    "Scores: the share of a head's attention on a pattern's targets, on windows of the run's validation text "
    "(or --data, --text), averaged over the positions that have a target (a perfect head scores 1; the table's "
    "header prints a uniform head's); 'dist' is how many positions back a head looks on average; 'probe ind' is "
    f"the induction score on random characters written twice. Roles: {ROLES}."
)
ROLE_COLOURS = {"previous": "36", "induction": "35", "duplicate": "33", "first": "34", "local": "32", "mixed": "2"}


def heads_cmd(
    target: TargetArg,
    data: Annotated[
        Path | None,
        typer.Option("--data", help="Measure on this file, folder or 'glob' instead of the run's validation split."),
    ] = None,
    text: Annotated[
        str | None,
        typer.Option("--text", help="Measure on this text instead (ablation needs block_size + 1 characters)."),
    ] = None,
    ablation: Annotated[
        Literal["mean", "zero", "none"],
        typer.Option(
            "--ablation", help="Replace a head's output by its mean over the sample, by zeros, or skip ablation."
        ),
    ] = "mean",
    exact: Annotated[
        str,
        typer.Option(
            "--exact",
            help="How many heads, ranked by the estimate, get an exact ablation: a number, 'all', or auto: every head "
            "when that is cheap, else the largest estimates and the role candidates (docs/inside.md).",
        ),
    ] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per head, one per line.")] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html", help="Write an offline page: the grid of heads, each head's pattern and the ablation bars."
        ),
    ] = None,
    over_training: Annotated[
        bool,
        typer.Option(
            "--over-training", help="Score every snapshot of the run (train.keep_every, best.pt, last.pt) instead."
        ),
    ] = False,
    png: Annotated[Path | None, typer.Option("--png", help="With --over-training: draw the formation chart.")] = None,
    no_color: Annotated[bool, typer.Option("--no-color", help="A plain table.")] = False,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = 0,
) -> None:
    """What each attention head does: pattern scores on the run's own text, a role, and the loss its removal costs."""
    check_output(html)
    check_output(png, "--png")
    if png is not None and not over_training:
        raise UserError("--png draws the formation chart of --over-training; add --over-training")
    if over_training:
        from minigpt.inspect.formation import draw_formation, follow_run, formation_table

        points, about = follow_run(target, inference_device(device, threads))
        if png is not None:
            draw_formation(points, about, png)
            print(f"wrote {png}", file=sys.stderr)
        if as_json:
            for p in points:
                print(json.dumps(p.to_dict()))
        else:
            print(formation_table(points, about))
        return
    if exact.isdigit():
        n_exact: int | str | None = int(exact)
    elif exact in ("all", "auto"):
        n_exact = None if exact == "all" else "auto"  # None: every head
    else:
        raise UserError(f"--exact must be a number of heads, 'all' or 'auto', got {exact!r}")
    from minigpt.infer.loading import load_model
    from minigpt.inspect.heads import heads_of, heads_page

    report = heads_of(load_model(target, inference_device(device, threads)), data, ablation, n_exact, text)
    if html is not None:
        page = heads_page(report, labels=report.meta.get("labels"))
        print(f"wrote {page.save(html)}: {page.summary}", file=sys.stderr)
    if as_json:
        for h in report.heads:
            record = {"layer": h.layer, "head": h.head, "scores": h.scores, "probe": h.probe}
            print(json.dumps({**record, "ablation": h.ablation, "role": h.role}))
    elif html is None:
        print(heads_table(report, wants_colour(no_color)))


def heads_table(report, colour: bool) -> str:
    """One row per head: the pattern scores on the text, the mean distance, the probe's induction score, the
    role and the ablation; the header says what each column is and what a perfect and a uniform head score."""
    paint = (lambda text, code: f"\033[{code}m{text}\033[0m") if colour else (lambda text, code: text)
    meta, u, n, c, pu = report.meta, report.uniform, report.positions, report.ceilings, report.probe_uniform
    unit = "character" if meta.get("unit", "char") == "char" else meta.get("unit", "token")
    short = {"previous": "prev", "duplicate": "dup", "induction": "induct", "first": "first"}
    windows = meta.get("windows", 0)
    lines = [
        f"{meta.get('source', '')}",
        f"scores on {meta.get('text', 'the text')}: {windows:,} window{'s' if windows != 1 else ''} of "
        f"{meta.get('context', 0)} "
        f"{unit}s; each the share of a head's attention on the pattern's targets, averaged over the positions that "
        "have one",
        f"  prev: the previous position; dup: earlier copies of the current {unit}; induct: the {unit} after an "
        f"earlier copy of the last two; first: position 0",
        "  positions with a target: " + ", ".join(f"{short[k]} {n[k]:,}" for k in n),
        "  a perfect head scores 1.00; a uniform head (its weight spread evenly) "
        + ", ".join(f"{short[k]} {u[k]:.2f}" for k in short),
        f"dist: how many positions back a head looks on average, weighted by its attention (a uniform head: "
        f"{u['distance']:.1f})",
        f"probe ind: the induction score on {len(report.tokens) // 2} random {unit}s written twice (perfect "
        f"{c['induction']:.2f}, uniform {pu['induction']:.2f})",
    ]
    if report.base_loss is not None:
        exact = sum(bool(h.ablation and h.ablation["exact"]) for h in report.heads)
        lines.append(
            f"ablation: the rise in loss when a head's output is replaced by its {report.ablation}"
            f"{' over the sample' if report.ablation == 'mean' else 's'}, on {report.ablation_tokens:,} "
            f"predictions (loss {report.base_loss:.4f} with every head); {exact} of {len(report.heads)} measured "
            "exactly (± a standard error), ~ marks an estimate"
        )
    lines += ["", *report.rows(lambda cell, role: paint(cell, ROLE_COLOURS.get(role, "0")))]
    lines += ["", f"roles: {ROLES}"]
    return "\n".join(lines)


def by_position_command(loaded, data: Path | None, max_tokens: int, as_json: bool, png: Path | None) -> None:
    """`minigpt eval --by-position`: the loss at each context position and the ICL score."""
    from minigpt.infer.evaluate import eval_ids_for, icl_score, loss_by_position

    check_output(png, "--png")
    ids, table, label = eval_ids_for(loaded, str(data) if data is not None else None)
    curve = loss_by_position(loaded.model, ids, table, max_tokens)
    score, late, early = icl_score(curve)
    if png is not None:
        from minigpt.inspect.heads import draw_loss_by_position

        draw_loss_by_position(curve, late, early, png, f"{loaded.path}: {label}")
        print(f"wrote {png}", file=sys.stderr)
    if as_json:
        record = {"by_position": [round(float(v), 6) for v in curve], "icl_score": score}
        print(json.dumps({**record, "positions": {"late": late, "early": early}, "unit": loaded.tokenizer.unit}))
        return
    block = len(curve)
    marks = sorted({0, early, block // 4, block // 2, late, block - 1})
    print(f"loss by position over {label} ({loaded.path}), nats:")
    print("  " + "  ".join(f"{t + 1:>5}" for t in marks) + "   (position: characters of context)")
    print("  " + "  ".join(f"{curve[t]:>5.3f}" for t in marks))
    print(
        f"in-context-learning score {score:+.4f} nats: the loss at position {late + 1} minus at {early + 1} "
        f"(negative: later characters are predicted better)"
    )
