"""Starting a training run: `start_run` makes the plan (`plan_run`: mode, config, checkpoint; the
precedence is docs/design.md's table), then `run_training` checks every input and trains."""

from __future__ import annotations

import enum
import itertools
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minigpt.checkpoint import BEST, LAST, Checkpoint, find_checkpoint, resolve_checkpoint, resumable_checkpoint
from minigpt.config.fields import parse_duration
from minigpt.config.files import (
    check_overrides,
    config_text,
    default_run_dir,
    file_config,
    parse_override,
    with_overrides,
)
from minigpt.config.schema import (
    Config,
    ModelConfig,
    config_from_dict,
    keys_with,
)
from minigpt.data.corpus import Corpus, load_corpus
from minigpt.data.encoding import file_sha256
from minigpt.data.sources import absolute_spec, describe, resolve_sources
from minigpt.data.tokenizer import CharTokenizer, Tokenizer, name_chars, tokenizer_from_dict
from minigpt.errors import UserError
from minigpt.io.lock import FileLock, LockHeld
from minigpt.io.textfiles import read_json_dict
from minigpt.model import parameter_count
from minigpt.runtime import distributed
from minigpt.runtime.cores import CoreLoad
from minigpt.runtime.device import DTYPES, decide, log, resolve_device
from minigpt.runtime.memory import keep_freed_memory
from minigpt.training import disk, preflight
from minigpt.training.autosize import AUTO_KEYS, auto_size, run_advice, timed_under_load
from minigpt.training.callbacks import Callback
from minigpt.training.disk import write_run_file
from minigpt.training.plan import Override, Resume, check_process_layout
from minigpt.training.progress import ByteProgress
from minigpt.training.schedule import RATE_KEYS, replanned_schedule_note
from minigpt.training.trainer import Trainer, TrainResult


class Mode(enum.Enum):
    NEW = "a new run in {out}"
    RESUME = "resume {out} from {source} (step {step})"
    FINE_TUNE = "fine-tune {source} (step {step}) into {out}"
    FINISHED = "{out} is finished"


@dataclass
class Plan:
    """What a training command will do, decided before anything is written: the mode, the resolved
    config, the checkpoint it starts from (a resumed run's newest, a fine-tuning run's source, read
    from `source`), the run folder, and the keys the user set (--auto leaves those alone)."""

    mode: Mode
    cfg: Config
    out_dir: Path
    explicit: frozenset[str] = frozenset()
    start: Checkpoint | None = None
    source: Path | None = None
    earlier_seconds: float = 0.0  # a finished run trained on: the wall time it already has

    def __post_init__(self) -> None:
        # the text's paths from the root: the run resumes and evaluates from any working directory
        paths = {"data.path": absolute_spec(self.cfg.data.path)}
        if self.cfg.data.val_path is not None:
            paths["data.val_path"] = absolute_spec(self.cfg.data.val_path)
        self.cfg = self.cfg.replace(**paths)

    def describe(self) -> str:
        step = self.start.step if self.start is not None else None
        return "plan: " + self.mode.value.format(out=self.out_dir, source=self.source, step=step)


def start_run(
    config_path: Path | None,
    overrides: Sequence[Override],
    out_dir: Path | None,
    resume: Resume,
    started: float | None = None,
    dry_run: bool = False,
    callbacks: Sequence[Callback] = (),
    load: CoreLoad | None = None,
    origin: str = "command line",
    processes: int = 1,  # --dry-run --nproc N: N
) -> TrainResult | None:
    """`minigpt train` and `minigpt.train()`: the plan, then the training (None when there is nothing
    to do, or `dry_run`). train.max_time counts from `started`; `origin` names the overrides' source."""
    load = load or CoreLoad()
    plan = plan_run(config_path, overrides, out_dir, resume, dry_run, origin)
    if plan.mode is Mode.FINISHED:
        return None
    started = (started or time.perf_counter()) - plan.earlier_seconds
    return run_training(plan, started, dry_run, callbacks, load, processes)


