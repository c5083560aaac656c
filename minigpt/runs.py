"""Starting a training run: a new run or a resumed one, which config wins, which keys may change on
resume, and the run directory itself. `minigpt train` calls `train_command`; the loop is the
`Trainer`'s."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from minigpt import distributed
from minigpt.checkpoint import LAST, Checkpoint, find_checkpoint
from minigpt.config import Config, batch_split_error, config_from_dict
from minigpt.config_files import load_config, save_config
from minigpt.data import load_corpus
from minigpt.errors import UserError
from minigpt.runtime import log, resolve_device, resolve_dtype
from minigpt.schedule import lr_at
from minigpt.tokenizer import CharTokenizer
from minigpt.trainer import Trainer, TrainResult

# keys that may change when a run is resumed: they change neither what the model is nor what it
# learns from (data.path may change too when the file's content is the same: its SHA-256 is checked)
MAY_CHANGE_ON_RESUME = (
    "train.max_steps", "train.eval_interval", "train.ckpt_interval", "train.device", "train.dtype",
    "train.compile", "data.cache_dir", "data.path", "log.",
)  # fmt: skip


def train_command(
    config_path: Path | None,
    overrides: Sequence[str | tuple[str, Any]],
    out_dir: Path | None,
    resume: bool,
) -> TrainResult:
    """`minigpt train`: resolve the config (or the resumed run's), then train."""
    name = config_path.stem if config_path is not None else "default"
    out_dir = out_dir if out_dir is not None else Path("runs") / name
    if not resume:
        cfg = load_config(config_path, overrides)
        existing = find_checkpoint(out_dir, prefer=LAST)
        if existing is not None:
            raise UserError(
                f"{out_dir} already holds a run ({existing.name}); continue it with --resume, or pick another --out"
            )
        return train(cfg, out_dir)
    ckpt_path = find_checkpoint(out_dir, prefer=LAST)
    if ckpt_path is None:
        raise UserError(f"--resume: {out_dir} holds no checkpoint (last.pt or best.pt) to resume from")
    ckpt = Checkpoint.load(ckpt_path)
    ckpt.check_resumable(ckpt_path)
    saved = config_from_dict(ckpt.config, str(ckpt_path))
    if config_path is not None:
        cfg = load_config(config_path, overrides)
    else:  # the run's own config, with the command line's overrides on top
        cfg = load_config(None, [(k, v) for k, v in saved.flat().items()] + list(overrides))
    changed = resume_changes(saved, cfg, str(config_path) if config_path else "these overrides")
    if changed:
        log("resuming with changed " + ", ".join(f"{k}={cfg.flat()[k]!r}" for k in changed))
    if "train.max_steps" in changed and ckpt.step < cfg.train.max_steps:
        log(replanned_schedule_note(saved, cfg, ckpt.step))
    return train(cfg, out_dir, resume_from=ckpt)


def resume_changes(saved: Config, new: Config, source: str) -> list[str]:
    """Keys whose values differ; raises if any of them changes the model or the data."""
    a, b = saved.flat(), new.flat()
    changed = [k for k in a if a[k] != b[k]]
    fixed = [k for k in changed if not k.startswith(MAY_CHANGE_ON_RESUME)]
    if fixed:
        diffs = ", ".join(f"{k}: {a[k]!r} -> {b[k]!r}" for k in fixed)
        raise UserError(
            f"cannot resume with {source}: it changes {diffs}; only {', '.join(MAY_CHANGE_ON_RESUME)}* may change on "
            "resume (start a new run with another --out instead)"
        )
    return changed


def replanned_schedule_note(saved: Config, cfg: Config, step: int) -> str:
    """A longer run re-plans the decay: say how the learning rate jumps at the resume step."""
    before = lr_at(step - 1, saved.optim, saved.train.max_steps) if step else 0.0
    after = lr_at(step, cfg.optim, cfg.train.max_steps)
    return (
        f"note: the {cfg.optim.schedule} schedule is re-planned over {cfg.train.max_steps} steps: "
        f"the learning rate goes from {before:.3g} to {after:.3g} at step {step}"
    )


def prepare_run_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to the run directory {out_dir}: {e.strerror}; choose another --out") from None


def train(cfg: Config, out_dir: Path, resume_from: Checkpoint | None = None) -> TrainResult:
    """Train `cfg` into `out_dir` (fresh, or continuing `resume_from`).

    Every input is checked before anything is written. Launched by torchrun, every rank runs
    this; rank 0 alone writes files and prints.
    """
    t_start = time.perf_counter()
    corpus = load_corpus(cfg.data, cfg.model.block_size)
    # record the text's absolute path: the run resumes and evaluates from any working directory
    cfg = cfg.replace(**{"data.path": str(corpus.path.resolve())})
    tok = corpus.tokenizer
    if resume_from is not None:
        saved_sha = resume_from.data.get("sha256")
        if saved_sha and saved_sha != corpus.sha256:
            raise UserError(
                f"cannot resume: {corpus.path} is not the text this run was trained on (its SHA-256 changed); "
                "restore the original file or start a new run"
            )
        tok = CharTokenizer.from_dict(resume_from.tokenizer)
    dist = distributed.launched()
    split = batch_split_error(cfg.train, dist.world_size)
    if split:
        raise UserError(split)
    device = resolve_device(cfg.train.device, dist)
    dtype = resolve_dtype(cfg.train.dtype, device)
    distributed.init(dist, device)
    try:
        if dist.is_main:
            prepare_run_dir(out_dir)
        trainer = Trainer(cfg, corpus, tok, device, dtype, out_dir, dist)
        if resume_from is not None:
            trainer.load_state_dict(resume_from.to_dict())
            log(f"resuming {out_dir} from step {trainer.state.step} (best val loss {trainer.state.best_val_loss:.4f})")
        if dist.is_main:
            save_config(cfg, out_dir / "config.yaml")
        return trainer.train(started=t_start)
    finally:
        distributed.shutdown()
