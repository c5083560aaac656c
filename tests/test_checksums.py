"""Checkpoint checksums: a bit flipped inside a tensor's bytes is caught on load, named in one
line, and a resume falls back to an intact checkpoint of the run; files of earlier releases load."""

from __future__ import annotations

import dataclasses
import resource
import shutil
import threading
from pathlib import Path

import pytest
import torch

from minigpt import checkpoint
from minigpt.checkpoint import Checkpoint, Damaged, load_checkpoint, snapshot_name, tensor_checksums
from minigpt.infer.loading import load_model

from .helpers import one_error_line

TENSOR = "blocks.1.mlp.c_fc.weight"


def flip_a_bit(path: Path, name: str) -> None:
    """Flip one bit in the middle of tensor `name`'s bytes (a weight's name, or a dotted path such
    as optimizer.state.0.momentum_buffer), found in the zip's data record that holds them."""
    tensor = tensor_named(load_checkpoint(path), name)
    data = tensor.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()
    whole = path.read_bytes()
    at = whole.find(data)
    assert at > 0 and whole.find(data, at + 1) == -1, "the tensor's bytes appear once in the file"
    middle = at + len(data) // 2
    path.write_bytes(whole[:middle] + bytes([whole[middle] ^ 0x10]) + whole[middle + 1 :])


def tensor_named(raw: dict, name: str) -> torch.Tensor:
    if name in raw["model"]:
        return raw["model"][name]
    obj = raw
    for part in name.split("."):
        obj = obj[part] if isinstance(obj, dict) and part in obj else obj[int(part)]
    return obj


@pytest.fixture
def run(trained_run: Path, tmp_path: Path) -> Path:
    """A copy of the tiny trained run (with its text and cache), for a test to damage."""
    shutil.copytree(trained_run.parent, tmp_path / "t")
    return tmp_path / "t" / "run"


def test_checksums_cover_every_tensor_and_an_untouched_file_verifies(run: Path) -> None:
    raw = load_checkpoint(run / "last.pt")
    sums = raw["checksums"]
    assert f"model.{TENSOR}" in sums and any(k.startswith("optimizer.state.") for k in sums)
    assert sums == tensor_checksums({k: v for k, v in raw.items() if k != "checksums"})
    Checkpoint.load(run / "last.pt").check_resumable(run / "last.pt")  # verifies every tensor: no error


def test_a_flipped_bit_in_a_weight_is_one_line_naming_the_file_and_the_tensor(run: Path, cli) -> None:
    best = run / "best.pt"
    flip_a_bit(best, TENSOR)
    damaged = best.read_bytes()
    torch.load(best, weights_only=True)  # torch itself loads it without a word: the checksum is what catches it
    expected = f"error: {best} is damaged: the bytes of {TENSOR} do not match their checksum"
    for command in (["sample", run, "--max-new-tokens", "5"], ["eval", best], ["score", best, "--text", "KING"]):
        assert one_error_line(cli(*command)).startswith(expected), command
    assert best.read_bytes() == damaged  # left as it was, for the user to look at


def test_resume_falls_back_to_best_when_last_is_damaged_and_says_so(run: Path, cli) -> None:
    last, best = run / "last.pt", run / "best.pt"
    best_step = Checkpoint.load(best).step
    flip_a_bit(last, "optimizer.state.0.momentum_buffer")  # the weights are intact: only a resume reads this
    assert cli("sample", last, "--max-new-tokens", "5").code == 0  # sampling reads, and checks, the weights alone
    r = cli("train", "--out", run, "--resume", "train.max_steps=70")
    assert r.code == 0, r
    said = f"{last} is damaged: the bytes of optimizer.state.0.momentum_buffer do not match their checksum"
    assert f"{said}; resuming from best.pt (step {best_step}) instead\n" in r.err
    assert Checkpoint.load(last).step == 70  # trained on from best.pt and wrote a good last.pt


