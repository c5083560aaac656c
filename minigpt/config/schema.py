"""One frozen dataclass per YAML section; defaults equal `configs/default.yaml` (a test keeps them so)."""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from minigpt.config import DEVICE_NAMES, SAMPLE_DTYPES, UNKNOWN_CHARS, is_device_name
from minigpt.config.fields import SEED_LIMIT, config_field, field_error, whole_number, whole_number_error
from minigpt.errors import UserError

DEFAULT_DATA_PATH = "data/tinyshakespeare.txt"


@dataclass(frozen=True)
class ModelConfig:
    n_layer: int = config_field(3, "number of transformer blocks", ge=1, auto=True)
    n_head: int = config_field(4, "attention heads per block (must divide n_embd)", ge=1, auto=True)
    n_embd: int = config_field(128, "width of the residual stream (embedding size)", ge=1, auto=True)
    block_size: int = config_field(64, "context length in characters", ge=1, auto=True)
    dropout: float = config_field(
        0.0, "dropout probability in [0, 1); 0 for small data or short runs", ge=0, lt=1, auto=True
    )
    bias: bool = config_field(False, "use biases in Linear and LayerNorm layers")
    pos_emb: str = config_field(
        "rope",
        "positions: learned (a trained table, GPT-2), sinusoidal (the original Transformer's fixed "
        "encoding) or rope (rotary, applied to queries and keys)",
        ("learned", "sinusoidal", "rope"),
    )
    norm: str = config_field(
        "pre",
        "LayerNorm placement: pre (before attention/MLP, GPT-2) or post (after each residual add, "
        "the original Transformer)",
        ("pre", "post"),
    )
    attn_only: bool = config_field(
        False, "drop the MLPs: blocks of attention only (the induction-head papers' toy models)"
    )
    # options the speed-record trainers use; each off by default (docs/configuration.md)
    qk_norm: bool = config_field(
        False, "RMS-normalise each head's queries and keys before attention (no learned scale)"
    )
    mlp_act: str = config_field(
        "gelu", "the MLP's activation: gelu (exact, GPT-2) or relu2 (relu(x) squared)", ("gelu", "relu2")
    )
    zero_init_proj: bool = config_field(
        False, "attention and MLP output projections start at zero (blocks start as identity)"
    )
    value_embeds: bool = config_field(
        False, "a second token embedding per block, added to its attention values (a learned mix)"
    )
    logit_softcap: float = config_field(0.0, "bound the logits smoothly: cap * tanh(logits / cap) (0 = off)", ge=0)


@dataclass(frozen=True)
class DataConfig:
    path: str | list[str] = config_field(
        DEFAULT_DATA_PATH,
        "what to train on: a text file, a folder (every file under it; hidden ones skipped), a glob pattern, or a "
        "list of these (the default: tiny Shakespeare, which ships with minigpt)",
        paths=True,
        on_resume=True,
    )
    val_fraction: float = config_field(
        0.1,
        "share held out for validation: the end of a single text, or whole files of several (chosen by a hash "
        "of their names)",
        gt=0,
        lt=1,
    )
    val_path: str | list[str] | None = config_field(
        None,
        "validation text instead of a share of data.path: a file, folder, glob or list",
        paths=True,
        on_resume=True,
    )
    doc_separator: str = config_field(
        "\n", "text put between two documents (files, or records of a record file), so no window glues them mid-line"
    )
    format: str = config_field(
        "auto",
        "how files are read: auto (by extension: .jsonl/.ndjson, .json, .csv, .tsv, .parquet, .arrow and datasets' "
        "save_to_disk folders are records, anything else text), or one of those formats for every file",
        ("auto", "text", "jsonl", "json", "csv", "tsv", "parquet", "arrow"),
    )
    text_field: str | list[str] = config_field(
        "text", "the field (column) of each record to train on, or a list of fields joined by data.field_separator"
    )
    field_separator: str = config_field(
        "\n", "text put between the fields of one record when data.text_field is a list"
    )
    skip_bad_records: bool = config_field(
        False, "skip records whose field is missing or not a string (and say how many), instead of an error"
    )
    tokenizer: str = config_field(
        "char",
        "char (one id per distinct character) or byte (the 256 byte values: any file, any language, a fixed "
        "vocabulary; losses in bits per byte)",
        ("char", "byte"),
    )
    cache_dir: str | None = config_field(
        None, "where encoded text is cached (default: the user's cache directory)", on_resume=True
    )
    new_chars: str = config_field(
        "error",
        "fine-tuning (train.init_from) on text with characters the model never saw: error (name them) or add "
        "(new embedding rows, initialised like the others)",
        ("error", "add"),
    )


