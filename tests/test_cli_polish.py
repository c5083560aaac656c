"""The command line as people expect it: --version, shell completion, choices in --help and in
errors, examples in every help, and a quiet, fast exit after torch.compile."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import typing
from importlib.metadata import version
from pathlib import Path

import pytest

from minigpt import __version__
from minigpt.cli.help import EXAMPLES, SampleDtype, UnknownChars, complete_directory, complete_run_or_checkpoint
from minigpt.config.schema import SampleOptions, all_keys, is_device_name

from .helpers import TINY, one_error_line

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ["train", "sweep", "sample", "eval", "score", "attention", "export", "runs"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}


def minigpt(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "minigpt", *args], capture_output=True, text=True, env=env or ENV, **kw
    )


def test_version_names_minigpt_torch_and_python(cli) -> None:
    expected = f"minigpt {__version__} (torch {version('torch')}, Python {sys.version.split()[0]})"
    r = cli("--version")
    assert r.code == 0 and r.out.strip() == expected
    dash_m = minigpt("--version", env={**ENV, "MINIGPT_CACHE_DIR": os.environ["MINIGPT_CACHE_DIR"]})  # empty cache
    assert dash_m.returncode == 0 and dash_m.stdout.strip() == expected and dash_m.stderr == ""
    entry = {"bf16": False, "ratio": 0.5, "shape": "4096x384", "threads": 2}  # what the precision probe caches
    (Path(os.environ["MINIGPT_CACHE_DIR"]) / "precision.json").write_text(json.dumps({"key": entry}))
    r = cli("--version")
    assert r.out.splitlines() == [
        expected,
        "precision for 4096x384 products on 2 thread(s): float32 (bf16 at 0.5x float32)",
    ]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^version = "(.+)"$', pyproject, re.M).group(1) == __version__


def test_choice_literals_match_the_config(cli) -> None:
    fields = {f.name: f for f in dataclasses.fields(SampleOptions)}
    assert typing.get_args(SampleDtype) == fields["dtype"].metadata["choices"]
    assert typing.get_args(UnknownChars) == fields["unknown"].metadata["choices"]
    assert all(is_device_name(d) for d in ("auto", "cpu", "cuda", "cuda:1", "mps"))


def test_every_help_shows_its_choices_and_real_examples(cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # rich wraps at the terminal's width
    helps = {}
    for command in COMMANDS:
        r = cli(command, "--help")
        assert r.code == 0, r
        helps[command] = r.out
        tail = r.out.split("Examples:")[-1]
        assert "Examples:" in r.out and all(line.strip() in tail for line in EXAMPLES[command].splitlines())
    top = cli("--help").out
    assert "--version" in top and "--install-completion" in top and "Examples:" in top
    assert "<auto|float32|bfloat16>" in helps["sample"] and "<error|skip>" in helps["sample"]
    for command in ("train", "sample", "eval", "score", "attention"):
        assert "<auto|cpu|cuda|cuda:N|mps>" in helps[command], command
    fixed = [f"{key}={'|'.join(f.metadata['choices'])}" for key, f in all_keys().items() if f.metadata.get("choices")]
    assert "train.dtype=auto|float32|bfloat16|float16" in fixed
    for key in fixed:  # read from config.py when the help is shown, so never out of date
        assert key in helps["train"], key


def test_flags_show_no_metavar_and_options_with_values_keep_theirs(cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    helps = {command: cli(command, "--help").out for command in COMMANDS} | {"minigpt": cli("--help").out}
    flags = {
        "minigpt": ["--version", "--help"],
        "train": ["--resume", "--help"],
        "eval": ["--json"],
        "sample": ["--json", "--interactive"],
        "score": ["--json", "--no-color"],
        "runs": ["--json"],
    }
    for command, text in helps.items():
        assert "<bool>" not in text, command
        for flag in flags.get(command, []):
            row = next(line for line in text.splitlines() if f" {flag} " in line)
            after = row.split(flag, 1)[1].lstrip(" -i")  # the short form (-i) may stand between
            assert not after.startswith("<"), (command, row)
    assert "--dtype" in helps["sample"] and "<auto|float32|bfloat16>" in helps["sample"]
    assert "--nproc" in helps["train"] and "<int range>" in helps["train"]

    assert "--device" in helps["eval"] and "<auto|cpu|cuda|cuda:N|mps>" in helps["eval"]


@pytest.fixture
def named_shell(monkeypatch):
    """`--install-completion SHELL` sets typer's switch in os.environ: undo it after the test."""
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "")


