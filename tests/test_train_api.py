"""minigpt.train(): the command line's training from Python, with callbacks that hear every event."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import minigpt
from minigpt.checkpoint import Checkpoint
from minigpt.training.events import scalar_curve

from .conftest import TINY


class Recorder(minigpt.Callback):
    """Every event, with the numbers it carries."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_train_start(self, trainer) -> None:
        self.events.append(("start", trainer.state.step))

    def on_step_end(self, trainer, stats) -> None:
        self.events.append(("step", trainer.state.step))

    def on_log(self, trainer, logs) -> None:
        self.events.append(("log", logs["step"], logs["loss"], logs["lr"], logs["grad_norm"]))

    def on_eval(self, trainer, val_loss, improved) -> None:
        self.events.append(("eval", trainer.state.step, val_loss, improved))

    def on_save(self, trainer, paths) -> None:
        self.events.append(("save", trainer.state.step, sorted(p.name for p in paths)))

    def on_train_end(self, trainer, result) -> None:
        self.events.append(("end", result.step, result.best_val_loss, result.full.loss))


def test_train_from_python_tells_every_event_and_trains_what_the_cli_trains(text_file: Path, tmp_path: Path, cli):
    # float32 and one thread: the dtype auto chooses and the threads a busy machine leaves are measured,
    # and two runs need not agree on them
    overrides = [*TINY, "train.max_steps=12", "train.eval_interval=6", "log.interval=4"]
    overrides += ["train.dtype=float32", "train.threads=1"]
    recorder = Recorder()
    run = minigpt.train(None, overrides, data=text_file, out=tmp_path / "api", callbacks=[recorder])
    events = recorder.events
    kinds = [e[0] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "end" and kinds.count("step") == 12
    steps = [e[1] for e in events if e[0] == "step"]
    assert steps == list(range(1, 13))
    # within a step: its log, its saves (written before on_eval hears of them), its eval, then step_end
    at = {n: [e[0] for e in events if e[0] not in ("start", "end") and e[1] == n] for n in (5, 6, 12)}
    assert at == {5: ["step"], 6: ["save", "eval", "step"], 12: ["log", "save", "eval", "step"]}
    logs = [e for e in events if e[0] == "log"]
    evals = [e for e in events if e[0] == "eval"]
    saves = [e for e in events if e[0] == "save"]
    assert [e[1] for e in logs] == [4, 8, 12] and [e[1] for e in evals] == [6, 12]
    assert [e[3] for e in evals] == [True, True] and evals[1][2] < evals[0][2]
    assert saves == [("save", 6, ["best.pt", "last.pt"]), ("save", 12, ["best.pt", "last.pt"])]

    results = json.loads((run.path / "results.json").read_text())
    end = events[-1]
    assert end == ("end", 12, results["best_val_loss_est"], results["val_loss_full"])
    assert results["best_val_loss_est"] == evals[1][2] and results["steps"] == 12
    train_loss = scalar_curve(run.path, "train/loss")
    assert train_loss["step"] == [4, 8, 12]
    assert train_loss["value"] == pytest.approx([e[2] for e in logs], rel=1e-6)
    assert scalar_curve(run.path, "lr")["value"] == pytest.approx([e[3] for e in logs], rel=1e-6)
    val = scalar_curve(run.path)  # the val estimate's curve, val/loss_est
    assert val["step"] == [6, 12] and val["value"] == pytest.approx([e[2] for e in evals], rel=1e-6)
    assert scalar_curve(run.path, "val/loss_full")["value"] == pytest.approx([results["val_loss_full"]], rel=1e-6)

    assert run.result.step == 12 and run.result.val_loss == evals[-1][2]
    assert isinstance(run.model, minigpt.api.Model) and run.model.path == run.path / "best.pt"
    assert run.model.sample("", max_new_tokens=20, seed=3) == minigpt.load(run.path).sample("", 20, seed=3)

    r = cli("train", "--data", text_file, "--out", tmp_path / "cli", *overrides)
    assert r.code == 0, r
    for name in ("last.pt", "best.pt"):
        a, b = Checkpoint.load(run.path / name).model, Checkpoint.load(tmp_path / "cli" / name).model
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name


def test_a_dict_config_and_the_cli_mistakes_raise_the_cli_line(text_file: Path, tmp_path: Path, cli) -> None:
    """The command line's message, naming where the key came from instead of the command line."""
    for overrides in (["model.n_layr=2"], ["train.max_steps=-1"], ["model.n_embd=30", "model.n_head=4"]):
        r = cli("train", "--data", text_file, "--out", tmp_path / "x", *overrides)
        assert r.code == 2 and r.err.startswith("error: command line: "), r
        with pytest.raises(minigpt.UserError) as raised:
            minigpt.train(None, overrides, data=text_file, out=tmp_path / "x")
        where = "minigpt.train()" if "model.n_head=4" in overrides else "overrides"  # two keys: the whole call
        assert r.err.strip() == f"error: {raised.value}".replace(f"error: {where}: ", "error: command line: ")
    with pytest.raises(minigpt.UserError, match="does not exist"):
        minigpt.train(tmp_path / "missing.yaml")
    with pytest.raises(minigpt.UserError, match=r"^config: unknown key 'model.n_layr'"):
        minigpt.train({"model": {"n_layr": 2}}, data=text_file, out=tmp_path / "x")
    with pytest.raises(minigpt.UserError, match=r"^overrides: override 'model.n_layer' must look like KEY=VALUE"):
        minigpt.train(None, ["model.n_layer"], data=text_file, out=tmp_path / "x")
    with pytest.raises(minigpt.UserError, match=r"^minigpt.train\(\): train.device must be auto, "):
        minigpt.train(None, device="tpu", data=text_file, out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


class Boom(minigpt.Callback):
    def on_log(self, trainer, logs) -> None:
        if logs["step"] == 8:
            raise ValueError("no room for the chart")


class StepBoom(minigpt.Callback):
    def on_step_end(self, trainer, stats) -> None:
        if trainer.state.step == 3:
            raise KeyError("x")


def test_a_callback_that_raises_stops_the_run_with_last_pt_saved(text_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    overrides = [*TINY, "train.max_steps=12", "train.eval_interval=6", "log.interval=4"]
    with pytest.raises(minigpt.UserError) as raised:
        minigpt.train(None, overrides, data=text_file, out=out, callbacks=[Boom()])
    message = str(raised.value)
    assert message.startswith("callback Boom failed in on_log at step 8: no room for the chart; saved ")
    assert f"resume with: minigpt train --out {out} --resume" in message
    assert Checkpoint.load(out / "last.pt").step == 8 and not (out / "results.json").exists()
    run = minigpt.train(None, overrides, data=text_file, out=out, resume=True)
    assert run.result.step == 12
    with pytest.raises(minigpt.UserError, match=r"^callback StepBoom failed in on_step_end at step 3: 'x'; saved "):
        minigpt.train(None, overrides, data=text_file, out=tmp_path / "step", callbacks=[StepBoom()])
    assert Checkpoint.load(tmp_path / "step" / "last.pt").step == 3


def test_one_plan_for_each_mode(trained_run: Path, text_file: Path, tmp_path: Path, cli) -> None:
    """plan_run turns a command into its mode, config and starting checkpoint; --dry-run prints it
    above the resolved config and writes nothing."""
    from minigpt.training.launch import Mode, plan_run
    from minigpt.training.plan import Resume

    new = plan_run(None, [f"data.path={text_file}", "model.n_layer=1"], tmp_path / "n", Resume.NO, False)
    assert (new.mode, new.cfg.model.n_layer, new.start) == (Mode.NEW, 1, None)
    assert new.explicit == {"data.path", "model.n_layer"}
    again = plan_run(None, ["train.max_steps=61"], trained_run, Resume.YES, False)
    assert again.mode is Mode.RESUME and again.start.step == 60 and again.cfg.train.max_steps == 61
    assert again.source == trained_run / "last.pt"
    done = plan_run(None, [], trained_run, Resume.AUTO, False)
    assert done.mode is Mode.FINISHED
    tune = plan_run(None, [f"train.init_from={trained_run}"], tmp_path / "t", Resume.NO, False)
    assert tune.mode is Mode.FINE_TUNE and tune.source == trained_run / "best.pt"
    assert tune.cfg.model == again.cfg.model  # the starting checkpoint's model section

    r = cli(
        "train",
        "--dry-run",
        "--init-from",
        trained_run,
        "--data",
        text_file,
        "--out",
        tmp_path / "t",
        "train.max_steps=5",
    )
    assert r.code == 0, r
    assert r.out.startswith(f"# plan: fine-tune {trained_run / 'best.pt'} (step ") and "max_steps: 5" in r.out
    assert not (tmp_path / "t").exists()


def test_train_takes_a_shipped_configs_name_from_any_folder(text_file: Path, tmp_path: Path, monkeypatch) -> None:
    """minigpt.train("cpu_4min") reads the shipped file, as `minigpt train cpu_4min` does."""
    monkeypatch.chdir(tmp_path)  # no configs/ here
    tiny = [*TINY, "train.max_steps=2", "train.final_eval=false", "log.tensorboard=false"]
    run = minigpt.train("cpu_4min", overrides=tiny, data=text_file, out="r")
    saved = (tmp_path / "r" / "config.yaml").read_text(encoding="utf-8")
    assert run.result.step == 2 and "max_time: 232s" in saved and "n_embd: 32" in saved  # the file, then overrides
    assert repr(run) == f"<minigpt.Run r: 2 steps, best val est {run.result.best_val_loss:.4f}>"  # a notebook's view
    with pytest.raises(minigpt.UserError, match=r"config file cpu_5min does not exist \(the shipped configs"):
        minigpt.train("cpu_5min")


def test_train_returns_the_model_on_the_device_it_trained_on(text_file: Path, tmp_path: Path, monkeypatch) -> None:
    """A run trained on the CPU (train.device=cpu in TINY) comes back on the CPU, though a GPU is
    visible by the end (`auto` would pick it): the device the run resolved, not `auto` again."""

    class GpuAppears(minigpt.Callback):
        def on_train_end(self, trainer, result) -> None:
            monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    run = minigpt.train(
        None, [*TINY, "train.max_steps=2"], data=text_file, out=tmp_path / "r", callbacks=[GpuAppears()]
    )
    assert run.model is not None and run.model.loaded.model.device == torch.device("cpu")
