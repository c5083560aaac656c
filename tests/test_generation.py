"""Sampling for real use: batched samples equal batch-1 ones, stop strings per sample, prompts of
mixed lengths, JSON records, the interactive loop, and each bad input."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import select
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from minigpt.cli.sample import SEPARATOR, parse_prompts_file, stdout_text
from minigpt.config.schema import SampleOptions
from minigpt.errors import UserError
from minigpt.infer.loading import cast_for_sampling, load_model
from minigpt.infer.sample import Piece, Sample, plan_samples, run_plan, sample_records, samples_of
from minigpt.runtime import memory

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def loaded(trained_run: Path):
    return load_model(trained_run, torch.device("cpu"))  # float32


def alone(loaded, prompt: str, seed: int, n: int = 60, **kw) -> str:
    opts = SampleOptions(num_samples=1, max_new_tokens=n, seed=seed, **kw)
    return sample_records(loaded, prompt, opts)[0].text


def test_a_batch_gives_each_sample_what_batch_1_gives_with_its_seed(loaded) -> None:
    for kw in ({}, {"top_k": 5, "top_p": 0.9, "temperature": 1.2}):
        batch = sample_records(loaded, "KING:", SampleOptions(num_samples=4, max_new_tokens=50, seed=40, **kw))
        assert [s.seed for s in batch] == list(range(40, 44))
        assert [s.text for s in batch] == [alone(loaded, "KING:", 40 + i, n=50, **kw) for i in range(4)]
        assert len({s.text for s in batch}) == 4  # and they differ from each other


def test_sampling_stores_the_weights_column_major_with_the_same_logits(trained_run: Path) -> None:
    fresh = load_model(trained_run, torch.device("cpu"))
    ids = torch.randint(0, fresh.tokenizer.vocab_size, (2, fresh.config.model.block_size))
    before = fresh.model(ids)[0]
    text = alone(fresh, "KING:", 3, n=40, temperature=0.0)
    cast_for_sampling(fresh, "float32", "cpu")
    linears = [m for m in fresh.model.blocks.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m.weight.t().is_contiguous() and not m.weight.is_contiguous() for m in linears)
    assert fresh.model.lm_head.weight.is_contiguous()  # the tied embedding is read by rows
    assert torch.allclose(fresh.model(ids)[0], before, atol=1e-5)
    assert alone(fresh, "KING:", 3, n=40, temperature=0.0) == text


def test_sampling_past_block_size_in_a_batch(loaded) -> None:
    block = loaded.model.cfg.block_size
    batch = sample_records(loaded, "", SampleOptions(num_samples=3, max_new_tokens=3 * block, seed=1))
    assert all(s.chars == 3 * block for s in batch)
    assert [s.text for s in batch] == [alone(loaded, "", 1 + i, n=3 * block) for i in range(3)]


def test_stop_strings_end_each_sample_on_its_own(loaded) -> None:
    stops = ["\n", "e "]
    free = [alone(loaded, "JULIET:", 7 + i, n=80) for i in range(5)]
    got = sample_records(loaded, "JULIET:", SampleOptions(num_samples=5, max_new_tokens=80, seed=7), stops=stops)
    for text, s in zip(free, got):
        cont = text[len("JULIET:") :]
        hits = [(cont.find(x), x) for x in stops if cont.find(x) >= 0]
        at, which = min(hits) if hits else (len(cont), "length")
        assert s.text == "JULIET:" + cont[:at] and s.stopped == which and s.chars == at  # the stop string left out
    assert len({s.stopped for s in got}) > 1 or len({s.chars for s in got}) > 1  # they ended differently


def test_prompts_of_mixed_lengths_share_batches_correctly(loaded) -> None:
    prompts = ["K", "KING:", "ROMEO:\nWhat", "QUEEN"]  # lengths 1, 5, 11, 5
    got = sample_records(loaded, prompts, SampleOptions(num_samples=2, max_new_tokens=30, seed=100))
    assert [s.prompt for s in got] == [p for p in prompts for _ in range(2)]
    assert [s.text for s in got] == [alone(loaded, s.prompt, s.seed, n=30) for s in got]
    assert [s.seed for s in got] == list(range(100, 108))


def test_records_serialise_as_json_lines(loaded) -> None:
    (s,) = sample_records(loaded, "KING:", SampleOptions(max_new_tokens=30, seed=3), stops=["::::"])
    record = json.loads(s.to_json())
    assert record == {"prompt": "KING:", "text": s.text, "chars": 30, "stopped": "length", "seed": 3}


def test_one_sample_streams_as_it_is_generated_several_come_in_order(loaded) -> None:
    forwards: list[int] = []
    hook = loaded.model.register_forward_hook(lambda *_: forwards.append(1))
    try:
        plan = plan_samples(loaded.tokenizer, ["KING:"], SampleOptions(max_new_tokens=30, seed=3))
        out = stdout_text(run_plan(loaded, plan), 1)
        assert next(out) == "KING:" and not forwards  # the prompt at once
        first = next(out)
        assert len(first) == 1 and len(forwards) == 1  # then each character as soon as it is drawn
        assert "KING:" + first + "".join(out) == alone(loaded, "KING:", 3, n=30) + "\n"
    finally:
        hook.remove()
    end = Sample("", "", 0, "length", 0)
    pieces = [Piece(1, "one"), Piece(0, "zero"), Piece(2, "two"), Piece(1, "!", end), Piece(0, "", end)]
    taken: list[Piece] = []
    out = stdout_text((taken.append(p) or p for p in [*pieces, Piece(2, "", end)]), 3)
    assert next(out) == "zero" and len(taken) == 5  # sample 1 was complete first, but waits for sample 0
    assert next(out) == SEPARATOR + "one!"
    assert list(out) == [SEPARATOR + "two", "\n"]


def test_streamed_output_never_shows_a_stop_string(loaded) -> None:
    def text(seed: int, stops: list[str]) -> list[Piece]:
        plan = plan_samples(loaded.tokenizer, ["KING:"], SampleOptions(max_new_tokens=200, seed=seed), stops)
        return list(run_plan(loaded, plan))

    # a seed whose sample holds the stop string, whatever the trained fixture writes
    seed = next((n for n in range(50) if "\n\n" in samples_of(text(n, []))[0].text), None)
    assert seed is not None, "no seed of 50 wrote a blank line in 200 characters"
    pieces = text(seed, ["\n\n"])
    (s,) = samples_of(pieces)
    assert "".join(stdout_text(pieces, 1)) == s.text + "\n" and "\n\n" not in s.text
    assert s.stopped == "\n\n"  # the stop string was written, and held back


def test_bad_sampling_inputs(loaded, monkeypatch) -> None:
    opts = SampleOptions(max_new_tokens=5)
    with pytest.raises(UserError, match="--stop must not be empty"):
        sample_records(loaded, "KING", opts, stops=[""])
    with pytest.raises(UserError, match="--stop 'été' has characters the model never saw \\('é'\\): it could never"):
        sample_records(loaded, "KING", opts, stops=["\u00e9t\u00e9"])
    with pytest.raises(UserError, match=r"--prompts-file p\.txt has no prompts"):
        parse_prompts_file("\n  \n", "p.txt")
    assert parse_prompts_file("a\\nb\nc\\\\n\n\n", "p.txt") == ["a\nb", "c\\n"]
    monkeypatch.setattr(memory, "available_bytes", lambda device: (50 * 2**20, "MemAvailable"))
    with pytest.raises(UserError, match=r"sampling 5,000 samples at once needs about .* --num-samples \d+ or fewer"):
        sample_records(loaded, "KING", SampleOptions(num_samples=5000, max_new_tokens=5))


WAIT = 90.0  # seconds a step may take at most: a limit, not a timing (on 2 busy cores, a start-up
# or the line after a Ctrl-C once took over 20 s in a full-suite run); a test waits only until it shows


class Terminal:
    """A process on a pseudo-terminal (its controlling terminal, so Ctrl-C there is SIGINT)."""

    def __init__(self, *args: str | Path, env: dict[str, str]) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: Ctrl-C must reach it, whatever the test runner's process ignores or blocks
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
            os.execve(sys.executable, [sys.executable, "-m", "minigpt", *map(str, args)], env)
        self.seen = ""

    def _read_while(self, waiting, what: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        while waiting():
            ready, _, _ = select.select([self.fd], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise AssertionError(f"no {what} within {timeout} s; the screen: {self.seen[-800:]!r}")
            try:
                self.seen += os.read(self.fd, 4096).decode("utf-8", "replace").replace("\r\n", "\n")
            except OSError:  # the child closed the terminal
                raise AssertionError(f"the program ended before {what}: {self.seen[-800:]!r}") from None

    def read_until(self, marker: str, timeout: float = WAIT) -> str:
        """Everything the terminal shows up to and including `marker` (CR LF read as LF)."""
        self._read_while(lambda: marker not in self.seen, repr(marker), timeout)
        shown, _, self.seen = self.seen.partition(marker)
        return shown + marker

    def read_at_least(self, n: int, timeout: float = WAIT) -> str:
        """What the terminal shows once it shows at least `n` more characters (kept for read_until)."""
        self._read_while(lambda: len(self.seen) < n, f"{n} characters", timeout)
        return self.seen

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode("utf-8"))

    def wait(self, timeout: float = WAIT) -> int:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                os.read(self.fd, 4096)  # keep the terminal drained
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        raise AssertionError("the loop did not exit")


def test_the_interactive_loop_on_a_real_terminal(trained_run: Path, loaded) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "dumb"}
    term = Terminal("sample", trained_run, "--interactive", "--dtype", "float32", env=env)
    try:
        term.read_until("> ")
        for command in (":temp 0", ":max 40"):
            term.type(command + "\n")
            term.read_until("> ")
        term.type("KING:\n")
        shown = term.read_until("> ")
        greedy = sample_records(loaded, "KING:", SampleOptions(temperature=0, max_new_tokens=40))[0].text
        assert greedy in shown  # the same text the library gives, streamed to the terminal
        term.type(":temp hot\n")
        assert "error: 'hot' is not a number" in term.read_until("> ")
        term.type(":max 100000\n")
        term.read_until("> ")
        term.type("ROMEO:\n")
        term.read_until("ROMEO:")  # the prompt echoed, then the generation streams
        term.read_at_least(60)  # it is streaming (rather than a fixed wait that might end before it starts)
        term.type("\x03")  # Ctrl-C in the middle of a 100,000-character generation
        assert "[interrupted]" in term.read_until("> ")
        term.type(":settings\n")
        assert "temperature=0.0" in term.read_until("> ")  # the loop and its settings survived
        term.type("\x04")  # Ctrl-D
        assert term.wait() == 0
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(term.pid, signal.SIGKILL)
            os.waitpid(term.pid, 0)
        os.close(term.fd)


def test_sample_flags_from_the_command_line(trained_run: Path, tmp_path: Path, cli) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("KING:\nROMEO:\\nWhat\n\nJULIET\n", encoding="utf-8")
    r = cli(
        "sample",
        trained_run,
        "--prompts-file",
        prompts,
        "--json",
        "--max-new-tokens",
        "30",
        "--stop",
        "\n",
        "--seed",
        "9",
    )
    assert r.code == 0, r
    records = [json.loads(line) for line in r.out.splitlines()]
    assert [x["prompt"] for x in records] == ["KING:", "ROMEO:\nWhat", "JULIET"]
    assert [x["seed"] for x in records] == [9, 10, 11]
    for x in records:  # each reproduces alone with its own seed
        alone_r = cli(
            "sample",
            trained_run,
            "--prompt",
            x["prompt"],
            "--seed",
            x["seed"],
            "--max-new-tokens",
            "30",
            "--stop",
            "\n",
            "--json",
        )
        assert json.loads(alone_r.out) == x
    (tmp_path / "p.txt").write_text("KING:\nspeak", encoding="utf-8")
    r = cli("sample", trained_run, "--prompt-file", tmp_path / "p.txt", "--max-new-tokens", "5")
    assert r.code == 0 and r.out.startswith("KING:\nspeak")
    bad = {
        ("--prompt", "a", "--prompt-file", tmp_path / "p.txt"): "give only one of --prompt and --prompt-file",
        ("--prompt-file", tmp_path / "missing.txt"): "missing.txt does not exist",
        ("--prompts-file", tmp_path / "p.txt", "--stop", ""): "--stop must not be empty",
        ("--interactive",): "--interactive needs a terminal",
    }
    (tmp_path / "latin.txt").write_bytes(b"caf\xe9")
    bad[("--prompt-file", tmp_path / "latin.txt")] = "is not UTF-8 text (byte 0xe9 at offset 3)"
    for args, message in bad.items():
        r = cli("sample", trained_run, *args)
        assert r.code == 2 and message in r.err and r.err.count("error:") == 1 and r.out == "", (args, r)