@dataclass(frozen=True)
class TrainConfig:
    batch_size: int = config_field(
        32, "sequences per optimizer step (split over grad_accum_steps micro-batches)", ge=1, auto=True
    )
    max_steps: int = config_field(300, "optimizer steps to train for", ge=1, on_resume=True, auto=True)
    grad_accum_steps: int = config_field(1, "micro-batches per optimizer step (must divide batch_size)", ge=1)
    eval_interval: int = config_field(
        150, "steps between evaluations (val loss, checkpoints, text sample)", ge=1, on_resume=True, auto=True
    )
    eval_steps: int = config_field(10, "validation batches per evaluation (fixed for the whole run)", ge=1)
    ckpt_interval: int = config_field(
        0, "steps between extra last.pt saves, independent of eval (0 = only at eval)", ge=0, on_resume=True
    )
    seed: int = config_field(1337, "one seed for weights, batches and dropout", ge=0, lt=SEED_LIMIT)
    device: str = config_field("auto", "auto (cuda > mps > cpu), cpu, cuda, cuda:N or mps", on_resume=True)
    dtype: str = config_field(
        "auto",
        "compute precision: auto (bf16 autocast on CUDA where supported, else fp16; on a CPU with bf16 "
        "hardware (AVX512-BF16 or AMX) bf16 autocast where the run's products measure faster, else fp32; "
        "the run's config.yaml records the choice), float32, bfloat16, float16",
        ("auto", "float32", "bfloat16", "float16"),
        on_resume=True,
    )
    attention: str = config_field(
        "auto",
        "bf16 attention on a CPU: flash (torch's kernel, in float32) or products (bf16 matrix products); "
        "auto measures which is faster for the run's shape (config.yaml records the choice)",
        ("auto", "flash", "products"),
        on_resume=True,
    )
    compile: bool = config_field(
        False, "torch.compile the model (falls back to eager if compilation fails)", on_resume=True
    )
    threads: int = config_field(
        0,
        "CPU threads for training (0 = the cores this process may use, less those others keep busy at the "
        "start; a CPU run's config.yaml records the count)",
        ge=0,
        on_resume=True,
    )
    init_from: str | None = config_field(
        None, "a run directory or checkpoint whose weights this new run starts from (fine-tuning; --init-from)"
    )
    patience: int = config_field(
        0, "stop after this many evaluations without a new best val loss (0 = never)", ge=0, on_resume=True, auto=True
    )
    min_delta: float = config_field(
        0.0, "the least val-loss improvement that resets the patience count", ge=0, on_resume=True
    )
    max_time: str | None = config_field(
        None,
        "stop cleanly at the first step past this wall time, e.g. 90s, 10m, 1h (null = no limit)",
        duration=True,
        on_resume=True,
    )
    target_loss: float | None = config_field(
        None,
        "stop once the validation loss reaches this (an evaluation's estimate at or below it, confirmed on the "
        "whole validation split); the done line and results.json give the time it took (0 or null = off)",
        ge=0,
        on_resume=True,
    )
    auto: bool = config_field(
        False,
        "choose the model and optimizer for train.max_time from the text and a short speed probe (keys set "
        "explicitly win; docs/training.md); same as --auto",
        on_resume=True,
    )
    final_eval: bool = config_field(
        True, "score the best checkpoint on the whole validation split at the end (results.json)", on_resume=True
    )
    final_eval_tokens: int = config_field(
        1_000_000,
        "the final evaluation's bound: a validation split longer than this many tokens is scored on an evenly "
        "spread sample of whole windows of about this many tokens (0 = always the whole split)",
        ge=0,
        on_resume=True,
    )
    keep_every: int = config_field(
        0,
        "keep a weights-only snapshot step_NNNNNNN.pt every N steps (sample, eval, attention take it; 0 = off)",
        ge=0,
        on_resume=True,
    )


