"""What each attention head does, measured: pattern scores on repeated random sequences, the loss
each head's removal costs (ablation), and a role where one pattern clearly dominates.

Pattern scores follow TransformerLens' head detector: for a detection pattern P (T, T) of 0s and
1s and a head's attention A (T, T), score = sum(A * P) / sum(A), averaged over the sequences.
The sequences are n random tokens repeated twice (T = 2n <= block_size), so a head can only be
as good as the rows that have a target allow; `ceilings` gives that best score and roles compare
each score with it (docs/heads.md)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from minigpt.errors import UserError
from minigpt.infer.windows import losses_of, spread_starts, text_windows
from minigpt.model import GPT, evaluating

PATTERNS = ("previous", "duplicate", "induction", "first")
MIN_HALF = 4  # the shortest repeated half: a context of fewer than 2 * 4 tokens has no room for the test
SEQUENCES = 8  # repeated sequences averaged over
# roles: a pattern's score relative to its ceiling (the perfect head's score) must reach ROLE_MIN and
# beat every other pattern's by ROLE_MARGIN; a head with none but a short mean reach is local
ROLE_MIN = 0.5
ROLE_MARGIN = 0.2
LOCAL_DISTANCE = 3.0
ROLE_NAMES = {"previous": "previous", "duplicate": "duplicate", "induction": "induction", "first": "first"}
ABLATION_TOKENS = 65_536  # the validation sample head ablation is measured on
# --exact auto: exact ablation for the heads whose estimate is at least AUTO_SHARE of the largest, at most AUTO_EXACT
AUTO_SHARE = 0.25
AUTO_EXACT = 6
RERUN_BATCHES = 4  # exact reruns go through the blocks this many estimate batches at a time


def repeated_tokens(
    vocab_size: int, block_size: int, byte_mode: bool = False, n_seq: int = SEQUENCES, seed: int = 0
) -> torch.Tensor:
    """n_seq sequences (n_seq, 2n) of n random tokens followed by the same n again, n = block_size // 2.
    A byte model draws printable ASCII bytes (the other byte values rarely occur in text)."""
    half = block_size // 2
    if half < MIN_HALF:
        raise UserError(
            f"model.block_size {block_size} is too short for head patterns: the repeated sequences need at least "
            f"{2 * MIN_HALF} positions"
        )
    gen = torch.Generator().manual_seed(seed)
    low, high = (32, 127) if byte_mode else (0, vocab_size)
    first = torch.randint(low, high, (n_seq, half), generator=gen)
    return torch.cat([first, first], dim=1)


def detection_patterns(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """The 0/1 patterns (T, T) of one sequence (T,), row = query, column = key, as TransformerLens
    builds them: previous (key t-1), duplicate (an earlier key with the query's token), induction
    (the key right after such an earlier copy), first (key 0)."""
    T = tokens.numel()
    same = (tokens[:, None] == tokens[None, :]).float().tril(-1)  # (T, T): earlier keys with the query's token
    induction = torch.zeros(T, T)
    induction[:, 1:] = same[:, :-1]  # one key to the right of each earlier copy
    first = torch.zeros(T, T)
    first[:, 0] = 1.0
    return {
        "previous": torch.diag(torch.ones(T - 1), -1),
        "duplicate": same,
        "induction": induction.tril(),
        "first": first,
    }


def pattern_scores(weights: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Scores (L, nh) of attention weights (L, B, nh, T, T) over token sequences (B, T): each
    pattern's sum(A * P) / sum(A) averaged over the sequences, and `distance`, the mean number of
    positions between a query and the keys it attends to."""
    weights = weights.float().cpu()
    out: dict[str, list[torch.Tensor]] = {name: [] for name in (*PATTERNS, "distance")}
    T = tokens.size(1)
    gap = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).clamp(min=0).float()  # (T, T) query - key
    for b in range(tokens.size(0)):
        A = weights[:, b]  # (L, nh, T, T)
        total = A.sum(dim=(-2, -1))
        for name, P in detection_patterns(tokens[b]).items():
            out[name].append((A * P).sum(dim=(-2, -1)) / total)
        out["distance"].append((A * gap).sum(dim=(-2, -1)) / total)
    return {name: torch.stack(v).mean(0) for name, v in out.items()}