def plan_run(
    config_path: Path | None,
    overrides: Sequence[Override],
    out_dir: Path | None,
    resume: Resume,
    dry_run: bool,
    origin: str = "command line",
) -> Plan:
    """The one place the command line becomes a run: which config wins (defaults < CONFIG <
    overrides; a resumed run's own config under the overrides), which mode, which checkpoint. The
    whole command line is checked before the run directory is looked at."""
    out_dir = out_dir if out_dir is not None else default_run_dir(config_path, overrides)
    existing = find_checkpoint(out_dir, prefer=LAST)
    filed = file_config(config_path)  # the CONFIG file, read once
    cfg = None
    if resume is not Resume.NO and existing is not None and config_path is None:
        check_overrides(overrides, origin)  # a resumed run's own config is read from its checkpoint
    else:
        cfg = with_overrides(filed, overrides, config_path, origin)
    explicit = explicit_keys(filed, overrides)
    if resume is Resume.AUTO and existing is None:
        log(f"--resume auto: {out_dir} holds no checkpoint; starting a new run")
        resume = Resume.NO
    if resume is not Resume.NO:
        which = str(config_path) if config_path else "these overrides"
        return _resume_plan(cfg, overrides, explicit, out_dir, which, origin)
    if existing is not None and not dry_run:
        raise UserError(taken_run_dir(out_dir, existing, cfg))
    if cfg.train.init_from is None:
        return Plan(Mode.NEW, cfg, out_dir, explicit)
    if cfg.train.auto:
        raise UserError("train.auto (--auto) sizes a new model; fine-tuning keeps the starting model's shape")
    source = resolve_checkpoint(Path(cfg.train.init_from).expanduser(), prefer=BEST)
    start = Checkpoint.load(source)
    start_cfg = config_from_dict(start.config, str(source))
    cfg = fine_tuning_config(cfg if config_path else None, overrides, start_cfg, source, origin)
    return Plan(Mode.FINE_TUNE, cfg, out_dir, start=start, source=source)


def taken_run_dir(out_dir: Path, existing: Path, cfg: Config) -> str:
    """Why a new run cannot go into `out_dir`, which holds the run of `existing`: the data is
    checked first (a missing file is the mistake to tell), then --resume is offered only when it
    would succeed (the same text, no key changed that a resume may not change), and a free --out."""
    files = resolve_sources(cfg.data.path)
    if cfg.data.val_path is not None:
        resolve_sources(cfg.data.val_path, "data.val_path")
    free = next(p for n in itertools.count(2) if not (p := out_dir.with_name(f"{out_dir.name}-{n}")).exists())
    taken = f"{out_dir} already holds a run ({existing.name})"
    ckpt = Checkpoint.load(existing)
    saved = config_from_dict(ckpt.config, str(existing))
    same_data = absolute_spec(cfg.data.path) == saved.data.path or (  # a copy of the same text resumes too
        len(files) == 1 and ckpt.data.get("sha256") == file_sha256(files[0].path, files[0].size)
    )
    try:
        resume_changes(saved, cfg.replace(**{"data.path": saved.data.path}), "")
    except UserError:
        a, b = saved.flat(), cfg.flat()
        differ = [k for k in a if a[k] != b[k] and k not in keys_with("on_resume")]
        shown = ", ".join(f"{k} {a[k]!r} -> {b[k]!r}" for k in differ[:3]) + (", ..." if len(differ) > 3 else "")
        return f"{taken} with another config ({shown}); pick another --out, e.g. --out {free}"
    if not same_data:
        return f"{taken} trained on {describe(saved.data.path)}; pick another --out, e.g. --out {free}"
    return f"{taken}; continue it with --resume, or pick another --out, e.g. --out {free}"


def explicit_keys(filed: Config, overrides: Sequence[Override]) -> frozenset[str]:
    """The keys a user set: on the command line, or in the CONFIG file (`filed`) with another value
    than the default (a file that lists every key, as configs/*.yaml do, sets only those it changes)."""
    keys = {parse_override(o)[0] for o in overrides}
    defaults = Config().flat()
    return frozenset(keys | {k for k, v in filed.flat().items() if v != defaults[k]})


