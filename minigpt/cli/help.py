"""What the command line tells about itself: option values (--help, Tab, click's "invalid value"), path
completion, examples, --version. Standard library only: `minigpt --help` and every Tab press import it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Literal

from minigpt.config import DEVICES, EXPORT_DTYPES, EXPORT_FORMATS, PLAYGROUND_DTYPES, SAMPLE_DTYPES, UNKNOWN_CHARS

SampleDtype = Literal[SAMPLE_DTYPES]  # minigpt sample --dtype (config.SampleOptions.dtype)
UnknownChars = Literal[UNKNOWN_CHARS]  # minigpt sample --unknown (config.SampleOptions.unknown)
ExportFormat = Literal[EXPORT_FORMATS]  # minigpt export --format
ExportDtype = Literal[EXPORT_DTYPES]  # minigpt export --dtype
PlaygroundDtype = Literal[PLAYGROUND_DTYPES]  # minigpt playground --dtype

EXAMPLES = {  # the end of each command's --help (rich markup: no square brackets)
    "minigpt": """minigpt train                         # the default model on tiny Shakespeare
minigpt sample runs/default --prompt "ROMEO:" --max-new-tokens 500
minigpt --install-completion bash     # Tab completes commands, options, runs""",
    "train": """minigpt train --data my_text.txt --out runs/mine
minigpt train --data ~/books/ data.tokenizer=byte --out runs/books
minigpt train --data posts.jsonl data.text_field=body --out runs/posts
minigpt train --data my_text/ --auto train.max_time=10m --dry-run   # the choice, no training
minigpt train cpu_4min               # a shipped config by name: 4 minutes of CPU, val loss ~1.47
minigpt train speedrun               # the same recipe until val loss 1.47: how long it takes here
minigpt train shakespeare_char --out runs/big
minigpt train model.n_layer=6 optim.lr=1e-3 train.max_steps=5000""",
    "sample": """minigpt sample runs/default --prompt "ROMEO:" --max-new-tokens 500
minigpt sample runs/default -n 32 --stop $'\\n\\n' --json > samples.jsonl
minigpt sample runs/default --prompts-file prompts.txt --top-p 0.9
minigpt sample runs/default --interactive""",
    "eval": """minigpt eval runs/default
minigpt eval runs/default --json
minigpt eval runs/default --data other_texts/""",
    "score": """minigpt score runs/default --text "O Romeo, Romeo! wherefore art thou Romeo?"
minigpt score runs/default --file scene.txt --no-color
minigpt score runs/default --text "KING:" --json
minigpt score runs/default --file scene.txt --html score.html""",
    "attention": """minigpt attention runs/default --text "ROMEO: But, soft!" --out attention.png
minigpt attention runs/default --text "Soft!" --layer 0 --head 1 --out 0-1.png
minigpt attention runs/default --file scene.txt --html attention.html""",
    "lens": """minigpt lens runs/default --text "ROMEO: But, soft! what light"
minigpt lens runs/default --text "ROMEO: But, soft!" --top   # and each layer's top 5
minigpt lens runs/default --text "KING:" --json
minigpt lens runs/default --file scene.txt --at 10 --at -1
minigpt lens runs/default --text "ROMEO: But, soft!" --html lens.html""",
    "export": """minigpt export runs/default exported/                  # a transformers folder
minigpt export runs/default exported_onnx/ --format onnx
minigpt export runs/default exported_bf16/ --dtype bfloat16 --force""",
    "playground": """minigpt playground runs/default playground.html     # for any browser, offline
minigpt playground runs/big big.html --dtype float16   # half the size""",
    "sweep": """minigpt sweep configs/cpu_4min.yaml model.n_layer=2,4 optim.lr=1e-3,3e-3
minigpt sweep configs/cpu_4min.yaml optim.lr=3e-4,1e-3,3e-3 model.n_embd=64,128 --random 3
minigpt sweep configs/cpu_4min.yaml optim.lr=1e-3,3e-3 --max-total-time 30m --out runs/lr""",
    "runs": """minigpt runs
minigpt runs experiments/ --json
minigpt runs runs/lr --html runs.html     # curves, a sortable table, each run's config""",
    "lessons": """minigpt lessons                # into ./lessons
minigpt lessons ~/minigpt-lessons""",
}


def epilog(command: str) -> str:
    return "Examples:\n" + EXAMPLES[command]


def train_epilog() -> str:
    """train's examples and the config keys that take fixed values, read from config/schema.py."""
    from minigpt.config.schema import all_keys

    fixed = [f"{k}={'|'.join(f.metadata['choices'])}" for k, f in all_keys().items() if f.metadata.get("choices")]
    keys = "Keys with fixed values (every key: docs/configuration.md):\n" + "\n".join(fixed)
    return f"{epilog('train')}\n\n{shipped_line()}\n\n{keys}"


def shipped_line() -> str:
    """The configs minigpt ships, for the --help of the commands that take a CONFIG."""
    from minigpt.config import shipped_configs

    return f"Shipped configs, by name from any folder (minigpt train cpu_4min): {', '.join(shipped_configs())}"


def version_line() -> str:
    """minigpt's, torch's and Python's versions and this machine's measured bf16 answers, without importing torch."""
    from importlib.metadata import PackageNotFoundError, version

    from minigpt import __version__
    from minigpt.runtime.precision import cached_lines

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "not installed"
    first = f"minigpt {__version__} (torch {torch_version}, Python {sys.version.split()[0]})"
    return "\n".join([first, *cached_lines()])


def complete_device(incomplete: str) -> list[str]:
    return [d for d in DEVICES if d.startswith(incomplete)]


def _matches(incomplete: str, keep_file: Callable[[str], bool]) -> list[str]:
    """Directories (with a trailing /) and the files `keep_file` accepts, whose path starts with
    `incomplete`; hidden entries only when `incomplete` names them."""
    folder, sep, start = incomplete.rpartition("/")
    prefix = folder + sep
    found = []
    try:
        with os.scandir(os.path.expanduser(prefix) or ".") as entries:
            for entry in entries:
                if not entry.name.startswith(start) or entry.name.startswith(".") and not start.startswith("."):
                    continue
                if entry.is_dir():
                    found.append(f"{prefix}{entry.name}/")
                elif keep_file(entry.name):
                    found.append(prefix + entry.name)
    except OSError:
        return []
    return sorted(found)


def _complete(incomplete: str, keep_file: Callable[[str], bool]) -> list[str]:
    found = _matches(incomplete, keep_file)
    if len(found) == 1 and found[0].endswith("/"):
        # one directory: its contents too, so that the shell inserts the common prefix `dir/` and waits,
        # rather than `dir/ ` with a space (typer's bash script does not tell bash these are file names)
        found += _matches(found[0], keep_file)
    return found


def complete_directory(incomplete: str) -> list[str]:
    """A run directory, or a folder of them."""
    return _complete(incomplete, lambda name: False)


def complete_run_or_checkpoint(incomplete: str) -> list[str]:
    """RUN_DIR|CHECKPOINT: directories and .pt files."""
    return _complete(incomplete, lambda name: name.endswith(".pt"))
