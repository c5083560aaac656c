"""`minigpt sample RUN --interactive`: a read-eval-print loop that keeps the model loaded (docs/sampling.md);
':' lines change settings, Ctrl-C stops one generation, and each generation moves the seed on by one."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Sequence
from typing import Any

from minigpt.config.schema import SampleOptions
from minigpt.errors import UserError

HELP = """commands (values as for minigpt sample's options):
  :temp T       temperature (0 = greedy)          :top-k K | :top-k off
  :top-p P | :top-p off                            :max N       characters to generate
  :seed S       seed of the next generation        :stop TEXT | :stop off
  :settings     show the current settings          :quit        leave (or Ctrl-D)
a prompt may hold \\n for a line break; Ctrl-C stops a generation"""

# command -> SampleOptions field
FIELDS = {
    ":temp": "temperature",
    ":temperature": "temperature",
    ":top-k": "top_k",
    ":top-p": "top_p",
    ":seed": "seed",
    ":max": "max_new_tokens",
    ":max-new-tokens": "max_new_tokens",
}


def _value(field: str, text: str) -> Any:
    if text in ("off", "none") and field in ("top_k", "top_p"):
        return None
    kind = int if field in ("top_k", "seed", "max_new_tokens") else float
    try:
        return kind(text)
    except ValueError:
        raise UserError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None


def command(
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
        say(HELP)
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
    elif name in FIELDS:
        if not arg:
            raise UserError(f"{name} needs a value, e.g. {name} {getattr(opts, FIELDS[name])}")
        opts = dataclasses.replace(opts, **{FIELDS[name]: _value(FIELDS[name], arg)})  # checked by SampleOptions
    else:
        raise UserError(f"unknown command {name}; :help lists them")
    return opts


def repl(
    run: Callable[[str, SampleOptions, Sequence[str]], Any],
    opts: SampleOptions,
    stops: Sequence[str],
    check_stop: Callable[[Sequence[str]], None],
) -> int:
    """The loop. `run(prompt, opts, stops)` generates one streamed sample."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("--interactive needs a terminal; to sample many prompts from a script use --prompts-file FILE")
    try:
        import readline  # noqa: F401  (line editing and history for input())
    except ImportError:
        pass

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    stops = list(stops)
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
                new = command(line, opts, stops, check_stop, say)
                if new is None:
                    return 0
                opts = new
                continue
            run(line.replace("\\n", "\n"), opts, stops)
            opts = dataclasses.replace(opts, seed=(opts.seed + 1) % 2**63)
        except UserError as e:
            say(f"error: {e}")
        except KeyboardInterrupt:
            sys.stdout.write("\n")
            say("[interrupted]")
            opts = dataclasses.replace(opts, seed=(opts.seed + 1) % 2**63)