def ceilings(tokens: torch.Tensor) -> dict[str, float]:
    """What a perfect head scores on these sequences (B, T): the share of query rows that have a
    target (a head can put all its weight on targets only there), averaged over the sequences."""
    T = tokens.size(1)
    rows: dict[str, list[float]] = {name: [] for name in PATTERNS}
    for b in range(tokens.size(0)):
        for name, P in detection_patterns(tokens[b]).items():
            rows[name].append(float((P.sum(-1) > 0).sum()) / T)
    return {name: sum(v) / len(v) for name, v in rows.items()}


def head_role(scores: dict[str, float], ceiling: dict[str, float]) -> str:
    """previous, duplicate, induction or first when that pattern's score reaches ROLE_MIN of its
    ceiling and beats every other pattern's relative score by ROLE_MARGIN; else local when the head
    looks on average fewer than LOCAL_DISTANCE positions back; else mixed."""
    rel = {name: scores[name] / ceiling[name] if ceiling[name] else 0.0 for name in PATTERNS}
    best = max(rel, key=rel.__getitem__)
    runner_up = max(v for k, v in rel.items() if k != best)
    if rel[best] >= ROLE_MIN and rel[best] - runner_up >= ROLE_MARGIN:
        return ROLE_NAMES[best]
    return "local" if scores["distance"] < LOCAL_DISTANCE else "mixed"


@dataclass
class HeadResult:
    """One head: its pattern scores, its role, and the validation loss its ablation costs."""

    layer: int
    head: int
    scores: dict[str, float]
    role: str
    # loss_delta (nats), stderr over the sampled windows, exact (measured) or an attribution estimate
    ablation: dict[str, float | bool] | None = None


@dataclass
class HeadsReport:
    """`minigpt heads`: every head, what a perfect head would score, and the ablation's setting."""

    heads: list[HeadResult]
    ceilings: dict[str, float]
    tokens: list[int]  # the first repeated sequence (the page draws each head's pattern over it)
    patterns: list[list[list[list[float]]]]  # (L, nh, T, T) weights of the heads over that sequence
    ablation: str  # mean, zero or none
    base_loss: float | None = None  # the sample's loss with every head in place
    ablation_tokens: int = 0  # predictions the ablation was measured over
    meta: dict = field(default_factory=dict)  # the run: source line, n_layer, n_head, block_size

    def to_dict(self) -> dict:
        return asdict(self)

    def head(self, layer: int, head: int) -> HeadResult:
        return self.heads[layer * self.meta["n_head"] + head]


@torch.no_grad()
def head_patterns(
    model: GPT, byte_mode: bool = False
) -> tuple[dict[str, torch.Tensor], dict[str, float], torch.Tensor, torch.Tensor]:
    """Pattern scores (name -> (L, nh)) on the repeated sequences, their ceilings, the sequences
    (B, T) and the weights over them (L, B, nh, T, T)."""
    tokens = repeated_tokens(model.vocab_size, model.cfg.block_size, byte_mode)
    with evaluating(model):
        weights = model.attention_maps(tokens.to(model.device))
    return pattern_scores(weights, tokens), ceilings(tokens), tokens, weights


