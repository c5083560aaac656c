"""The playground (`minigpt playground`, `Model.playground`): one self-contained HTML page with a
model's weights, its vocabulary and a JavaScript GPT and sampler; no network, no Python (docs/inside.md,
"The playground").
`minigpt explain` writes the same page opened on one prediction, explained step by step (docs/model.md)."""

from __future__ import annotations

import base64
import html
import inspect
from pathlib import Path
from typing import TYPE_CHECKING

from minigpt.config import PLAYGROUND_DTYPES
from minigpt.errors import UserError
from minigpt.inspect.pages import UNIT_WORDS, HtmlPage, check_output, render, token_label

if TYPE_CHECKING:
    from minigpt.infer.loading import LoadedModel

MAX_PAGE_BYTES = 100_000_000  # browsers parse a page this big in seconds; beyond it, use float16 or a smaller model
ASSETS_BYTES = 200_000  # the page less its weights, an upper bound for the estimate made before encoding
INLINE_LIMIT = 30_000_000  # a notebook shows a page up to this size inline; a bigger one only names its file
TIED = "lm_head.weight"  # the same tensor as wte.weight: stored once
# the model options gpt.js reads (every one that changes what the model computes)
MODEL_KEYS = (
    "n_layer n_head n_embd block_size pos_emb norm bias attn_only qk_norm mlp_act value_embeds logit_softcap".split()
)


L1, L2, L3 = (
    "lessons/01_characters_to_vectors.ipynb",
    "lessons/02_one_head_by_hand.ipynb",
    "lessons/03_heads_and_block.ipynb",
)
# the page's stages, a row for each name a tutorial uses: (stage, tutorial name, module, function, a piece
# of its code ("": the function's own line), the lesson section that computes it)
STAGES = (
    (1, "characters to ids", "model", "GPT.forward", "", f"{L1}: The tokenizer: characters to ids"),
    (2, "token embedding", "model", "GPT.embed", "self.wte(idx)", f"{L1}: The embedding table: ids to vectors"),
    (
        2,
        "positions: learned (sinusoidal, rotary: the lines after)",
        "model",
        "GPT.embed",
        "self.wpe(",
        f"{L1}: Positions",
    ),
    (3, "LayerNorm (pre or post)", "model", "Block.forward", "self.ln_1(", f"{L2}: LayerNorm"),
    (
        4,
        "queries, keys, values",
        "model",
        "CausalSelfAttention.forward",
        "self.c_attn(x)",
        f"{L2}: Queries, keys and values",
    ),
    (
        4,
        "rotary positions",
        "model",
        "CausalSelfAttention.forward",
        "apply_rope(",
        f"{L1}: Rotary: angles, not vectors",
    ),
    (
        4,
        "scores, causal mask, softmax, weighted sum",
        "model",
        "CausalSelfAttention.forward",
        "(q @ k.transpose(-2, -1)) / math.sqrt(hs)",
        f"{L2}: Scores, the causal mask, the softmax, the weighted sum",
    ),
    (
        5,
        "heads merged, output projection",
        "model",
        "CausalSelfAttention.forward",
        "self.c_proj(",
        f"{L3}: Merging the heads and the output projection",
    ),
    (
        5,
        "residual add",
        "model",
        "Block.forward",
        "x = x + self.attn",
        f"{L3}: Residual additions, the second LayerNorm and the MLP",
    ),
    (
        6,
        "feed-forward layer, GELU",
        "model",
        "MLP.forward",
        "self.c_fc(x)",
        f"{L3}: Residual additions, the second LayerNorm and the MLP",
    ),
    (7, "final LayerNorm", "model", "GPT.forward", "self.ln_f(", f"{L3}: What it predicts, and how the stream grows"),
    (
        7,
        "logits: the tied head",
        "model",
        "GPT.__init__",
        "self.lm_head.weight = self.wte.weight",
        f"{L3}: What it predicts, and how the stream grows",
    ),
    (7, "temperature, top-k, top-p", "infer.decode", "next_token_probs", "", "docs/sampling.md"),
)


def model_places() -> list[dict]:
    """Each tutorial name's place in the code, found now (the files' lines move): the file, and the line of
    the function's first line holding its piece of code (the function's own line if none does or none is
    named); its stage in the page and its lesson section."""
    import importlib

    places = []
    for stage, tutorial, module, qualname, piece, lesson in STAGES:
        function = importlib.import_module(f"minigpt.{module}")
        for attr in qualname.split("."):
            function = getattr(function, attr)
        lines, start = inspect.getsourcelines(function)
        found = next((k for k, text in enumerate(lines) if piece and piece in text and k > 0), 0)
        name = qualname + (f": {piece.rstrip('(')}" if found else "")
        file = f"minigpt/{module.replace('.', '/')}.py"
        places.append(
            {"stage": stage, "tutorial": tutorial, "name": name, "file": file, "line": start + found, "lesson": lesson}
        )
    return places


