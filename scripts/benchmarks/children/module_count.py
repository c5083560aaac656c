"""startup's child: `minigpt --help` in-process, then how many modules it imported (on stderr)."""

import sys

from minigpt.cli.app import main

main(["--help"])
print(len(sys.modules), file=sys.stderr)
