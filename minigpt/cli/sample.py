"""`minigpt sample` after its flags are read: which flags go together, the line naming the model,
and the three modes: the interactive loop, JSON records, or the samples as text."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from minigpt.cli.interactive import repl
from minigpt.config.schema import SampleOptions
from minigpt.errors import UserError
from minigpt.infer.loading import LoadedModel
from minigpt.infer.sample import check_stops, requests_for, sample_records


def sample_command(loaded: LoadedModel, prompts: list[str], label: str, opts: SampleOptions, stops: Sequence[str],
                   as_json: bool, interactive: bool, write: Callable[[str], None]) -> int:  # fmt: skip
    """`minigpt sample` after its flags are read: the interactive loop, JSON records, or the samples
    as text. Every prompt and stop string is checked before anything is generated."""
    tok = loaded.tokenizer
    if interactive and (label != "--prompt" or prompts != [""] or as_json or opts.num_samples != 1):
        raise UserError("--interactive reads its prompts from the terminal; leave out --prompt, --prompt-file, "
                        "--prompts-file, --json and --num-samples")  # fmt: skip
    check_stops(tok, stops)
    requests_for(tok, prompts, 1, 0, opts.unknown, label)  # unknown characters: refused before any output
    step, val = loaded.checkpoint.step, loaded.checkpoint.val_loss
    val_text = f", val loss {val:.4f}" if isinstance(val, float) else ""
    print(f"sampling from {loaded.path} (step {step}{val_text})", file=sys.stderr)
    if interactive:

        def run(prompt: str, o: SampleOptions, s: Sequence[str]) -> None:
            sample_records(loaded, prompt, o, write, s)  # a prompt's unknown characters: an error line, as always

        return repl(run, opts, stops, lambda s: check_stops(tok, s))
    if as_json:
        for s in sample_records(loaded, prompts, opts, None, stops, label):
            write(s.to_json() + "\n")
    else:
        sample_records(loaded, prompts, opts, write, stops, label)
    return 0