@contextmanager
def _heads_edited(model: GPT, edits: dict[int, object]) -> Iterator[None]:
    """Each layer l in `edits` passes its heads' output through edits[l] while inside (a hook on its `head_out`)."""
    hooks = [
        model.blocks[la].attn.head_out.register_forward_hook(lambda _m, _x, y, f=f: f(y)) for la, f in edits.items()
    ]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def ablate_heads(
    model: GPT,
    ids: np.ndarray,
    table: np.ndarray | None,
    mode: str = "mean",
    exact: int | str | None = None,
    max_tokens: int = ABLATION_TOKENS,
    batch_windows: int = 16,
) -> tuple[list[list[dict]], float, int]:
    """The rise in loss when each head's output is replaced by its mean over the sample (mode
    "mean") or by zeros ("zero"), on an evenly spread sample of whole windows of `ids`.

    One forward and backward pass estimates every head's rise (`_estimate`). Exact ablation then
    reruns the blocks from the head's layer up, starting from the kept residual stream, for the
    `exact` heads with the largest estimates (all when None; "auto": those whose estimate is at
    least AUTO_SHARE of the largest, at most AUTO_EXACT). Returns per layer and head
    {loss_delta, stderr, exact} (stderr over the sampled windows; None for an estimate), the
    unablated loss, and the predictions scored."""
    cfg = model.cfg
    n_pred = len(ids) - 1
    if n_pred < cfg.block_size:
        raise UserError(
            f"the ablation text has {n_pred + 1:,} tokens; it needs one whole window of "
            f"block_size + 1 = {cfg.block_size + 1:,}"
        )
    block = cfg.block_size
    starts = spread_starts(n_pred, block, max_tokens) or list(range(0, n_pred - block + 1, block))
    batches = list(text_windows(ids, block, table, starts, batch_windows, model.device))
    estimate, mean, kept = _estimate(model, batches, mode)
    results = [
        [{"loss_delta": float(estimate[la, h]), "stderr": None, "exact": False} for h in range(cfg.n_head)]
        for la in range(cfg.n_layer)
    ]
    base = torch.cat([losses for _, losses in kept])  # (W,) each window's mean loss
    order = sorted(np.ndindex(cfg.n_layer, cfg.n_head), key=lambda lh: -float(estimate[lh]))
    if exact == "auto":
        top = float(estimate.max())
        exact = min(AUTO_EXACT, sum(float(estimate[lh]) >= AUTO_SHARE * top for lh in order)) if top > 0 else 0
    groups = []  # (ids, targets, the stream entering each layer), RERUN_BATCHES batches at a time
    for i in range(0, len(batches), RERUN_BATCHES):
        part, streams = batches[i : i + RERUN_BATCHES], [k[0] for k in kept[i : i + RERUN_BATCHES]]
        layers = [torch.cat([s[layer] for s in streams]) for layer in range(cfg.n_layer)]
        groups.append((torch.cat([b[0] for b in part]), torch.cat([b[1] for b in part]), layers))
    del kept
    with torch.no_grad(), evaluating(model):
        for layer, head in order if exact is None else order[:exact]:
            fill = mean[layer, head].to(model.dtype).to(model.device)

            def replace(out: torch.Tensor, head: int = head, fill: torch.Tensor = fill) -> torch.Tensor:
                out = out.clone()
                out[:, head] = fill
                return out

            rises = []
            with _heads_edited(model, {layer: replace}):
                for idx, y, streams in groups:
                    _, rope = model.embed(idx)
                    x = model.run_blocks(streams[layer], idx, rope, layer)
                    rises.append(losses_of(model.logits(x), y).mean(1).cpu())
            deltas = torch.cat(rises).double() - base.double()
            stderr = float(deltas.std() / math.sqrt(len(deltas))) if len(deltas) > 1 else 0.0
            results[layer][head] = {"loss_delta": float(deltas.mean()), "stderr": stderr, "exact": True}
    return results, float(base.mean()), len(starts) * block


def _estimate(
    model: GPT, batches: list[tuple[torch.Tensor, torch.Tensor]], mode: str
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[list[torch.Tensor], torch.Tensor]]]:
    """Every head's estimated loss rise (L, nh) from one forward and backward pass, the fill each
    head's output is replaced by (L, nh, hs), and per batch the residual stream entering each
    layer and each window's loss.

    With d_t = (m - z_t) . dL/dz_t at each position t (z the head's output, m its fill, L the
    summed loss), the estimate is the mean of d_t + d_t^2 / 2: attribution patching's first-order
    term, which nearly vanishes in a trained model, plus a Gauss-Newton-like second-order one
    (docs/heads.md measures how well it ranks heads against exact ablation). Expanding the square
    keeps only sums of hs-sized terms, so the fill m may be the sample's mean, known at the end."""
    cfg = model.cfg
    L, nh, hs = cfg.n_layer, cfg.n_head, cfg.n_embd // cfg.n_head
    sums = {
        "z": torch.zeros(L, nh, hs, dtype=torch.float64),  # sum of z
        "g": torch.zeros(L, nh, hs, dtype=torch.float64),  # sum of g
        "zg": torch.zeros(L, nh, dtype=torch.float64),  # sum of z.g
        "zg2": torch.zeros(L, nh, dtype=torch.float64),  # sum of (z.g)^2
        "gzg": torch.zeros(L, nh, hs, dtype=torch.float64),  # sum of g (z.g)
        "gg": torch.zeros(L, nh, hs, hs, dtype=torch.float64),  # sum of g g^T
    }
    kept = []
    with evaluating(model):
        for idx, y in batches:
            outs: list[torch.Tensor] = []

            def keep(z: torch.Tensor, outs: list[torch.Tensor] = outs) -> torch.Tensor:
                outs.append(z)
                return z

            with torch.enable_grad(), _heads_edited(model, dict.fromkeys(range(L), keep)):
                x, rope = model.embed(idx)
                x = x.detach().requires_grad_()
                streams = []
                for layer in range(L):
                    streams.append(x.detach())
                    x = model.run_blocks(x, idx, rope, layer, layer + 1)
                losses = losses_of(model.logits(x), y)  # (B, T)
                grads = torch.autograd.grad(losses.sum(), outs)
            z = torch.stack([o.detach() for o in outs], 1).double().cpu()  # (B, L, nh, T, hs)
            g = torch.stack(grads, 1).double().cpu()
            zg = (z * g).sum(-1)  # (B, L, nh, T)
            sums["z"] += z.sum((0, 3))
            sums["g"] += g.sum((0, 3))
            sums["zg"] += zg.sum((0, 3))
            sums["zg2"] += zg.square().sum((0, 3))
            sums["gzg"] += (g * zg[..., None]).sum((0, 3))
            sums["gg"] += torch.einsum("blnti,blntj->lnij", g, g)
            kept.append((streams, losses.detach().mean(1).cpu()))
    n = sum(y.numel() for _, y in batches)
    fill = sums["z"] / n if mode == "mean" else torch.zeros_like(sums["z"])  # (L, nh, hs)
    first = (fill * sums["g"]).sum(-1) - sums["zg"]  # sum of d_t
    second = torch.einsum("lni,lnij,lnj->ln", fill, sums["gg"], fill) - 2 * (fill * sums["gzg"]).sum(-1) + sums["zg2"]
    return ((first + second / 2) / n).float(), fill.float(), kept


