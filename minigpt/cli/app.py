"""The `minigpt` command line: parse flags, call one library function, map errors to exit codes:
0 success, 1 a bug, 2 a user mistake (one `error:` line), 74 a file could not be written, 130 / 138
/ 143 stopped by SIGINT / SIGUSR1 / SIGTERM after saving last.pt (docs/distributed.md)."""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import os
import sys
import threading
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from typer.core import TyperOption

from minigpt.cli import help as cli_help
from minigpt.cli.heads import ROLE_HELP, by_position_command, heads_cmd
from minigpt.cli.help import ExportDtype, ExportFormat, PlaygroundDtype, epilog
from minigpt.cli.lens import lens_cmd
from minigpt.cli.options import DeviceOpt, HtmlOpt, TargetArg, ThreadsOpt, UnknownOpt, inference_device, wants_colour
from minigpt.cli.sample import sample
from minigpt.cli.sweep import sweep_cmd
from minigpt.cli.train import train_cmd
from minigpt.errors import TrainingInterrupted, UserError

_display_type_rich = getattr(TyperOption, "display_type_rich", None)  # typer 0.29's; other releases lack it


def _flag_without_metavar(self: TyperOption, ctx) -> str | None:
    """A flag takes no value, so its help shows none: typer 0.29 showed `--json <bool>`."""
    return None if self.is_flag else _display_type_rich(self, ctx)


if _display_type_rich is not None:
    TyperOption.display_type_rich = _flag_without_metavar  # every option of every command, --help included

app = typer.Typer(no_args_is_help=True, pretty_exceptions_enable=False, epilog=epilog("minigpt"))


def _print_version(value: bool) -> None:
    if value:
        print(cli_help.version_line())
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Show the versions of minigpt, torch and Python, and exit.",
        ),
    ] = False,
) -> None:
    """Train character-level GPT models on any text (a file, a folder, a whole corpus), watch them learn, sample."""


# the commands whose bodies are in their own modules: cli/train.py, cli/sweep.py, cli/sample.py, ...
app.command(name="train", epilog=cli_help.train_epilog())(train_cmd)
app.command(name="sweep", epilog=f"{epilog('sweep')}\n\n{cli_help.shipped_line()}")(sweep_cmd)
app.command(epilog=epilog("sample"))(sample)


@app.command(name="eval", epilog=epilog("eval"))
def eval_(
    target: TargetArg,
    data: Annotated[
        Path | None, typer.Option("--data", help="Evaluate on all of this file, folder or 'glob', not the val split.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    max_tokens: Annotated[
        int,
        typer.Option(
            "--max-tokens",
            min=0,
            help="Past this many tokens, score an evenly spread sample of whole windows (0 = every position).",
        ),
    ] = 0,
    by_position: Annotated[
        bool,
        typer.Option(
            "--by-position",
            help="The mean loss at each position of the "
            "context, and the in-context-learning score (late positions minus early ones).",
        ),
    ] = False,
    png: Annotated[Path | None, typer.Option("--png", help="With --by-position: draw the loss curve.")] = None,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = 0,
) -> None:
    """Loss over the whole validation split (or --data FILE), every position scored."""
    from minigpt.infer.evaluate import evaluate
    from minigpt.infer.loading import load_model
    from minigpt.inspect.pages import UNIT_WORDS

    if png is not None and not by_position:
        raise UserError("--png draws the loss by position; add --by-position")
    loaded = load_model(target, inference_device(device, threads))
    if by_position:
        by_position_command(loaded, data, max_tokens, as_json, png)
        return
    result, label = evaluate(loaded, data, max_tokens)
    label = f"a spread sample of {result.of_tokens:,}, {label}" if result.sampled else label
    if as_json:
        print(json.dumps(result.to_dict()))
    else:
        print(
            f"loss {result.loss:.4f} nats | {result.bpc:.4f} bits/{result.unit} | perplexity {result.perplexity:.3f} | "
            f"{result.tokens:,} {UNIT_WORDS[result.unit]} ({label}, {loaded.path})"
        )


@app.command(epilog=epilog("score"))
def score(
    target: TargetArg,
    text: Annotated[str | None, typer.Option("--text", help="The text to score.")] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file",
            help="Score this UTF-8 file (or JSON Lines, CSV, Parquet... file, by the run's data.text_field) instead.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    no_color: Annotated[bool, typer.Option("--no-color", help="Plain columns: position, character, bits.")] = False,
    html: HtmlOpt = None,
    unknown: UnknownOpt = "error",
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = 0,
) -> None:
    """How surprised the model is by each character, in bits (-log2 p), and the bits per character.

    Green is expected, red surprising, one step of colour per bit; the first character is not scored.
    """
    from minigpt.cli.pages import score_terminal, text_input
    from minigpt.data.tokenizer import checked_text
    from minigpt.infer.loading import load_model
    from minigpt.infer.score import score_text
    from minigpt.inspect.pages import check_output
    from minigpt.inspect.surprise import score_page

    check_output(html)
    loaded = load_model(target, inference_device(device, threads))
    text, label = text_input(text, file, loaded.config.data)
    if html is not None:
        page = score_page(loaded, text, label, unknown)
        print(f"wrote {page.save(html)}: {page.summary} (from {loaded.path})", file=sys.stderr)
        return
    result = score_text(loaded, checked_text(loaded.tokenizer, text, label, unknown))
    if as_json:
        print(json.dumps(result.to_dict()))
        return
    print(score_terminal(result, wants_colour(no_color), str(loaded.path)))


@app.command(epilog=epilog("attention"))
def attention(
    target: TargetArg,
    text: Annotated[str | None, typer.Option("--text", help="The text to look at.")] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", help="Look at this UTF-8 file (or a record file, by the run's data.text_field) instead."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="The picture to write, e.g. attention.png: layers as rows, heads "
            "as columns, the first block_size characters.",
        ),
    ] = None,
    html: HtmlOpt = None,
    layer: Annotated[int | None, typer.Option("--layer", help="Only this layer (0-based).")] = None,
    head: Annotated[int | None, typer.Option("--head", help="Only this head (0-based).")] = None,
    unknown: UnknownOpt = "error",
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = 0,
) -> None:
    """Heat maps of the causal attention weights over TEXT (--out), or the explorer page (--html).

    Row i is the character at position i choosing what comes next; column j, how much it looks at character j.
    """
    from minigpt.cli.pages import text_input, write_attention_files
    from minigpt.infer.loading import load_model

    loaded = load_model(target, inference_device(device, threads))
    text, label = text_input(text, file, loaded.config.data)
    for line in write_attention_files(loaded, text, label, out, html, layer, head, unknown):
        print(f"{line} (from {loaded.path})" if line.startswith("wrote") else line, file=sys.stderr)


