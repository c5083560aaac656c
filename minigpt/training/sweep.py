"""`minigpt sweep`: one run per grid point in `OUT/<its values>`; repeating it continues (docs/runs.md)."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import random
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from minigpt.config.files import check_overrides, parse_override
from minigpt.config.schema import Config
from minigpt.errors import Diverged, TrainingInterrupted, UserError

DEFINITION = "sweep.yaml"
MAX_VALUE_CHARS = 24  # a value longer than this is shortened in a run's name (with a hash, so names stay apart)


@dataclass(frozen=True)
class Point:
    name: str  # the run's directory under the sweep's folder
    values: tuple[tuple[str, str], ...]  # (key, value as written on the command line)

    def overrides(self) -> list[str]:
        return [f"{key}={value}" for key, value in self.values]


@dataclass(frozen=True)
class Sweep:
    """The config, the fixed keys, each varying key's values (as written), and which points run."""

    out: Path
    config: Path | None
    fixed: dict[str, str]  # key -> value, for every run
    grid: dict[str, list[str]]  # key -> its values (two or more), in command-line order
    random: int | None = None  # draw this many distinct points of the grid
    seed: int = 0

    @property
    def varying(self) -> list[str]:
        """The keys that vary: a run's name, a table's columns, the HParams' keys."""
        return list(self.grid)

    def points(self) -> list[Point]:
        """Every grid point (last key fastest), or `random` of them drawn with `seed`, in grid order."""
        combos = list(itertools.product(*self.grid.values()))
        if self.random is not None:
            if self.random > len(combos):
                raise UserError(
                    f"--random {self.random}: the grid has only {len(combos)} points; drop --random to run them all"
                )
            combos = [combos[i] for i in sorted(random.Random(self.seed).sample(range(len(combos)), self.random))]
        labels = {key: value_labels(values) for key, values in self.grid.items()}
        short = short_keys(self.varying)
        return [
            Point(
                ",".join(f"{short[k]}={labels[k][v]}" for k, v in zip(self.grid, combo)), tuple(zip(self.grid, combo))
            )
            for combo in combos
        ]

    def overrides(self, point: Point) -> list[str | tuple[str, Any]]:
        """The HParams keys first (a fixed log.hparam_keys may replace them), the fixed keys, the point's values."""
        fixed = [f"{key}={value}" for key, value in self.fixed.items()]
        return [("log.hparam_keys", self.varying), *fixed, *point.overrides()]

    def config_of(self, point: Point) -> Config:
        """The point's config as `minigpt train` resolves it for its folder (`plan_run`, as --resume auto)."""
        from minigpt.runtime.device import log_sink
        from minigpt.training.launch import plan_run
        from minigpt.training.plan import Resume

        with log_sink(lambda line: None):  # what the run will say when it starts
            return plan_run(self.config, self.overrides(point), self.out / point.name, Resume.AUTO, True).cfg

    def definition(self) -> dict[str, Any]:
        config = str(self.config.resolve()) if self.config is not None else None
        return {"config": config, "fixed": self.fixed, "grid": self.grid, "random": self.random, "seed": self.seed}


def split_values(text: str) -> list[str]:
    """'1e-3,3e-3' -> ['1e-3', '3e-3']; commas inside brackets, braces or a leading quote do not split."""
    values, depth, quote, start = [], 0, "", 0
    for i, c in enumerate(text):
        if quote:
            quote = "" if c == quote else quote
        elif c in "\"'" and i == start:
            quote = c
        elif c in "[{(":
            depth += 1
        elif c in "]})":
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            values.append(text[start:i])
            start = i + 1
    return [*values, text[start:]]


def parse_grid(items: list[str]) -> tuple[dict[str, str], dict[str, list[str]]]:
    """KEY=V1,V2 items -> (fixed keys, grid), each value checked as a KEY=VALUE override is."""
    fixed: dict[str, str] = {}
    grid: dict[str, list[str]] = {}
    for item in items:
        key, _, text = item.partition("=")
        key = key.strip()
        values = split_values(text)
        if key in fixed or key in grid:
            raise UserError(f"command line: {key} is given twice; list its values once, e.g. {key}=V1,V2")
        if len(values) > 1 and "" in values:
            raise UserError(f"command line: {item} has an empty value; separate the values with single commas")
        seen: list[tuple[Any, str]] = []
        for value in values:
            check_overrides([f"{key}={value}"])
            same = [text for parsed, text in seen if parsed == same_value(key, value)]
            if same:
                raise UserError(f"command line: {key} lists the same value twice ({same[0]} and {value})")
            seen.append((same_value(key, value), value))
        if len(values) == 1:
            fixed[key] = values[0]
        else:
            grid[key] = values
    if not grid:
        raise UserError(
            "nothing to sweep: give at least one key with two or more values, e.g. model.n_layer=2,4 optim.lr=1e-3,3e-3"
        )
    return fixed, grid


