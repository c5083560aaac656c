"""`python -m minigpt.runtime.torchrun [--remove=FILE] TORCHRUN-ARGS`: torch's launcher for `--nproc N`, which
passes SIGUSR1 to the workers, gives them 120 s to save, gives each CPU worker its share of the cores,
exits with their planned code (PLANNED), tells every rank's error line, and removes FILE (their request)
when they end (docs/distributed.md#signals, docs/distributed.md)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

# exit codes a worker ends with on purpose, after saying why in one line
PLANNED = frozenset({2, 74, *(128 + s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", 10)))})


def main(argv: list[str]) -> int:
    remove = Path(argv.pop(0).removeprefix("--remove=")) if argv and argv[0].startswith("--remove=") else None
    for name in ("PET_SIGNALS_TO_HANDLE", "TORCHELASTIC_SIGNALS_TO_HANDLE"):  # torchrun's signals, and SIGUSR1
        handled = os.environ.get(name, "SIGTERM,SIGINT,SIGHUP,SIGQUIT")
        if hasattr(signal, "SIGUSR1") and "SIGUSR1" not in handled:
            os.environ[name] = handled + ",SIGUSR1"
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120")
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import determine_local_world_size, parse_args, run

    args = parse_args(argv)
    share_cores(determine_local_world_size(args.nproc_per_node))
    try:
        run(args)
    except SignalException as e:  # the workers were sent the same signal and have saved
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        # rank 0's planned exit, else another rank's: the ranks torchrun stopped after it (SIGTERM) are not the cause
        planned = [f.exitcode for rank, f in sorted(e.failures.items()) if f.exitcode in PLANNED]
        if not planned:
            raise
        for line in failure_lines({rank: (f.exitcode, f.message) for rank, f in e.failures.items()}):
            print(line, file=sys.stderr, flush=True)
        return planned[0]
    finally:
        if remove is not None:
            remove.unlink(missing_ok=True)
    return 0


def share_cores(processes: int) -> None:
    """OMP_NUM_THREADS for `processes` workers on this machine: the cores divided among them, where the
    user set none (torchrun would set 1, and a CPU run would train on one core a process)."""
    if processes > 1 and "OMP_NUM_THREADS" not in os.environ:
        from minigpt.runtime.cores import allowed_cores

        os.environ["OMP_NUM_THREADS"] = str(max(1, allowed_cores() // processes))


def record_error(message: str) -> None:
    """Leave a worker's user error where its torchrun agent reads it (the worker's error file, in torch's
    format), so the launcher can tell it; nothing outside torchrun."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        Path(path).write_text(json.dumps({"message": message, "timestamp": int(time.time())}), encoding="utf-8")


def error_line(message: str) -> str | None:
    """What a worker prints of its user error: rank 0 says it (`error: ...`); another rank leaves it to its
    launcher (torchrun's error file, `failure_lines`) or, launched some other way, says it naming itself."""
    rank = os.environ.get("RANK", "0")
    record_error(message)
    if rank == "0":
        return f"error: {message}"
    return None if os.environ.get("TORCHELASTIC_ERROR_FILE") else f"error: rank {rank}: {message}"


def failure_lines(failures: dict[int, tuple[int, str]]) -> list[str]:
    """The lines the launcher adds for failed workers ({rank: (exit code, message)}): one for each message
    rank 0 has not printed itself, naming the ranks that ended with it; a planned exit without one says so."""
    told = failures[0][1] if 0 in failures else None
    by_message: dict[str, list[int]] = {}
    for rank, (code, message) in sorted(failures.items()):
        if rank == 0 or message == told or code not in (2, 74):  # a signal's exit: rank 0 says why
            continue
        text = message if message and not message.startswith("To enable traceback") else f"exited with code {code}"
        by_message.setdefault(text, []).append(rank)
    lines = []
    for message, ranks in by_message.items():
        who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
        lines.append(f"error: {who}: {message}")
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
