"""What each attention head does, measured: pattern scores on the model's own text and on a
repeated random probe, the loss each head's ablation costs, and a role (docs/inside.md defines each)."""

from __future__ import annotations

import base64
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from minigpt.errors import UserError
from minigpt.infer.windows import losses_of, spread_starts, text_windows
from minigpt.inspect.pages import MAX_PAGE_WEIGHTS, HtmlPage, render
from minigpt.model import GPT, evaluating

PATTERNS = ("previous", "duplicate", "induction", "first")
MIN_HALF = 4  # the shortest repeated half: a context of fewer than 2 * 4 tokens has no room for the probe
SEQUENCES = 8  # repeated sequences of the probe
SCORE_TOKENS = 8_192  # positions of the text the pattern scores read (spread windows, the same every time)
SCORE_CONTEXT = 256  # the longest window the pattern scores read: memory grows with its square
MAP_FLOATS = 1 << 24  # attention weights held at once while scoring (64 MB of float32): sets the batch
TEXT_POSITIONS = 200  # a pattern's text score decides the role when this many positions have a target
ROLE_MIN = 0.5  # ROLE_MIN, ROLE_MARGIN and LOCAL_DISTANCE: the rules of `head_role`
ROLE_MARGIN = 0.2
LOCAL_DISTANCE = 3.0
ABLATION_TOKENS = 65_536  # the validation sample head ablation is measured on, at most
ABLATION_FLOPS = 4e11  # ... and at most this many forward FLOPs of it: a large model reads fewer windows
EXACT_ALL_FLOPS = 1e12  # --exact auto measures every head exactly when all the reruns cost at most this
AUTO_SHARE = 0.25  # AUTO_SHARE and AUTO_EXACT: which heads --exact auto measures otherwise (`exact_choice`)
AUTO_EXACT = 6
RERUN_BATCHES = 4  # exact reruns go through the blocks this many estimate batches at a time


def repeated_tokens(
    vocab_size: int,
    block_size: int,
    byte_mode: bool = False,
    n_seq: int = SEQUENCES,
    seed: int = 0,
    freqs: np.ndarray | None = None,
) -> torch.Tensor:
    """n_seq sequences (n_seq, 2n) of n random tokens written twice, n = min(block_size, SCORE_CONTEXT) // 2,
    drawn by `freqs` (counts per token id), else uniformly (a byte model: printable ASCII)."""
    half = min(block_size, SCORE_CONTEXT) // 2
    if half < MIN_HALF:
        raise UserError(
            f"model.block_size {block_size} is too short for head patterns: the repeated sequences need at least "
            f"{2 * MIN_HALF} positions"
        )
    gen = torch.Generator().manual_seed(seed)
    if freqs is not None and np.asarray(freqs).sum() > 0:
        weights = torch.as_tensor(np.asarray(freqs, dtype=np.float64))
        first = torch.multinomial(weights, n_seq * half, replacement=True, generator=gen).view(n_seq, half)
    else:
        low, high = (32, 127) if byte_mode else (0, vocab_size)
        first = torch.randint(low, high, (n_seq, half), generator=gen)
    return torch.cat([first, first], dim=1)


def targets(tokens: torch.Tensor, prefix: int = 1) -> dict[str, torch.Tensor]:
    """Each pattern's targets (B, T, T) over sequences (B, T), row = query, column = key, as
    TransformerLens builds them; with prefix 2 an induction target needs the last two tokens to repeat."""
    B, T = tokens.shape
    same = (tokens[:, :, None] == tokens[:, None, :]).tril(-1)  # (B, T, T) earlier keys with the query's token
    induction = torch.zeros_like(same)
    induction[:, :, 1:] = same[:, :, :-1]  # one key to the right of each earlier copy
    if prefix == 2:
        induction[:, :, 1] = False  # key 1 has no token two before it
        induction[:, 1:, 2:] &= same[:, :-1, :-2]  # key s - 2 holds the token at query t - 1
    eye = torch.ones(T, T, dtype=torch.bool, device=tokens.device)
    first = torch.zeros_like(same)
    first[:, :, 0] = True
    previous = eye.tril(-1).triu(-1).expand(B, T, T)
    return {"previous": previous, "duplicate": same, "induction": induction, "first": first}