def analyze_heads(
    model: GPT,
    byte_mode: bool = False,
    ids: np.ndarray | None = None,
    table: np.ndarray | None = None,
    ablation: str = "mean",
    exact: int | str | None = None,
    meta: dict | None = None,
) -> HeadsReport:
    """Every head's pattern scores and role, and, given validation `ids` and an ablation mode, the
    loss its ablation costs (exact for the `exact` heads the estimates rank highest, all when None)."""
    scores, ceiling, tokens, weights = head_patterns(model, byte_mode)
    L, nh = model.cfg.n_layer, model.cfg.n_head
    deltas, base, n_tok = None, None, 0
    if ids is not None and ablation != "none":
        deltas, base, n_tok = ablate_heads(model, ids, table, ablation, exact)
    heads = []
    for layer in range(L):
        for head in range(nh):
            s = {name: float(v[layer, head]) for name, v in scores.items()}
            heads.append(HeadResult(layer, head, s, head_role(s, ceiling), deltas[layer][head] if deltas else None))
    patterns = weights[:, 0].float().cpu().numpy().round(4).tolist()  # (L, nh, T, T)
    info = {"n_layer": L, "n_head": nh, "block_size": model.cfg.block_size, **(meta or {})}
    return HeadsReport(heads, ceiling, tokens[0].tolist(), patterns, ablation, base, n_tok, info)


def heads_of(loaded, data=None, ablation: str = "mean", exact: int | str | None = "auto") -> HeadsReport:
    """`minigpt heads` on a loaded model: every head measured, ablations on the run's validation
    split (or all of `data`). exact: "auto" (see ablate_heads), a number of heads, or None for all."""
    from minigpt.infer.evaluate import eval_ids_for
    from minigpt.infer.loading import source_line
    from minigpt.inspect.pages import token_label

    model = loaded.model.float()
    ids = table = None
    label = ""
    if ablation != "none":
        ids, table, label = eval_ids_for(loaded, str(data) if data is not None else None)
    meta = {"source": source_line(loaded), "ablation_text": label, "unit": loaded.tokenizer.unit}
    report = analyze_heads(model, loaded.tokenizer.kind == "byte", ids, table, ablation, exact, meta)
    report.meta["labels"] = [token_label(loaded.tokenizer, i) for i in report.tokens]  # how the page shows them
    return report


def draw_loss_by_position(curve: np.ndarray, late: int, early: int, path, title: str) -> None:
    """The mean loss at each context position, with the two positions of the ICL score marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    pos = np.arange(1, len(curve) + 1)
    ax.plot(pos, curve, color="#4e79a7")
    for t, name in ((early, "early"), (late, "late")):
        ax.axvline(t + 1, color="#e15759", lw=0.8, ls="--")
        ax.annotate(f"{name}: {curve[t]:.3f}", (t + 1, curve[t]), textcoords="offset points", xytext=(4, 8), fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("position in the context (characters seen + 1), log scale")
    ax.set_ylabel("mean loss (nats)")
    ax.set_title(f"ICL score {curve[late] - curve[early]:+.3f} nats\n{title}", fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