def test_with_no_intact_resumable_checkpoint_the_error_names_the_newest_intact_snapshot(run: Path, cli) -> None:
    last, best = run / "last.pt", run / "best.pt"
    ckpt = Checkpoint.load(best)
    for step in (10, 20):
        snap = Checkpoint(ckpt.model, ckpt.config, ckpt.tokenizer, ckpt.data, step=step)
        snap.save(run / snapshot_name(step))
    flip_a_bit(run / snapshot_name(20), TENSOR)
    flip_a_bit(last, TENSOR)
    flip_a_bit(best, "rng.torch_cpu")
    line = one_error_line(cli("train", "--out", run, "--resume"))
    assert line.startswith(f"error: {last} is damaged: the bytes of {TENSOR} do not match their checksum"), line
    snap = run / snapshot_name(10)
    assert line.endswith(
        f"but {snap.name} is: start from its weights with minigpt train --init-from {snap} --out NEW_RUN"
    )


def test_checkpoints_of_earlier_releases_without_checksums_still_load(cli) -> None:
    fixture = Path(__file__).parent / "fixtures" / "v0_1_runs" / "char"
    path = next(fixture.glob("*.pt"))
    raw = load_checkpoint(path)
    assert "checksums" not in raw
    Checkpoint.load(path).check_resumable(path) if raw.get("optimizer") else Checkpoint.load(path)
    r = cli("sample", fixture, "--max-new-tokens", "5", "--seed", "1")
    assert r.code == 0 and r.out, r


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA: a GPU run's checkpoint")
def test_a_gpu_runs_checkpoint_keeps_its_tied_weights_shared_and_verifies(tmp_path: Path) -> None:
    weight = torch.randn(8, 4, device="cuda")
    ckpt = Checkpoint(
        {"wte.weight": weight, "lm_head.weight": weight, "ln.bias": torch.zeros(4, device="cuda")}, {}, {}, {}
    )
    ckpt.save(tmp_path / "g.pt")
    loaded = Checkpoint.load(tmp_path / "g.pt")
    assert (
        loaded.model["wte.weight"].untyped_storage().data_ptr()
        == loaded.model["lm_head.weight"].untyped_storage().data_ptr()
    )
    assert torch.equal(loaded.model["wte.weight"], weight.cpu())


@pytest.fixture
def hashed_on_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every checksum hashed on a pool of 4 threads, however small the checkpoint and however many
    cores the machine has; the list collects the names of the threads that hashed."""
    where: list[str] = []
    one = checkpoint._digest
    monkeypatch.setattr(checkpoint, "_digest", lambda t: where.append(threading.current_thread().name) or one(t))
    monkeypatch.setattr(checkpoint, "PARALLEL_BYTES", 0)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    return where


def test_tensors_hashed_on_several_threads_get_the_digests_of_one_thread_in_order(hashed_on_threads) -> None:
    tensors = [torch.randn(n) for n in (10, 300_000, 7, 1_200_000, 50_000)]
    tensors += [torch.arange(999), torch.randn(64, 48).to(torch.bfloat16).t()]  # int64; a strided bf16 view
    one_thread = [checkpoint._digest(t) for t in tensors]
    hashed_on_threads.clear()
    assert checkpoint._digests(tensors) == one_thread
    assert len(hashed_on_threads) == len(tensors)
    assert all(name.startswith("checksum") for name in hashed_on_threads), hashed_on_threads  # not the caller


def test_a_flipped_bit_is_caught_when_threads_hash(run: Path, hashed_on_threads) -> None:
    best, last = run / "best.pt", run / "last.pt"
    flip_a_bit(best, TENSOR)
    with pytest.raises(Damaged, match=f"^{best} is damaged: the bytes of {TENSOR} do not match their checksum"):
        load_model(run, torch.device("cpu"))
    Checkpoint.load(last).check_resumable(last)  # an intact file verifies on threads too
    assert any(name.startswith("checksum") for name in hashed_on_threads)


def test_a_resume_holds_its_optimizer_state_in_its_own_memory(tmp_path: Path) -> None:
    """torch.load maps the file, and the optimizer writes its state in place: a state left mapped
    would copy each 4 KiB page at its first write, a page fault each, in the resumed run's first step."""
    moment = torch.randn(4 << 20)  # 16 MiB: 4,096 pages
    ckpt = Checkpoint(model={"w": torch.ones(3)}, config={}, tokenizer={"kind": "char", "chars": ["a"]}, data={})
    ckpt = dataclasses.replace(ckpt, step=1, tokens_seen=1, best_val_loss=1.0, rng={"torch_cpu": torch.get_rng_state()})
    ckpt = dataclasses.replace(ckpt, optimizer={"state": {0: {"exp_avg": moment}}, "param_groups": []})
    ckpt.save(tmp_path / "last.pt")

    def faults_in_a_first_write(optimizer_state: dict) -> int:
        state = optimizer_state["state"][0]["exp_avg"]
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        state.mul_(0.5)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    mapped = Checkpoint.load(tmp_path / "last.pt")  # as sampling loads it: nothing is copied
    assert faults_in_a_first_write(mapped.optimizer) >= 4096 // 2  # what the copy saves a resume
    _, resumed = checkpoint.resumable_checkpoint(tmp_path / "last.pt", print)
    assert torch.equal(resumed.optimizer["state"][0]["exp_avg"], moment)
    assert faults_in_a_first_write(resumed.optimizer) < 4096 // 8


