"""`python -m minigpt` runs the command line (and is what torchrun launches with -m)."""

from minigpt.cli.app import run

if __name__ == "__main__":
    run()
