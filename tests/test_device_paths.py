"""The evaluation, lens, loss-by-position, head-score and training paths run on a device the test
controls (tests/fake_device.py), which refuses float64 and CPU tensors as a Mac or a GPU does: the
faults that no CPU run shows and every Mac run hits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt.checkpoint import list_snapshots
from minigpt.config.files import load_config
from minigpt.data.corpus import load_corpus
from minigpt.infer.evaluate import eval_ids_for, evaluate, icl_score, loss_by_position
from minigpt.infer.loading import load_model
from minigpt.inspect.formation import follow_run, score_point
from minigpt.inspect.lens import logit_lens
from minigpt.training.trainer import Trainer

from .fake_device import fake_device  # noqa: F401 (a fixture)
from .helpers import TINY

TEXT = "KING:\nSpeak now good lord what say you."


def test_the_fake_device_refuses_what_a_mac_refuses(fake_device) -> None:  # noqa: F811
    x = torch.arange(4.0, device=fake_device)
    assert x.device == fake_device and (x * 2).sum().item() == 12 and x.tolist() == [0, 1, 2, 3]
    for to_float64 in (
        lambda: x.double(),
        lambda: x.to(torch.float64),
        lambda: x.sum(dtype=torch.float64),
        lambda: torch.zeros(2, dtype=torch.float64, device=fake_device),
    ):
        with pytest.raises(TypeError, match="float64"):
            to_float64()
    assert x.cpu().double().sum().item() == 6.0 and type(x.cpu()) is torch.Tensor
    with pytest.raises(RuntimeError, match="same device"):
        x + torch.ones(4)
    with pytest.raises(TypeError, match="numpy"):
        x.numpy()


def test_eval_by_position_lens_and_head_scores_run_on_the_device(trained_run: Path, fake_device) -> None:  # noqa: F811
    on_cpu, on_device = load_model(trained_run, torch.device("cpu")), load_model(trained_run, fake_device)
    assert on_device.model.device == fake_device
    ids, table, _ = eval_ids_for(on_cpu, None)
    assert evaluate(on_device, None)[0].loss == pytest.approx(evaluate(on_cpu, None)[0].loss, rel=1e-5)
    curve = loss_by_position(on_device.model, ids, table)  # eval --by-position, the ICL score
    np.testing.assert_allclose(curve, loss_by_position(on_cpu.model, ids, table), rtol=1e-5)
    assert icl_score(curve)[1:] == icl_score(np.zeros(len(curve)))[1:]
    lens = logit_lens(on_device.model, on_device.tokenizer, TEXT)
    np.testing.assert_allclose(lens.loss, logit_lens(on_cpu.model, on_cpu.tokenizer, TEXT).loss, rtol=1e-5)
    point = score_point(on_device.model, ids, table)  # the head scores logged at each evaluation
    expected = score_point(on_cpu.model, ids, table)
    assert point.icl_score == pytest.approx(expected.icl_score, abs=1e-5)
    np.testing.assert_allclose(point.induction, expected.induction, rtol=1e-5)


def test_training_with_head_scores_evaluates_on_the_device(text_file: Path, tmp_path: Path, fake_device) -> None:  # noqa: F811
    cfg = load_config(
        None,
        [
            *TINY,
            f"data.path={text_file}",
            "model.n_layer=1",
            "optim.optimizer=adamw",  # Muon chooses bf16 by device: the same numbers need one update
            "train.max_steps=2",
            "train.eval_interval=1",
            "train.keep_every=1",
            "log.sample_length=4",
            "log.head_scores=true",
            "log.tensorboard=true",
        ],
    )
    corpus = load_corpus(cfg.data, cfg.model.block_size)
    runs = {}
    for name, device in (("cpu", torch.device("cpu")), ("device", fake_device)):
        runs[name] = Trainer(cfg, corpus, corpus.tokenizer, device, torch.float32, tmp_path / name).train()
    assert runs["device"].full.loss == pytest.approx(runs["cpu"].full.loss, rel=1e-4)  # the same numbers, up to
    # float32 rounding (the two devices need not sum in the same order)
    assert runs["device"].best_val_loss == pytest.approx(runs["cpu"].best_val_loss, rel=1e-4)
    assert len(list_snapshots(tmp_path / "device")) == 2
    points, _ = follow_run(tmp_path / "device", fake_device)  # heads --over-training, loaded onto the device
    assert [p.step for p in points] == [1, 2]