def megabytes(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


class PlaygroundPage(HtmlPage):
    """The playground page: `save(path)` writes it atomically; a notebook shows it inline."""

    path: Path | None = None

    def save(self, path: str | Path) -> Path:
        self.path = super().save(path)
        return self.path

    def _repr_html_(self) -> str:
        if len(self.html) <= INLINE_LIMIT:
            return super()._repr_html_()
        where = f" Open {html.escape(str(self.path))} in a browser." if self.path else " Save it and open the file."
        return f"<p>minigpt playground: {html.escape(self.summary)}, too big to show inline.{where}</p>"


def check_dtype(dtype: str) -> None:
    if dtype not in PLAYGROUND_DTYPES:
        raise UserError(f"--dtype {dtype!r} is not one of: {', '.join(PLAYGROUND_DTYPES)}")


def check_size(n_bytes: int, dtype: str) -> None:
    """One error line for a page past MAX_PAGE_BYTES: its size, and what makes it smaller."""
    if n_bytes <= MAX_PAGE_BYTES:
        return
    size, limit = megabytes(n_bytes), megabytes(MAX_PAGE_BYTES)
    if dtype == "float32":
        hint = f"--dtype float16 halves the weights (about {megabytes(n_bytes // 2)})"
    else:
        hint = "the model is too big for a page even in float16; train a smaller one"
    raise UserError(f"the playground page would be {size}, over the {limit} a page may hold; {hint}")


def weight_blob(loaded: LoadedModel, dtype: str) -> tuple[bytes, dict[str, list]]:
    """The weights as one little-endian buffer and the manifest {name: [offset, shape]} (offsets in numbers)."""
    import numpy as np

    numbers = np.dtype("<f4" if dtype == "float32" else "<f2")
    parts, manifest, offset = [], {}, 0
    for name, tensor in loaded.model.state_dict().items():
        if name == TIED:
            continue
        array = tensor.detach().float().cpu().numpy().astype(numbers)
        manifest[name] = [offset, list(tensor.shape)]
        offset += array.size
        parts.append(array.tobytes())
    return b"".join(parts), manifest


def page_data(loaded: LoadedModel, dtype: str) -> dict:
    """Everything the page needs, as plain data: the model's shape, the vocabulary, the weights and the run."""
    from minigpt.infer.decode import half_window
    from minigpt.model import QK_NORM_EPS

    cfg, tok, ckpt = loaded.config.model, loaded.tokenizer, loaded.checkpoint
    blob, manifest = weight_blob(loaded, dtype)
    return {
        "run": loaded.path.parent.name if loaded.path.name in ("best.pt", "last.pt") else loaded.path.stem,
        "source": str(loaded.path),
        "step": ckpt.step,
        "valLoss": ckpt.val_loss if isinstance(ckpt.val_loss, float) else None,
        "params": loaded.model.num_params(non_embedding=False),
        "model": {
            **{k: getattr(cfg, k) for k in MODEL_KEYS},
            "vocab_size": tok.vocab_size,
            "half_window": half_window(cfg.block_size),
            "qk_norm_eps": QK_NORM_EPS,
        },
        "tokenizer": tok.kind,
        "chars": list(tok.chars) if tok.kind == "char" else None,
        "labels": [token_label(tok, i) for i in range(tok.vocab_size)],
        "startId": tok.start_id,
        "dtype": dtype,
        "tensors": manifest,
        "weights": base64.b64encode(blob).decode("ascii"),
        "code": model_places(),
        "explain": None,
    }


def playground_page(loaded: LoadedModel, dtype: str = "float32", explain: dict | None = None) -> PlaygroundPage:
    """The page of `loaded`, refused with one line when it would pass MAX_PAGE_BYTES; with `explain`
    ({"text": ..., "at": token index}), it opens on that text with the prediction after `at` explained."""
    check_dtype(dtype)
    n = sum(t.numel() for name, t in loaded.model.state_dict().items() if name != TIED)
    check_size((n * (4 if dtype == "float32" else 2) * 4 + 2) // 3 + ASSETS_BYTES, dtype)  # base64: 4 chars / 3 bytes
    data = page_data(loaded, dtype) | {"explain": explain}
    title = f"explain: {data['run']}" if explain else f"playground: {data['run']}"
    page = render("playground", title, data)
    n_bytes = len(page.encode("utf-8"))
    check_size(n_bytes, dtype)
    summary = f"{megabytes(n_bytes)}, {data['params'] / 1e6:.2f}M parameters in {dtype}"
    return PlaygroundPage(page, "playground", summary, height=900)


def playground_run(target: Path, out: Path, dtype: str = "float32") -> str:
    """`minigpt playground`: OUT and --dtype checked before the model loads, then the page written;
    returns the line that says what was written and how big it is."""
    import torch

    from minigpt.infer.loading import load_model

    check_dtype(dtype)
    check_output(out, "")
    loaded = load_model(target, torch.device("cpu"))
    page = playground_page(loaded, dtype)
    page.save(out)
    return f"wrote {out}: {page.summary} (from {loaded.path})"


def explain_run(target: Path, out: Path, text: str, at: int | None = None, dtype: str = "float32") -> str:
    """`minigpt explain`: the playground page of TARGET opened on `text`, the prediction after its token
    `at` (default the last; negative counts from the end) explained step by step; returns what was written."""
    import torch

    from minigpt.data.tokenizer import checked_text
    from minigpt.infer.loading import load_model

    check_dtype(dtype)
    check_output(out, "")
    loaded = load_model(target, torch.device("cpu"))
    text = checked_text(loaded.tokenizer, text, "--text", "error")
    ids = loaded.tokenizer.encode(text)
    n = len(ids)
    index = n - 1 if at is None else at + n if at < 0 else at
    if not 0 <= index < n:
        unit = UNIT_WORDS[loaded.tokenizer.unit]
        raise UserError(f"--at {at} is outside the text's {n} {unit}; give 0..{n - 1} (or -1 for the last)")
    page = playground_page(loaded, dtype, {"text": text, "at": index})
    page.save(out)
    label = token_label(loaded.tokenizer, ids[index])  # its character (a byte model: its byte)
    return f"wrote {out}: the prediction after '{label}' (#{index}) explained; {page.summary} (from {loaded.path})"