def _resume_plan(
    from_file: Config | None,
    overrides: Sequence[Override],
    explicit: frozenset[str],
    out_dir: Path,
    which: str,
    origin: str,
) -> Plan:
    """A resumed run's plan, by one rule whatever the CONFIG: the checkpoint's config, then what the
    command sets (a CONFIG file's keys that differ from the defaults, as `explicit_keys` counts them;
    a dict's and the overrides, in `overrides`) on top; `which` names it in an error."""
    ckpt_path = find_checkpoint(out_dir, prefer=LAST)
    if ckpt_path is None:
        raise UserError(f"--resume: {out_dir} holds no checkpoint (last.pt or best.pt) to resume from")
    ckpt_path, ckpt = resumable_checkpoint(ckpt_path, log)  # a damaged last.pt falls back to best.pt
    saved = config_from_dict(ckpt.config, str(ckpt_path))
    saved_items = list(saved.flat().items())
    given = list(overrides) if from_file is None else [(k, v) for k, v in from_file.flat().items() if k in explicit]
    cfg = with_overrides(Config(), saved_items + given, None, origin)
    cfg = saved_init_from(saved, cfg)  # a job script repeats its fine-tuning command's train.init_from
    if cfg.train.auto:  # what --auto chose is the run's: the command that started it resumes it
        cfg = cfg.replace(**{k: saved.flat()[k] for k in AUTO_KEYS if k not in explicit})
    changed = resume_changes(saved, cfg, which)
    if changed:
        log("resuming with changed " + ", ".join(f"{k}={cfg.flat()[k]!r}" for k in changed))
    # what auto chose is decided again as the run goes on: `decide` keeps it on the device it was chosen on
    unset = [k for k in (ckpt.decided or {}).get("keys", []) if k not in explicit]
    defaults = Config().flat()
    cfg = cfg.replace(**{k: defaults[k] for k in unset})
    replanned = [k for k in changed if k == "train.max_steps" or k in RATE_KEYS and k != "optim.grad_clip"]
    if replanned and ckpt.step < cfg.train.max_steps:
        log(replanned_schedule_note(saved, cfg, ckpt.step, replanned))
    done = why_finished(out_dir, ckpt, cfg)
    rescore = any(k in ("train.final_eval", "train.final_eval_tokens") for k in changed)  # asked for
    if done and not rescore:  # a finished run stays as it finished: its results.json is not rewritten
        log(f"{out_dir} is finished: {done} at step {ckpt.step}; nothing to do")
        return Plan(Mode.FINISHED, cfg, out_dir, start=ckpt, source=ckpt_path)
    # a finished run that goes on (a raised max_steps or time budget): its wall time, and the time
    # budget, count from the run's start, so results.json covers the whole run
    earlier = float((finished_results(out_dir, ckpt) or {}).get("wall_s") or 0.0)
    return Plan(Mode.RESUME, cfg, out_dir, start=ckpt, source=ckpt_path, earlier_seconds=earlier)


def finished_results(out_dir: Path, ckpt: Checkpoint) -> dict | None:
    """The run's results.json when it records the checkpoint's step (the run ended there), else None."""
    results = read_json_dict(out_dir / "results.json")
    return results if results and results.get("steps") == ckpt.step else None


def why_finished(out_dir: Path, ckpt: Checkpoint, cfg: Config) -> str | None:
    """Why the run (newest checkpoint `ckpt`, continued with `cfg`) has nothing left to do, or None;
    without a results.json of that step, it was cut short and resumes."""
    results = finished_results(out_dir, ckpt)
    if results is None:
        return None
    t, step = cfg.train, ckpt.step or 0
    if step >= t.max_steps:
        return f"it reached train.max_steps ({t.max_steps})"
    if t.patience and (ckpt.evals_since_best or 0) >= t.patience:
        return f"it stopped early (train.patience {t.patience}; the best was at step {ckpt.best_step})"
    stopped = str(results.get("stopped") or "")
    before = (ckpt.config.get("train") or {}).get("max_time")
    raised = before and t.max_time and (parse_duration(str(t.max_time)) or 0) > (parse_duration(str(before)) or 0)
    if t.max_time and "train.max_time" in stopped and not raised:
        return f"its time budget, train.max_time {t.max_time}, ran out"
    target = results.get("target") or {}
    if t.target_loss and target.get("reached") and target["val_loss_full"] <= t.target_loss:  # not a lower one
        return f"it reached train.target_loss {t.target_loss:g} (val {target['val_loss_full']:.4f} on the whole split)"
    return None


