"""share's sampler: characters/s of generation alone, timed inside the process (start-up does not
count), with the threads `minigpt sample` would choose.

    python sampler.py RUN CHARS     prints characters/s
"""

import sys
import time
from pathlib import Path

# isort: off
from minigpt.runtime.cores import CoreLoad  # as `minigpt sample` does: before torch loads

START_LOAD = CoreLoad()
import torch  # noqa: E402

# isort: on
from minigpt.infer.decode import generate  # noqa: E402
from minigpt.infer.loading import cast_for_sampling, load_model  # noqa: E402
from minigpt.runtime.device import configure_threads  # noqa: E402

configure_threads(0, START_LOAD.others())
loaded = load_model(Path(sys.argv[1]), torch.device("cpu"))
cast_for_sampling(loaded, "auto", "cpu")
gen = torch.Generator().manual_seed(1)
generate(loaded.model, [0], 100, 0.8, generator=gen)  # warm-up
t0 = time.perf_counter()
generate(loaded.model, [0], int(sys.argv[2]), 0.8, generator=gen)
print(int(sys.argv[2]) / (time.perf_counter() - t0))
