"""TensorBoard's HParams dashboard and embedding projector, read back from tiny runs with
tensorboard's own readers: what each run writes, where, and that it makes no stray run."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from minigpt.checkpoint import load_checkpoint
from minigpt.config.schema import all_keys
from minigpt.training import loop

from .helpers import TINY, make_text

METRICS = ["val/loss_est", "val/bpc_est", "val/loss_full", "val/bpc_full"]
# characters make_text lacks: a digit, a tab, a caseless letter, a symbol, a vertical tab (unprintable)
EXTRA = "Act 3:\tExit, pursued by a bear. \u4e2d\u20ac\x0b\n"


def train(cli, tmp_path: Path, *overrides: str) -> Path:
    data = tmp_path / "text.txt"
    data.write_text(EXTRA + make_text(), encoding="utf-8")
    out = tmp_path / "run"
    r = cli("train", "--data", data, "--out", out, *TINY, "train.max_steps=10", "train.eval_interval=5", *overrides)
    assert r.code == 0, r
    return out


def hparams_data(run: Path) -> dict[str, object]:
    """The run's HParams plugin records by tag (experiment, session start, session end), parsed."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    acc = EventAccumulator(str(run))
    acc.Reload()
    try:
        content = acc.PluginTagToContent(metadata.PLUGIN_NAME)
    except KeyError:  # no summary of the plugin's at all
        content = {}
    parsed = {}
    for tag, data in content.items():
        plugin_data = HParamsPluginData()
        plugin_data.ParseFromString(data)
        parsed[tag] = getattr(plugin_data, plugin_data.WhichOneof("data"))
    return parsed


def tensorboard_runs(logdir: Path) -> list[Path]:
    """The folders TensorBoard lists as runs (those holding event files), found as it finds them."""
    from tensorboard.backend.event_processing.io_wrapper import GetLogdirSubdirectories

    return sorted(Path(p) for p in GetLogdirSubdirectories(str(logdir)))


def projector_rows(run: Path, step: int) -> list[list[str]]:
    folder = run / f"{step:05d}" / "embeddings"
    return [line.split("\t") for line in (folder / "metadata.tsv").read_text(encoding="utf-8").splitlines()]