def saved_init_from(saved: Config, cfg: Config) -> Config:
    """`cfg` with train.init_from as the run saved it (the resolved file) when it names the same
    checkpoint: the command that started a fine-tuning run can then resume it unchanged."""
    given, kept = cfg.train.init_from, saved.train.init_from
    if given is None or kept is None or given == kept:
        return cfg
    try:
        same = resolve_checkpoint(Path(given).expanduser(), prefer=BEST).resolve() == Path(kept).resolve()
    except (UserError, OSError):  # a path that no longer exists: the usual refusal follows
        return cfg
    return cfg.replace(**{"train.init_from": kept}) if same else cfg


def fine_tuning_config(
    from_file: Config | None, overrides: Sequence[Override], start: Config, source: Path, origin: str
) -> Config:
    """A fine-tuning run's config: the model section is the starting checkpoint's, or must match it with
    a CONFIG file (`from_file`); only model.dropout, not part of the weights, may differ."""
    if from_file is None:
        model_keys = [(k, v) for k, v in start.flat().items() if k.startswith("model.")]
        cfg = with_overrides(Config(), model_keys + list(overrides), None, origin)
    else:
        cfg = from_file
    a, b = start.flat(), cfg.flat()
    differ = [k for k in a if k.startswith("model.") and k != "model.dropout" and a[k] != b[k]]
    if differ:
        diffs = ", ".join(f"{k}: {a[k]!r} there, {b[k]!r} here" for k in differ)
        raise UserError(
            f"cannot start from {source}: the model differs in {diffs}; use the same model section "
            "(leave out CONFIG and model.* overrides to take the checkpoint's)"
        )
    return cfg.replace(**{"train.init_from": str(source.resolve())})


def resume_changes(saved: Config, new: Config, source: str) -> list[str]:
    """Keys whose values differ; raises if any of them changes the model or the data."""
    a, b = saved.flat(), new.flat()
    changed = [k for k in a if a[k] != b[k]]
    allowed = keys_with("on_resume")  # data.path and data.val_path too: the text's hash is checked
    fixed = [k for k in changed if k not in allowed]
    if fixed:
        diffs = ", ".join(f"{k}: {a[k]!r} -> {b[k]!r}" for k in fixed)
        may = ", ".join([k for k in allowed if not k.startswith("log.")] + ["log.*"])
        raise UserError(
            f"cannot resume with {source}: it changes {diffs}; only {may} may change on "
            "resume (start a new run with another --out instead)"
        )
    return changed


def prepare_run_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to the run directory {out_dir}: {e.strerror}; choose another --out") from None


def starting_vocabulary(
    start: Tokenizer, corpus_tok: Tokenizer, new_chars: str, source: Path, corpus_path: str
) -> Tokenizer:
    """The fine-tuning run's vocabulary: the starting model's, each character keeping its id, plus
    the new text's unseen characters at the end when data.new_chars is `add` (an error otherwise)."""
    if start.kind != corpus_tok.kind:
        raise UserError(
            f"cannot start from {source}: it is a {start.kind} model and data.tokenizer is {corpus_tok.kind}; "
            f"set data.tokenizer={start.kind}"
        )
    if not isinstance(start, CharTokenizer):
        return start
    unseen = [c for c in corpus_tok.chars if c not in start.stoi]
    if not unseen:
        return start
    if new_chars != "add":
        raise UserError(
            f"{corpus_path} has {len(unseen)} character(s) the model in {source} never saw: {name_chars(unseen)}; set "
            "data.new_chars=add to give them new embedding rows, or remove them from the text"
        )
    return start.extended(unseen)


def starting_weights(fresh: dict[str, Any], start: dict[str, Any]) -> dict[str, Any]:
    """The starting checkpoint's weights in a model of the same shape, except that the token
    embedding (and the tied output head) may have more rows: the extra rows keep `fresh`'s
    initialisation, the old ones are copied."""
    out = {}
    for key, tensor in fresh.items():
        old = start[key]
        if old.shape == tensor.shape:
            out[key] = old
        else:  # wte.weight / lm_head.weight: (vocab, n_embd) with new characters appended
            grown = tensor.clone()
            grown[: old.shape[0]] = old
            out[key] = grown
    return out