def detection_patterns(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """The 0/1 float patterns (T, T) of one sequence (T,), as TransformerLens builds them."""
    return {name: P[0].float() for name, P in targets(tokens[None]).items()}


@torch.no_grad()
def pattern_sums(weights: Iterable[tuple[torch.Tensor, torch.Tensor]], prefix: int = 1) -> dict:
    """Per query position, summed over the (attention (L, B, nh, T, T), tokens (B, T)) batches of `weights`:
    share, defined, uniform (pattern -> ...) and distance, on the CPU in float64."""
    out: dict = {"share": {}, "defined": {}, "uniform": {}, "distance": 0.0, "windows": 0}
    for A, tokens in weights:
        A = A.float()
        T = tokens.size(1)
        pos = torch.arange(T, device=A.device)
        gap = (pos[:, None] - pos[None, :]).clamp(min=0).float()  # (T, T) query - key
        for name, P in targets(tokens, prefix).items():
            Pf = P.float()
            sums = {
                "share": torch.einsum("lbhts,bts->lht", A, Pf),
                "defined": P.any(-1).float().sum(0),
                "uniform": (Pf.sum(-1) / (pos + 1)).sum(0),
            }
            for key, value in sums.items():
                value = value.cpu().double()
                out[key][name] = out[key][name] + value if name in out[key] else value
        out["distance"] = out["distance"] + torch.einsum("lbhts,ts->lht", A, gap).cpu().double()
        out["windows"] += tokens.size(0)
    return out


def pattern_scores(weights: torch.Tensor, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """The probe's scores (L, nh) of weights (L, B, nh, T, T) over sequences (B, T): each pattern's
    sum(A * P) / sum(A), as TransformerLens' detect_head, and the mean `distance` back."""
    return probe_scores(pattern_sums([(weights, tokens.to(weights.device))]))[0]


def probe_scores(sums: dict) -> tuple[dict[str, torch.Tensor], dict[str, float], dict[str, float]]:
    """From `pattern_sums` of the probe: the scores (name -> (L, nh)), a perfect head's and a uniform head's."""
    rows = sums["windows"] * sums["distance"].size(-1)
    scores = {name: (s.sum(-1) / rows).float() for name, s in sums["share"].items()}
    scores["distance"] = (sums["distance"].sum(-1) / rows).float()
    ceiling = {name: float(d.sum()) / rows for name, d in sums["defined"].items()}
    uniform = {name: float(u.sum()) / rows for name, u in sums["uniform"].items()}
    return scores, ceiling, uniform


def text_scores(sums: dict) -> tuple[dict[str, torch.Tensor], dict[str, int], dict[str, float]]:
    """From `pattern_sums` of text windows: each pattern's mean share (name -> (L, nh)) over the positions
    with a target, how many there were, and a uniform head's share; position 0 is left out."""
    scores, positions, uniform = {}, {}, {}
    for name in PATTERNS:
        n = float(sums["defined"][name][1:].sum())
        positions[name] = int(n)
        scores[name] = (sums["share"][name][..., 1:].sum(-1) / max(n, 1.0)).float()
        uniform[name] = float(sums["uniform"][name][1:].sum()) / max(n, 1.0)
    T = sums["distance"].size(-1)
    scores["distance"] = (sums["distance"][..., 1:].sum(-1) / max(sums["windows"] * (T - 1), 1)).float()
    uniform["distance"] = T / 4  # row t looks t / 2 back on average: the mean over rows 1..T-1
    return scores, positions, uniform


def _maps(model: GPT, batches: Iterable[torch.Tensor]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """(attention maps (L, B, nh, T, T), tokens (B, T)) of each batch of token windows, in eval mode."""
    with evaluating(model):
        for x in batches:
            yield model.attention_maps(x), x


def _batch(model: GPT, T: int) -> int:
    """Windows of T tokens per batch: MAP_FLOATS attention weights at most (one window at least)."""
    return max(1, MAP_FLOATS // (model.cfg.n_layer * model.cfg.n_head * T * T))


def _text_batches(model: GPT, ids: np.ndarray, table: np.ndarray | None, max_tokens: int) -> Iterator[torch.Tensor]:
    """Windows (B, T) of `ids` on the CPU, T = min(block_size, SCORE_CONTEXT): an evenly spread sample
    of max_tokens positions (a text shorter than one window is read as one)."""
    T = min(model.cfg.block_size, SCORE_CONTEXT)
    n_pred = len(ids) - 1
    if n_pred < T:
        row = np.asarray(ids[: T + 1])
        yield torch.from_numpy(table[row] if table is not None else row.astype(np.int64))[None]
        return
    starts = spread_starts(n_pred, T, max_tokens) or list(range(0, n_pred - T + 1, T))
    for x, _ in text_windows(ids, T, table, starts, _batch(model, T)):
        yield x


@dataclass
class TextScores:
    """Every head's pattern scores on windows of a text, as plain numbers (`text_scores`)."""

    scores: dict[str, list[list[float]]]
    positions: dict[str, int]
    uniform: dict[str, float]
    windows: int
    context: int
    counts: list[int] = field(default_factory=list)  # how often each token id occurs in the windows


def score_text(
    model: GPT, ids: np.ndarray, table: np.ndarray | None = None, max_tokens: int = SCORE_TOKENS
) -> TextScores:
    """Every head's pattern scores over a spread sample of `max_tokens` positions of `ids`, a bounded
    batch at a time; the model's mode is left as it was."""
    counts = torch.zeros(model.vocab_size, dtype=torch.int64)

    def counted() -> Iterator[torch.Tensor]:
        for x in _text_batches(model, ids, table, max_tokens):  # counted on the CPU (MPS's bincount is slow)
            counts.add_(torch.bincount(x.flatten(), minlength=model.vocab_size))
            yield x.to(model.device)

    sums = pattern_sums(_maps(model, counted()), prefix=2)
    scores, positions, uniform = text_scores(sums)
    return TextScores(
        {name: v.tolist() for name, v in scores.items()},
        positions,
        uniform,
        sums["windows"],
        int(sums["distance"].size(-1)),
        counts.tolist(),
    )


def evidence(scores: dict[str, float], perfect: dict[str, float], uniform: dict[str, float]) -> dict[str, float]:
    """Each pattern's lift above a uniform head as a share of a perfect head's: 0 uniform, 1 perfect."""
    return {
        name: (scores[name] - uniform[name]) / (perfect[name] - uniform[name]) if perfect[name] > uniform[name] else 0.0
        for name in PATTERNS
    }


def head_role(lift: dict[str, float], distance: float) -> str:
    """The pattern whose evidence reaches ROLE_MIN and beats every other's by ROLE_MARGIN; else local
    (fewer than LOCAL_DISTANCE positions back on average) or mixed."""
    best = max(lift, key=lift.__getitem__)
    runner_up = max(v for k, v in lift.items() if k != best)
    if lift[best] >= ROLE_MIN and lift[best] - runner_up >= ROLE_MARGIN:
        return best
    return "local" if distance < LOCAL_DISTANCE else "mixed"


@dataclass
class HeadResult:
    """One head: its scores on the text and the probe, its evidence and role, and its ablation's cost."""

    layer: int
    head: int
    scores: dict[str, float]  # on the text: a share of attention, averaged over the positions with a target
    probe: dict[str, float]  # on the repeated random probe (TransformerLens' detector)
    evidence: dict[str, float]  # per pattern: 0 a uniform head, 1 a perfect one (text, or probe where too few)
    role: str
    # loss_delta (nats), stderr over the sampled windows, exact (measured) or an estimate
    ablation: dict[str, float | bool] | None = None


@dataclass
class HeadsReport:
    """`minigpt heads`: every head, what perfect and uniform heads score, and the ablation's setting."""

    heads: list[HeadResult]
    positions: dict[str, int]  # text positions with a target, per pattern
    uniform: dict[str, float]  # a uniform head's text scores and distance (a perfect head scores 1)
    ceilings: dict[str, float]  # a perfect head's probe scores
    probe_uniform: dict[str, float]  # a uniform head's probe scores
    tokens: list[int]  # the first repeated sequence of the probe (the page draws each head's pattern over it)
    patterns: list[list[list[list[float]]]]  # (L, nh, T, T) weights of the heads over that sequence
    ablation: str  # mean, zero or none
    base_loss: float | None = None  # the sample's loss with every head in place
    ablation_tokens: int = 0  # predictions the ablation was measured over
    meta: dict = field(default_factory=dict)  # the run: source line, n_layer, n_head, block_size, text

    def to_dict(self) -> dict:
        return asdict(self)

    def head(self, layer: int, head: int) -> HeadResult:
        return self.heads[layer * self.meta["n_head"] + head]

    def rows(self, paint: Callable[[str, str], str] = lambda cell, role: cell) -> list[str]:
        """The header and one row per head: its text scores, distance, probe induction score, role (through
        `paint(cell, role)`, e.g. a colour) and ablation (exact: with a standard error; ~: an estimate)."""
        header = f"{'layer':>5} {'head':>4}  {'prev':>5} {'dup':>5} {'induct':>6} {'first':>5} {'dist':>5}  "
        header += f"{'probe ind':>9}  {'role':<9}"
        if self.base_loss is not None:
            header += f"  {'ablation (nats)':>18}"
        rows = [header]
        for h in self.heads:
            s, a = h.scores, h.ablation
            row = (
                f"{h.layer:>5} {h.head:>4}  {s['previous']:>5.2f} {s['duplicate']:>5.2f} {s['induction']:>6.2f} "
                f"{s['first']:>5.2f} {s['distance']:>5.1f}  {h.probe['induction']:>9.2f}  "
            )
            row += paint(f"{h.role:<9}", h.role)
            if a is not None:
                delta = f"{a['loss_delta']:>+8.4f}"
                row += f"   {delta} ± {a['stderr']:.4f}" if a["exact"] else f"  ~{delta}"
            rows.append(row.rstrip())
        return rows

    def __repr__(self) -> str:
        """The table of `rows`, for a notebook cell (`minigpt heads` prints it with what each column means)."""
        return "\n".join(self.rows())


@torch.no_grad()
def head_patterns(
    model: GPT, byte_mode: bool = False, freqs: np.ndarray | None = None
) -> tuple[dict[str, torch.Tensor], dict[str, float], dict[str, float], torch.Tensor, torch.Tensor]:
    """The probe: pattern scores (name -> (L, nh)) on the repeated sequences, a perfect and a
    uniform head's, the sequences (B, T) and the weights over the first one (L, nh, T, T)."""
    tokens = repeated_tokens(model.vocab_size, model.cfg.block_size, byte_mode, freqs=freqs)
    step = _batch(model, tokens.size(1))
    first: list[torch.Tensor] = []

    def maps() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        for A, x in _maps(model, (tokens[i : i + step].to(model.device) for i in range(0, len(tokens), step))):
            if not first:
                first.append(A[:, 0].float().cpu())
            yield A, x

    scores, ceiling, uniform = probe_scores(pattern_sums(maps()))
    return scores, ceiling, uniform, tokens, first[0]


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


def ablation_starts(model: GPT, n_pred: int) -> list[int]:
    """The whole windows head ablation reads: a spread sample within ABLATION_TOKENS and ABLATION_FLOPS."""
    block = model.cfg.block_size
    if n_pred < block:
        raise UserError(
            f"the ablation text has {n_pred + 1:,} tokens; it needs one whole window of "
            f"block_size + 1 = {block + 1:,} (or pass --ablation none)"
        )
    budget = max(8 * block, int(ABLATION_FLOPS / _forward_flops(model)))
    return spread_starts(n_pred, block, min(ABLATION_TOKENS, budget)) or list(range(0, n_pred - block + 1, block))


def _forward_flops(model: GPT) -> float:
    """Forward FLOPs per token of the model (a third of training's)."""
    from minigpt.runtime.mfu import flops_per_token

    return flops_per_token(model.cfg, model.vocab_size) / 3


def exact_choice(
    estimate: torch.Tensor, exact: int | str | None, candidates: Iterable[tuple[int, int]], rerun_flops: float
) -> list[tuple[int, int]]:
    """The heads (layer, head) to ablate exactly, largest estimate first: all (None or "all"), the `exact`
    largest, or "auto" (docs/inside.md: all within EXACT_ALL_FLOPS, else the top ones and every candidate)."""
    L, nh = estimate.shape
    order = sorted(np.ndindex(L, nh), key=lambda lh: -float(estimate[lh]))
    if exact in (None, "all") or (exact == "auto" and rerun_flops <= EXACT_ALL_FLOPS):
        return order
    if exact != "auto":
        return order[:exact]
    top = float(estimate.max())
    chosen = [lh for lh in order if top > 0 and float(estimate[lh]) >= AUTO_SHARE * top][:AUTO_EXACT]
    wanted = set(chosen) | set(candidates)
    return [lh for lh in order if lh in wanted]


def ablate_heads(
    model: GPT,
    ids: np.ndarray,
    table: np.ndarray | None,
    mode: str = "mean",
    exact: int | str | None = None,
    candidates: Iterable[tuple[int, int]] = (),
    batch_windows: int = 16,
) -> tuple[list[list[dict]], float, int]:
    """The rise in loss when each head's output is replaced by its mean ("mean") or zeros ("zero"):
    estimated for all, rerun exactly for `exact_choice`'s heads. Returns per layer and head
    {loss_delta, stderr, exact}, the unablated loss, and the predictions scored."""
    cfg = model.cfg
    block = cfg.block_size
    starts = ablation_starts(model, len(ids) - 1)
    batches = list(text_windows(ids, block, table, starts, batch_windows, model.device))
    estimate, mean, kept = _estimate(model, batches, mode)
    results = [
        [{"loss_delta": float(estimate[la, h]), "stderr": None, "exact": False} for h in range(cfg.n_head)]
        for la in range(cfg.n_layer)
    ]
    base = torch.cat([losses for _, losses in kept])  # (W,) each window's mean loss
    rerun = len(starts) * block * _forward_flops(model) * cfg.n_head * (cfg.n_layer + 1) / 2
    chosen = exact_choice(estimate, exact, candidates, rerun)
    groups = []  # (ids, targets, the stream entering each layer), RERUN_BATCHES batches at a time
    for i in range(0, len(batches), RERUN_BATCHES):
        part, streams = batches[i : i + RERUN_BATCHES], [k[0] for k in kept[i : i + RERUN_BATCHES]]
        layers = [torch.cat([s[layer] for s in streams]) for layer in range(cfg.n_layer)]
        groups.append((torch.cat([b[0] for b in part]), torch.cat([b[1] for b in part]), layers))
    del kept
    with torch.no_grad(), evaluating(model):
        for layer, head in chosen:
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
    """Every head's estimated loss rise (L, nh) from one forward and backward pass (docs/inside.md), the
    fill (L, nh, hs), and per batch the residual stream entering each layer and each window's loss.
    Only hs-sized sums are kept, so the fill may be the sample's mean; no float64 on the device (MPS has none)."""
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
            z = torch.stack([o.detach() for o in outs], 1).float()  # (B, L, nh, T, hs), on the device
            g = torch.stack(grads, 1).float()
            zg = (z * g).sum(-1)  # (B, L, nh, T)
            batch = {
                "z": z.sum((0, 3)),
                "g": g.sum((0, 3)),
                "zg": zg.sum((0, 3)),
                "zg2": zg.square().sum((0, 3)),
                "gzg": (g * zg[..., None]).sum((0, 3)),
                "gg": torch.einsum("blnti,blntj->lnij", g, g),
            }
            for key, value in batch.items():
                sums[key] += value.cpu().double()
            kept.append((streams, losses.detach().mean(1).cpu()))
    n = sum(y.numel() for _, y in batches)
    fill = sums["z"] / n if mode == "mean" else torch.zeros_like(sums["z"])  # (L, nh, hs)
    first = (fill * sums["g"]).sum(-1) - sums["zg"]  # sum of d_t
    second = torch.einsum("lni,lnij,lnj->ln", fill, sums["gg"], fill) - 2 * (fill * sums["gzg"]).sum(-1) + sums["zg2"]
    return ((first + second / 2) / n).float(), fill.float(), kept


def analyze_heads(
    model: GPT,
    ids: np.ndarray,
    table: np.ndarray | None = None,
    byte_mode: bool = False,
    ablation: str = "mean",
    exact: int | str | None = None,
    meta: dict | None = None,
) -> HeadsReport:
    """Every head's pattern scores on the text `ids` and on the probe, its role, and, unless `ablation`
    is "none", the loss its ablation costs on `ids`."""
    L, nh = model.cfg.n_layer, model.cfg.n_head
    text = score_text(model, ids, table)
    probe, ceiling, uniform, tokens, first = head_patterns(model, byte_mode, np.asarray(text.counts))
    heads = []
    for layer in range(L):
        for head in range(nh):
            s = {name: v[layer][head] for name, v in text.scores.items()}
            p = {name: float(v[layer, head]) for name, v in probe.items()}
            on_text, on_probe = evidence(s, dict.fromkeys(PATTERNS, 1.0), text.uniform), evidence(p, ceiling, uniform)
            # the text's evidence where it has enough positions with a target, else the probe's
            lift = {name: (on_text if text.positions[name] >= TEXT_POSITIONS else on_probe)[name] for name in PATTERNS}
            heads.append(HeadResult(layer, head, s, p, lift, head_role(lift, s["distance"])))
    deltas, base, n_tok = None, None, 0
    if ablation != "none":
        candidates = [(h.layer, h.head) for h in heads if max(h.evidence.values()) >= ROLE_MIN]
        deltas, base, n_tok = ablate_heads(model, ids, table, ablation, exact, candidates)
        for h in heads:
            h.ablation = deltas[h.layer][h.head]
    patterns = first.numpy().round(4).tolist()  # (L, nh, T, T)
    info = {"n_layer": L, "n_head": nh, "block_size": model.cfg.block_size, "windows": text.windows, **(meta or {})}
    info["context"] = text.context
    probe_part = {"ceilings": ceiling, "probe_uniform": uniform, "tokens": tokens[0].tolist(), "patterns": patterns}
    ablated = {"ablation": ablation, "base_loss": base, "ablation_tokens": n_tok}
    return HeadsReport(heads, text.positions, text.uniform, **probe_part, **ablated, meta=info)


def heads_of(
    loaded, data=None, ablation: str = "mean", exact: int | str | None = "auto", text: str | None = None
) -> HeadsReport:
    """`minigpt heads` on a loaded model: every head measured on the run's validation split (or all
    of `data`, or the string `text`)."""
    from minigpt.infer.evaluate import eval_ids_for
    from minigpt.infer.loading import source_line
    from minigpt.inspect.pages import token_label

    model = loaded.model.float()
    if text is not None:
        if data is not None:
            raise UserError("give --data or --text, not both")
        from minigpt.data.tokenizer import checked_text

        ids = np.asarray(loaded.tokenizer.encode(checked_text(loaded.tokenizer, text, "--text")), dtype=np.int64)
        table, label = None, f"--text ({len(ids):,} {loaded.tokenizer.unit}s)"
    else:
        ids, table, label = eval_ids_for(loaded, str(data) if data is not None else None)
    if len(ids) < 2:  # a head's patterns need a query with a key before it
        what = "--text" if text is not None else label
        raise UserError(f"{what} has {len(ids)} {loaded.tokenizer.unit}; heads needs a text of 2 or more")
    meta = {"source": source_line(loaded), "text": label, "ablation_text": label, "unit": loaded.tokenizer.unit}
    report = analyze_heads(model, ids, table, loaded.tokenizer.kind == "byte", ablation, exact, meta)
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


# ---- the page (`minigpt heads --html`): a grid (layers x heads) of each head's role, pattern scores on the text
# and attention over the repeated probe; one head's pattern large; the loss each head's ablation costs. Built
# from a HeadsReport's plain numbers; the page itself is web/heads_page.html and heads_page.js.

MAX_SIDE = 256  # positions a pattern shows per side: the large view is ~400 px, finer detail would not show


def heads_page(report: HeadsReport, labels: list[str] | None = None) -> HtmlPage:
    """The page of `report`; `labels` (one string per token of `report.tokens`, e.g. `pages.token_label`)
    lets it show the sequence's characters, else it shows positions only."""
    meta = report.meta
    n_layer, n_head = meta["n_layer"], meta["n_head"]
    T = len(report.tokens)
    if labels is not None and len(labels) != T:
        raise ValueError(f"labels has {len(labels)} entries; the report's sequence has {T} tokens")
    pool, weights = pooled_patterns(report.patterns, T)
    data = {
        "source": meta.get("source", ""),
        "unit": meta.get("unit", "char"),
        "nLayer": n_layer,
        "nHead": n_head,
        "tokens": report.tokens,
        "labels": labels,
        "ceilings": report.ceilings,  # the probe's
        "probeUniform": report.probe_uniform,
        "uniform": report.uniform,  # the text's (a perfect head scores 1 there)
        "positions": report.positions,
        "text": meta.get("text", ""),
        "windows": meta.get("windows", 0),
        "context": meta.get("context", 0),
        "heads": [asdict(h) for h in report.heads],  # layer, head, scores, probe, evidence, role, ablation
        "ablation": report.ablation,
        "baseLoss": report.base_loss,
        "ablationTokens": report.ablation_tokens,
        "ablationText": meta.get("ablation_text", ""),
        "blockSize": meta.get("block_size"),
        "roleMin": ROLE_MIN,
        "textPositions": TEXT_POSITIONS,
        "roleMargin": ROLE_MARGIN,
        "localDistance": LOCAL_DISTANCE,
        "pool": pool,  # each pixel of a pattern: the largest weight over pool x pool (query, key) pairs
        "side": weights.shape[-1],
        "weights": base64.b64encode(weights.tobytes()).decode("ascii"),  # (L, nh, side, side), weight x 255
    }
    roles = Counter(h.role for h in report.heads)
    shown = ", ".join(f"{n} {role}" for role, n in roles.most_common())
    ablation = (
        f"; {report.ablation} ablation on {report.ablation_tokens:,} predictions"
        if report.base_loss is not None
        else "; no ablation"
    )
    summary = f"{len(report.heads)} heads ({n_layer} layers x {n_head}): {shown}{ablation}"
    title = f"heads: {n_layer} layers x {n_head} heads"
    return HtmlPage(render("heads_page", title, data), "heads", summary, height=980)


def pooled_patterns(patterns: list, T: int) -> tuple[int, np.ndarray]:
    """The weights (L, nh, T, T) as bytes (weight x 255, rounded), max-pooled over pool x pool blocks
    when T is past MAX_SIDE or the page would hold more than MAX_PAGE_WEIGHTS of them: a stripe
    one position wide stays visible, where a mean would fade it."""
    w = np.asarray(patterns, dtype=np.float32).reshape(-1, T, T)  # (L * nh, T, T)
    pool = 1
    while math.ceil(T / pool) > MAX_SIDE or w.shape[0] * math.ceil(T / pool) ** 2 > MAX_PAGE_WEIGHTS:
        pool += 1
    if pool > 1:
        side = math.ceil(T / pool)
        padded = np.zeros((w.shape[0], side * pool, side * pool), dtype=np.float32)
        padded[:, :T, :T] = w
        w = padded.reshape(w.shape[0], side, pool, side, pool).max(axis=(2, 4))
    return pool, np.rint(np.clip(w, 0.0, 1.0) * 255).astype(np.uint8)