@pytest.mark.parametrize("command", ["minigpt", *COMMANDS])
def test_examples_name_real_commands_and_options(command, cli, named_shell) -> None:
    """Every example parses: its options exist (an unknown one fails before --help is acted on)."""
    for line in EXAMPLES[command].splitlines():
        words = shlex.split(line.split("#")[0].split(">")[0])
        assert words[0] == "minigpt" and (command == "minigpt" or words[1] == command), line
        r = cli(*words[1:], "--help")
        assert r.code == 0 and "Usage:" in r.out, (line, r)


def test_a_wrong_choice_is_clicks_one_line_and_exit_2(tmp_path: Path, cli, named_shell) -> None:
    run = tmp_path / "run"  # parsing fails before the run is looked for
    line = one_error_line(cli("sample", run, "--dtype", "float16"))
    assert "Invalid value for '--dtype'" in line and "'float16' is not one of 'auto', 'float32', 'bfloat16'" in line
    assert "Value error" not in line
    line = one_error_line(cli("sample", run, "--unknown", "ignore"))
    assert "Invalid value for '--unknown'" in line and "'ignore' is not one of 'error', 'skip'" in line
    assert "unknown device 'tpu'" in one_error_line(cli("eval", run, "--device", "tpu"))
    assert "train.dtype must be one of" in one_error_line(cli("train", "--out", run, "train.dtype=fp8"))
    assert "'tcsh' is not one of 'bash'" in one_error_line(cli("--install-completion", "tcsh"))


def test_directory_completion(tmp_path: Path, monkeypatch) -> None:
    for d in ("runs/default", "runs/mine", "other", ".hidden"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "runs/default/best.pt").touch()
    (tmp_path / "notes.txt").touch()
    monkeypatch.chdir(tmp_path)
    assert complete_directory("") == ["other/", "runs/"]
    assert complete_directory("r") == ["runs/", "runs/default/", "runs/mine/"]  # one match: its contents too
    assert complete_run_or_checkpoint("runs/d") == ["runs/default/", "runs/default/best.pt"]
    assert complete_directory(".") == [".hidden/"]
    assert complete_directory(f"{tmp_path}/o") == [f"{tmp_path}/other/"]
    assert complete_directory("missing/") == []


