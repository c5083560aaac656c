"""The package's one atomic write and its one file lock, against real failures and real processes."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from minigpt.config.schema import DataConfig
from minigpt.data.corpus import load_corpus
from minigpt.errors import UserError
from minigpt.io import atomic
from minigpt.io.atomic import atomic_open, atomic_write, default_file_mode
from minigpt.io.lock import FileLock, LockHeld, read_owner

ROOT = Path(__file__).resolve().parents[1]

# takes the lock on argv[1], says so, holds it until a line comes in, lets go, says so, and lives on
# until a second line (so a waiter that gets the lock got it from the release, not from the exit)
HOLDER = """
import sys
from pathlib import Path
from minigpt.io.lock import FileLock
lock = FileLock(Path(sys.argv[1]))
lock.acquire()
print("held", flush=True)
sys.stdin.readline()
lock.release()
print("released", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def holder() -> Iterator:
    """Start another process holding the lock on a path: `start(path)` returns it once it holds it."""
    started: list[subprocess.Popen[str]] = []

    def start(path: Path) -> subprocess.Popen[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, str(path)], env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline() == "held\n"
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()


def tell(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.write("\n")
    proc.stdin.flush()


@pytest.mark.parametrize("fsync", [True, False])
def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temporary(tmp_path: Path, fsync: bool) -> None:
    path = tmp_path / "state.bin"
    path.write_bytes(b"old content")
    with pytest.raises(RuntimeError, match="midway"):
        with atomic_open(path, fsync=fsync) as f:
            f.write(b"new content, half of it")
            f.flush()
            assert len(list(tmp_path.iterdir())) == 2  # the temporary file, beside the target
            raise RuntimeError("midway")
    assert path.read_bytes() == b"old content"
    assert list(tmp_path.iterdir()) == [path]

    def interrupted(f) -> None:
        f.write(b"new")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, interrupted)
    assert path.read_bytes() == b"old content"
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize("fsync", [True, False])
def test_a_complete_write_replaces_the_file_and_syncs_only_when_asked(tmp_path: Path, monkeypatch, fsync) -> None:
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    path = tmp_path / "state.bin"
    path.write_bytes(b"old")
    with atomic_open(path, fsync=fsync) as f:
        f.write(b"new")
    assert path.read_bytes() == b"new" and list(tmp_path.iterdir()) == [path]
    assert path.stat().st_mode & 0o777 == default_file_mode()  # not mkstemp's 0600
    assert len(synced) == (2 if fsync else 0)  # the file, then the directory (the rename)


def test_cache_entries_are_written_without_fsync_and_their_metadata_with(
    text_file: Path, tmp_path: Path, monkeypatch
) -> None:
    written: list[tuple[str, bool]] = []
    real = atomic.atomic_open

    def spy(path: Path, *, fsync: bool = True):
        written.append((path.name, fsync))
        return real(path, fsync=fsync)

    monkeypatch.setattr(atomic, "atomic_open", spy)
    load_corpus(DataConfig(path=str(text_file), cache_dir=str(tmp_path / "cache")), 16)
    (entry,) = (tmp_path / "cache").glob("*.bin")
    assert (entry.name, False) in written and (entry.with_suffix(".json").name, True) in written
    assert all(fsync for name, fsync in written if name != entry.name)  # every other file: durable


def test_a_lock_held_by_another_process_is_refused_at_once_naming_it_and_free_after_kill_9(
    tmp_path: Path, holder
) -> None:
    path = tmp_path / ".lock"
    other = holder(path)
    t0 = time.monotonic()
    with pytest.raises(LockHeld) as held:
        FileLock(path, blocking=False).acquire()
    assert time.monotonic() - t0 < 2  # one attempt, no wait
    assert held.value.owner == str(other.pid) and f"(pid {other.pid})" in str(held.value)
    assert held.value.path == path

    other.send_signal(signal.SIGKILL)  # no release: the kernel drops the lock with the process
    other.wait()
    lock = FileLock(path, blocking=False)
    assert lock.acquire() is True
    assert read_owner(path) == str(os.getpid())
    lock.release()
    assert path.exists()  # the lock file stays: deleting it would split waiters across two files


def test_the_run_lock_names_the_training_that_holds_it(tmp_path: Path, holder) -> None:
    from minigpt.training.launch import lock_run_dir

    other = holder(tmp_path / ".lock")
    with pytest.raises(UserError) as refused:
        lock_run_dir(tmp_path)
    assert str(refused.value) == (
        f"{tmp_path} is in use by another minigpt training (pid {other.pid}); wait for it to end, or train into "
        "another --out"
    )
    tell(other)  # let go
    assert other.stdout is not None and other.stdout.readline() == "released\n"
    run_lock = lock_run_dir(tmp_path)
    run_lock.release()
    run_lock.release()  # a second release does nothing


def test_a_blocking_acquire_waits_until_the_holder_lets_go(tmp_path: Path, holder) -> None:
    path = tmp_path / "entry.lock"
    other = holder(path)
    lock = FileLock(path)
    acquired: list[float] = []
    waiter = threading.Thread(target=lambda: (lock.acquire(), acquired.append(time.monotonic())), daemon=True)
    waiter.start()
    time.sleep(1.0)
    assert not acquired and waiter.is_alive()  # still waiting
    told = time.monotonic()
    tell(other)
    assert other.stdout is not None and other.stdout.readline() == "released\n"
    waiter.join(timeout=30)
    assert acquired and acquired[0] > told
    assert other.poll() is None  # the holder lives on: the release, not its exit, let the waiter in
    assert read_owner(path) == str(os.getpid())
    lock.release()


def test_the_encoding_cache_waits_for_an_entry_another_process_holds(text_file: Path, tmp_path: Path, holder) -> None:
    cfg = DataConfig(path=str(text_file), cache_dir=str(tmp_path / "cache"))
    expected = np.asarray(load_corpus(cfg, 16).ids)
    (entry_lock,) = (tmp_path / "cache").glob("*.lock")
    other = holder(entry_lock)
    loaded: list = []
    reader = threading.Thread(target=lambda: loaded.append(load_corpus(cfg, 16)), daemon=True)
    reader.start()
    time.sleep(1.0)
    assert not loaded  # the entry is locked: it may be being written
    tell(other)
    reader.join(timeout=60)
    assert loaded and np.array_equal(np.asarray(loaded[0].ids), expected)


@pytest.mark.skipif(os.name == "nt", reason="flock's absence is a POSIX filesystem's")
def test_a_filesystem_without_locks_goes_unlocked_rather_than_leaving_a_marker(tmp_path: Path, monkeypatch) -> None:
    import filelock._unix

    def no_flock(fd: int) -> bool:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(filelock._unix, "lock_fd_nonblocking", no_flock)
    path = tmp_path / ".lock"
    lock = FileLock(path)
    assert lock.acquire() is False and lock._lock is None  # no soft lock: its marker would outlive a kill -9
    lock.release()
    assert FileLock(path, blocking=False).acquire() is False