@dataclass(frozen=True)
class OptimConfig:
    lr: float = config_field(3e-3, "peak learning rate, reached at the end of warm-up", ge=0, on_resume=True, auto=True)
    min_lr: float = config_field(3e-4, "learning rate at the end of the decay (<= lr)", ge=0, on_resume=True, auto=True)
    warmup_steps: int = config_field(25, "linear warm-up steps from ~0 to lr", ge=0, auto=True)
    schedule: str = config_field(
        "cosine", "decay after warm-up: cosine, linear or constant", ("cosine", "linear", "constant"), auto=True
    )
    schedule_by: str = config_field(
        "steps",
        "what the decay runs over: steps (to train.max_steps), or time (to train.max_time of wall clock, so a "
        "fixed time budget always ends its decay; one process only)",
        ("steps", "time"),
        auto=True,
    )
    weight_decay: float = config_field(0.1, "AdamW weight decay, applied to weight matrices only", ge=0, auto=True)
    beta1: float = config_field(0.9, "AdamW beta1", ge=0, lt=1)
    beta2: float = config_field(0.99, "AdamW beta2", ge=0, lt=1, auto=True)
    grad_clip: float = config_field(
        1.0, "clip the global gradient norm to this (0 = no clipping)", ge=0, on_resume=True
    )
    optimizer: str = config_field(
        "muon", "adamw, or muon for the blocks' weight matrices (AdamW for the rest)", ("adamw", "muon"), auto=True
    )
    muon_lr: float = config_field(
        0.03, "Muon's peak learning rate (on the same schedule as lr)", ge=0, on_resume=True, auto=True
    )
    muon_momentum: float = config_field(0.95, "Muon's Nesterov momentum", ge=0, lt=1)
    muon_weight_decay: float = config_field(
        0.0, "decoupled weight decay on Muon's matrices (weight_decay reaches AdamW's only)", ge=0, auto=True
    )


@dataclass(frozen=True)
class LogConfig:
    tensorboard: bool = config_field(True, "write TensorBoard event files into the run directory")
    progress: str = config_field(
        "auto",
        "progress display: bar (a live bar), lines (a plain line every progress_seconds, for log files), off, "
        "or auto (bar on a terminal, lines when stderr is a file or pipe)",
        ("auto", "bar", "lines", "off"),
    )
    progress_seconds: float = config_field(10.0, "seconds between progress lines in lines mode", gt=0)
    interval: int = config_field(10, "steps between train-loss / lr / throughput logs", ge=1)
    sample_length: int = config_field(200, "characters of sample text logged at each eval (0 = none)", ge=0)
    sample_prompt: str = config_field("\n", "prompt for the text sample logged at each eval")
    attention_probe: str = config_field(
        "ROMEO:\nBut, soft! what light",
        "text whose attention maps are logged to TensorBoard as images at each eval (empty = off)",
        auto=True,
    )
    advice: bool = config_field(
        True, "print the advisor's lines before a run: what it will see, and where it will likely overfit"
    )
    hparams: bool = config_field(
        True, "write the run's config and final metrics for TensorBoard's HParams dashboard (one table of all runs)"
    )
    hparam_keys: list[str] | None = config_field(
        None,
        "config keys shown in the HParams dashboard (default: every model, optim and train key; a sweep sets "
        "the keys it varies)",
    )
    embeddings: bool = config_field(
        True, "write the character embeddings at each eval for TensorBoard's projector, labelled by character class"
    )
    head_scores: bool = config_field(
        True, "log the ICL score and every head's induction and previous-character scores to TensorBoard at each eval"
    )
    peak_tflops: float = config_field(
        0.0,
        "peak TFLOPS of one device, for the MFU figure (0 = look the GPU up in minigpt's table; "
        "no MFU on a CPU unless set)",
        ge=0,
    )


@dataclass(frozen=True)
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    log: LogConfig = field(default_factory=LogConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """{'model.n_layer': 4, ...}"""
        return {f"{s}.{k}": v for s, sec in self.to_dict().items() for k, v in sec.items()}

    def replace(self, **flat_overrides: Any) -> Config:
        """A copy with dotted keys replaced (values validated like overrides)."""
        raw = self.to_dict()
        for key, value in flat_overrides.items():
            set_dotted(raw, key, value, "replace")
        return config_from_dict(raw, "replace")


SECTIONS: dict[str, type] = {f.name: typing.get_type_hints(Config)[f.name] for f in dataclasses.fields(Config)}


def all_keys() -> dict[str, dataclasses.Field]:
    """Every valid dotted key and its dataclass field, in declaration order."""
    return {f"{s}.{f.name}": f for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)}


# names other tools give these keys: an unknown key with one of them as its last part is pointed here
KEY_ALIASES = {
    "learning_rate": "optim.lr",
    "lr": "optim.lr",
    "min_learning_rate": "optim.min_lr",
    "warmup": "optim.warmup_steps",
    "warmup_iters": "optim.warmup_steps",
    "wd": "optim.weight_decay",
    "n_layers": "model.n_layer",
    "num_layers": "model.n_layer",
    "layers": "model.n_layer",
    "n_heads": "model.n_head",
    "num_heads": "model.n_head",
    "heads": "model.n_head",
    "d_model": "model.n_embd",
    "n_embed": "model.n_embd",
    "hidden_size": "model.n_embd",
    "context": "model.block_size",
    "context_length": "model.block_size",
    "seq_len": "model.block_size",
    "epochs": "train.max_steps",
    "max_iters": "train.max_steps",
    "iters": "train.max_steps",
    "steps": "train.max_steps",
    "batch": "train.batch_size",
    "data": "data.path",
}
ALIAS_NOTES = {"train.max_steps": "minigpt counts optimizer steps, not passes over the text"}