def lock_run_dir(out_dir: Path) -> FileLock:
    """RUN/.lock, held for the life of one training process through the package's one file lock
    (`minigpt.io.lock`): a second training is refused at once, told the holder's pid; the kernel
    releases the lock when the process ends in any way (kill -9 included)."""
    lock = FileLock(out_dir / ".lock", blocking=False)
    try:
        lock.acquire()
    except LockHeld as held:
        raise UserError(
            f"{held.path.parent} is in use by another minigpt training (pid {held.owner}); wait for it to end, "
            "or train into another --out"
        ) from None
    return lock


def vocabulary_check(m: ModelConfig) -> Callable[[int], None]:
    """A character vocabulary too large for the model: its embedding table alone would outweigh
    the transformer blocks (most of the model would be rows for rare characters). Checked as soon
    as the vocabulary is known, before the ids are written."""
    blocks = (4 if m.attn_only else 12) * m.n_layer * m.n_embd**2  # attention (4 d^2) and MLP (8 d^2) weights

    def check(vocab: int) -> None:
        if vocab > 256 and vocab * m.n_embd > blocks:
            raise UserError(
                f"data.path has {vocab:,} distinct characters: their embedding table ({vocab * m.n_embd / 1e6:.1f}M "
                f"parameters at model.n_embd={m.n_embd}) would outweigh the model's transformer blocks "
                f"({blocks / 1e6:.1f}M); train on bytes with data.tokenizer=byte (256 ids), or use a bigger model"
            )

    return check


def model_vocabulary(
    cfg: Config, corpus: Corpus, resume_from: Checkpoint | None, init_from: tuple[Path, Checkpoint] | None
) -> Tokenizer:
    """The vocabulary the model trains with: the text's own for a new run; the checkpoint's for a
    resume (of the same text: its SHA-256 is checked); the starting model's, perhaps extended, for
    fine-tuning."""
    if resume_from is not None:
        saved_sha = resume_from.data.get("sha256")
        if saved_sha and saved_sha != corpus.sha256:
            raise UserError(
                f"cannot resume: {corpus.description} is not the text this run was trained on (its content hash "
                "changed: a file was edited, added or removed); restore the original text or start a new run"
            )
        return tokenizer_from_dict(resume_from.tokenizer)
    if init_from is not None:
        start_tok = tokenizer_from_dict(init_from[1].tokenizer)
        return starting_vocabulary(start_tok, corpus.tokenizer, cfg.data.new_chars, init_from[0], corpus.description)
    return corpus.tokenizer


