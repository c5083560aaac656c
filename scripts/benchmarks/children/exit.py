"""tricks' child: a process that imports torch and exits, through exit_fast or sys.exit (its
whole-process time is the figure).

    python exit.py exit_fast|sys.exit
"""

import sys

import torch  # noqa: F401  (what makes the teardown slow)

from minigpt.cli.app import exit_fast

if sys.argv[1] == "exit_fast":
    exit_fast(0)
sys.exit(0)
