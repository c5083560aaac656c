"""speed, its report: each part's figures summed up over the repeats against its target
(targets.yaml), and the table (metric | minigpt | reference | ratio | target | met?)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from benchmarks.harness import targets, yes_no

TARGETS = targets()["speed"]


@dataclass
class Series:
    """One metric over the repeats (numbers; or labels such as a dtype, summed up by the most common)."""

    runs: list[Any] = field(default_factory=list)

    @property
    def median(self) -> Any:
        if all(isinstance(r, int | float) for r in self.runs):
            return statistics.median(self.runs)
        return max(self.runs, key=self.runs.count)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "median": self.median}


@dataclass
class Row:
    """One line of the table."""

    metric: str
    minigpt: str
    reference: str
    ratio: str
    target: str
    met: str


def collect(runs: list[dict[str, float]]) -> dict[str, Series]:
    return {key: Series([r[key] for r in runs]) for key in runs[0]}


def summarize_quality(s: dict[str, Series]) -> dict[str, Any]:
    target = TARGETS["quality"]["wall_ratio"]
    ratio = s["minigpt_wall_s"].median / s["reference_wall_s"].median
    loss_ok = s["minigpt_val_loss"].median <= s["reference_val_loss"].median
    return {
        **{k: v.to_dict() for k, v in s.items()},
        "loss_ok": loss_ok,
        "wall_ratio": ratio,
        "wall_ratio_target": target,
        "wall_ratio_met": ratio <= target,
        "met": loss_ok and ratio <= target,
    }


def summarize_speedup(s: dict[str, Series], metric: str, target: float, **extra: Any) -> dict[str, Any]:
    """Every series, then minigpt's median `metric` over the reference's, met when it is >= target."""
    ratio = s[f"minigpt_{metric}"].median / s[f"reference_{metric}"].median
    return {**{k: v.to_dict() for k, v in s.items()}, **extra, "ratio": ratio, "target": target, "met": ratio >= target}


def summarize_batch_sampling(s: dict[str, Series]) -> dict[str, Any]:
    target = TARGETS["batch-sampling"]["ratio"]
    return {**{k: v.to_dict() for k, v in s.items()}, "target": target, "met": s["default_ratio"].median >= target}


def compile_row(metric: str, part: dict[str, Any]) -> Row:
    """minigpt's compile time and dtype in a training comparison (the reference: eager float32)."""
    mg = f"{part['minigpt_compile_s']['median']:.1f}, {part['minigpt_dtype']['median']}"
    return Row(metric, mg, "0, float32", "", "", "")


def quality_rows(q: dict[str, Any]) -> list[Row]:
    loss_m, loss_r = q["minigpt_val_loss"]["median"], q["reference_val_loss"]["median"]
    wall_m, wall_r = q["minigpt_wall_s"]["median"], q["reference_wall_s"]["median"]
    return [
        Row(
            "val loss (whole val split, nats)",
            f"{loss_m:.4f}",
            f"{loss_r:.4f}",
            f"{loss_m - loss_r:+.4f}",
            "<= ref",
            yes_no(q["loss_ok"]),
        ),
        Row(
            "time to quality: process wall (s)",
            f"{wall_m:.1f}",
            f"{wall_r:.1f}",
            f"{q['wall_ratio']:.2f}x",
            f"<= {q['wall_ratio_target']}x",
            yes_no(q["wall_ratio_met"]),
        ),
        Row("  reference's own wall_s", "", f"{q['reference_reported_wall_s']['median']:.1f}", "", "", ""),
        Row("  minigpt eval process wall (s)", f"{q['minigpt_eval_wall_s']['median']:.1f}", "", "", "", ""),
        compile_row("  of which compile (s), dtype", q),
    ]


def throughput_rows(t: dict[str, Any]) -> list[Row]:
    tps_m, tps_r = t["minigpt_tokens_per_s"]["median"], t["reference_tokens_per_s"]["median"]
    ms_m, ms_r = t["minigpt_ms_per_step"]["median"], t["reference_ms_per_step"]["median"]
    return [
        Row(
            "train tokens/s (reference recipe)",
            f"{tps_m:,.0f}",
            f"{tps_r:,.0f}",
            f"{t['ratio']:.2f}x",
            f">= {t['target']}x",
            yes_no(t["met"]),
        ),
        Row("  ms/step", f"{ms_m:.2f}", f"{ms_r:.2f}", f"{ms_m / ms_r:.2f}x", "", ""),
        compile_row("  compile (s, not in tokens/s), dtype", t),
    ]