def run_training(
    plan: Plan,
    started: float | None = None,
    dry_run: bool = False,
    callbacks: Sequence[Callback] = (),
    load: CoreLoad | None = None,
    processes: int = 1,
) -> TrainResult | None:
    """Train the plan: fresh, continuing its checkpoint, or starting from its weights (fine-tuning).
    Every input is checked before anything is written. Launched by torchrun, every rank runs
    this; rank 0 alone writes files and prints. The rest: as start_run's."""
    cfg, out_dir = plan.cfg, plan.out_dir
    resume_from = plan.start if plan.mode is Mode.RESUME else None
    init_from = (plan.source, plan.start) if plan.mode is Mode.FINE_TUNE else None
    t_start = started if started is not None else time.perf_counter()
    check_process_layout(cfg, max(distributed.launched().world_size, processes), resume_from is not None)  # first
    corpus = load_corpus(cfg.data, cfg.model.block_size, ByteProgress, vocabulary_check(cfg.model))
    tok = model_vocabulary(cfg, corpus, resume_from, init_from)
    corpus = corpus.in_vocabulary(tok)  # a fine-tuned model may order or hold more characters than the text
    dist = distributed.launched()
    world = max(dist.world_size, processes)  # --dry-run --nproc N checks each of the N processes
    device = resolve_device(cfg.train.device, dist)
    if device.type == "cpu":
        keep_freed_memory()  # each step's activations reuse the last step's pages, not fresh ones
    distributed.init(dist, device)  # rank 0's choices reach every rank
    lock: FileLock | None = None
    try:  # from here the process group is up: every way out shuts it down (a live gloo group can abort the exit)
        if dist.enabled:  # every rank starts from what rank 0 found: a new run, or the same checkpoint
            distributed.check_same_start(plan.mode.name.lower(), plan.source, plan.start, dist)
        rows = cfg.train.batch_size // (cfg.train.grad_accum_steps * world) * cfg.model.block_size
        trained = None  # a resume keeps what auto chose where the run trained: the values its config carries
        if resume_from is not None and resume_from.decided:
            saved = resume_from.config["train"]
            trained = {**resume_from.decided, **{k: saved[k] for k in ("dtype", "attention", "threads")}}
        chosen, advised = decide(cfg, device, rows, trained, dist, (load or CoreLoad()).others())  # cores others keep
        given = cfg.flat()  # before the choices: "auto" (or threads 0) marks a key auto chose
        decided = {"keys": [k for k in chosen if given[k] in ("auto", 0)], "device": device.type}
        decided["processes"] = dist.local_world_size  # the processes that shared the cores
        cfg = cfg.replace(**chosen)  # the one resolved config: config.yaml's, and every checkpoint's
        dtype = DTYPES[chosen["train.dtype"]]
        steps = None  # the steps train.max_time allows (--auto's probe, or a timed step for the advisor)
        if cfg.train.auto and resume_from is None:
            cfg, steps = auto_size(cfg, plan.explicit, corpus, tok, device, dtype, t_start)
        too_big = preflight.check(cfg, tok.vocab_size, device, dtype, world)  # each of the world's processes
        if too_big:
            raise UserError(too_big)
        kept = [disk.snapshot_plan(cfg, tok.vocab_size, resume_from.step if resume_from is not None else 0)]
        disk.preflight(cfg, out_dir, parameter_count(cfg.model, tok.vocab_size), dist.is_main, kept)
        if resume_from is None:
            advised += run_advice(cfg, corpus, tok, device, dtype, steps, t_start, not dist.enabled, world)
            if cfg.train.max_time and device.type == "cpu":  # the estimates above come from timed steps
                advised += timed_under_load((load or CoreLoad()).others())
        if dry_run:
            for line in advised:
                log(line)
            print(f"# {plan.describe()}\n" + dry_run_text(cfg, plan.explicit, steps), end="")
            return None
        if dist.is_main:
            prepare_run_dir(out_dir)
            lock = lock_run_dir(out_dir)
            existing = find_checkpoint(out_dir, prefer=LAST)
            if resume_from is None and existing is not None:  # written while this process was starting
                raise UserError(f"{out_dir} already holds a run ({existing.name}); pick another --out")
        trainer = Trainer(cfg, corpus, tok, device, dtype, out_dir, dist, decided)  # says what the data and model are
        for line in advised:  # then what the run will do with them
            log(line)
        if resume_from is not None:
            trainer.load_state_dict(resume_from.to_dict())
            log(f"resuming {out_dir} from step {trainer.state.step} (best val est {trainer.state.best_val_loss:.4f})")
        if init_from is not None:
            _start_from(trainer, *init_from)
        if dist.is_main:
            write_run_file(out_dir / "config.yaml", config_text(cfg))  # the choices, concrete
        return trainer.train(started=t_start, callbacks=callbacks)
    finally:
        if lock is not None:
            lock.release()
        distributed.shutdown()


def dry_run_text(cfg: Config, explicit: frozenset[str], expected: int | None) -> str:
    """`--dry-run`'s config, with a comment on train.max_steps where the time budget, not the
    steps, ends the run: --auto sets it as a cap only (`expected`: the steps it plans)."""
    t = cfg.train
    if t.auto and "train.max_steps" not in explicit:
        planned = f"; --auto plans ~{expected:,} steps" if expected else ""
        why = f"a cap only: train.max_time {t.max_time} ends the run{planned}"
    elif t.max_time:
        why = f"or train.max_time {t.max_time}, whichever comes first, ends the run"
    else:
        return config_text(cfg)
    return re.sub(r"^(  max_steps: \d+)$", rf"\1  # {why}", config_text(cfg), count=1, flags=re.M)


def _start_from(trainer: Trainer, source: Path, start: Checkpoint) -> None:
    trainer.model.load_state_dict(starting_weights(trainer.model.state_dict(), start.model))
    trainer.init_from = {"path": str(source.resolve()), "step": start.step, "val_loss": start.val_loss}
    added = trainer.tok.vocab_size - len(start.tokenizer["chars"])
    extra = f"; {added} new character(s) get new embedding rows" if added else ""
    log(f"starting from {source} (step {start.step}): its weights, a fresh optimizer and schedule{extra}")
