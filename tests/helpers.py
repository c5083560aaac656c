"""What several test files share, in one place: the tiny config and text, the tiny model, the one
check of a user-mistake line, and the builders of trainers and child processes. Fixtures live in
conftest.py; a test file imports helpers from here, never from another test file. Torch is
imported inside the functions that need it, so that conftest.py (which imports this) loads none."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from minigpt.model import GPT
    from minigpt.training.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]

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
TRAINED_RUN_PEAK_TFLOPS = 1.0  # a made-up CPU peak, so that conftest's trained_run logs MFU
TINY_MODEL = {"n_layer": 2, "n_head": 2, "n_embd": 32, "block_size": 16}  # TINY's model, as ModelConfig keywords


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


def tiny_model(vocab: int = 20, seed: int | None = 0, **options) -> GPT:
    """The tiny GPT (TINY_MODEL with `options` on top) over `vocab` ids, built right after
    torch.manual_seed(seed) (None: no seeding), in eval mode."""
    import torch

    from minigpt.config.schema import ModelConfig
    from minigpt.model import GPT

    if seed is not None:
        torch.manual_seed(seed)
    return GPT(ModelConfig(**{**TINY_MODEL, **options}), vocab).eval()


def trained_like(m: GPT, scale: float = 0.2) -> GPT:
    """Every weight moved off its initial value, as training would (zero projections included)."""
    import torch

    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p) * scale)
    return m


def one_error_line(r) -> str:
    """The one `error: ...` line a user mistake prints (exit 2, no traceback, nothing else)."""
    assert r.code == 2, r
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r
    assert "Traceback" not in r.err
    return lines[0]


def make_trainer(text_file: Path, out: Path, *overrides: str) -> Trainer:
    """A Trainer of TINY on `text_file` for 20 steps, on the CPU in float32."""
    import torch

    from minigpt.config.files import load_config
    from minigpt.data.corpus import load_corpus
    from minigpt.training.trainer import Trainer

    # dropout on, so the global RNG stream matters as much as the batch stream
    cfg = load_config(None, [*TINY, f"data.path={text_file}", "train.max_steps=20", "model.dropout=0.1", *overrides])
    corpus = load_corpus(cfg.data, cfg.model.block_size)
    return Trainer(cfg, corpus, corpus.tokenizer, torch.device("cpu"), torch.float32, out)


def weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}


def spawn(*args: str | Path, cache: Path, prelude: str = "") -> subprocess.Popen:
    """`python -m minigpt ARGS` in a child process (optionally after running `prelude` in it)."""
    code = prelude + "\nimport sys\nfrom minigpt.cli.app import run\nsys.argv = ['minigpt', *sys.argv[1:]]\nrun()\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MINIGPT_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def wait_for_step(path: Path, step: int, proc: subprocess.Popen, timeout: float = 90) -> None:
    """Wait until the checkpoint at `path` reaches `step` (the child is training by then)."""
    from minigpt.checkpoint import load_checkpoint
    from minigpt.errors import UserError

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            if path.exists() and load_checkpoint(path)["step"] >= step:
                return
        except UserError:
            pass  # never expected (writes are atomic), but a reader must not crash the test on it
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"{path} did not reach step {step} in {timeout}s: {proc.communicate()}")


def launch(*args: str | Path, cache: Path, wait: bool = True, extra_path: Path | None = None):
    """`minigpt train --nproc 2 ARGS` as a real process tree (torchrun + 2 workers)."""
    path = [str(ROOT)] + ([str(extra_path)] if extra_path else [])
    (cache / "tmp").mkdir(parents=True, exist_ok=True)  # the --nproc request file goes there
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "MINIGPT_CACHE_DIR": str(cache),
        "TMPDIR": str(cache / "tmp"),
    }
    cmd = [sys.executable, "-m", "minigpt", "train", "--nproc", "2", *map(str, args)]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    if wait:
        proc.communicate_result = proc.communicate(timeout=240)
    return proc


class Evil:
    """Unpickling it runs a shell command (touches $EVIL_MARKER): what weights_only must refuse."""

    def __reduce__(self):
        return (os.system, (f"touch {Path(os.environ['EVIL_MARKER'])}",))


def page_data(path: Path) -> dict:
    """The JSON a minigpt HTML page embeds (its `minigpt-data` script)."""
    html = path.read_text(encoding="utf-8")
    return json.loads(html.split('<script type="application/json" id="minigpt-data">')[1].split("</script>")[0])