def test_install_completion_bash(tmp_path: Path) -> None:
    env = {**ENV, "HOME": str(tmp_path)}
    r = minigpt("--install-completion", "bash", env=env)
    assert r.returncode == 0, r.stderr
    script = tmp_path / ".bash_completions" / "minigpt.sh"
    assert "_MINIGPT_COMPLETE=complete_bash" in script.read_text()
    assert f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    zsh = minigpt("--show-completion", "zsh", env=env)  # the shell named, not the one detected
    assert zsh.returncode == 0 and zsh.stdout.startswith("#compdef minigpt")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_bash_completion_offers_commands_options_choices_and_run_directories(tmp_path: Path) -> None:
    """The installed script itself, in bash, with `minigpt` on the PATH as after `uv sync`."""
    exe = Path(sys.executable).parent / "minigpt"
    if not exe.exists():
        pytest.skip("the minigpt console script is not installed")
    (tmp_path / "runs" / "default").mkdir(parents=True)
    (tmp_path / "runs" / "default" / "best.pt").touch()
    (tmp_path / "other").mkdir()
    script = minigpt("--show-completion", "bash").stdout
    cases = {
        "minigpt ''": "train sweep sample eval score attention export playground explain heads lens runs lessons "
        "import",
        "minigpt train --": "--out --data --device --resume --init-from --nproc --auto --dry-run --help",
        "minigpt sample x --dtype ''": "auto float32 bfloat16",
        "minigpt eval x --device c": "cpu cuda",
        "minigpt sample r": "runs/ runs/default/",
        "minigpt runs ''": "other/ runs/",
    }
    calls = "\n".join(f'c {words}; echo "${{COMPREPLY[*]}}"' for words in cases)
    program = f"""{script}
c() {{ COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _minigpt_completion minigpt; }}
{calls}
"""
    env = {**ENV, "PATH": f"{exe.parent}{os.pathsep}{os.environ['PATH']}"}
    r = subprocess.run(["bash", "--norc", "-c", program], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == list(cases.values()), r.stdout


def test_completion_costs_no_start_up_time() -> None:
    """Shell completion and --help import nothing heavy: not torch (minigpt's config, 12 ms, is allowed)."""
    code = (
        "import sys\nfrom minigpt.cli.app import main\nmain(['--help'])\n"
        "heavy = ('torch', 'importlib.metadata')\n"
        "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT)
    assert r.returncode == 0 and r.stderr.strip().splitlines()[-1] == "[]", r.stderr
    env = {**ENV, "_MINIGPT_COMPLETE": "complete_bash", "COMP_WORDS": "minigpt sample x --dtype ", "COMP_CWORD": "4"}
    code = (
        "import sys\nfrom minigpt.cli.app import main\ntry:\n    main([])\nfinally:\n    print('torch' in sys.modules)"  # noqa: E501
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert r.stdout.split() == ["auto", "float32", "bfloat16", "False"], r


EXIT_WITH_TRITON = """
import atexit, sys, threading
from concurrent.futures import ThreadPoolExecutor
import triton  # loads nanobind, as torch.compile does
from minigpt.cli.app import run
from minigpt.cli.app import nanobind_loaded
assert nanobind_loaded()
pool = ThreadPoolExecutor(2)  # idle non-daemon workers, like the compiler's
pool.submit(print, "pool ran", flush=True).result()
atexit.register(print, "atexit ran")
sys.stdout.write("buffered output")  # no newline, no flush: the exit must flush it
sys.argv = ["minigpt", *sys.argv[1:]]
run()
"""


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton (and its nanobind) not installed")
def test_exit_after_the_compiler_loaded_is_quiet_and_complete(tmp_path: Path) -> None:
    env = {k: v for k, v in ENV.items() if k != "PYTHONUNBUFFERED"}  # so that stdout is buffered
    r = subprocess.run(
        [sys.executable, "-c", EXIT_WITH_TRITON, "sample", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    assert r.returncode == 2 and r.stderr.startswith("error: ") and len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stdout.startswith("pool ran\nbuffered output") and "atexit ran" in r.stdout, r.stdout


def test_the_cuda_home_notice_is_dropped_while_compiling() -> None:
    import logging

    from minigpt.runtime.device import without_cuda_home_notice

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__()
            self.records: list[logging.LogRecord] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.records.append(record)

    logger, keep = logging.getLogger("torch.utils.cpp_extension"), Keep()
    logger.addHandler(keep)
    try:
        with without_cuda_home_notice():
            logger.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local")
            logger.warning("something else")
        logger.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/opt/cuda")  # outside: shown
    finally:
        logger.removeHandler(keep)
    assert [r.getMessage() for r in keep.records] == [
        "something else",
        "No CUDA runtime is found, using CUDA_HOME='/opt/cuda'",
    ]


@pytest.mark.slow
def test_a_compiled_run_ends_with_its_done_block(text_file: Path, tmp_path: Path) -> None:
    """train.compile=true on the CPU (about 10 s with a warm inductor cache, 30 s cold): nothing
    after the done block, no nanobind leak report, no CUDA_HOME notice."""
    tiny = [a for a in TINY if not a.startswith(("model.n_layer", "model.n_embd"))]
    args = [*tiny, "model.n_layer=1", "model.n_embd=16", "train.max_steps=3", "train.compile=true", "log.progress=off"]
    r = minigpt("train", "--data", str(text_file), "--out", str(tmp_path / "run"), *args, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "compiled the model" in r.stderr and "leaked" not in r.stderr and "Traceback" not in r.stderr
    assert "No CUDA runtime" not in r.stderr
    after_done = r.stderr.split("\ndone: ")[1].splitlines()[1:]
    assert [line.split(":")[0].strip() for line in after_done] == ["sample", "evaluate", "tensorboard"], r.stderr


def test_the_command_line_starts_on_a_typer_without_the_metavar_hook() -> None:
    """typer 0.27 (the GPU machines' image) has no TyperOption.display_type_rich: the CLI must
    still import and run there instead of failing at import."""
    code = (
        "import typer.core as core; [delattr(c, 'display_type_rich') for c in core.TyperOption.__mro__ "
        "if 'display_type_rich' in vars(c)]; "
        "from minigpt.cli.app import app; from typer.testing import CliRunner; "
        "r = CliRunner().invoke(app, ['--version']); print(r.exit_code, r.output.startswith('minigpt '))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "True"]
