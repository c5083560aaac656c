"""memory's child: three training steps of one config; what they add to resident memory, beside
the memory preflight's estimate less the weights.

    python memory.py DATA [KEY=VALUE ...]     prints {"measured": BYTES, "estimated": BYTES}
"""

import json
import resource
import sys
import tempfile
from pathlib import Path

import torch

from minigpt.config.files import load_config
from minigpt.data.corpus import load_corpus
from minigpt.model import parameter_count
from minigpt.runtime.device import configure_threads, resolve_dtype
from minigpt.runtime.memory import process_rss
from minigpt.training.loop import train_step
from minigpt.training.preflight import estimate
from minigpt.training.trainer import Trainer

cfg = load_config(None, [f"data.path={sys.argv[1]}", "train.device=cpu", "log.tensorboard=false", *sys.argv[2:]])
configure_threads(cfg.train.threads)
corpus = load_corpus(cfg.data, cfg.model.block_size)
dtype = resolve_dtype(cfg.train.dtype, torch.device("cpu"))[0]
trainer = Trainer(cfg, corpus, corpus.tokenizer, torch.device("cpu"), dtype, Path(tempfile.mkdtemp()))
before = process_rss()
for _ in range(3):
    train_step(trainer)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
n_params = parameter_count(cfg.model, corpus.tokenizer.vocab_size)
micro = cfg.train.batch_size // cfg.train.grad_accum_steps
est = estimate(cfg, corpus.tokenizer.vocab_size, n_params, dtype).total(micro) - 4 * n_params
print(json.dumps({"measured": peak - before, "estimated": est}))
