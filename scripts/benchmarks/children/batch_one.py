"""speed's batch-sampling part, the batch-1 path in one whole process: the same loading and dtype
as `minigpt sample`, then one sample after another (seeds seed + k, as `-n N` numbers them).

    python batch_one.py RUN SAMPLES CHARS     prints the characters generated in all
"""

import sys
from pathlib import Path

import torch

from minigpt.config.schema import SampleOptions
from minigpt.infer.loading import cast_for_sampling, load_model
from minigpt.infer.sample import sample_records

loaded = load_model(Path(sys.argv[1]), torch.device("cpu"))
cast_for_sampling(loaded, "auto", "cpu")
n, chars = int(sys.argv[2]), int(sys.argv[3])
out = [sample_records(loaded, "", SampleOptions(max_new_tokens=chars, seed=1337 + k))[0].text for k in range(n)]
print(sum(len(t) for t in out))
