"""Self-describing checkpoints (docs/design.md): what one holds (`Checkpoint`: tensors and plain data, read
with `weights_only`), written atomically with a checksum per tensor, and which ones a run directory holds:
`last.pt`, `best.pt` and the weights-only snapshots `step_NNNNNNN.pt`, which no resume starts from."""

from __future__ import annotations

import dataclasses
import difflib
import re
import shlex
import warnings
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import xxhash

from minigpt.errors import UserError
from minigpt.io import atomic
from minigpt.io.diskspace import write_errors

FORMAT = "minigpt-checkpoint"
VERSION = 1
LAST, BEST = "last.pt", "best.pt"
SNAPSHOT = re.compile(r"^step_(\d{7,})\.pt$")  # a snapshot's name
RESUME_SECTIONS = ("optimizer", "scaler", "rng", "rng_ranks")  # the tensors a resume needs beyond the weights
HASH_THREADS = 8  # at most: past a few cores the memory, not the hash, sets the pace
PARALLEL_BYTES = 4 << 20  # tensors smaller than this in all are hashed on the calling thread
MAX_RUNS_NAMED = 6  # a folder of runs given for one run: the first few are named


class Damaged(UserError):
    """A checkpoint whose bytes are not those written (cut short, garbled, a checksum that does not
    match); a resume falls back to another of the run's. `fact` is the line without its advice."""

    def __init__(self, fact: str, advice: str = ""):
        super().__init__(f"{fact}; {advice}" if advice else fact)
        self.fact = fact


@dataclass
class Checkpoint:
    """Everything a checkpoint holds; the on-disk dict has exactly these keys (plus the format
    marker and version). Sampling and evaluation need the first four; a resume needs the rest."""

    model: dict[str, torch.Tensor]  # the unwrapped model's state dict: loads with or without DDP
    config: dict[str, Any]  # the resolved config (Config.to_dict())
    tokenizer: dict[str, Any]  # CharTokenizer.to_dict()
    data: dict[str, Any]  # {"path": absolute path of the text, "sha256": its content hash}
    step: int | None = None  # optimizer steps taken
    tokens_seen: int | None = None
    best_val_loss: float | None = None
    best_step: int | None = None  # the step of best_val_loss
    evals_since_best: int | None = None  # evaluations without an improvement that counts (patience)
    time_progress: float | None = None  # optim.schedule_by=time: the fraction of the decay done
    val_loss: float | None = None  # the fixed-batch estimate at this step, if evaluated
    optimizer: dict[str, Any] | None = None
    scaler: dict[str, Any] | None = None  # the fp16 GradScaler, when one is used
    rng: dict[str, Any] | None = None  # this process's torch RNG states and the batch generator
    rng_ranks: list[dict[str, Any]] | None = None  # every rank's torch RNG states under DDP
    # the config's keys auto chose and where: {"keys": ["train.dtype", ...], "device": "cpu", "processes": 1}
    decided: dict[str, Any] | None = None
    init_from: dict[str, Any] | None = None  # fine-tuned: {"path", "step", "val_loss"} of the starting checkpoint
    checksums: dict[str, str] | None = None  # xxh3-64 of each tensor by dotted name (save recomputes them)

    RESUME_KEYS = ("optimizer", "rng", "step", "tokens_seen", "best_val_loss")

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any], path: Path) -> Checkpoint:
        """The typed view of a loaded checkpoint; one missing essential key is a damaged file."""
        names = [f.name for f in dataclasses.fields(cls)]
        missing = [k for k in ("model", "config", "tokenizer") if k not in raw]
        if missing:
            raise UserError(f"{path} is a damaged minigpt checkpoint: it lacks {', '.join(missing)}")
        dicts = ("model", "config", "tokenizer", "data", "optimizer", "rng", "init_from", "decided")
        odd = [k for k in dicts if raw.get(k) is not None and not isinstance(raw[k], dict)]
        if odd:
            raise UserError(
                f"{path} is a damaged minigpt checkpoint: its {odd[0]} is {type(raw[odd[0]]).__name__}, not a dict"
            )
        return cls(**{k: raw[k] for k in names if k in raw and k != "data"}, data=raw.get("data") or {})

    def check_resumable(self, path: Path) -> None:
        """Everything a resume needs is there and its bytes match their checksums."""
        missing = [k for k in self.RESUME_KEYS if getattr(self, k) is None]
        if missing:
            raise UserError(f"{path} cannot be resumed: it lacks {', '.join(missing)} (a damaged or foreign file)")
        verify_tensors(self.to_dict(), path, RESUME_SECTIONS)

    def save(self, path: Path) -> None:
        """Write atomically; any failed write is one `WriteError` line, and the previous file stays as it was."""
        payload = self.to_dict()
        kept = f"the previous {path.name} is unchanged" if path.is_file() else f"no {path.name} was written"
        after = f"{kept}; then resume: {resume_command(path.parent, auto=True)}"
        with write_errors(path, payload_bytes(payload), after):
            save_checkpoint(payload, path)

    @classmethod
    def load(cls, path: Path, verify: tuple[str, ...] = ("model",)) -> Checkpoint:
        """Read `path`, checking the bytes of the `verify` sections' tensors (the weights: what
        sampling reads; `check_resumable` checks the rest; `()` for only the config and counters)."""
        raw = load_checkpoint(path)
        verify_tensors(raw, path, verify)
        return cls.from_dict(raw, path)


