"""minigpt's benchmarks: one module per `scripts/bench.py` subcommand, over harness.py."""
