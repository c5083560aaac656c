"""The training loop and everything with side effects around it: evaluation, checkpoints,
the progress bar, TensorBoard, interrupts."""

from __future__ import annotations

import contextlib
import math
import signal
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from minigpt import distributed
from minigpt.checkpoint import BEST, LAST, load_checkpoint, save_checkpoint
from minigpt.config import Config, config_from_dict, load_config, save_config
from minigpt.data import Batcher, Corpus, load_corpus
from minigpt.errors import TrainingInterrupted, UserError
from minigpt.mfu import device_peak, flops_per_token, mfu_percent
from minigpt.model import GPT
from minigpt.optim import AdamW
from minigpt.sampler import generate
from minigpt.schedule import lr_at
from minigpt.tokenizer import CharTokenizer

# keys that may change when a run is resumed: they do not change what the model is or what it learns from
# what a checkpoint needs for --resume
RESUME_KEYS = ("config", "tokenizer", "model", "optimizer", "rng", "step", "tokens_seen", "best_val_loss")
# (data.path may change too when the file's content is the same: the SHA-256 is checked)
RESUMABLE_KEYS = (
    "train.max_steps", "train.eval_interval", "train.ckpt_interval", "train.device", "train.dtype",
    "train.compile", "data.cache_dir", "data.path", "log.",
)  # fmt: skip


def log(msg: str) -> None:
    """Status for the person at the terminal: stderr, clear of the progress bar; rank 0 only."""
    if distributed.launched().is_main:
        tqdm.write(msg, file=sys.stderr)


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda > mps > cpu; an explicit device must exist."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name not in ("cpu", "mps", "cuda") and not (name.startswith("cuda:") and name[5:].isdigit()):
        raise UserError(f"unknown device '{name}': use auto, cpu, cuda, cuda:N or mps")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UserError(f"device '{name}' requested but CUDA is not available here; use --device cpu or auto")
        index = int(name.partition(":")[2] or 0)
        if index >= torch.cuda.device_count():
            raise UserError(f"device '{name}' requested but only {torch.cuda.device_count()} CUDA device(s) exist")
    if name == "mps" and not torch.backends.mps.is_available():
        raise UserError("device 'mps' requested but Apple MPS is not available here; use --device cpu or auto")
    return torch.device(name)