def sampling_rows(s: dict[str, Any]) -> list[Row]:
    mg, ref = s["minigpt_chars_per_s"]["median"], s["reference_chars_per_s"]["median"]
    return [
        Row(
            "sampling chars/s (6x384, ctx 256)",
            f"{mg:,.1f}",
            f"{ref:,.1f}",
            f"{s['ratio']:.2f}x",
            f">= {s['target']:g}x",
            yes_no(s["met"]),
        )
    ]


def batch_sampling_rows(b: dict[str, Any]) -> list[Row]:
    rows = []
    for name, label in (("default", "default model"), ("6x384", "6x384 ctx 256")):
        mg, one = b[f"{name}_batched_chars_per_s"]["median"], b[f"{name}_batch1_chars_per_s"]["median"]
        ok = yes_no(b["met"]) if name == "default" else ""  # the target is the default model's
        rows.append(
            Row(
                f"{b['samples']['median']} samples chars/s, {label}",
                f"{mg:,.0f}",
                f"{one:,.0f} (batch 1)",
                f"{b[f'{name}_ratio']['median']:.2f}x",
                f">= {b['target']:g}x" if ok else "",
                ok,
            )
        )
    return rows


def budget_rows(g: dict[str, Any]) -> list[Row]:
    target = TARGETS["budget"]
    rows = []
    last = str(int(max(float(k) for k in g["at_seconds"])))
    for sec, row in g["at_seconds"].items():
        mg, ref = row["minigpt"], row["reference"]
        if mg is None or ref is None:
            continue
        final = sec == last
        what = f"cpu_4min.yaml val loss at {sec} s (whole split)" if final else f"  curve val loss at {sec} s"
        rows.append(
            Row(
                what,
                f"{mg:.4f}",
                f"{ref:.4f}",
                f"{mg - ref:+.4f}",
                f"<= {target['val_loss']:.2f}" if final else "<= ref",
                yes_no(mg <= ref and (mg <= target["val_loss"] or not final)),
            )
        )
    rows.append(
        Row(
            "  whole process (s)",
            f"{g['minigpt_wall_s']:.1f}",
            f"{g['reference_wall_s']:.1f}",
            "",
            f"<= {target['wall_s']:g}",
            yes_no(g["minigpt_wall_s"] <= target["wall_s"]),
        )
    )
    return rows


def big_rows(big: dict[str, Any]) -> list[Row]:
    frac, frac_target = big["fraction_of_peak"], TARGETS["big"]["fraction_of_peak"]
    return [
        Row(
            "train tokens/s (6x384, ctx 256, batch 16)",
            f"{big['minigpt_tokens_per_s']:,.0f}",
            f"{big['reference_tokens_per_s']:,.0f}",
            f"{big['ratio']:.2f}x",
            f">= {big['target_ratio']:g}x",
            yes_no(big["ratio"] >= big["target_ratio"]),
        ),
        Row(
            f"  fraction of the measured {big['peak_dtype']} peak",
            f"{100 * frac:.0f}%",
            f"{100 * big['reference_fraction_of_fp32_peak']:.0f}% of float32's",
            f"({big['peak_gflops']:.0f} GFLOP/s)",
            f">= {100 * frac_target:.0f}%",
            yes_no(frac >= frac_target),
        ),
    ]


ROWS = {  # a part's key in the results: its rows, in the table's order
    "time_to_quality": quality_rows,
    "train_throughput": throughput_rows,
    "sampling": sampling_rows,
    "batch_sampling": batch_sampling_rows,
    "budget": budget_rows,
    "big": big_rows,
}


def table_rows(results: dict[str, Any]) -> list[Row]:
    return [row for key, rows in ROWS.items() if key in results for row in rows(results[key])]


def format_table(rows: list[Row]) -> str:
    header = Row("metric", "minigpt", "reference", "ratio", "target", "met?")
    cells = [[r.metric, r.minigpt, r.reference, r.ratio, r.target, r.met] for r in [header, *rows]]
    widths = [max(len(c[i]) for c in cells) for i in range(6)]

    def line(c: list[str]) -> str:
        return " | ".join(c[0].ljust(widths[0]) if i == 0 else c[i].rjust(widths[i]) for i in range(6)).rstrip()

    sep = "-+-".join("-" * w for w in widths)
    return "\n".join([line(cells[0]), sep, *(line(c) for c in cells[1:])])