def _tensors(obj: Any, name: str) -> Iterator[tuple[str, torch.Tensor]]:
    """Every tensor in `obj` with its dotted name (`model.blocks.3.mlp.fc.weight`, `optimizer.state.0.exp_avg`)."""
    if isinstance(obj, torch.Tensor):
        yield name, obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield from _tensors(value, f"{name}.{key}")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _tensors(value, f"{name}.{i}")


def _digest(tensor: torch.Tensor) -> str:
    """xxh3-64 of a CPU tensor's bytes, in element order."""
    return xxhash.xxh3_64_hexdigest(tensor.detach().contiguous().reshape(-1).view(torch.uint8).numpy())


def _digests(tensors: list[torch.Tensor]) -> list[str]:
    """`_digest` of each tensor, in order, on torch's thread count (at most HASH_THREADS), one share of
    about equal bytes a thread. Speed trick: cores divide the hash's time (xxhash releases the GIL);
    benchmark scripts/checksum_bench.py --hash-threads 1 against the default."""
    threads = min(HASH_THREADS, torch.get_num_threads(), len(tensors))
    if threads < 2 or sum(t.nbytes for t in tensors) < PARALLEL_BYTES:
        return [_digest(t) for t in tensors]
    shares: list[list[int]] = [[] for _ in range(threads)]
    loads = [0] * threads
    for i in sorted(range(len(tensors)), key=lambda i: -tensors[i].nbytes):  # largest first, to the lightest share
        lightest = loads.index(min(loads))
        shares[lightest].append(i)
        loads[lightest] += tensors[i].nbytes
    digests: list[str] = [""] * len(tensors)

    def hash_share(share: list[int]) -> None:
        for i in share:
            digests[i] = _digest(tensors[i])

    with ThreadPoolExecutor(threads, thread_name_prefix="checksum") as pool:
        list(pool.map(hash_share, shares))  # list(): a thread's exception is raised here
    return digests


def tensor_checksums(payload: dict[str, Any]) -> dict[str, str]:
    """The checksum of every tensor in a checkpoint's payload (CPU tensors), by dotted name."""
    named = [nt for key, value in payload.items() if key != "checksums" for nt in _tensors(value, key)]
    return dict(zip([n for n, _ in named], _digests([t for _, t in named])))


def verify_tensors(raw: dict[str, Any], path: Path, sections: tuple[str, ...]) -> None:
    """Raise `Damaged` naming the first tensor of `sections` not matching its checksum
    (a file without checksums passes)."""
    sums = raw.get("checksums")
    if not isinstance(sums, dict):
        return
    named = [nt for section in sections for nt in _tensors(raw.get(section), section)]
    for (name, _), digest in zip(named, _digests([t for _, t in named])):
        if sums.get(name) != digest:
            raise Damaged(
                f"{path} is damaged: the bytes of {name.removeprefix('model.')} do not match their checksum",
                "a disk or a copy changed them: copy the file again, or use another checkpoint of the run",
            )


