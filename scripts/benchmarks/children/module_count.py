"""startup's child: `minigpt --help` in-process, then how many modules it imported (on stderr).

python module_count.py CLI_MODULE     CLI_MODULE: where `main` is (minigpt.cli.app)
"""

import importlib
import sys

importlib.import_module(sys.argv[1]).main(["--help"])
print(len(sys.modules), file=sys.stderr)
