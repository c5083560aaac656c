"""The advisor's lines before a run, and `--auto`, which sizes a run for `train.max_time` (docs/training.md)."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace

import torch

from minigpt.config.fields import parse_duration
from minigpt.config.schema import Config, ModelConfig, keys_with
from minigpt.data.corpus import Corpus
from minigpt.data.tokenizer import Tokenizer
from minigpt.errors import UserError
from minigpt.model import GPT, parameter_count
from minigpt.runtime.cores import allowed_cores
from minigpt.runtime.device import autocast, enable_fast_matmul, log, synchronize
from minigpt.runtime.mfu import flops_per_token
from minigpt.training.loop import Step, optimizer_step
from minigpt.training.optim import build_optimizer

# (n_layer, n_embd, n_head, block_size, batch_size), smallest first; the anchor is configs/cpu_4min.yaml's
# shape before issue 66 widened it, and 3 x 192 at context 256 is what a 2-core AMX host picks for that
# recipe's four minutes (at 2,600 steps it beat 3 x 192 at context 128, docs/lab/benchmarks.md)
LADDER = (
    (2, 64, 4, 64, 16),
    (2, 96, 4, 128, 16),
    (3, 96, 4, 128, 16),
    (3, 128, 4, 128, 16),
    (3, 192, 6, 256, 8),
    (4, 256, 8, 128, 16),
    (6, 256, 8, 256, 32),
    (6, 384, 6, 256, 64),
    (8, 512, 8, 256, 64),
    (12, 768, 12, 256, 64),
)
ANCHOR = LADDER[3]
TOKENS_PER_PARAM = 4  # the largest rung that sees this many tokens per block parameter (docs/training.md)
DROPOUT_PASSES = ((30, 0.2), (10, 0.1))  # more passes over the text than this: this dropout
EVAL_SECONDS = 15  # an evaluation per this much of the budget, 3 to 10 a run
FINAL_EVAL_SHARE = 0.04  # of the budget kept for the final evaluation and exit
SHAPE_KEYS = (  # what a step's time depends on
    "model.n_layer",
    "model.n_embd",
    "model.n_head",
    "model.block_size",
    "model.dropout",
    "train.batch_size",
)
AUTO_KEYS = keys_with("auto")  # every key choose() sets


def block_params(m: ModelConfig) -> int:
    """The transformer blocks' weights: what scaling rules count (embeddings are a small table here)."""
    return parameter_count(m, 0)


def model_of(rung: tuple[int, int, int, int, int], base: ModelConfig) -> ModelConfig:
    layers, width, heads, block, _ = rung
    return ModelConfig(**{**base.__dict__, "n_layer": layers, "n_embd": width, "n_head": heads, "block_size": block})


PROBE = (LADDER[0], LADDER[3], LADDER[5])  # a small, the anchor and a large shape, 0.1x to 6x its work


@dataclass(frozen=True)
class Probe:
    """Measured seconds a step of each PROBE shape, by FLOPs; other shapes interpolate on log-log axes."""

    points: tuple[tuple[float, float], ...]  # (FLOPs a step, seconds a step), by FLOPs
    anchor_step_s: float
    dropout_cost: float = 1.0  # a step with dropout over one without, at the anchor (~2 on a CPU, docs/training.md)

    def step_seconds(self, m: ModelConfig, vocab: int, batch: int) -> float:
        flops, pts = step_flops(m, vocab, batch), self.points
        i = 1 if flops <= pts[1][0] else len(pts) - 1  # the segment it falls in (or the end one beyond)
        (f0, t0), (f1, t1) = pts[i - 1], pts[i]
        slope = math.log(t1 / t0) / math.log(f1 / f0)
        return t0 * (flops / f0) ** slope


def step_flops(m: ModelConfig, vocab: int, batch: int) -> float:
    return flops_per_token(m, vocab) * m.block_size * batch


RECIPE = Config().replace(**{"optim.optimizer": "muon"})  # the optimizer --auto trains with