def _map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """`obj` with each tensor in its dicts, lists and tuples replaced by `fn(tensor)`."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(v, fn) for v in obj)
    return obj


def resume_command(run: Path, *overrides: str, auto: bool = False) -> str:
    """The command that continues the run in `run`, shell-quoted (`overrides`: KEY=VALUE words)."""
    words = ["minigpt", "train", "--out", str(run), "--resume", *(["auto"] if auto else []), *overrides]
    return " ".join(shlex.quote(w) for w in words)


def payload_bytes(obj: Any) -> int:
    """About what `torch.save(obj)` writes: the tensors' bytes plus a little for each entry and the archive."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size() + 256  # a record of its own, aligned to 64 bytes
    if isinstance(obj, dict):
        return sum(payload_bytes(k) + payload_bytes(v) for k, v in obj.items()) + 16
    if isinstance(obj, (list, tuple)):
        return sum(payload_bytes(v) for v in obj) + 16
    return len(obj) + 8 if isinstance(obj, (str, bytes)) else 16


def save_checkpoint(payload: dict[str, Any], path: Path) -> None:
    """Atomically write `payload` to `path` with each tensor's checksum, computed on the CPU copy torch.save makes."""
    copies: dict[tuple, torch.Tensor] = {}

    def cpu(t: torch.Tensor) -> torch.Tensor:
        """On the CPU, as torch.save would write it: one copy of a tensor that appears twice (a tied head), so
        that it is still saved once and shared; a CPU tensor is not copied."""
        if t.device.type == "cpu":
            return t
        view = (t.untyped_storage().data_ptr(), t.storage_offset(), t.size(), t.stride(), t.dtype)
        if view not in copies:
            copies[view] = t.detach().cpu()
        return copies[view]

    payload = _map_tensors(payload, cpu)
    payload = {"format": FORMAT, "version": VERSION, **payload, "checksums": tensor_checksums(payload)}
    atomic.atomic_write(path, lambda f: torch.save(payload, f))


