"""`minigpt sample`, from its flags to the text on stdout: the prompts, which flags go together, and the
three modes (interactive, JSON records, text); every input is checked once, by `plan_samples`."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated

import typer

from minigpt.cli.help import SampleDtype
from minigpt.cli.options import DeviceOpt, TargetArg, ThreadsOpt, UnknownOpt, inference_device
from minigpt.config.schema import SampleOptions
from minigpt.errors import UserError
from minigpt.io.textfiles import read_text

if TYPE_CHECKING:
    from minigpt.infer.sample import Piece

DEFAULT = SampleOptions()  # the flags' defaults are the schema's
SEPARATOR = "\n\n---\n"  # between samples on stdout
REPL_HELP = """commands (values as for minigpt sample's options):
  :temp T       temperature (0 = greedy)          :top-k K | :top-k off
  :top-p P | :top-p off                            :max N       characters to generate
  :seed S       seed of the next generation        :stop TEXT | :stop off
  :settings     show the current settings          :quit        leave (or Ctrl-D)
a prompt may hold \\n for a line break; Ctrl-C stops a generation"""
REPL_FIELDS = {  # command -> SampleOptions field
    ":temp": "temperature",
    ":temperature": "temperature",
    ":top-k": "top_k",
    ":top-p": "top_p",
    ":seed": "seed",
    ":max": "max_new_tokens",
    ":max-new-tokens": "max_new_tokens",
}


def sample(
    target: TargetArg,
    prompt: Annotated[str | None, typer.Option("--prompt", help="Text to continue (default: a newline).")] = None,
    prompt_file: Annotated[
        str | None,
        typer.Option(
            "--prompt-file", metavar="FILE", help="The prompt is this UTF-8 file's whole text (- reads stdin)."
        ),
    ] = None,
    prompts_file: Annotated[
        str | None,
        typer.Option("--prompts-file", metavar="FILE", help="One prompt per line (\\n: a line break), batched."),
    ] = None,
    num_samples: Annotated[
        int, typer.Option("--num-samples", "-n", help="Samples per prompt, in one batch.")
    ] = DEFAULT.num_samples,
    max_new_tokens: Annotated[
        int, typer.Option("--max-new-tokens", help="Characters to generate.")
    ] = DEFAULT.max_new_tokens,
    temperature: Annotated[
        float, typer.Option("--temperature", help="Softmax temperature; 0 is greedy.")
    ] = DEFAULT.temperature,
    top_k: Annotated[int | None, typer.Option("--top-k", help="Keep the k most likely characters.")] = None,
    top_p: Annotated[float | None, typer.Option("--top-p", help="Nucleus: keep the most likely p of mass.")] = None,
    seed: Annotated[int, typer.Option("--seed", help="Random seed; sample k uses seed + k.")] = DEFAULT.seed,
    stop: Annotated[
        list[str] | None,
        typer.Option("--stop", metavar="TEXT", help="End a sample where it writes this text (not shown; repeatable)."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per sample: prompt, text, chars, stopped, seed.")
    ] = False,
    interactive: Annotated[
        bool,
        typer.Option(
            "--interactive",
            "-i",
            help="Prompt after prompt on the terminal, the model kept loaded (:help for settings).",
        ),
    ] = False,
    unknown: UnknownOpt = DEFAULT.unknown,
    device: DeviceOpt = "auto",
    threads: ThreadsOpt = 0,
    dtype: Annotated[
        SampleDtype,
        typer.Option(
            "--dtype",
            help="The weights' precision while sampling. auto is bfloat16 on a GPU with it in hardware, "
            "and on a CPU where bf16 measures faster (minigpt --version shows the measured answers).",
        ),
    ] = DEFAULT.dtype,
) -> int:
    """Generate text. Only the samples go to stdout: one streamed as it is generated, several each as it completes."""
    from minigpt.infer.loading import cast_for_sampling, load_model
    from minigpt.infer.sample import check_stops, plan_samples, run_plan, samples_of

    opts = SampleOptions(num_samples, max_new_tokens, temperature, top_k, top_p, seed, unknown, dtype)
    prompts, label = prompts_from(prompt, prompt_file, prompts_file)
    if interactive and (label != "--prompt" or prompts != [""] or as_json or num_samples != 1):
        raise UserError(
            "--interactive reads its prompts from the terminal; leave out --prompt, --prompt-file, "
            "--prompts-file, --json and --num-samples"
        )
    loaded = load_model(target, inference_device(device, threads))
    cast_for_sampling(loaded, dtype, device)
    stops = stop or []
    if interactive:
        check_stops(loaded.tokenizer, stops)
        _announce(loaded)
        return repl(loaded, opts, stops)
    plan = plan_samples(loaded.tokenizer, prompts, opts, stops, label)  # every input checked before any output
    _announce(loaded)
    if as_json:
        for s in samples_of(run_plan(loaded, plan)):
            _write_stdout(s.to_json() + "\n")
    else:
        for text in stdout_text(run_plan(loaded, plan), len(plan.requests)):
            _write_stdout(text)
    return 0


def stdout_text(pieces: Iterable[Piece], n: int) -> Iterator[str]:
    """stdout's text of n samples, prompt and continuation: a single sample as it is generated;
    several in order, each once it and those before it are complete, separated by SEPARATOR."""
    held: dict[int, list[str]] = {}
    complete, written = set(), 0
    for p in pieces:
        if n == 1:
            yield p.text
            continue
        held.setdefault(p.row, []).append(p.text)
        if p.sample is not None:
            complete.add(p.row)
        while written in complete:
            yield (SEPARATOR if written else "") + "".join(held.pop(written))
            written += 1
    yield "\n"


def _announce(loaded) -> None:
    """The line on stderr naming the model the samples come from."""
    from minigpt.checkpoint import val_loss_text

    step, val = loaded.checkpoint.step, loaded.checkpoint.val_loss
    print(f"sampling from {loaded.path} (step {step}{val_loss_text(val)})", file=sys.stderr)


def prompts_from(prompt: str | None, prompt_file: str | None, prompts_file: str | None) -> tuple[list[str], str]:
    """The prompts of --prompt, the whole --prompt-file or each line of --prompts-file (one of them), and the flag."""
    given = [
        f
        for f, v in (("--prompt", prompt), ("--prompt-file", prompt_file), ("--prompts-file", prompts_file))
        if v is not None
    ]
    if len(given) > 1:
        raise UserError(f"give only one of {' and '.join(given)}")
    if prompt_file is not None:
        return [read_text(prompt_file, "--prompt-file")], "--prompt-file"
    if prompts_file is not None:
        return parse_prompts_file(read_text(prompts_file, "--prompts-file"), prompts_file), "--prompts-file"
    return [prompt or ""], "--prompt"


def parse_prompts_file(text: str, path: str) -> list[str]:
    r"""One prompt per line; `\n` in a line is a line break (and `\\` a backslash)."""
    prompts = [line.replace("\\\\", "\0").replace("\\n", "\n").replace("\0", "\\") for line in text.splitlines()]
    prompts = [p for p in prompts if p.strip()]
    if not prompts:
        raise UserError(f"--prompts-file {path} has no prompts (one per line; blank lines are skipped)")
    return prompts


def _write_stdout(text: str) -> None:
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`minigpt sample RUN | head`): stop quietly, exit 0
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush does not complain
        raise typer.Exit(0) from None


def _repl_command(
    line: str,
    opts: SampleOptions,
    stops: list[str],
    check_stop: Callable[[Sequence[str]], None],
    say: Callable[[str], None],
) -> SampleOptions | None:
    """Apply one ':' command: the new options, or None to quit. Mistakes raise UserError."""
    name, _, arg = line.strip().partition(" ")
    arg = arg.strip()
    if name in (":quit", ":q", ":exit"):
        return None
    if name in (":help", ":h", ":?"):
        say(REPL_HELP)
    elif name == ":settings":
        shown = ", ".join(f"{f.name}={getattr(opts, f.name)}" for f in dataclasses.fields(opts) if f.name != "dtype")
        say(f"{shown}, stop={stops or 'none'}")
    elif name == ":stop":
        if arg in ("off", "none", ""):
            stops.clear()
        else:
            stop = arg.replace("\\n", "\n")
            check_stop([stop])
            stops[:] = [stop]
    elif name in REPL_FIELDS:
        field = REPL_FIELDS[name]
        if not arg:
            raise UserError(f"{name} needs a value, e.g. {name} {getattr(opts, field)}")
        kind = int if field in ("top_k", "seed", "max_new_tokens") else float
        try:
            value = None if arg in ("off", "none") and field in ("top_k", "top_p") else kind(arg)
        except ValueError:
            raise UserError(f"{arg!r} is not {'an integer' if kind is int else 'a number'}") from None
        opts = dataclasses.replace(opts, **{field: value})  # checked by SampleOptions
    else:
        raise UserError(f"unknown command {name}; :help lists them")
    return opts


def repl(loaded, opts: SampleOptions, stops: list[str]) -> int:
    """--interactive: a read-eval-print loop that keeps the model loaded (docs/sampling.md); a prompt runs one
    streamed sample, a ':' line changes settings, Ctrl-C stops one generation; each moves the seed on by one."""
    from minigpt.infer.sample import check_stops, plan_samples, run_plan

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("--interactive needs a terminal; to sample many prompts from a script use --prompts-file FILE")
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    say("type a prompt and press Enter; :help lists the commands; Ctrl-D quits")
    while True:
        try:
            line = input("> ")
        except EOFError:
            say("")
            return 0
        except KeyboardInterrupt:
            say("")
            continue
        try:
            if line.startswith(":"):
                new = _repl_command(line, opts, stops, lambda s: check_stops(loaded.tokenizer, s), say)
                if new is None:
                    return 0
                opts = new
                continue
            plan = plan_samples(loaded.tokenizer, [line.replace("\\n", "\n")], opts, stops)
            for text in stdout_text(run_plan(loaded, plan), 1):
                _write_stdout(text)
            opts = dataclasses.replace(opts, seed=(opts.seed + 1) % 2**63)
        except UserError as e:
            say(f"error: {e}")
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            say("[interrupted]")
            opts = dataclasses.replace(opts, seed=(opts.seed + 1) % 2**63)