def test_load_model_gives_the_checkpoints_weights_in_float32_and_leaves_the_rng_alone(run: Path) -> None:
    """The model is given the file's tensors: the same logits as a model built and copied into, its
    head still tied, the caller's RNG untouched by the weights drawn to build it,
    and a weight stored in another dtype comes out float32, as copying made it."""
    raw = load_checkpoint(run / "best.pt")
    fields = {k: v for k, v in raw.items() if k not in ("format", "version", "checksums")}
    fields["model"] = {**raw["model"], TENSOR: raw["model"][TENSOR].to(torch.float16)}
    Checkpoint(**fields).save(run / "best.pt")
    state = torch.get_rng_state()
    loaded = load_model(run, torch.device("cpu"))
    assert torch.equal(torch.get_rng_state(), state)
    model = loaded.model
    assert model.lm_head.weight is model.wte.weight and {p.dtype for p in model.parameters()} == {torch.float32}
    built = type(model)(loaded.config.model, loaded.tokenizer.vocab_size)
    built.load_state_dict(Checkpoint.load(run / "best.pt").model)
    x = torch.arange(8)[None] % loaded.tokenizer.vocab_size
    assert torch.equal(built.eval()(x)[0], model(x)[0])


def test_a_checkpoint_replaced_while_it_loads_is_read_whole_from_one_file(run: Path, monkeypatch) -> None:
    """A training replaces last.pt (atomically) every few steps; torch.load opens the file by name for its
    zip reader and again for the mmap, so a save in between once mixed two checkpoints ('damaged')."""
    last = run / "last.pt"
    raw = load_checkpoint(last)
    newer = {k: v for k, v in raw.items() if k not in ("format", "version", "checksums")}
    newer["model"] = {k: v + 1 if v.is_floating_point() else v for k, v in raw["model"].items()}
    checkpoint.save_checkpoint(newer, run / "newer.pt")
    expected = raw["model"][TENSOR].clone()
    real_from_file = torch.UntypedStorage.from_file

    def saved_in_between(*args, **kwargs):  # the training's save lands after the zip reader opened last.pt
        if (run / "newer.pt").exists():
            (run / "newer.pt").replace(last)
        return real_from_file(*args, **kwargs)

    monkeypatch.setattr(torch.UntypedStorage, "from_file", saved_in_between)
    loaded = Checkpoint.load(last)  # verifies the weights' checksums
    assert torch.equal(loaded.model[TENSOR], expected)  # the file that was opened, whole
    assert not (run / "newer.pt").exists()  # the replacement did happen mid-load