def time_steps(
    m: ModelConfig,
    vocab: int,
    batch: int,
    device: torch.device,
    dtype: torch.dtype,
    seconds: float,
    recipe: Config = RECIPE,
) -> float:
    """Median seconds of an optimizer step of a shape on random ids, over about `seconds` after two warm-ups."""
    torch.manual_seed(0)
    enable_fast_matmul(device)  # TF32 on, as the trainer will train
    model = GPT(m, vocab).to(device)
    cfg = replace(recipe, model=m, train=replace(recipe.train, batch_size=batch, grad_accum_steps=1))
    window = torch.randint(vocab, (batch, m.block_size + 1), device=device)
    step = Step(
        model=model,
        train_model=model,
        optimizer=build_optimizer(model, cfg, device, dtype),
        next_batch=lambda: (window[:, :-1], window[:, 1:]),
        ctx=autocast(device, dtype),
        scaler=torch.amp.GradScaler(device.type, enabled=False),
        accum=1,
        grad_clip=cfg.optim.grad_clip,
    )
    times: list[float] = []
    end, warm_up = 0.0, 2
    while warm_up or len(times) < 3 or time.perf_counter() < end:
        start = time.perf_counter()
        optimizer_step(step, recipe.optim.lr)  # the trainer's own step
        synchronize(device)
        if warm_up:
            warm_up -= 1
            end = time.perf_counter() + seconds
        else:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def probe(cfg: Config, vocab: int, device: torch.device, dtype: torch.dtype, seconds: float = 0.4) -> Probe:
    """Time the PROBE shapes for about `seconds` each, and the anchor once more with dropout."""
    points = []
    for rung in PROBE:
        m = model_of(rung, cfg.model)
        points.append((step_flops(m, vocab, rung[4]), time_steps(m, vocab, rung[4], device, dtype, seconds)))
    dropped = replace(model_of(ANCHOR, cfg.model), dropout=0.1)
    with_dropout = time_steps(dropped, vocab, ANCHOR[4], device, dtype, seconds)
    return Probe(tuple(points), points[1][1], max(with_dropout / points[1][1], 1.0))


def budget_steps(
    cfg: Config, vocab: int, device: torch.device, dtype: torch.dtype, started: float, processes: int = 1
) -> int | None:
    """The steps train.max_time leaves room for, from a timed step of one of `processes`' share of the
    batch (CPU processes share the cores: the whole batch); None without a budget or compiled."""
    t = cfg.train
    if not t.max_time or t.compile:
        return None
    rows = t.batch_size // t.grad_accum_steps // (processes if device.type != "cpu" else 1)
    step_s = t.grad_accum_steps * time_steps(cfg.model, vocab, rows, device, dtype, 0.3, cfg)
    left = (parse_duration(str(t.max_time)) or 0.0) - (time.perf_counter() - started)
    return max(int(left * (1 - FINAL_EVAL_SHARE) / step_s), 1)


@dataclass(frozen=True)
class Choice:
    values: dict[str, object]  # the keys --auto sets (explicit keys left out)
    steps: int  # the steps the budget is expected to allow
    why: str


@dataclass(frozen=True)
class Candidate:
    rung: tuple[int, int, int, int, int]
    model: ModelConfig
    steps: int
    tokens: int
    passes: float
    turn: int  # the step where val loss is expected to stop falling


