"""Shared fixtures: a made-up text, tiny model settings, and an isolated encoding cache; and how
the suite shares the machine with itself (bytecode, threads and cores under pytest-xdist)."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import pytest

try:
    import fcntl
except ImportError:  # Windows: tests that need the machine alone run beside others there
    fcntl = None

SESSION_DIR = "MINIGPT_TESTS_SESSION_DIR"  # one folder for the run, shared by xdist's workers and subprocesses
WORKER = os.environ.get("PYTEST_XDIST_WORKER")


def _session_dir() -> Path:
    """Made by the process pytest started (xdist's controller), before it starts any worker."""
    if not os.environ.get(SESSION_DIR):
        folder = tempfile.mkdtemp(prefix="minigpt-tests-")
        owner = os.getpid()
        atexit.register(lambda: os.getpid() == owner and shutil.rmtree(folder, ignore_errors=True))
        os.environ[SESSION_DIR] = folder
    return Path(os.environ[SESSION_DIR])


def _bytecode_cache_for_the_session() -> None:
    """Where Python may not write bytecode (PYTHONDONTWRITEBYTECODE=1) and none was compiled ahead
    (`uv sync` without --compile-bytecode), every process the tests start compiles torch's ~2,500
    modules again: `import torch` took 6.5 s instead of 2.8 s on a 2-core machine, and the suite
    starts about 30 such processes. Keep the bytecode in the session's folder instead
    (PYTHONPYCACHEPREFIX: nothing is written beside the sources or into the environment)."""
    if not sys.dont_write_bytecode or os.environ.get("PYTHONPYCACHEPREFIX"):
        return  # Python caches bytecode already (or someone chose where: xdist's workers inherit it)
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None or os.path.exists(importlib.util.cache_from_source(spec.origin)):
        return  # compiled ahead of time: nothing to gain
    prefix = str(_session_dir() / "pycache")
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False  # this process (torch is not loaded yet)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix  # and every process it starts
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def _one_share_of_the_cores_per_worker() -> None:
    """Under pytest-xdist, each worker's torch (and every process it starts) gets its share of the
    cores: 1 thread each for 2 workers on 2 cores. Two teams of spinning OpenMP threads on the same
    cores collapse (a 0.6 s test took 7 to 19 s), and a training's automatic thread count would
    follow the other worker's load (minigpt/runtime/cores.py), so that two runs meant to be
    bit-identical could reduce in different orders. A fixed share is what that policy would pick
    with the other worker busy, without the measuring."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if WORKER is None or workers < 2 or os.environ.get("OMP_NUM_THREADS"):
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ["OMP_NUM_THREADS"] = str(max(1, cores // workers))


_session_dir()
_bytecode_cache_for_the_session()
_one_share_of_the_cores_per_worker()

from minigpt.cli.app import main  # noqa: E402
from tests.helpers import TINY, TRAINED_RUN_PEAK_TFLOPS, make_text  # noqa: E402, F401  (also for older imports)


def _take_the_machine(alone: bool) -> IO[str]:
    """A readers-writer lock over pytest-xdist's workers, held while the returned file is open: a
    test marked `alone` (it measures how busy the cores are) waits until the test running on each
    other worker ends, and none starts until it ends; other tests share. The gate keeps a waiting
    `alone` test from being starved by the tests that keep starting on the other workers."""
    folder = _session_dir()
    machine = open(folder / "machine.lock", "a")  # held past this function: closed by the caller (with)
    with open(folder / "gate.lock", "a") as gate:
        fcntl.flock(gate, fcntl.LOCK_EX)
        fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
    return machine  # the gate is let go as it closes


def _wait_for_every_worker_to_collect() -> None:
    """Each worker says once that it has collected (importing torch and the test modules keeps a core
    busy for seconds); an `alone` test waits until all have. Run first, it would otherwise measure a
    worker that is still collecting as load: the machine lock only covers the tests themselves."""
    folder = _session_dir()
    (folder / f"collected-{WORKER}").touch()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    deadline = time.monotonic() + 120  # a worker that died at collection must not hang the suite
    while len(list(folder.glob("collected-*"))) < workers and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Setup, call and teardown (session fixtures included) under the machine lock."""
    if WORKER is None or fcntl is None:
        return (yield)
    alone = item.get_closest_marker("alone") is not None
    if alone:
        _wait_for_every_worker_to_collect()
    else:
        (_session_dir() / f"collected-{WORKER}").touch()
    with _take_the_machine(alone=alone):
        return (yield)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The `alone` tests first: there, the other workers wait for them idle, having just collected
    (at the end, a worker that has finished keeps a core busy for ~0.3 s as it shuts down; and in
    the middle, one would wait for the other worker's test, maybe a long one). Then the long `early`
    ones, so that no worker is left with one at the end. A stable sort: the rest keep their order."""
    items.sort(key=lambda item: 0 if item.get_closest_marker("alone") else 1 if item.get_closest_marker("early") else 2)


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


def _train_tiny_run(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / "text.txt"
    data.write_text(make_text(), encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINIGPT_CACHE_DIR", str(folder / "cache"))
    try:
        code = main(
            [
                "train",
                "--data",
                str(data),
                "--out",
                str(folder / "run"),
                *TINY,
                "train.max_steps=60",
                "train.eval_interval=30",
                "log.attention_probe=KING:\nSpeak",
                f"log.peak_tflops={TRAINED_RUN_PEAK_TFLOPS}",
            ]
        )
    finally:
        mp.undo()
    assert code == 0


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One tiny run shared by the tests that only read it (sample, eval, events). Trained once a
    session, by the first of pytest-xdist's workers that needs it; each worker gets its own copy,
    so that no two workers' commands meet in one run directory."""
    tmp = tmp_path_factory.mktemp("trained")
    if fcntl is None:  # no lock to share it with: each worker trains its own
        _train_tiny_run(tmp)
        return tmp / "run"
    shared = _session_dir() / "trained"
    with open(_session_dir() / "trained.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "complete").exists():
            shutil.rmtree(shared, ignore_errors=True)  # left by a worker that died half-way
            _train_tiny_run(shared)
            (shared / "complete").touch()
    shutil.copytree(shared, tmp, dirs_exist_ok=True, ignore=shutil.ignore_patterns("complete"))
    return tmp / "run"


CHROMIUM = os.environ.get("MINIGPT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def browser():
    """The system Chromium through Playwright, one per test module. .ci/run installs it: under CI a
    missing browser fails the test, it does not skip it."""
    if not Path(CHROMIUM).exists():
        missing = f"no Chromium at {CHROMIUM} (apt-get install chromium, or set MINIGPT_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser, request: pytest.FixtureRequest):
    """A page that cannot reach any network; every request it makes and every script error is
    recorded (`page.requests`, `page.errors`). A module may set VIEWPORT = (width, height)."""
    width, height = getattr(request.module, "VIEWPORT", (1200, 800))
    context = browser.new_context(offline=True, viewport={"width": width, "height": height})
    pg = context.new_page()
    pg.requests, pg.errors = [], []
    pg.on("request", lambda r: pg.requests.append(r.url))
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    yield pg
    context.close()