def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX512-BF16 or AMX). There, bf16
    matrix multiplies run about 4x faster than float32 ones (750 against 190 GFLOP/s on 2 cores
    of an AVX512-BF16 EPYC); without it bf16 is emulated and slower than float32."""
    cpu = getattr(torch, "cpu", None)
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(bool(getattr(cpu, name, lambda: False)()) for name in checks)


def cuda_has_native_bf16(device: torch.device) -> bool:
    """bf16 in hardware (Ampere and later, or ROCm); torch.cuda.is_bf16_supported() also says yes
    where bf16 is only emulated (T4, V100), which is slower than fp16 there."""
    if torch.version.hip:
        return torch.cuda.is_bf16_supported()
    return torch.cuda.get_device_capability(device)[0] >= 8


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The autocast compute dtype; float32 means no autocast."""
    if name == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if cuda_has_native_bf16(device) else torch.float16
        if device.type == "cpu" and cpu_has_native_bf16():
            return torch.bfloat16
        return torch.float32
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]
    if dtype == torch.float16 and device.type == "cpu":
        raise UserError("train.dtype float16 is not supported on the CPU; use bfloat16 or float32")
    return dtype


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def build_optimizer(model: torch.nn.Module, cfg: Config, device: torch.device) -> torch.optim.AdamW | AdamW:
    """AdamW with weight decay on matrices (Linear weights, embeddings) only, fused where supported."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.optim.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    betas = (cfg.optim.beta1, cfg.optim.beta2)
    if device.type == "cuda":
        return torch.optim.AdamW(groups, lr=cfg.optim.lr, betas=betas, fused=True)
    return AdamW(groups, lr=cfg.optim.lr, betas=betas)  # same update, ~6 s less start-up (see optim.py)


@torch.no_grad()
def estimate_loss(model: GPT, batches: Sequence[tuple[torch.Tensor, torch.Tensor]], ctx) -> float:
    """Mean loss over fixed batches, in eval mode (no dropout)."""
    was_training = model.training
    model.eval()
    total = torch.zeros((), device=batches[0][0].device)
    for x, y in batches:
        with ctx:
            _, loss = model(x, y)
        total += loss.float()
    model.train(was_training)
    return total.item() / len(batches)


def sample_text(model: GPT, tok: CharTokenizer, cfg: Config, length: int, seed: int) -> str:
    """A short sample for TensorBoard, from its own generator (training RNG untouched)."""
    device = next(model.parameters()).device
    prompt = [tok.stoi[c] for c in cfg.log.sample_prompt if c in tok.stoi] or [0]
    gen = torch.Generator(device=device).manual_seed(seed)
    ids = generate(model, prompt, length, temperature=0.8, generator=gen)
    return tok.decode(prompt + ids)


class AttentionLogger:
    """The probe text's attention maps as a TensorBoard image at each eval (unknown characters
    dropped); the figure is built once and redrawn, about a second an eval on 2 CPU cores."""

    def __init__(self, model: GPT, tok: CharTokenizer, probe: str):
        from minigpt.attention import probe_ids

        self.model = model
        self.ids = probe_ids(tok, probe, model.cfg.block_size)
        self.chars = [tok.chars[i] for i in self.ids]
        self.figure: Any = None

    def log(self, writer: Any, step: int) -> None:
        if len(self.ids) < 2:
            return
        from minigpt.attention import AttentionFigure

        model = self.model
        was_training = model.training
        model.eval()
        maps = model.attention_maps(torch.tensor([self.ids], device=next(model.parameters()).device))[:, 0]
        model.train(was_training)
        if self.figure is None:
            cfg = model.cfg
            self.figure = AttentionFigure(self.chars, list(range(cfg.n_layer)), list(range(cfg.n_head)), light=True)
        writer.add_figure("attention", self.figure.update(maps, f"step {step}"), step, close=False)

    def close(self) -> None:
        if self.figure is not None:
            self.figure.close()


class StopRequest:
    """Turns the first SIGINT/SIGTERM into a flag the loop checks between steps (so a step is never
    cut in half); a second signal exits at once (checkpoints are written atomically, so nothing on
    disk can be left half-written)."""

    def __init__(self, hard_exit: bool = True) -> None:
        # under torchrun the launcher itself follows a Ctrl-C with SIGTERM to every worker and
        # kills them after its own timeout: there, further signals only keep the stop request
        self.hard_exit = hard_exit
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            if not self.hard_exit:
                return
            log("second interrupt: exiting now without saving")
            raise SystemExit(128 + signum)
        self.signum = signum
        log(f"{signal.Signals(signum).name}: finishing this step, then saving last.pt (interrupt again to quit now)")

    def __enter__(self) -> StopRequest:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. inside a test runner thread)
                pass
        return self

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


@dataclass
class TrainResult:
    out_dir: Path
    step: int
    best_val_loss: float
    val_loss: float | None
    wall_seconds: float


@dataclass
class _State:
    step: int = 0
    tokens_seen: int = 0
    best_val_loss: float = math.inf


def _rng_state(device: torch.device, batcher: Batcher) -> dict[str, Any]:
    state: dict[str, Any] = {"torch_cpu": torch.get_rng_state(), "batcher": batcher.state_dict()}
    if device.type == "cuda":
        state["torch_cuda"] = torch.cuda.get_rng_state_all()
    elif device.type == "mps":
        state["torch_mps"] = torch.mps.get_rng_state()
    return state


def _restore_rng(ckpt: dict[str, Any], device: torch.device, batcher: Batcher, dist: distributed.Dist,
                 seed: int) -> None:  # fmt: skip
    """Put every random-number stream back where the checkpoint left it.

    The batch stream is shared by all ranks. The dropout streams are per rank: restored exactly
    when the number of processes is unchanged, re-derived from the seed and step otherwise.
    """
    batcher.load_state_dict(ckpt["rng"]["batcher"])
    ranks = ckpt.get("rng_ranks")
    if dist.enabled == bool(ranks) and (not ranks or len(ranks) == dist.world_size):
        state = ranks[dist.rank] if ranks else ckpt["rng"]
        torch.set_rng_state(state["torch_cpu"])
        if device.type == "cuda" and len(state.get("torch_cuda", [])) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["torch_cuda"])
        elif device.type == "mps" and "torch_mps" in state:
            torch.mps.set_rng_state(state["torch_mps"])
    else:
        torch.manual_seed(seed + 1 + dist.rank + 7919 * ckpt["step"])
        log("note: the number of processes changed since the checkpoint; dropout masks are re-seeded")


def _maybe_compile(
    model: GPT,
    enabled: bool,
    device: torch.device,
    batch_shape: tuple[int, int],
    ctx: contextlib.AbstractContextManager,
) -> torch.nn.Module:
    """torch.compile with a fallback to eager when no working compiler is available.

    Compilation is lazy, so a trial forward/backward on a dummy batch of the training shape, under
    the training autocast, triggers it here (the graph training will use), with the random-number
    state forked so the trial does not change the run.
    """
    if not enabled:
        return model
    if not hasattr(torch, "compile"):
        log("warning: this PyTorch has no torch.compile; training eagerly")
        return model
    compiled = torch.compile(model)
    t0 = time.perf_counter()
    try:
        devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            x = torch.zeros(batch_shape, dtype=torch.long, device=device)
            with ctx:
                _, loss = compiled(x, x)
            loss.backward()
        model.zero_grad(set_to_none=True)
    except Exception as e:  # any backend failure (no C++ compiler, unsupported op, ...)
        model.zero_grad(set_to_none=True)
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
        log(f"warning: torch.compile failed ({first}); training eagerly")
        return model
    log(f"compiled the model in {time.perf_counter() - t0:.1f}s")
    return compiled


def _check_resume_config(saved: Config, new: Config, source: str) -> list[str]:
    """Keys whose values differ; raises if any of them changes the model or the data."""
    a, b = saved.flat(), new.flat()
    changed = [k for k in a if a[k] != b[k]]
    fixed = [k for k in changed if not k.startswith(RESUMABLE_KEYS)]
    if fixed:
        diffs = ", ".join(f"{k}: {a[k]!r} -> {b[k]!r}" for k in fixed)
        raise UserError(
            f"cannot resume with {source}: it changes {diffs}; only {', '.join(RESUMABLE_KEYS)}* may change on "
            "resume (start a new run with another --out instead)"
        )
    return changed


def _prepare_run_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write to the run directory {out_dir}: {e.strerror}; choose another --out") from None


def _save(payload: dict[str, Any], path: Path) -> None:
    """save_checkpoint, with a full disk or a vanished directory reported as what it is."""
    try:
        save_checkpoint(payload, path)
    except OSError as e:
        raise UserError(
            f"cannot write {path}: {e.strerror}; the previous {path.name} is unchanged (free space, then --resume)"
        ) from None


def _diverged(what: str, value: float, step: int, cfg: Config, out_dir: Path) -> UserError:
    good = run_dir_checkpoint(out_dir)
    kept = f"the last good checkpoint is kept: {good}" if good else "no checkpoint was written"
    return UserError(
        f"training diverged: the {what} became {value} at step {step} ({kept}); try a lower optim.lr "
        f"(now {cfg.optim.lr:g}), keep optim.grad_clip on (now {cfg.optim.grad_clip:g}), or check the data"
    )


def run_dir_checkpoint(out_dir: Path) -> Path | None:
    """The newest good checkpoint of a run directory (last.pt, else best.pt)."""
    for name in (LAST, BEST):
        if (out_dir / name).is_file():
            return out_dir / name
    return None


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
        existing = run_dir_checkpoint(out_dir)
        if existing is not None:
            raise UserError(
                f"{out_dir} already holds a run ({existing.name}); continue it with --resume, or pick another --out"
            )
        return train(cfg, out_dir)
    ckpt_path = run_dir_checkpoint(out_dir)
    if ckpt_path is None:
        raise UserError(f"--resume: {out_dir} holds no checkpoint (last.pt or best.pt) to resume from")
    ckpt = load_checkpoint(ckpt_path)
    missing = [k for k in RESUME_KEYS if k not in ckpt]
    if missing:
        raise UserError(f"{ckpt_path} cannot be resumed: it lacks {', '.join(missing)} (a damaged or foreign file)")
    saved = config_from_dict(ckpt["config"], str(ckpt_path))
    if config_path is not None:
        cfg = load_config(config_path, overrides)
    else:  # the run's own config, with the command line's overrides on top
        cfg = load_config(None, [(k, v) for k, v in saved.flat().items()] + list(overrides))
    changed = _check_resume_config(saved, cfg, str(config_path) if config_path else "these overrides")
    if changed:
        log("resuming with changed " + ", ".join(f"{k}={cfg.flat()[k]!r}" for k in changed))
    if "train.max_steps" in changed and ckpt["step"] < cfg.train.max_steps:
        before = lr_at(ckpt["step"] - 1, saved.optim, saved.train.max_steps) if ckpt["step"] else 0.0
        after = lr_at(ckpt["step"], cfg.optim, cfg.train.max_steps)
        log(
            f"note: the {cfg.optim.schedule} schedule is re-planned over {cfg.train.max_steps} steps: "
            f"the learning rate goes from {before:.3g} to {after:.3g} at step {ckpt['step']}"
        )
    return train(cfg, out_dir, resume_from=ckpt)


def train(cfg: Config, out_dir: Path, resume_from: dict[str, Any] | None = None) -> TrainResult:
    """Train `cfg` into `out_dir` (fresh, or continuing `resume_from`, a loaded checkpoint).

    Launched by torchrun, every rank runs this; rank 0 alone writes files and prints.
    """
    t_start = time.perf_counter()
    corpus: Corpus = load_corpus(cfg.data, cfg.model.block_size)  # every input checked before anything is written
    # record the text's absolute path: the run resumes and evaluates from any working directory
    cfg = cfg.replace(**{"data.path": str(corpus.path.resolve())})
    tok = corpus.tokenizer
    if resume_from is not None:
        saved_sha = resume_from.get("data", {}).get("sha256")
        if saved_sha and saved_sha != corpus.sha256:
            raise UserError(
                f"cannot resume: {corpus.path} is not the text this run was trained on (its SHA-256 changed); "
                "restore the original file or start a new run"
            )
        tok = CharTokenizer.from_dict(resume_from["tokenizer"])
    dist = distributed.launched()
    per_rank = cfg.train.grad_accum_steps * dist.world_size
    if cfg.train.batch_size % per_rank:
        raise UserError(
            f"train.batch_size ({cfg.train.batch_size}) must be divisible by train.grad_accum_steps "
            f"({cfg.train.grad_accum_steps}) x the number of processes ({dist.world_size}); change one of them"
        )
    dist, ddp_device = distributed.init(cfg.train.device)
    try:
        return _train(cfg, out_dir, resume_from, corpus, tok, dist, ddp_device, t_start)
    finally:
        distributed.shutdown()


def _train(
    cfg: Config, out_dir: Path, resume_from: dict[str, Any] | None, corpus: Corpus, tok: CharTokenizer,
    dist: distributed.Dist, ddp_device: torch.device | None, t_start: float,
) -> TrainResult:  # fmt: skip
    device = ddp_device if ddp_device is not None else resolve_device(cfg.train.device)
    dtype = resolve_dtype(cfg.train.dtype, device)
    if dist.is_main:
        _prepare_run_dir(out_dir)

    torch.manual_seed(cfg.train.seed)  # weights (the same on every rank) and dropout
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = GPT(cfg.model, tok.vocab_size).to(device)
    if dist.enabled:
        torch.manual_seed(cfg.train.seed + 1 + dist.rank)  # each rank its own dropout masks
    optimizer = build_optimizer(model, cfg, device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
    micro = cfg.train.batch_size // cfg.train.grad_accum_steps  # sequences per micro-step, all ranks together
    shard = {"rank": dist.rank, "world_size": dist.world_size}
    batcher = Batcher(corpus.train, cfg.model.block_size, micro, cfg.train.seed, device, **shard)
    val_source = Batcher(corpus.val, cfg.model.block_size, micro, cfg.train.seed + 1, device, **shard)
    val_batches = [val_source.next() for _ in range(cfg.train.eval_steps)]  # fixed for the whole run
    state = _State()

    if resume_from is not None:
        model.load_state_dict(resume_from["model"])
        optimizer.load_state_dict(resume_from["optimizer"])
        if resume_from.get("scaler"):
            scaler.load_state_dict(resume_from["scaler"])
        _restore_rng(resume_from, device, batcher, dist, cfg.train.seed)
        state = _State(resume_from["step"], resume_from["tokens_seen"], resume_from["best_val_loss"])
        log(f"resuming {out_dir} from step {state.step} (best val loss {state.best_val_loss:.4f})")

    if dist.is_main:
        save_config(cfg, out_dir / "config.yaml")
    ctx = autocast(device, dtype)
    log(
        f"data: {corpus.path} ({len(corpus.train) + len(corpus.val):,} chars, vocab {tok.vocab_size}; "
        f"{len(corpus.train):,} train / {len(corpus.val):,} val)"
    )
    where = f"{dist.world_size} processes ({device.type}, DDP)" if dist.enabled else f"device {device}"
    log(f"model: {model.num_params() / 1e6:.2f}M parameters | {where} | dtype {str(dtype).replace('torch.', '')}")
    flops_tok = flops_per_token(cfg.model, tok.vocab_size)
    peak, peak_source = device_peak(device, cfg.log.peak_tflops)
    if peak is not None or device.type == "cuda":
        log(f"MFU: {flops_tok / 1e6:.1f} MFLOP per token trained; peak {peak_source}")
    compiled = _maybe_compile(model, cfg.train.compile, device, (micro // dist.world_size, cfg.model.block_size), ctx)
    train_model: torch.nn.Module = compiled
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel

        train_model = DistributedDataParallel(compiled, device_ids=[device.index] if device.type == "cuda" else None)

    writer = None
    if cfg.log.tensorboard and dist.is_main:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torch.utils.tensorboard import SummaryWriter
        # on resume, drop events a crashed run logged after its checkpoint (steps > state.step)
        writer = SummaryWriter(log_dir=str(out_dir), purge_step=state.step + 1 if state.step else None)

    attention_logger = (
        AttentionLogger(model, tok, cfg.log.attention_probe) if writer and cfg.log.attention_probe else None
    )

    def payload(val_loss: float | None) -> dict[str, Any]:
        """The checkpoint; a collective call under DDP (it gathers every rank's RNG state)."""
        rng = _rng_state(device, batcher)
        ranks = distributed.all_gather({k: v for k, v in rng.items() if k != "batcher"}, dist)
        return {
            "model": model.state_dict(),  # the unwrapped model: loads anywhere, with or without DDP
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler.is_enabled() else None,
            "rng": rng,
            "rng_ranks": ranks if dist.enabled else None,
            "step": state.step,
            "tokens_seen": state.tokens_seen,
            "best_val_loss": state.best_val_loss,
            "val_loss": val_loss,
            "config": cfg.to_dict(),
            "tokenizer": tok.to_dict(),
            "data": {"path": cfg.data.path, "sha256": corpus.sha256},
        }

    def save(payload_: dict[str, Any], name: str) -> None:
        if dist.is_main:
            _save(payload_, out_dir / name)

    max_steps = cfg.train.max_steps
    accum = cfg.train.grad_accum_steps
    tokens_per_step = cfg.train.batch_size * cfg.model.block_size
    val_loss: float | None = None
    bar = tqdm(
        total=max_steps, initial=state.step, desc="train", unit="step", file=sys.stderr, dynamic_ncols=True,
        disable=not dist.is_main,
    )  # fmt: skip
    model.train()
    loss_sum = torch.zeros((), device=device)
    loss_count = 0
    stop_signal: int | None = None  # agreed by all ranks
    t_log, tokens_at_log = time.perf_counter(), state.tokens_seen
    rates: list[float] = []  # tokens/s of each log interval, for the summary at the end
    try:
        with StopRequest(hard_exit=not dist.enabled) as stop:
            while state.step < max_steps:
                if not dist.enabled:
                    stop_signal = stop.signum
                if stop_signal is not None:
                    if loss_count and not math.isfinite(loss_sum.item()):  # never save a broken model
                        raise _diverged("training loss", loss_sum.item(), state.step, cfg, out_dir)
                    save(payload(val_loss), LAST)
                    raise TrainingInterrupted(
                        128 + stop_signal,
                        f"stopped at step {state.step}; saved {out_dir / LAST}. Resume with: "
                        f"minigpt train --out {out_dir} --resume",
                    )
                lr = lr_at(state.step, cfg.optim, max_steps)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                step_loss = torch.zeros((), device=device)
                for micro_step in range(accum):
                    x, y = batcher.next()
                    # under DDP, gradients are averaged over ranks only on the last micro-step
                    sync = not dist.enabled or micro_step == accum - 1
                    with contextlib.nullcontext() if sync else train_model.no_sync(), ctx:
                        _, loss = train_model(x, y)
                        loss = loss / accum
                    scaler.scale(loss).backward()
                    step_loss += loss.detach()
                scaler.unscale_(optimizer)
                max_norm = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else math.inf
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                state.step += 1
                state.tokens_seen += tokens_per_step
                loss_sum += step_loss
                loss_count += 1
                bar.update(1)

                last_step = state.step == max_steps
                do_eval = state.step % cfg.train.eval_interval == 0 or last_step
                do_ckpt = bool(cfg.train.ckpt_interval) and state.step % cfg.train.ckpt_interval == 0
                do_log = state.step % cfg.log.interval == 0 or last_step
                if not (do_eval or do_ckpt or do_log):
                    continue
                # a sync point (the same steps on every rank): the mean loss over ranks since the last
                # log, and whether any rank was asked to stop; the only host sync between evals
                asked = float(stop.signum or 0)
                reduced = distributed.all_sum(torch.stack([loss_sum.float(), loss_sum.new_tensor(asked)]), dist)
                mean_loss = reduced[0].item() / dist.world_size / loss_count
                if dist.enabled and reduced[1].item() > 0:
                    stop_signal = stop.signum or signal.SIGTERM
                if not math.isfinite(mean_loss):  # never checkpoint a broken model
                    raise _diverged("training loss", mean_loss, state.step, cfg, out_dir)
                if do_log:
                    loss_sum.zero_()
                    loss_count = 0
                    now = time.perf_counter()
                    tps = (state.tokens_seen - tokens_at_log) / max(now - t_log, 1e-9)
                    t_log, tokens_at_log = now, state.tokens_seen
                    rates.append(tps)
                    shown = {"loss": f"{mean_loss:.4f}", "lr": f"{lr:.2e}", "tok_s": f"{tps:,.0f}"}
                    if peak is not None:
                        shown["mfu"] = f"{mfu_percent(tps, flops_tok, peak, dist.world_size):.1f}%"
                    bar.set_postfix(shown, refresh=False)
                    if writer is not None:
                        writer.add_scalar("train/loss", mean_loss, state.step)
                        writer.add_scalar("lr", lr, state.step)
                        writer.add_scalar("grad_norm", float(grad_norm), state.step)
                        writer.add_scalar("tokens_per_sec", tps, state.step)
                        if peak is not None:
                            writer.add_scalar("mfu", mfu_percent(tps, flops_tok, peak, dist.world_size), state.step)

                if do_eval:
                    t_eval = time.perf_counter()
                    local = estimate_loss(model, val_batches, ctx)
                    val_loss = distributed.all_sum(torch.tensor([local]), dist).item() / dist.world_size
                    if not math.isfinite(val_loss):
                        raise _diverged("validation loss", val_loss, state.step, cfg, out_dir)
                    improved = val_loss < state.best_val_loss
                    if improved:
                        state.best_val_loss = val_loss
                    ckpt = payload(val_loss)
                    save(ckpt, LAST)
                    if improved:
                        save(ckpt, BEST)
                    log(
                        f"step {state.step}: val loss {val_loss:.4f} ({val_loss / math.log(2):.3f} bpc)"
                        + (" *best" if improved else "")
                    )
                    if writer is not None:
                        writer.add_scalar("val/loss", val_loss, state.step)
                        writer.add_scalar("val/bpc", val_loss / math.log(2), state.step)
                        if cfg.log.sample_length > 0:
                            text = sample_text(model, tok, cfg, cfg.log.sample_length, cfg.train.seed)
                            # TensorBoard renders text as markdown: a code block keeps the line breaks
                            writer.add_text("sample", "```\n" + text + "\n```", state.step)
                        if attention_logger is not None:
                            attention_logger.log(writer, state.step)
                        writer.flush()
                    t_log += time.perf_counter() - t_eval  # keep eval time out of tokens/s
                elif do_ckpt:
                    save(payload(val_loss), LAST)
    finally:
        bar.close()
        if writer is not None:
            writer.close()
        if attention_logger is not None:
            attention_logger.close()

    wall = time.perf_counter() - t_start
    speed = ""
    if rates:
        rate = statistics.median(rates)
        speed = f", {rate:,.0f} tokens/s" + (
            f" (MFU {mfu_percent(rate, flops_tok, peak, dist.world_size):.1f}%)" if peak is not None else ""
        )
    log(
        f"done: {state.step} steps in {wall:.1f}s{speed}, best val loss {state.best_val_loss:.4f} "
        f"({state.best_val_loss / math.log(2):.3f} bpc)\n"
        f"  sample:      minigpt sample {out_dir}\n"
        f"  evaluate:    minigpt eval {out_dir}\n"
        f"  tensorboard: tensorboard --logdir {out_dir.parent}"
    )
    return TrainResult(out_dir, state.step, state.best_val_loss, val_loss, wall)
