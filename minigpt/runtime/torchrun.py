"""`python -m minigpt.runtime.torchrun [--remove=FILE] TORCHRUN-ARGS`: torch's launcher for `--nproc N`, which
passes SIGUSR1 to the workers, gives them 120 s to save, exits with their planned code (PLANNED) and
removes FILE (their request) when they end (docs/cluster.md#signals)."""

from __future__ import annotations

import os
import signal
import sys
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
