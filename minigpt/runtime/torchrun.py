"""torchrun for `minigpt train --nproc N`: torch's own launcher, run so that a cluster's signals
and a worker's exit code come through.

- SIGUSR1 (SLURM's advance warning, `--signal=USR1@120`) is passed to every worker like SIGTERM
  (torch's launcher would die of it, leaving the workers on their own);
- the workers get 120 s (`TORCH_ELASTIC_SHUTDOWN_TIMEOUT`, unless set) to finish their step and
  save before the launcher kills them;
- the launcher exits with the workers' code when they stopped as minigpt means them to (a saved
  stop on a signal: 130, 138, 143; a user mistake: 2; a failed write: 74), without torch's
  failure report; any other failure keeps it (a traceback is a bug).

`python -m minigpt.runtime.torchrun [--remove=FILE] TORCHRUN-ARGS` is what `launch_local` runs;
FILE (the workers' request) is removed when they end."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

# exit codes a worker ends with on purpose, after saying why in one line
PLANNED = frozenset({2, 74, *(128 + s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGUSR1", 10)))})


def _settings() -> None:
    """torchrun's --signals-to-handle through its environment variable (PET_SIGNALS_TO_HANDLE; older
    torch reads TORCHELASTIC_SIGNALS_TO_HANDLE), unless the user chose them."""
    for name in ("PET_SIGNALS_TO_HANDLE", "TORCHELASTIC_SIGNALS_TO_HANDLE"):
        handled = os.environ.get(name, "SIGTERM,SIGINT,SIGHUP,SIGQUIT")
        if hasattr(signal, "SIGUSR1") and "SIGUSR1" not in handled:
            os.environ[name] = handled + ",SIGUSR1"
    os.environ.setdefault("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "120")


def main(argv: list[str]) -> int:
    remove = Path(argv.pop(0).removeprefix("--remove=")) if argv and argv[0].startswith("--remove=") else None
    _settings()
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    try:
        run(parse_args(argv))
    except SignalException as e:  # the workers were sent the same signal and have saved
        return 128 + int(e.sigval)
    except ChildFailedError as e:
        first = e.failures.get(0) or e.get_first_failure()[1]  # rank 0's reason, where it has one
        if first.exitcode in PLANNED:
            return first.exitcode
        raise
    finally:
        if remove is not None:
            remove.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
