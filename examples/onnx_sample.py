"""Sample text from a model exported with `minigpt export RUN OUT --format onnx`, using only
onnxruntime and numpy (no torch, no minigpt): what a program in any language with an ONNX
runtime does.

    uv run python examples/onnx_sample.py OUT --prompt "ROMEO:" --max-new-tokens 200

OUT/minigpt.json holds the vocabulary, the context (block_size) and the sampling defaults. Each
step feeds the last block_size ids and samples the next from the logits at the last position
(temperature 0: the most likely). minigpt's own sampler keeps a KV cache and, past block_size,
restarts from the last half window, so past the first window its text can differ slightly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort


def encode(text: str, vocab: dict) -> list[int]:
    """Ids of `text`: a char model's characters (unseen ones dropped, as in tokenizer.json), or UTF-8 bytes."""
    if vocab["kind"] == "byte":
        return list(text.encode("utf-8"))
    ids = {c: i for i, c in enumerate(vocab["chars"])}
    return [ids[c] for c in text if c in ids]


def decode(ids: list[int], vocab: dict) -> str:
    if vocab["kind"] == "byte":
        return bytes(ids).decode("utf-8", errors="replace")
    return "".join(vocab["chars"][i] for i in ids)


def next_id(logits: np.ndarray, temperature: float, top_k: int | None, rng: np.random.Generator) -> int:
    """One id from a row of logits: the argmax at temperature 0, else a draw after temperature and top_k."""
    if temperature == 0:
        return int(np.argmax(logits))
    scaled = (logits.astype(np.float64) - logits.max()) / temperature
    if top_k is not None and top_k < scaled.size:
        scaled[scaled < np.sort(scaled)[-top_k]] = -np.inf
    probs = np.exp(scaled)
    return int(rng.choice(scaled.size, p=probs / probs.sum()))


def sample(folder: Path, prompt: str, max_new_tokens: int, temperature: float | None, top_k: int | None,
           seed: int) -> str:  # fmt: skip
    """prompt + max_new_tokens sampled ids, decoded."""
    info = json.loads((folder / "minigpt.json").read_text(encoding="utf-8"))
    vocab, block = info["vocabulary"], info["block_size"]
    temperature = info["sampling"]["temperature"] if temperature is None else temperature
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    ids = encode(prompt, vocab) or [info["start_id"]]  # no prompt: start from a newline (not shown)
    n = len(ids)
    for _ in range(max_new_tokens):
        window = np.array([ids[-block:]], dtype=np.int64)  # (1, T), T <= block_size
        (logits,) = session.run(["logits"], {"input_ids": window})  # (1, T, vocab)
        ids.append(next_id(logits[0, -1], temperature, top_k, rng))
    return prompt + decode(ids[n:], vocab)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the folder minigpt export --format onnx wrote")
    parser.add_argument("--prompt", default="", help="text to continue")
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--temperature", type=float, default=None, help="default: minigpt.json's")
    parser.add_argument("--top-k", type=int, default=None)
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()
    text = sample(args.folder, args.prompt, args.max_new_tokens, args.temperature, args.top_k, args.seed)
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
