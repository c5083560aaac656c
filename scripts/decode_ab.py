"""Decoding speed of two checkouts of minigpt, side by side, for a change to the model or the sampler.

    uv run python scripts/decode_ab.py OLD_CHECKOUT NEW_CHECKOUT [--run RUN] [--tokens 500] [--repeats 7]

Each measurement is a child process that imports minigpt from one checkout; the children alternate
between the two. Each times, after a warm-up, `infer.decode.generate` (the decoding loop, batch 1)
and `infer.sample.sample_records` (plus the stop-string handling and the text pieces of `minigpt
sample`, with a stop string that never matches), and hashes the ids it drew, so the table also
says whether both checkouts decode the same text. The model is a random 6x384 one (block 256, 65
characters) in float32 stored column-major, as `minigpt sample` stores it, or with --run a run's
checkpoint as `minigpt sample` loads it (--dtype auto). Prints the median tokens/s of each and
new/old; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

MODES = ("generate", "sample_records")


def child(root: str, run: str | None, tokens: int) -> None:
    """In the child process: minigpt from `root`; one rate and one hash per mode, as JSON on stdout."""
    sys.path.insert(0, root)
    import torch

    from minigpt.config.schema import ModelConfig, SampleOptions
    from minigpt.data.tokenizer import CharTokenizer
    from minigpt.infer.decode import generate
    from minigpt.infer.loading import LoadedModel, cast_for_sampling, column_major_for_decoding, load_model
    from minigpt.infer.sample import sample_records
    from minigpt.model import GPT

    assert Path(sys.modules["minigpt"].__file__).is_relative_to(Path(root).resolve()), "minigpt from elsewhere"
    if run:
        loaded = load_model(Path(run), torch.device("cpu"))
        cast_for_sampling(loaded, "auto", "cpu")
    else:
        torch.manual_seed(0)
        model = GPT(ModelConfig(n_layer=6, n_head=6, n_embd=384, block_size=256), 65).eval()
        column_major_for_decoding(model)
        loaded = LoadedModel(model, CharTokenizer([chr(33 + i) for i in range(65)]), None, None, None)

    def decode(n: int) -> str:
        return str(generate(loaded.model, [0], n, 0.8, generator=torch.Generator().manual_seed(1)))

    def sample(n: int) -> str:
        opts = SampleOptions(max_new_tokens=n, seed=1)
        never = loaded.tokenizer.decode([loaded.tokenizer.vocab_size - 1] * 4)  # the last character, 4 times
        return sample_records(loaded, loaded.tokenizer.decode([0]), opts, stops=[never])[0].text

    out = {}
    for mode, fn in zip(MODES, (decode, sample)):
        fn(20)  # warm-up
        t = time.perf_counter()
        drawn = fn(tokens)
        out[mode] = (tokens / (time.perf_counter() - t), hashlib.md5(drawn.encode()).hexdigest()[:8])
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", help="the checkout to compare against (e.g. /work/main)")
    ap.add_argument("new", help="the checkout with the change")
    ap.add_argument("--run", help="a run directory or checkpoint (default: a random 6x384 model)")
    ap.add_argument("--tokens", type=int, default=500, help="tokens timed per measurement")
    ap.add_argument("--repeats", type=int, default=7, help="measurements of each checkout, alternating")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child, a.run, a.tokens)
        return 0
    rates: dict[str, dict[str, list[float]]] = {side: {m: [] for m in MODES} for side in ("old", "new")}
    hashes: dict[str, dict[str, set[str]]] = {side: {m: set() for m in MODES} for side in ("old", "new")}
    for _ in range(a.repeats):
        for side, root in (("old", a.old), ("new", a.new)):
            cmd = [sys.executable, __file__, root, root, "--child", root, "--tokens", str(a.tokens)]
            cmd += ["--run", a.run] if a.run else []
            got = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
            for mode, (rate, digest) in got.items():
                rates[side][mode].append(rate)
                hashes[side][mode].add(digest)
    print(f"{'mode':<16}{'old tok/s':>12}{'new tok/s':>12}{'new/old':>10}  same text")
    for m in MODES:
        old, new = statistics.median(rates["old"][m]), statistics.median(rates["new"][m])
        same = "yes" if hashes["old"][m] == hashes["new"][m] and len(hashes["new"][m]) == 1 else "NO"
        print(f"{m:<16}{old:>12.1f}{new:>12.1f}{new / old:>10.3f}  {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