def candidates(cfg: Config, vocab: int, train_tokens: int, val_tokens: int, budget: float, speed: Probe) -> list:
    """Each LADDER rung the text has room for, its steps in the budget, dropout where it would overfit."""
    out = []
    for rung in LADDER:
        m = model_of(rung, cfg.model)
        if m.block_size > min(train_tokens // 8, val_tokens - 2):
            break  # the text holds too few windows of this context
        m = replace(m, dropout=0.0)
        steps = max(int(budget / speed.step_seconds(m, vocab, rung[4])), 1)
        if turn_step(m, rung[4], train_tokens) < steps / speed.dropout_cost:
            steps = max(int(steps / speed.dropout_cost), 1)
            passes = steps * m.block_size * rung[4] / max(train_tokens, 1)
            m = replace(m, dropout=next((p for over, p in DROPOUT_PASSES if passes > over), DROPOUT_PASSES[-1][1]))
        tokens = steps * m.block_size * rung[4]
        out.append(
            Candidate(rung, m, steps, tokens, tokens / max(train_tokens, 1), turn_step(m, rung[4], train_tokens))
        )
    return out


def choose(cfg: Config, vocab: int, train_tokens: int, val_tokens: int, budget_s: float, speed: Probe) -> Choice:
    """The config for `budget_s` seconds: the largest rung seeing TOKENS_PER_PARAM, patience if it overfits."""
    found = candidates(cfg, vocab, train_tokens, val_tokens, budget_s * (1 - FINAL_EVAL_SHARE), speed)
    if not found:
        raise ValueError("no rung fits")  # the caller checked the text's length for the smallest context
    c = ([c for c in found if c.tokens >= TOKENS_PER_PARAM * block_params(c.model)] or found[:1])[-1]
    lasting = c.turn >= c.steps
    evals = min(10, max(3, int(budget_s // EVAL_SECONDS)))  # each costs about a second: few in a short run
    values: dict[str, object] = {
        "model.n_layer": c.rung[0],
        "model.n_embd": c.rung[1],
        "model.n_head": c.rung[2],
        "model.block_size": c.rung[3],
        "model.dropout": c.model.dropout,
        "train.batch_size": c.rung[4],
        "train.max_steps": max(10 * c.steps, 1000),  # a cap only: the run ends at train.max_time
        "train.eval_interval": max(50, round(min(c.steps, c.turn) / evals, -1)),
        "train.patience": 0 if lasting else 3,
        "optim.optimizer": "muon",
        "optim.lr": 1e-3,
        "optim.min_lr": 1e-5,
        "optim.muon_lr": 0.02,
        "optim.warmup_steps": min(50, max(c.steps // 20, 1)),
        "optim.schedule": "cosine",
        "optim.schedule_by": "time",
        "optim.beta2": 0.99,
        "optim.weight_decay": 0.1,
        "optim.muon_weight_decay": 0.1,
        "log.attention_probe": "",  # its images cost ~0.5 s an eval; `minigpt attention` draws them after
    }
    n = block_params(c.model)
    why = (
        f"{c.rung[0]} x {c.rung[1]} ({n / 1e6:.2f}M block parameters), context {c.rung[3]}, batch {c.rung[4]}"
        + (f", dropout {c.model.dropout}" if c.model.dropout else "")
        + f": ~{c.steps:,} steps in {budget_s:.0f} s here, {per_block_parameter(c.tokens, n, 'token')}, "
        f"{c.passes:.1f} passes over the text"
        + ("" if lasting else f"; the text is small for the time: patience stops it near step {c.turn:,}")
    )
    return Choice(values, c.steps, why)


# val loss turns after OVERFIT_PASSES * sqrt(tokens per block parameter) * (1 + DROPOUT_GAIN * dropout) passes
OVERFIT_PASSES = 20.0
DROPOUT_GAIN = 20.0
SHORT_DOCUMENTS = 1.0  # documents shorter than this share of the context on average: said so (docs/training.md)


def per_block_parameter(tokens: float, params: int, unit: str) -> str:
    """'0.25 chars per block parameter': the advisor's one wording of the ratio (2 figures below 10)."""
    ratio = tokens / max(params, 1)
    shown = f"{ratio:,.0f}" if ratio >= 10 else f"{ratio:.2g}"
    return f"{shown} {unit}{'' if shown == '1' else 's'} per block parameter"


def turn_step(m: ModelConfig, batch: int, train_tokens: int) -> int:
    """The step after which val loss is expected to stop falling."""
    passes = OVERFIT_PASSES * math.sqrt(train_tokens / block_params(m)) * (1 + DROPOUT_GAIN * m.dropout)
    return max(1, int(passes * train_tokens / (batch * m.block_size)))


def advice(cfg: Config, vocab: int, corpus: Corpus, unit: str, allowed: int | None = None) -> list[str]:
    """The advisor's lines, three at most; `allowed`: the steps the time budget allows, when known."""
    t, m = cfg.train, cfg.model
    steps = min(t.max_steps, allowed) if allowed else t.max_steps
    n, train_tokens = block_params(m), len(corpus.train)
    tokens = steps * t.batch_size * m.block_size
    lines = [
        f"plan: {parameter_count(m, vocab) / 1e6:.2f}M parameters; {steps:,} steps see {tokens / 1e6:,.1f}M {unit}s, "
        f"{per_block_parameter(tokens, n, unit)}, {tokens / max(train_tokens, 1):,.1f} passes over the "
        f"{train_tokens / 1e6:,.2f}M training {unit}s"
    ]
    turn = turn_step(m, t.batch_size, train_tokens)
    if turn < steps * 0.8 and not t.auto:  # --auto's own line says where patience stops it, and why
        fixes = "train.patience=3" if not t.patience else ""
        fixes = ", ".join(
            f for f in (f"model.dropout={min(m.dropout + 0.1, 0.3):.1f}", f"train.max_steps={turn}", fixes) if f
        )
        lines.append(
            f"advice: val loss will likely stop falling near step {turn:,} of {steps:,} (a small text for this "
            f"model: {tokens / max(train_tokens, 1):,.0f} passes); try {fixes}"
        )
    elif tokens < n:
        lines.append(
            f"advice: the model is big for this run: {per_block_parameter(tokens, n, unit)}, under one; a smaller "
            "model, or --auto with train.max_time, learns more in the same time"
        )
    lines += schedule_advice(cfg, allowed)
    mean_doc = len(corpus.ids) / max(corpus.documents, 1)
    if corpus.documents > 1 and mean_doc < SHORT_DOCUMENTS * m.block_size:
        lines.append(
            f"advice: the documents average {mean_doc:,.0f} {unit}s, under model.block_size ({m.block_size}): "
            f"most windows span several documents; a context of {2 ** math.floor(math.log2(max(mean_doc, 8)))} "
            "would cost less a step"
        )
    return lines[:3]


def schedule_advice(cfg: Config, allowed: int | None) -> list[str]:
    """A line when train.max_time and the schedule (decay or warm-up) disagree."""
    t, o = cfg.train, cfg.optim
    if not allowed:
        return []
    if o.schedule_by == "steps" and o.schedule != "constant" and allowed < 0.8 * t.max_steps:
        return [
            f"advice: train.max_time ({t.max_time}) allows about {allowed:,} of train.max_steps {t.max_steps:,} here: "
            f"the run stops {allowed / t.max_steps:.0%} into its {o.schedule} decay, at a high learning rate; "
            f"set optim.schedule_by=time (the decay follows the clock) or train.max_steps={allowed}"
        ]
    if o.schedule_by == "time" and t.max_steps < 0.8 * allowed:
        return [
            f"advice: train.max_steps ({t.max_steps:,}) ends the run before train.max_time ({t.max_time}) does, "
            f"about {t.max_steps / allowed:.0%} into its decay by time; raise train.max_steps (a cap only here)"
        ]
    if o.warmup_steps > 0.2 * allowed:
        return [
            f"advice: the warm-up, optim.warmup_steps {o.warmup_steps:,}, is {o.warmup_steps / allowed:.0%} of the "
            f"~{allowed:,} steps train.max_time allows here; try optim.warmup_steps={max(allowed // 20, 1)}"
        ]
    return []


def run_advice(
    cfg: Config,
    corpus: Corpus,
    tok: Tokenizer,
    device: torch.device,
    dtype: torch.dtype,
    steps: int | None,
    started: float,
    timed: bool,
    processes: int = 1,
) -> list[str]:
    """The advisor's lines for a new run: `steps` from --auto, else (`timed`) from a timed step."""
    if not cfg.log.advice:
        return []
    if steps is None and timed:
        steps = budget_steps(cfg, tok.vocab_size, device, dtype, started, processes)
    return advice(cfg, tok.vocab_size, corpus, tok.unit, steps)


def timed_under_load(busy: float | None) -> list[str]:
    """A line when the steps were timed while other processes kept this process's cores busy."""
    if busy is None or busy < 0.5:
        return []
    return [
        f"note: the step counts above are estimates timed while other processes kept {busy:.1f} of this process's "
        f"{allowed_cores()} cores busy; on a quiet machine the run takes more steps (results.json records its own)"
    ]


def auto_size(
    cfg: Config,
    explicit: frozenset[str],
    corpus: Corpus,
    tok: Tokenizer,
    device: torch.device,
    dtype: torch.dtype,
    started: float,
) -> tuple[Config, int | None]:
    """--auto: the sized config (explicit keys win) and its expected steps (None if keys set the shape)."""
    budget = parse_duration(str(cfg.train.max_time)) or 0.0
    speed = probe(cfg, tok.vocab_size, device, dtype)
    left = budget - (time.perf_counter() - started)
    if left <= 0:
        raise UserError(
            f"train.max_time ({cfg.train.max_time}) is spent before training starts (start-up and the speed probe "
            "took it); give a longer budget"
        )
    choice = choose(cfg, tok.vocab_size, len(corpus.train), len(corpus.val), left, speed)
    values = {k: v for k, v in choice.values.items() if k not in explicit}
    width, heads = values.get("model.n_embd", cfg.model.n_embd), values.get("model.n_head", cfg.model.n_head)
    if width % heads and "model.n_head" not in explicit:  # your width, the rung's heads: as many as divide it
        values["model.n_head"] = max(h for h in range(1, heads + 1) if width % h == 0)
    cfg = cfg.replace(**values)
    mine = ", ".join(sorted(k for k in choice.values if k in explicit))
    if any(k in explicit for k in SHAPE_KEYS):  # the run trains your shape: the line says so first
        log(f"--auto: kept yours: {mine}; the other keys are set for the time (its own shape: {choice.why})")
    else:
        log(f"--auto: {choice.why}" + (f"; kept yours: {mine}" if mine else ""))
    log(
        f"--auto: a step of 3 x 128, the probe's middle shape, took {speed.anchor_step_s * 1e3:.1f} ms here, "
        f"{speed.dropout_cost:.1f}x that with dropout (the rule: docs/training.md)"
    )
    return cfg, None if explicit.intersection(SHAPE_KEYS) else choice.steps