@app.command(name="export", epilog=epilog("export"))
def export_cmd(
    target: TargetArg,
    out: Annotated[
        Path,
        typer.Argument(
            metavar="OUT",
            autocompletion=cli_help.complete_directory,
            help="The folder to write (created; see --force).",
        ),
    ],
    fmt: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="hf: a transformers folder (safetensors, "
            "tokenizer.json, model card); onnx: model.onnx + minigpt.json.",
        ),
    ] = "hf",
    dtype: Annotated[ExportDtype, typer.Option("--dtype", help="The weights' precision in the files.")] = "float32",
    force: Annotated[bool, typer.Option("--force", help="Replace what OUT holds.")] = False,
) -> None:
    """Export a model for other tools: a Hugging Face transformers folder, or ONNX (docs/export.md)."""
    from minigpt.export.folder import export_run

    print(export_run(target, out, fmt, dtype, force), file=sys.stderr)


@app.command(name="playground", epilog=epilog("playground"))
def playground_cmd(
    target: TargetArg,
    out: Annotated[Path, typer.Argument(metavar="OUT.html", help="The page to write (replaced if it exists).")],
    dtype: Annotated[
        PlaygroundDtype, typer.Option("--dtype", help="The weights' precision in the page: float16 halves its size.")
    ] = "float32",
) -> None:
    """Write one HTML page that runs the model in the browser, offline (docs/inside.md).

    It samples (temperature, top-k, top-p, seed) and shows each character's probability and attention.
    """
    from minigpt.export.playground import playground_run

    print(playground_run(target, out, dtype), file=sys.stderr)


@app.command(
    name="explain",
    epilog="Examples:\nminigpt explain runs/default explain.html --text 'ROMEO:'\n"
    "minigpt explain runs/default explain.html --text 'KING:' --at 2    # the prediction after 'N'",
)
def explain_cmd(
    target: TargetArg,
    out: Annotated[Path, typer.Argument(metavar="PAGE.html", help="The page to write (replaced if it exists).")],
    text: Annotated[str, typer.Option("--text", help="The text the model reads.")],
    at: Annotated[
        int | None, typer.Option("--at", help="The character whose next one is explained (0-based; -1 the last).")
    ] = None,
    dtype: Annotated[
        PlaygroundDtype, typer.Option("--dtype", help="The weights' precision in the page: float16 halves its size.")
    ] = "float32",
) -> None:
    """Write the playground page opened on one prediction, explained step by step (docs/model.md).

    Each stage of the forward pass with its formula, shapes and real numbers, computed in the page.
    """
    from minigpt.export.playground import explain_run

    print(explain_run(target, out, text, at, dtype), file=sys.stderr)


app.command(name="heads", epilog=ROLE_HELP)(heads_cmd)

import_app = typer.Typer(no_args_is_help=True, help="Open a model trained by another program as a minigpt run.")
app.add_typer(import_app, name="import")


@import_app.command(name="nanogpt")
def import_nanogpt_cmd(
    ckpt: Annotated[Path, typer.Argument(metavar="CKPT", help="nanoGPT's checkpoint: out-shakespeare-char/ckpt.pt.")],
    out: Annotated[Path, typer.Option("--out", help="The run folder to write (new or empty).")],
    meta: Annotated[
        Path | None, typer.Option("--meta", help="Its vocabulary (default: data/DATASET/meta.pkl, as nanoGPT's).")
    ] = None,
    data: Annotated[
        Path | None, typer.Option("--data", help="The text it trained on (default: input.txt beside meta.pkl).")
    ] = None,
) -> None:
    """A character-level nanoGPT checkpoint as a minigpt run: sample, eval, heads, export... (docs/export.md)."""
    from minigpt.export.nanogpt import import_nanogpt

    print(import_nanogpt(ckpt, meta, out, data), file=sys.stderr)