def closest_key(key: str) -> str | None:
    """The key a mistyped `key` most likely means: an alias, a near name, else the nearest dotted key."""
    keys = all_keys()
    section, _, tail = key.rpartition(".")
    tail = tail.lower()
    if tail in KEY_ALIASES:
        return KEY_ALIASES[tail]
    names = {}  # a field name -> its key, the given section's first
    for k in sorted(keys, key=lambda k: k.split(".")[0] != section):
        names.setdefault(k.split(".")[1], k)
    close = difflib.get_close_matches(tail, list(names), n=1, cutoff=0.75)
    if close:
        return names[close[0]]
    whole = difflib.get_close_matches(key, list(keys), n=1, cutoff=0.5)
    return whole[0] if whole else None


def keys_with(rule: str) -> tuple[str, ...]:
    """The keys whose fields carry `rule` ("on_resume", "auto"); every log.* key may change on resume."""
    every_log_key = rule == "on_resume"
    return tuple(k for k, f in all_keys().items() if f.metadata.get(rule) or every_log_key and k.startswith("log."))


def _suggest(key: str) -> str:
    """ " (did you mean 'optim.lr'?)", with its section and help when the section written differs."""
    found = closest_key(key)
    if found is None:
        return ""
    section = found.split(".")[0]
    if key.rpartition(".")[0] == section:
        return f" (did you mean '{found}'?)"
    note = ALIAS_NOTES.get(found, "") if key.rpartition(".")[2].lower() in KEY_ALIASES else ""
    what = f"{note}; " if note else ""
    return f" (did you mean '{found}'? {what}it is in the {section} section: {all_keys()[found].metadata['help']})"


TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _coerce(key: str, value: Any, typ: Any, source: str) -> Any:
    """Check `value` against the field type, accepting YAML's common spellings."""
    if list[str] in typing.get_args(typ):
        paths = key in all_keys() and all_keys()[key].metadata.get("paths")
        if value is None and type(None) in typing.get_args(typ):
            return None
        if isinstance(value, str) and value and str in typing.get_args(typ):
            return value
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) and v for v in value):
            return list(value)
        what = "a path, folder or glob pattern, or a list of them" if paths else "a name or a list of names"
        if str not in typing.get_args(typ):
            what = "a list of names, such as [model.n_layer, optim.lr]"
        raise UserError(f"{source}: {key} must be {what}, got {value!r}")
    if typing.get_origin(typ) in (typing.Union, types.UnionType):
        if value is None:
            return None
        typ = next(t for t in typing.get_args(typ) if t is not type(None))
    bad = UserError(f"{source}: {key} must be {TYPE_NAMES.get(typ, str(typ))}, got {value!r}")
    if typ is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if typ is int:
        number = whole_number(value)  # 5000, 5_000, 5e3; not 2.5 or 1e30
        if number is None:
            raise UserError(f"{source}: {whole_number_error(key, value)}")
        return number
    if typ is float:
        if isinstance(value, bool):
            raise bad
        if isinstance(value, (int, float)):
            return float(value)
        num = _as_number(value)
        if num is not None:
            return num  # YAML 1.1 reads "3e-4" as a string
        raise bad
    if typ is str:
        if isinstance(value, str):
            return value
        if key in all_keys() and all_keys()[key].metadata.get("duration") and _as_number(value) is not None:
            return str(value)  # `max_time: 600` in YAML: seconds
        raise bad
    raise AssertionError(f"unsupported config type {typ!r} for {key}")


def _as_number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def set_dotted(raw: dict[str, dict[str, Any]], key: str, value: Any, source: str) -> None:
    if key.count(".") != 1 or key not in all_keys():
        raise UserError(f"{source}: unknown key '{key}'{_suggest(key)}")
    section, name = key.split(".")
    raw.setdefault(section, {})[name] = value


def check_value(key: str, value: Any, source: str) -> None:
    """One key's value on its own (the key known, its type, bounds and choices), before the rest of the config."""
    set_dotted({}, key, value, source)
    section, name = key.split(".")
    problem = field_error(
        key, _coerce(key, value, typing.get_type_hints(SECTIONS[section])[name], source), all_keys()[key].metadata
    )
    if problem:
        raise UserError(f"{source}: {problem}")


