"""Shared fixtures: a made-up text, tiny model settings, and an isolated encoding cache."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from minigpt.cli.app import main

TINY = [
    "model.n_layer=2",
    "model.n_head=2",
    "model.n_embd=32",
    "model.block_size=16",
    "train.batch_size=8",
    "train.eval_steps=2",
    "train.device=cpu",
    "log.interval=5",
    "log.sample_length=20",
    "log.attention_probe=",  # drawing attention images costs ~0.5 s an eval: only trained_run draws them
    "optim.warmup_steps=5",
]
TRAINED_RUN_PEAK_TFLOPS = 1.0  # a made-up CPU peak, so that trained_run logs MFU


def make_text(n_chars: int = 20_000, seed: int = 0) -> str:
    """A text with structure to learn (repeated words and lines), made up on the spot."""
    rng = random.Random(seed)
    words = ["the", "king", "queen", "speak", "hear", "me", "now", "good", "lord", "what", "say", "you"]
    lines = []
    size = 0
    while size < n_chars:
        name = rng.choice(["ROMEO", "JULIET", "KING"])
        line = f"{name}:\n" + " ".join(rng.choice(words) for _ in range(rng.randint(4, 10))).capitalize() + ".\n\n"
        lines.append(line)
        size += len(line)
    return "".join(lines)[:n_chars]


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Never touch the user's real cache directory."""
    monkeypatch.setenv("MINIGPT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    path = tmp_path / "text.txt"
    path.write_text(make_text(), encoding="utf-8")
    return path


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, out={self.out[-500:]!r}, err={self.err[-1500:]!r})"


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Run `minigpt ARGS` in-process and return its exit code, stdout and stderr."""

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny run shared by the tests that only read it (sample, eval, events)."""
    tmp = tmp_path_factory.mktemp("trained")
    data = tmp / "text.txt"
    data.write_text(make_text(), encoding="utf-8")
    out = tmp / "run"
    mp = pytest.MonkeyPatch()
    mp.setenv("MINIGPT_CACHE_DIR", str(tmp / "cache"))
    try:
        code = main(["train", "--data", str(data), "--out", str(out), *TINY, "train.max_steps=60",
                     "train.eval_interval=30", "log.attention_probe=KING:\nSpeak",
                     f"log.peak_tflops={TRAINED_RUN_PEAK_TFLOPS}"])  # fmt: skip
    finally:
        mp.undo()
    assert code == 0
    return out