def same_value(key: str, value: str) -> Any:
    """`value` as parsed for `key`, so 1e-3 and 0.001 compare equal."""
    parsed = parse_override(f"{key}={value}")[1]
    if isinstance(parsed, str):
        try:
            return float(parsed)
        except ValueError:
            return parsed
    return parsed


def short_keys(keys: list[str]) -> dict[str, str]:
    """Each key by its last part in run names (n_layer), or whole where two keys share that part."""
    tails = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: t if tails.count(t) == 1 else k for k, t in zip(keys, tails)}


def value_labels(values: list[str]) -> dict[str, str]:
    """Each value as a run's name shows it: unsafe characters '_', a hash added when long or ambiguous."""

    def tag(v: str) -> str:
        return hashlib.sha1(v.encode("utf-8")).hexdigest()[:6]

    safe = {v: re.sub(r"[^A-Za-z0-9._+-]", "_", v).strip("_") or tag(v) for v in values}
    for v, s in safe.items():
        if len(s) > MAX_VALUE_CHARS:
            safe[v] = f"{s[: MAX_VALUE_CHARS - 7]}-{tag(v)}"
    clash = {s for s in safe.values() if list(safe.values()).count(s) > 1}
    return {v: f"{s}-{tag(v)}" if s in clash else s for v, s in safe.items()}


def plan_sweep(config: Path | None, items: list[str], out: Path | None, draw: int | None, seed: int) -> Sweep:
    """The sweep the command line describes, every point's config and the folder checked before any run."""
    fixed, grid = parse_grid(items)
    name = config.stem if config is not None else "default"
    sweep = Sweep(out if out is not None else Path("runs") / f"{name}-sweep", config, fixed, grid, draw, seed)
    for point in sweep.points():
        try:
            sweep.config_of(point)
        except UserError as e:
            raise UserError(f"sweep point {point.name}: {e}") from None
    check_folder(sweep)
    return sweep


def read_definition(folder: Path) -> dict[str, Any] | None:
    """The sweep.yaml of `folder` as written, or None when it holds none."""
    path = folder / DEFINITION
    if not path.is_file():
        return None
    try:
        found = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    if not isinstance(found, dict) or not isinstance(found.get("grid"), dict):
        raise UserError(f"{path} is not a minigpt sweep definition (it has no grid)")
    return found


def sweep_of(folder: Path) -> Sweep | None:
    """The sweep whose runs `folder` holds (from its sweep.yaml), or None."""
    found = read_definition(folder)
    if found is None:
        return None
    config = Path(found["config"]) if found.get("config") else None
    fixed = {str(k): str(v) for k, v in (found.get("fixed") or {}).items()}
    grid = {str(k): [str(v) for v in values] for k, values in found["grid"].items()}
    return Sweep(folder, config, fixed, grid, found.get("random"), int(found.get("seed") or 0))


def check_folder(sweep: Sweep) -> None:
    """A folder holds one grid: the same definition continues it; another grid, or non-sweep runs, are refused."""
    before = read_definition(sweep.out)
    if before is not None:
        now = sweep.definition()
        differ = [k for k in ("config", "fixed", "grid") if before.get(k) != now[k]]
        if differ:
            shown = "; ".join(definition_change(k, before.get(k), now[k]) for k in differ)
            raise UserError(
                f"{sweep.out} holds another sweep ({shown}); sweep into another --out, or repeat the command "
                f"that {sweep.out / DEFINITION} records to continue that one"
            )
        return
    if sweep.out.is_dir():
        held = sorted(str(p.parent) for pattern in ("last.pt", "best.pt") for p in sweep.out.rglob(pattern))
        if held:
            raise UserError(f"{sweep.out} already holds runs that are not a sweep's ({held[0]}); give another --out")


def definition_change(part: str, before: Any, now: Any) -> str:
    """What differs in one part of two definitions, key by key for the grid and the fixed keys."""
    if not (isinstance(before, dict) and isinstance(now, dict)):
        return f"{part} {before!r} there, {now!r} here"

    def shown(values: Any) -> str:
        return ",".join(values) if isinstance(values, list) else "unset" if values is None else str(values)

    keys = [k for k in dict.fromkeys([*before, *now]) if before.get(k) != now.get(k)]
    return ", ".join(f"{part} {k} {shown(before.get(k))} there, {shown(now.get(k))} here" for k in keys)