app.command(name="lens", epilog=epilog("lens"))(lens_cmd)


@app.command(epilog=epilog("runs"))
def runs(
    folder: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", autocompletion=cli_help.complete_directory, help="The folder of run directories."
        ),
    ] = Path("runs"),
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per run, one per line.")] = False,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="PAGE",
            help="Write one offline page instead: the val loss curves together (by step or wall time), a "
            "sortable table with the keys that differ marked, each run's config.",
        ),
    ] = None,
) -> None:
    """List the runs under DIR: steps, best val loss, parameters, wall time and where a fine-tuned run started.

    A ~ before a loss marks the fixed-batch estimate; without it, the loss is over the whole validation split.
    A sweep's folder (minigpt sweep) lists its runs best first, with the keys it varies as columns.
    """
    from minigpt.cli.runs_table import format_runs, format_sweep, list_runs, runs_page, sweep_rows
    from minigpt.training.sweep import sweep_of

    if html is not None:
        print(runs_page(folder, html), file=sys.stderr)
        return
    sweep = sweep_of(folder) if folder.is_dir() else None
    found = sweep_rows(sweep) if sweep is not None else list_runs(folder)
    if as_json:
        for run in found:
            print(json.dumps(run.to_dict()))
    elif sweep is not None:
        print(format_sweep(found))
    elif found:
        print(format_runs(found))
    else:
        print(f"no runs under {folder}", file=sys.stderr)


@app.command(epilog=epilog("lessons"))
def lessons(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="Where to put them (created).")] = Path("lessons"),
) -> None:
    """Copy the lessons (attention step by step, on the default model, trained in seconds) into DIR.

    Open them with Jupyter in a Python that has minigpt (docs/inside.md)."""
    import shutil

    from minigpt.config import shipped

    notebooks = sorted(shipped("lessons").glob("*.ipynb"))
    if taken := [folder / p.name for p in notebooks if (folder / p.name).exists()]:
        raise UserError(f"{taken[0]} exists; give another DIR (minigpt lessons DIR)")
    folder.mkdir(parents=True, exist_ok=True)
    for p in notebooks:
        shutil.copyfile(p, folder / p.name)
    how = f"jupyter lab {folder}"
    if shutil.which("jupyter") is None:
        how += " (Jupyter is not installed here: pip install jupyterlab)"
    print(f"{len(notebooks)} lessons in {folder}; open them with: {how}", file=sys.stderr)


def exit_fast(code: int) -> NoReturn:
    """End the process with `code` without the interpreter's slow teardown (atexit handlers still run;
    once nanobind is loaded, `_exit_without_teardown`: docs/design.md#decisions).
    Speed trick: every command ends sooner; benchmark `scripts/bench.py tricks`."""
    if nanobind_loaded():
        _exit_without_teardown(code)
    gc.freeze()
    sys.exit(code)


def nanobind_loaded() -> bool:
    """Whether a nanobind extension (triton's, after torch.compile) is loaded, from `type`'s subclasses."""
    return any(meta.__module__ == "nanobind" for meta in type.__subclasses__(type))


def _exit_without_teardown(code: int) -> NoReturn:
    """What Py_FinalizeEx does before its teardown (threading's shutdown, the atexit handlers, flushing
    stdout and stderr), then os._exit: no last collection, no __del__, no C-level exit hooks."""
    shutdown_threads = getattr(threading, "_shutdown", None)
    if shutdown_threads is None:  # not the CPython this was written against: the interpreter's own exit
        sys.exit(code)
    shutdown_threads()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns every user mistake into one line and exit code 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    for flag, shell in zip(args, args[1:]):  # `--show-completion fish` for the shell named, not typer's guess
        if flag in ("--install-completion", "--show-completion") and not shell.startswith("-"):
            os.environ["_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"] = "1"
    try:
        result = app(args=argv, standalone_mode=False, prog_name="minigpt")
        return result if isinstance(result, int) else 0
    except UserError as e:
        from minigpt.runtime.torchrun import error_line  # under torchrun: rank 0 says it, the launcher the others'

        line = error_line(str(e))
        if line is not None:
            print(line, file=sys.stderr)
        return getattr(e, "exit_code", 2)  # 74 for a WriteError
    except typer.TyperException as e:  # usage errors: unknown option, missing argument, bad value
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `minigpt`: the help was shown
            return 0
        ctx = getattr(e, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        message = e.format_message().replace("Value error, ", "")  # pydantic's prefix on a wrong choice
        print(f"error: {message}{hint}", file=sys.stderr)
        return 2
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except TrainingInterrupted as e:
        if os.environ.get("RANK", "0") == "0":
            print(str(e), file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `minigpt sample RUN | head`
        sys.stderr.close()
        return 0


def run() -> None:
    """The `minigpt` program (and `python -m minigpt`)."""
    exit_fast(main())
