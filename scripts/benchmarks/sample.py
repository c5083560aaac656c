"""sample: decoding and whole-process `minigpt sample`, this working tree against a git ref, with the
reference's uncached generation as the yardstick."""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.harness import (
    BARE_RUN,
    DEFAULT_REFERENCE,
    add_data_arg,
    add_repeats_arg,
    child,
    machine_info,
    minigpt,
    minigpt_train,
    missing_file,
    progress,
    run_reference,
    run_timed,
    scratch,
    targets,
    two_trees,
    yes_no,
)
from benchmarks.speed import SAMPLE_MODEL, SAMPLE_REFERENCE_MODEL

PREVIOUS_RELEASE = "b94c9da"  # the release before the round that slowed decoding (issue 66)
ONE_STEP = ["train.max_steps=1", "train.eval_steps=1", "train.batch_size=2", "train.compile=false", *BARE_RUN]
QUICK_MODEL = ["model.n_layer=2", "model.n_head=2", "model.n_embd=64", "model.block_size=64"]
QUICK_REFERENCE_MODEL = ["--layers", "2", "--heads", "2", "--embd", "64", "--ctx", "64"]
TARGETS = targets()["sample"]


def cpu_flags() -> str:
    """The CPU's bf16 flags, which decide sampling's dtype (none: bf16 is emulated)."""
    info = Path("/proc/cpuinfo")
    flags = set(info.read_text().split()) if info.is_file() else set()
    return " ".join(f for f in ("avx512_bf16", "amx_bf16", "amx_tile") if f in flags) or "none"


def measure(a: argparse.Namespace, tmp: Path) -> tuple[dict[str, dict[str, list[float]]], list[float]]:
    """Each measurement's values for each tree, alternating (A B B A ...), and the reference's chars/s."""
    trees = two_trees(a.before, tmp)
    model, ref_model = (QUICK_MODEL, QUICK_REFERENCE_MODEL) if a.quick else (SAMPLE_MODEL, SAMPLE_REFERENCE_MODEL)
    chars, ref_chars = (50, 20) if a.quick else (a.chars, 1000)
    runs = {}
    for name, env in trees.items():  # each tree writes its own checkpoint: the format may differ between them
        progress(f"{name}: a checkpoint of {' '.join(model)} (1 training step)")
        runs[name] = tmp / f"run-{name}"
        run_timed(minigpt_train(a.data.resolve(), runs[name], *model, *ONE_STEP), env, cwd=tmp)
        sample = minigpt("sample", str(runs[name]), "--max-new-tokens", "1", "--device", "cpu")
        run_timed(sample, env, cwd=tmp)  # warm-up: file caches, and the sampling dtype's probe cached
    seen: dict[str, dict[str, list[float]]] = {m: {n: [] for n in trees} for m in ("decode", "whole", "startup")}
    ref: list[float] = []
    for i in range(a.repeats):
        for name in list(trees) if i % 2 == 0 else list(reversed(trees)):
            env, run = trees[name], str(runs[name])
            decode = run_timed([child("sampler.py"), run, str(chars)], env, cwd=tmp)
            seen["decode"][name].append(1000 / float(decode.stdout.split()[-1]))  # ms a character
            for what, n in (("whole", chars), ("startup", 1)):
                args = minigpt("sample", run, "--max-new-tokens", str(n), "--device", "cpu", "--seed", "1")
                seen[what][name].append(run_timed(args, env, cwd=tmp).wall_s)
            got = {what: values[name][-1] for what, values in seen.items()}
            progress(
                f"[{i + 1}] {name}: {got['decode']:.2f} ms a character, {got['whole']:.1f} s, {got['startup']:.2f} s"
            )
        if a.reference is not None:
            ref_args = ["--generate", str(ref_chars), *ref_model]
            _, out = run_reference(a.reference, a.data.resolve(), trees["after"], *ref_args)
            ref.append(float(out["gen_tokens_per_s"]))
    return seen, ref


def run(a: argparse.Namespace) -> int:
    """Decoding and whole-process `minigpt sample`, this working tree against a git ref.

    Each tree (--before's, unpacked with `git archive`, and this one) trains a 6x384 context-256
    checkpoint of its own (1 step), then, alternating A B B A ...:
      decode   generation alone, ms a character (children/sampler.py: --chars after a warm-up, in
               process, `sample --dtype auto`'s weights and `sample`'s threads)
      whole    `minigpt sample RUN --max-new-tokens CHARS --seed 1`, whole process, seconds
      startup  the same with --max-new-tokens 1
    and the reference's uncached generation (reference_gpt.py --generate 1000, same shape) once a
    repeat. Prints medians, after/before, minigpt over the reference (decode and whole process, as
    `speed --only sampling` counts it) beside the targets, and one JSON line."""
    if a.reference is not None:
        a.reference = a.reference.resolve()
    if missing_file(("data file", a.data), *([("reference script", a.reference)] if a.reference else [])):
        return 2
    with scratch("minigpt-sample-") as tmp:
        seen, ref = measure(a, tmp)
    chars = 50 if a.quick else a.chars
    med = {what: {name: statistics.median(v) for name, v in values.items()} for what, values in seen.items()}
    print(f"\nmedians of {a.repeats} (before = {a.before}, after = working tree); CPU bf16 flags: {cpu_flags()}")
    print(f"{'measurement':<26} {'before':>8} {'after':>8} {'after/before':>13}")
    labels = {"decode": "decode, ms a character", "whole": f"sample {chars} chars, s", "startup": "sample 1 char, s"}
    for what, m in med.items():
        print(f"{labels[what]:<26} {m['before']:>8.3f} {m['after']:>8.3f} {m['after'] / m['before']:>13.3f}")
    result: dict[str, Any] = {"before_ref": a.before, "repeats": a.repeats, "chars": chars, "quick": a.quick}
    result |= {"runs": seen, "medians": med, "cpu_bf16_flags": cpu_flags()}
    if ref:
        cps = statistics.median(ref)
        over = {
            n: {"decode": 1000 / med["decode"][n] / cps, "whole": chars / med["whole"][n] / cps} for n in seen["decode"]
        }
        for name, r in over.items():
            print(f"{name} over the reference's {cps:,.0f} chars/s: decode {r['decode']:.1f}x, whole {r['whole']:.1f}x")
        ms, ratio = TARGETS["decode_ms"], TARGETS["whole_ratio"]
        print(f"target: decode <= {ms} ms a character: {yes_no(med['decode']['after'] <= ms)}")
        print(f"target: whole process >= {ratio}x the reference: {yes_no(over['after']['whole'] >= ratio)}")
        result |= {"reference_chars_per_s": ref, "over_reference": over}
    if a.quick:
        print("quick mode: a tiny model and a few characters, a smoke test of this script; the numbers mean nothing")
    print(json.dumps({**result, "machine": machine_info()}))
    return 0


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument(
        "--before", default=PREVIOUS_RELEASE, help=f"git ref to compare against (default {PREVIOUS_RELEASE})"
    )
    ap.add_argument("--chars", type=int, default=3000, help="characters to generate (default 3000)")
    ap.add_argument("--reference", type=Path, default=DEFAULT_REFERENCE, help="reference_gpt.py to compare with")
    ap.add_argument("--no-reference", dest="reference", action="store_const", const=None, help="skip the reference")
    ap.add_argument("--quick", action="store_true", help="a tiny model and 50 characters: a smoke test of this script")
    add_data_arg(ap)
    add_repeats_arg(ap, default=3)