def save_definition(sweep: Sweep) -> None:
    from minigpt.training.disk import write_run_file

    sweep.out.mkdir(parents=True, exist_ok=True)
    text = "# minigpt sweep: run the same command again to continue it; each run is a folder here\n"
    write_run_file(sweep.out / DEFINITION, text + yaml.safe_dump(sweep.definition(), sort_keys=False))


@dataclass
class Outcome:
    point: Point
    note: str  # what happened to the run in this command: trained, resumed, finished before, not run...


def run_sweep(sweep: Sweep, max_total: float | None, started: float) -> list[Outcome]:
    """Train every unfinished point in turn; past `max_total` seconds from `started`, stop and start no more."""
    from minigpt.runtime.device import log

    if max_total is not None and not hasattr(signal, "setitimer"):
        raise UserError("--max-total-time needs a POSIX system (its timer stops the run in progress); leave it out")
    save_definition(sweep)
    points = sweep.points()
    deadline = started + max_total if max_total else None
    outcomes: list[Outcome] = []
    with stop_between_runs(sweep, points, outcomes):
        for i, point in enumerate(points, 1):
            log(f"sweep: run {i} of {len(points)}: {sweep.out / point.name}")
            left = deadline - time.perf_counter() if deadline is not None else None
            outcomes.append(Outcome(point, train_point(sweep, point, left)))
    return outcomes


def train_point(sweep: Sweep, point: Point, left: float | None) -> str:
    """Start, resume or skip one point's run as `--resume auto` would, within `left` seconds; what happened."""
    from minigpt.checkpoint import LAST, Checkpoint, find_checkpoint
    from minigpt.runtime.device import forget_compiled, log
    from minigpt.training.launch import start_run, why_finished
    from minigpt.training.plan import Resume

    out = sweep.out / point.name
    existing = find_checkpoint(out, prefer=LAST)
    if existing is not None:
        ckpt = Checkpoint.load(existing, verify=())
        done = why_finished(out, ckpt, sweep.config_of(point))
        if done:
            log(f"{out} is finished: {done} at step {ckpt.step}; skipping it")
            return "finished before"
    if left is not None and left < 1:
        log(f"{out} is not started: --max-total-time ran out")
        return "not run: --max-total-time ran out"
    forget_compiled()
    with RunBudget(left) as budget:
        try:
            start_run(sweep.config, sweep.overrides(point), out, Resume(existing is not None), time.perf_counter())
            budget.active = False
        except TrainingInterrupted:
            if not budget.ran_out:
                raise
            return "cut short by --max-total-time"
        except Diverged as e:
            log(f"error: {e}")  # a rate too high is an outcome of a sweep, not a mistake in the command: go on
            return "diverged"
    return "resumed" if existing is not None else "trained"


class RunBudget:
    """The seconds one run may take (None: no limit); then it is stopped as SIGUSR1 stops it (docs/runs.md)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds
        self.active = False  # the run is in progress: a stop now is the budget's
        self.ran_out = False
        self._previous: Any = None

    def __enter__(self) -> RunBudget:
        if self.seconds is not None:
            self.active = True
            self._previous = signal.signal(signal.SIGALRM, self._alarm)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.active = False
        if self.seconds is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._previous)

    def _alarm(self, signum: int, frame: Any) -> None:
        from minigpt.runtime.device import log

        if not self.active:
            return
        self.ran_out = True
        log("sweep: --max-total-time ran out; stopping the run in progress (it saves last.pt and resumes next time)")
        handler = signal.getsignal(signal.SIGUSR1)  # the trainer's, or between its steps stop_between_runs'
        if callable(handler):
            handler(signal.SIGUSR1, frame)


@contextlib.contextmanager
def stop_between_runs(sweep: Sweep, points: list[Point], outcomes: list[Outcome]) -> Iterator[None]:
    """A stop signal between runs ends the sweep at once (during one, the trainer saves first), exit 128 + signum."""
    from minigpt.training.interrupts import STOP_SIGNALS

    def stop(signum: int, frame: Any) -> None:
        raise TrainingInterrupted(128 + signum, signal.Signals(signum).name)

    previous = {}
    for sig in STOP_SIGNALS:
        with contextlib.suppress(ValueError):  # not the main thread (a test runner's): signals stay as they were
            previous[sig] = signal.signal(sig, stop)
    try:
        yield
    except TrainingInterrupted as e:
        n = len(outcomes)
        where = f"in run {n + 1} of {len(points)} ({sweep.out / points[n].name})" if n < len(points) else "at its end"
        raise TrainingInterrupted(
            e.exit_code,
            f"sweep {sweep.out} stopped {where}; {n} run(s) done. Run the same minigpt sweep command again to go "
            "on: finished runs are skipped, an interrupted one resumes from its last.pt",
        ) from None
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