def load_checkpoint(path: Path) -> dict[str, Any]:
    """Load a minigpt checkpoint on the CPU with `weights_only=True`; refuse anything else."""
    if not path.exists():
        raise UserError(f"checkpoint {path} does not exist")
    if path.is_dir():
        raise UserError(f"{path} is a directory, not a checkpoint file")
    with path.open("rb") as f:
        magic = f.read(4)
        if not magic:
            raise Damaged(f"{path} is damaged or truncated (the file is empty)")
        if magic != b"PK\x03\x04":  # torch.save writes a zip archive
            raise UserError(f"{path} is not a minigpt checkpoint (not a PyTorch checkpoint file at all)")
        # torch.load opens the file by name twice (its zip reader, then the mmap): through this open file, both
        # read one file even if a training replaces `path` meanwhile (a mix of two saves fails its checksums)
        source = Path(f"/proc/self/fd/{f.fileno()}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # e.g. torch's note on a foreign pickle protocol: we refuse or load
                # mmap: tensors are paged in when used, so sampling does not read the optimizer state
                ckpt = torch.load(source if source.exists() else path, map_location="cpu", weights_only=True, mmap=True)
        except Exception as e:  # torch raises many kinds, with paragraphs of its zip reader's or unpickler's text
            raise _unreadable(path, e) from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != FORMAT:
        raise UserError(f"{path} is not a minigpt checkpoint (no '{FORMAT}' marker)")
    if ckpt.get("version") != VERSION:
        raise UserError(f"{path} is a version {ckpt.get('version')} checkpoint; this minigpt reads version {VERSION}")
    return ckpt


def _unreadable(path: Path, error: Exception) -> UserError:
    """One short line for a zip file torch.load refused: code it would not run, not a checkpoint, or damaged."""
    text = str(error)
    code = re.search(r"GLOBAL (\S+)", text)  # torch's unpickler names the function it will not call
    if code:
        return UserError(
            f"refusing to load {path}: it holds objects that would run code when loaded ({code.group(1)}); "
            "minigpt checkpoints hold only tensors and plain data"
        )
    try:  # the central directory is the zip's last record: a file cut short has none
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return Damaged(f"{path} is damaged or truncated (its zip directory, written last, is missing)")
    if not any(name.endswith("/data.pkl") for name in names):
        return UserError(f"{path} is not a minigpt checkpoint (a zip archive, not a PyTorch checkpoint)")
    unpickler = re.search(r"WeightsUnpickler error:\s*(.+)", text)  # torch's reason, after its advice
    reason = unpickler.group(1).strip()[:80] if unpickler else type(error).__name__
    return Damaged(f"{path} is damaged or truncated (its contents are garbled: {reason})")


def find_checkpoint(run_dir: Path, prefer: str) -> Path | None:
    """A run directory's `prefer` checkpoint (LAST: resuming; BEST: sampling), else the other, else None."""
    names = (prefer, LAST if prefer == BEST else BEST)
    return next((run_dir / name for name in names if (run_dir / name).is_file()), None)


def resolve_checkpoint(target: Path, prefer: str) -> Path:
    """A checkpoint file, or a run directory's checkpoint by `prefer`; an error if there is none,
    with the run or checkpoint beside it whose name is nearest, or the runs a folder holds."""
    if not target.exists():
        near = nearest_run_path(target)
        hint = f"did you mean {near}?" if near else "give a run directory or a .pt checkpoint"
        raise UserError(f"{target} does not exist ({hint})")
    if target.is_file():
        return target
    found = find_checkpoint(target, prefer)
    if found is None:
        inside = runs_inside(target)
        if inside:
            shown = ", ".join(str(p) for p in inside[:MAX_RUNS_NAMED])
            more = f" and {len(inside) - MAX_RUNS_NAMED} more" if len(inside) > MAX_RUNS_NAMED else ""
            raise UserError(
                f"{target} is a folder of runs, not a run: give one of them, {shown}{more} "
                f"('minigpt runs {target}' compares them)"
            )
        other = LAST if prefer == BEST else BEST
        raise UserError(f"run directory {target} holds no checkpoint ({prefer} or {other}); train into it first")
    return found


def resumable_checkpoint(path: Path, say: Callable[[str], None]) -> tuple[Path, Checkpoint]:
    """The run's checkpoint `path` checked whole for a resume; if damaged, the run's intact best.pt (said
    in one line), else the damage, naming the newest intact snapshot to start again from."""
    try:
        return path, _load_resumable(path)
    except Damaged as damage:
        fallback = path.parent / BEST
        if path.name != BEST and fallback.is_file():
            try:
                ckpt = _load_resumable(fallback)
            except UserError:
                pass
            else:
                say(f"{damage.fact}; resuming from {fallback.name} (step {ckpt.step}) instead")
                return fallback, ckpt
        for snapshot in reversed(list_snapshots(path.parent)):  # the newest whose weights load
            try:
                Checkpoint.load(snapshot)
            except UserError:
                continue
            raise Damaged(
                damage.fact,
                f"no intact resumable checkpoint is left, but {snapshot.name} is: start from its weights with "
                f"minigpt train --init-from {snapshot} --out NEW_RUN",
            ) from None
        raise damage from None


def _load_resumable(path: Path) -> Checkpoint:
    """`path` checked whole, its optimizer state copied out of the file's mapping, which the optimizer writes.
    Speed trick: a resume's first step without a fault a page; benchmark scripts/checksum_bench.py (resume_step)."""
    ckpt = Checkpoint.load(path)
    ckpt.check_resumable(path)
    return dataclasses.replace(ckpt, optimizer=_map_tensors(ckpt.optimizer, torch.clone))


def val_loss_text(val_loss: object) -> str:
    """', val est 2.7069' (the in-training estimate on fixed batches) for a header, or '' without one."""
    return f", val est {val_loss:.4f}" if isinstance(val_loss, float) else ""


def runs_inside(folder: Path) -> list[Path]:
    """The run directories (holding last.pt or best.pt) under `folder`, at any depth, in path order."""
    return sorted({p.parent for name in (LAST, BEST) for p in folder.rglob(name) if p.is_file()})


def nearest_run_path(target: Path) -> Path | None:
    """The folder or .pt file beside a mistyped `target` whose name is nearest to it, if one is near."""
    parent = target.parent
    if parent != target and not parent.exists():  # ruins/default: the folder is the typo
        parent = nearest_run_path(parent) or parent
    try:
        names = [p.name for p in parent.iterdir() if p.is_dir() or p.suffix == ".pt"]
    except OSError:
        return None
    if target.name in names:
        return parent / target.name
    close = difflib.get_close_matches(target.name, names, n=1, cutoff=0.6)
    return parent / close[0] if close else None


def snapshot_name(step: int) -> str:
    """`step_0000100.pt`: seven digits, so that names sort by step up to ten million steps."""
    return f"step_{step:07d}.pt"


def list_snapshots(run_dir: Path) -> list[Path]:
    """The run directory's snapshots in step order (not the dot-named files of a write in progress)."""
    if not run_dir.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in run_dir.iterdir() if (m := SNAPSHOT.match(p.name)) and p.is_file()]
    return [p for _, p in sorted(found)]