def config_from_dict(raw: Any, source: str, check: bool = True) -> Config:
    """A Config from nested plain data; types always checked, values and combinations unless not `check`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError(f"{source}: the top level must be a mapping of sections ({', '.join(SECTIONS)})")
    sections = {}
    for sname, body in raw.items():
        if sname not in SECTIONS:
            close = difflib.get_close_matches(str(sname), list(SECTIONS), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (sections: {', '.join(SECTIONS)})"
            raise UserError(f"{source}: unknown section '{sname}'{hint}")
        if body is None:
            body = {}
        if not isinstance(body, dict):
            raise UserError(f"{source}: section '{sname}' must be a mapping of keys, got {body!r}")
        cls = SECTIONS[sname]
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for name, value in body.items():
            key = f"{sname}.{name}"
            if name not in hints:
                raise UserError(f"{source}: unknown key '{key}'{_suggest(key)}")
            kwargs[name] = _coerce(key, value, hints[name], source)
        sections[sname] = cls(**kwargs)
    cfg = Config(**sections)
    if check:
        validate(cfg, source)
    return cfg


def batch_split_error(
    t: TrainConfig, processes: int = 1, processes_label: str = "the number of processes"
) -> str | None:
    """train.batch_size must split evenly into grad_accum_steps micro-steps on every process."""
    if t.batch_size % (t.grad_accum_steps * processes) == 0:
        return None
    msg = f"train.batch_size ({t.batch_size}) must be divisible by train.grad_accum_steps ({t.grad_accum_steps})"
    return msg if processes == 1 else f"{msg} x {processes_label} ({processes}); change one of them"


def validate(cfg: Config, source: str) -> None:
    """Reject impossible values and combinations, naming the key: fields' bounds and choices, then two-key rules."""

    def fail(msg: str) -> None:
        raise UserError(f"{source}: {msg}")

    flat = cfg.flat()
    for key, f in all_keys().items():
        problem = field_error(key, flat[key], f.metadata)
        if problem:
            fail(problem)
    m, t, o = cfg.model, cfg.train, cfg.optim
    if m.n_embd % m.n_head:
        fail(f"model.n_embd ({m.n_embd}) must be divisible by model.n_head ({m.n_head})")
    if m.pos_emb == "rope" and (m.n_embd // m.n_head) % 2:
        fail(f"model.pos_emb rope needs an even head size; n_embd / n_head is {m.n_embd // m.n_head}")
    split = batch_split_error(t)
    if split:
        fail(split)
    if not is_device_name(t.device):
        fail(f"train.device must be {DEVICE_NAMES}, got '{t.device}'")
    if o.lr <= 0:
        fail(f"optim.lr must be > 0, got {o.lr}")
    if o.min_lr > o.lr:
        fail(f"optim.min_lr ({o.min_lr}) must be <= optim.lr ({o.lr})")
    if t.auto and not t.max_time:
        fail("train.auto (--auto) sizes the run for a time budget: set train.max_time too (e.g. train.max_time=10m)")
    if o.schedule_by == "time" and not t.max_time:
        fail("optim.schedule_by time needs train.max_time, the budget the decay runs over (e.g. train.max_time=4m)")
    for key in cfg.log.hparam_keys or []:
        if key not in all_keys():
            fail(f"log.hparam_keys names an unknown key '{key}'{_suggest(key)}")


@dataclass(frozen=True)
class SampleOptions:
    """How to sample, from `minigpt sample`'s flags or the Python API, checked when built (errors name the flag)."""

    num_samples: int = config_field(1, "how many samples", ge=1)
    max_new_tokens: int = config_field(500, "characters to generate", ge=0)
    temperature: float = config_field(0.8, "softmax temperature; 0 is greedy", ge=0)
    top_k: int | None = config_field(None, "keep the k most likely characters", ge=1)
    top_p: float | None = config_field(None, "nucleus: keep the most likely p of the probability mass", gt=0, le=1)
    seed: int = config_field(1337, "random seed; the same seed gives the same text", ge=0, lt=SEED_LIMIT)
    unknown: str = config_field("error", "prompt characters the model never saw: an error, or skipped", UNKNOWN_CHARS)
    dtype: str = config_field("auto", "the weights' precision while sampling", SAMPLE_DTYPES)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            problem = field_error("--" + f.name.replace("_", "-"), getattr(self, f.name), f.metadata, flag=True)
            if problem:
                raise UserError(problem)
