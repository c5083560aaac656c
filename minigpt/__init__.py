"""minigpt: character-level GPT training from the command line."""

import os

__version__ = "0.1.0"

# OpenMP threads that find no work spin for a while before sleeping (libgomp's default). With two
# minigpt processes on the same cores, each spins on cores the other needs: measured on 2 cores,
# two trainings side by side fell to a fraction of one alone (230x slower for a tiny model).
# PASSIVE makes idle threads sleep at once. libgomp reads it when torch loads it, so it is set
# here, before anything imports torch; a value already in the environment is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
