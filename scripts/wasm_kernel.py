"""Build gpt.js's WebAssembly SIMD matmul from its text, minigpt/inspect/web/matmul.wat: the bytes go
into gpt.js's MATMUL_WASM line as base64 (the page is one offline file: nothing is fetched).

    uv run python scripts/wasm_kernel.py          # rewrite the line after editing matmul.wat
    uv run python scripts/wasm_kernel.py --check  # exit 1 if the line is not matmul.wat's bytes

wasmtime's wat2wasm (a dev dependency) assembles the text: a well-kept assembler, not one of ours."""

from __future__ import annotations

import argparse
import base64
import re
import sys
from pathlib import Path

WEB = Path(__file__).resolve().parents[1] / "minigpt" / "inspect" / "web"
LINE = re.compile(r'^const MATMUL_WASM = "([A-Za-z0-9+/=]*)";$', re.M)


def kernel_base64() -> str:
    """matmul.wat assembled, as base64."""
    import wasmtime

    return base64.b64encode(bytes(wasmtime.wat2wasm((WEB / "matmul.wat").read_text()))).decode()


def embedded_base64() -> str:
    found = LINE.search((WEB / "gpt.js").read_text())
    if found is None:
        raise SystemExit('gpt.js has no `const MATMUL_WASM = "...";` line')
    return found.group(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that gpt.js holds matmul.wat's bytes")
    args = parser.parse_args(argv)
    built = kernel_base64()
    if args.check:
        if built != embedded_base64():
            print("gpt.js's MATMUL_WASM is stale: run scripts/wasm_kernel.py")
            return 1
        print("gpt.js's MATMUL_WASM is matmul.wat's")
        return 0
    js = WEB / "gpt.js"
    embedded_base64()  # the line exists
    js.write_text(LINE.sub(f'const MATMUL_WASM = "{built}";', js.read_text(), count=1))
    print(f"gpt.js: MATMUL_WASM from matmul.wat ({len(base64.b64decode(built)):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