def test_a_run_records_its_hparams_and_embeddings_in_its_own_folder(cli, tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, metadata

    run = train(cli, tmp_path)
    assert tensorboard_runs(tmp_path) == [run]  # add_hparams would have made a second, timestamped run

    records = hparams_data(run)
    assert set(records) == {metadata.EXPERIMENT_TAG, metadata.SESSION_START_INFO_TAG, metadata.SESSION_END_INFO_TAG}
    experiment = records[metadata.EXPERIMENT_TAG]
    shown = [k for k in all_keys() if k.split(".")[0] in ("model", "optim", "train")]
    infos = {h.name: h for h in experiment.hparam_infos}
    assert list(infos) == shown
    assert [m.name.tag for m in experiment.metric_infos] == METRICS
    assert infos["model.n_layer"].type == api_pb2.DATA_TYPE_FLOAT64
    pos_emb = infos["model.pos_emb"]
    assert [v.string_value for v in pos_emb.domain_discrete.values] == ["learned", "sinusoidal", "rope"]
    assert [v.string_value for v in infos["model.bias"].domain_discrete.values] == ["false", "true"]
    assert not infos["optim.lr"].HasField("domain_discrete")

    start = records[metadata.SESSION_START_INFO_TAG].hparams
    assert start["model.n_layer"].number_value == 2 and start["optim.lr"].number_value == pytest.approx(3e-3)
    assert start["model.pos_emb"].string_value == "rope" and start["model.bias"].string_value == "false"
    assert start["train.max_time"].string_value == "null" and start["train.device"].string_value == "cpu"
    assert records[metadata.SESSION_END_INFO_TAG].status == api_pb2.STATUS_SUCCESS

    acc = EventAccumulator(str(run))
    acc.Reload()
    assert set(METRICS) <= set(acc.Tags()["scalars"])  # the dashboard's metric columns read these

    config = (run / "projector_config.pbtxt").read_text(encoding="utf-8")
    assert 'tensor_name: "embeddings:00005"' in config and 'tensor_name: "embeddings:00010"' in config
    rows = projector_rows(run, 10)
    chars = load_checkpoint(run / "last.pt")["tokenizer"]["chars"]
    assert rows[0] == ["token", "class"] and len(rows) == len(chars) + 1
    by_char = {c: tuple(row) for c, row in zip(chars, rows[1:])}  # row i is id i
    assert by_char["\n"] == ("\u21b5", "whitespace")  # as the pages show it
    assert by_char[" "] == ("\u2423", "whitespace") and by_char["\t"] == ("\u2192", "whitespace")
    assert by_char["\x0b"] == ("\\x0b", "whitespace")  # unprintable: escaped, so the TSV line holds
    assert by_char["K"] == ("K", "capital") and by_char["k"] == ("k", "lower-case letter")
    assert by_char["3"] == ("3", "digit") and by_char["."] == (".", "punctuation")
    assert by_char["\u20ac"] == ("\u20ac", "punctuation") and by_char["\u4e2d"] == ("\u4e2d", "other")
    tensors = (run / "00010" / "embeddings" / "tensors.tsv").read_text().splitlines()
    matrix = torch.tensor([[float(x) for x in line.split("\t")] for line in tensors])
    assert torch.allclose(matrix, load_checkpoint(run / "last.pt")["model"]["wte.weight"].float(), atol=1e-6)


def test_a_byte_model_labels_its_256_bytes_and_log_hparams_false_writes_none(cli, tmp_path: Path) -> None:
    run = train(cli, tmp_path, "data.tokenizer=byte", "log.hparams=false", "train.max_steps=5")
    assert hparams_data(run) == {}
    rows = projector_rows(run, 5)
    assert rows[0] == ["token", "class"] and len(rows) == 257
    byte = {i: tuple(row) for i, row in enumerate(rows[1:])}
    assert byte[10] == ("\u21b5", "whitespace") and byte[32] == ("\u2423", "whitespace")
    assert byte[ord("A")] == ("A", "capital") and byte[ord("z")] == ("z", "lower-case letter")
    assert byte[ord("0")] == ("0", "digit") and byte[ord("$")] == ("$", "punctuation")
    assert byte[0] == ("0x00", "other") and byte[127] == ("0x7F", "other")
    assert byte[0xC3] == ("0xC3", "non-ASCII byte") and byte[255] == ("0xFF", "non-ASCII byte")


def test_hparam_keys_restrict_the_dashboard_and_log_embeddings_false_writes_none(cli, tmp_path: Path) -> None:
    from tensorboard.plugins.hparams import metadata

    keys = "log.hparam_keys=[model.n_layer, optim.lr, data.tokenizer, data.path]"
    run = train(cli, tmp_path, keys, "log.embeddings=false", "train.max_steps=5")
    records = hparams_data(run)
    names = [h.name for h in records[metadata.EXPERIMENT_TAG].hparam_infos]
    assert names == ["model.n_layer", "optim.lr", "data.tokenizer", "data.path"]
    start = records[metadata.SESSION_START_INFO_TAG].hparams
    assert set(start) == set(names) and start["data.tokenizer"].string_value == "char"
    assert start["data.path"].string_value == str(tmp_path / "text.txt")
    assert not (run / "projector_config.pbtxt").exists() and not list(run.glob("0*"))


def test_a_bad_hparam_key_is_one_error_line(cli, tmp_path: Path) -> None:
    r = cli("train", "--out", tmp_path / "run", *TINY, "log.hparam_keys=[model.n_layer,model.n_layr]")
    assert r.code == 2, r
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r
    assert "log.hparam_keys names an unknown key 'model.n_layr' (did you mean 'model.n_layer'?)" in lines[0]
    assert not (tmp_path / "run").exists()


def test_an_interrupted_run_has_no_session_end_until_its_resume_finishes(cli, tmp_path: Path, monkeypatch) -> None:
    """A resume writes into the same folder: still one run, one session (the first start), the
    end once the run finishes, and the projector lists the steps from before the resume too."""
    from tensorboard.plugins.hparams import api_pb2, metadata

    real_step = loop.train_step

    def step_with_interrupt(self):
        if self.state.step == 6:
            os.kill(os.getpid(), signal.SIGINT)  # the step finishes, then training stops at step 7
        return real_step(self)

    monkeypatch.setattr(loop, "train_step", step_with_interrupt)
    data = tmp_path / "text.txt"
    data.write_text(make_text(), encoding="utf-8")
    run = tmp_path / "run"
    args = ["--data", data, "--out", run, *TINY, "train.max_steps=10", "train.eval_interval=5"]
    assert cli("train", *args).code == 130
    assert metadata.SESSION_END_INFO_TAG not in hparams_data(run)
    monkeypatch.setattr(loop, "train_step", real_step)
    assert cli("train", "--out", run, "--resume", "train.max_steps=15").code == 0

    assert tensorboard_runs(tmp_path) == [run] and len(list(run.glob("events.out.tfevents*"))) == 2
    records = hparams_data(run)
    assert records[metadata.SESSION_END_INFO_TAG].status == api_pb2.STATUS_SUCCESS
    assert records[metadata.SESSION_START_INFO_TAG].hparams["train.max_steps"].number_value == 10  # the first
    config = (run / "projector_config.pbtxt").read_text(encoding="utf-8")
    assert [f"embeddings:{s:05d}" for s in (5, 10, 15)] == [
        line.split('"')[1] for line in config.splitlines() if "tensor_name" in line
    ]
