"""`minigpt export`: the Hugging Face folder and the ONNX file, checked with the real libraries
(transformers, tokenizers, safetensors, onnxruntime): the same logits, the same greedy text, the
same token ids, and one error line for every bad request with nothing half-written."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import safetensors  # noqa: F401  (the export extra: missing, the file fails rather than skips)
import tokenizers  # noqa: F401
import torch
import yaml
from transformers import AutoModelForCausalLM, AutoTokenizer

import minigpt
from minigpt.checkpoint import Checkpoint
from minigpt.cli.app import main
from minigpt.config.schema import Config, ModelConfig
from minigpt.data.tokenizer import CharTokenizer
from minigpt.export.folder import export_loaded
from minigpt.infer.loading import load_model
from minigpt.model import GPT, parameter_count

from .helpers import TINY, make_text, one_error_line

ROOT = Path(__file__).resolve().parents[1]
BLOCK = 16  # TINY's model.block_size
HF_FILES = [
    "README.md",
    "SHA256SUMS",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
]
MODELS = {  # name: extra training overrides, and the architecture it must export as
    "rope_char": ([], "gpt_neox"),
    "learned_char": (["model.pos_emb=learned"], "gpt2"),
    "rope_byte": (["data.tokenizer=byte"], "gpt_neox"),
}


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The three tiny models, trained once for the whole session, and each one's hf export."""
    tmp = tmp_path_factory.mktemp("export")
    data = tmp / "text.txt"
    data.write_text(make_text(6000) + "é ü — “quoted” 😀\n", encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINIGPT_CACHE_DIR", str(tmp / "cache"))
    out = {}
    try:
        for name, (extra, _) in MODELS.items():
            run = tmp / name
            args = [
                "train",
                "--data",
                str(data),
                "--out",
                str(run),
                *TINY,
                "train.max_steps=20",
                "train.eval_interval=20",
                "log.sample_length=0",
                "log.tensorboard=false",
                *extra,
            ]
            assert main(args) == 0
            assert main(["export", str(run), str(tmp / f"{name}-hf")]) == 0
            out[name] = run
    finally:
        mp.undo()
    return out


def hf_folder(run: Path) -> Path:
    return run.parent / f"{run.name}-hf"


def full_windows(tok, seeds: tuple[int, int] = (1, 2)) -> list[list[int]]:
    """Two different texts' ids, each exactly block_size tokens (the byte model's hold multi-byte characters)."""
    texts = [make_text(200, seed=s)[7 * s :] for s in seeds]
    if tok.kind == "byte":
        return [tok.encode("é😀" + t)[:BLOCK] for t in texts]
    return [tok.encode("".join(c for c in "é" + t if c in tok.stoi))[:BLOCK] for t in texts]


@pytest.mark.parametrize("name", MODELS)
def test_transformers_logits_equal_minigpts(name: str, runs: dict[str, Path]) -> None:
    loaded = load_model(runs[name], torch.device("cpu"))
    hf = AutoModelForCausalLM.from_pretrained(hf_folder(runs[name]))
    assert hf.config.model_type == MODELS[name][1] and hf.config.max_position_embeddings == BLOCK
    windows = full_windows(loaded.tokenizer)
    assert windows[0] != windows[1] and all(len(w) == BLOCK for w in windows)
    ids = torch.tensor(windows)
    with torch.no_grad():
        ours, theirs = loaded.model(ids)[0], hf(ids).logits
    assert ours.abs().max() > 1  # trained logits, not the near-zero ones of a fresh model
    torch.testing.assert_close(theirs, ours, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", MODELS)
def test_greedy_generate_equals_minigpt_sample(name: str, runs: dict[str, Path], cli) -> None:
    """prompt + new tokens fill the context exactly; past it minigpt slides its window and transformers does not."""
    folder = hf_folder(runs[name])
    tok, hf = AutoTokenizer.from_pretrained(folder), AutoModelForCausalLM.from_pretrained(folder)
    prompt = "KING:\n" if name != "rope_byte" else "KING é:"  # the byte prompt: 8 bytes
    ids = tok(prompt, return_tensors="pt").input_ids
    new = BLOCK - ids.shape[1]
    out = hf.generate(ids, do_sample=False, max_new_tokens=new, attention_mask=torch.ones_like(ids))
    assert out.shape[1] == BLOCK
    r = cli(
        "sample",
        runs[name],
        "--prompt",
        prompt,
        "--max-new-tokens",
        new,
        "--temperature",
        "0",
        "--dtype",
        "float32",
        "--device",
        "cpu",
    )
    assert r.code == 0, r
    assert tok.decode(out[0]) == r.out.removesuffix("\n")


def test_char_tokenizer_one_token_per_character_and_unseen_ones_dropped(runs: dict[str, Path]) -> None:
    loaded = load_model(runs["rope_char"], torch.device("cpu"))
    tok = AutoTokenizer.from_pretrained(hf_folder(runs["rope_char"]))
    chars = loaded.tokenizer.chars
    assert tok.vocab_size == len(chars) and tok.convert_ids_to_tokens(list(range(len(chars)))) == chars
    text = "KING:\n  Speak  now. é ü — “quoted” 😀\n\n"
    ids = tok(text).input_ids
    assert ids == loaded.tokenizer.encode(text)  # one id per character, minigpt's ids
    assert tok.decode(ids) == text
    # unseen characters (never in the training text) are dropped, as `minigpt sample --unknown skip`
    assert "Z" not in chars and "€" not in chars and "字" not in chars
    assert tok("KZING€ 字now").input_ids == loaded.tokenizer.encode("KING now")
    assert tok.decode(tok("KZING€ 字now").input_ids) == "KING now"


def test_byte_tokenizer_ids_are_byte_values(runs: dict[str, Path]) -> None:
    tok = AutoTokenizer.from_pretrained(hf_folder(runs["rope_byte"]))
    text = "KING: é ü — “quoted” 😀 字 \x00\t\r\n  end"
    assert tok.vocab_size == 256
    assert tok(text).input_ids == list(text.encode("utf-8"))
    assert tok.decode(tok(text).input_ids) == text
    assert tok.decode([0xFF, 65]) == "\ufffdA"  # not UTF-8: the replacement character, as minigpt decodes


def assert_sha256sums_check(folder: Path) -> None:
    """The real `sha256sum -c` accepts the folder's SHA256SUMS, which lists every other file, and
    refuses it once a byte of the largest file changes (the byte is put back)."""
    check = ["sha256sum", "--check", "--strict", "SHA256SUMS"]
    listed = sorted(line.split("  ", 1)[1] for line in (folder / "SHA256SUMS").read_text().splitlines())
    assert listed == sorted(p.name for p in folder.iterdir() if p.name != "SHA256SUMS")
    r = subprocess.run(check, cwd=folder, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.count(": OK") == len(listed), r
    biggest = max(folder.iterdir(), key=lambda p: p.stat().st_size)
    whole = biggest.read_bytes()
    biggest.write_bytes(whole[:100] + bytes([whole[100] ^ 1]) + whole[101:])
    try:
        r = subprocess.run(check, cwd=folder, capture_output=True, text=True)
        assert r.returncode == 1 and f"{biggest.name}: FAILED" in r.stdout, r
    finally:
        biggest.write_bytes(whole)


def test_model_card_and_generation_config(runs: dict[str, Path]) -> None:
    run, folder = runs["rope_char"], hf_folder(runs["rope_char"])
    assert sorted(p.name for p in folder.iterdir()) == HF_FILES
    assert_sha256sums_check(folder)
    card = (folder / "README.md").read_text(encoding="utf-8")
    front = yaml.safe_load(card.split("---")[1])
    results = json.loads((run / "results.json").read_text())
    loaded = load_model(run, torch.device("cpu"))
    assert front["parameters"] == parameter_count(loaded.config.model, loaded.tokenizer.vocab_size)
    assert front["training_steps"] == 20 and front["training_files"] == 1
    assert front["training_bytes"] == len((run.parent / "text.txt").read_bytes())
    assert front["val_loss_nats"] == round(results["val_loss_full"], 4)
    assert front["val_bits_per_char"] == round(results["val_loss_full"] / math.log(2), 4)
    assert str(run.parent) not in card and "text.txt" not in card  # no private paths
    assert "AutoModelForCausalLM" in card and 'pipeline("text-generation"' in card
    gen = json.loads((folder / "generation_config.json").read_text())
    assert gen["do_sample"] is True and gen["temperature"] == 0.8 and gen["top_k"] == 0 and gen["max_length"] == BLOCK


def random_model(tmp_path: Path, **options) -> Path:
    """A checkpoint of an untrained model with every weight random (LayerNorms and biases too), so a
    wrong mapping of any of them shows in the logits."""
    cfg = Config(model=ModelConfig(n_layer=2, n_head=2, n_embd=16, block_size=BLOCK, **options))
    tok = CharTokenizer.from_text(make_text(2000))
    torch.manual_seed(0)
    model = GPT(cfg.model, tok.vocab_size)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.ndim == 1 and p.shape[0] == 16 else 0.0))
    path = tmp_path / "model.pt"
    Checkpoint(model=model.state_dict(), config=cfg.to_dict(), tokenizer=tok.to_dict(), data={}, step=0).save(path)
    return path


@pytest.mark.parametrize(
    "options, arch",
    [
        ({"pos_emb": "sinusoidal"}, "gpt2"),
        ({"pos_emb": "learned", "norm": "post", "bias": True}, "opt"),
        ({"pos_emb": "sinusoidal", "norm": "post"}, "opt"),
        ({"pos_emb": "rope", "bias": True}, "gpt_neox"),
        ({"pos_emb": "learned", "bias": True}, "gpt2"),
        ({"pos_emb": "rope", "mlp_act": "relu2", "zero_init_proj": True}, "gpt_neox"),
        ({"pos_emb": "learned", "mlp_act": "relu2"}, "gpt2"),
        ({"pos_emb": "learned", "norm": "post", "mlp_act": "relu2"}, "opt"),
    ],
)
def test_every_mappable_option_computes_the_same_logits(options: dict, arch: str, tmp_path: Path) -> None:
    loaded = load_model(random_model(tmp_path, **options), torch.device("cpu"))
    export_loaded(loaded, tmp_path / "hf")
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    assert hf.config.model_type == arch
    ids = torch.tensor(full_windows(loaded.tokenizer))
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, loaded.model(ids)[0], atol=1e-4, rtol=0)


def test_rope_with_post_layernorm_is_refused(tmp_path: Path, cli) -> None:
    ckpt = random_model(tmp_path, pos_emb="rope", norm="post")
    line = one_error_line(cli("export", ckpt, tmp_path / "out"))
    assert "model.norm post with model.pos_emb rope" in line and "--format onnx" in line
    assert not (tmp_path / "out").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


ALL_OPTIONS = {"qk_norm": True, "mlp_act": "relu2", "zero_init_proj": True, "value_embeds": True, "logit_softcap": 2.0}


@pytest.mark.parametrize("key", ["qk_norm", "value_embeds", "logit_softcap"])
def test_options_without_a_transformers_architecture_are_refused(key: str, tmp_path: Path, cli) -> None:
    ckpt = random_model(tmp_path, **{key: ALL_OPTIONS[key]})
    line = one_error_line(cli("export", ckpt, tmp_path / "out"))
    assert f"model.{key} is {str(ALL_OPTIONS[key]).lower()}," in line and "--format onnx" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pt"]


def test_onnx_exports_every_model_option_exactly(tmp_path: Path) -> None:
    loaded = load_model(random_model(tmp_path, **ALL_OPTIONS), torch.device("cpu"))
    export_loaded(loaded, tmp_path / "onnx", "onnx")
    session = ort.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.array(full_windows(loaded.tokenizer), dtype=np.int64)
    (logits,) = session.run(["logits"], {"input_ids": ids})
    with torch.no_grad():
        ours = loaded.model(torch.from_numpy(ids))[0].numpy()
    assert np.abs(ours).max() <= 2.0 and np.abs(ours).max() > 1.0  # the soft-cap is in the graph
    np.testing.assert_allclose(logits, ours, atol=1e-4, rtol=0)


@pytest.mark.slow  # the ONNX export and onnxruntime (10 s on 2 cores): CI runs it in its slow step
def test_onnx_logits_equal_minigpts_and_the_example_samples_without_torch(runs: dict[str, Path], cli) -> None:
    folder = runs["rope_char"].parent / "rope_char-onnx"
    assert cli("export", runs["rope_char"], folder, "--format", "onnx").code == 0
    assert sorted(p.name for p in folder.iterdir()) == ["SHA256SUMS", "minigpt.json", "model.onnx", "tokenizer.json"]
    assert_sha256sums_check(folder)
    loaded = load_model(runs["rope_char"], torch.device("cpu"))
    session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    windows = np.array(full_windows(loaded.tokenizer), dtype=np.int64)
    for ids in (windows, windows[:1, :5], windows[1:, :1]):  # dynamic batch and length (up to block_size)
        (logits,) = session.run(["logits"], {"input_ids": ids})
        with torch.no_grad():
            ours = loaded.model(torch.from_numpy(ids))[0].numpy()
        np.testing.assert_allclose(logits, ours, atol=1e-4, rtol=0)
    info = json.loads((folder / "minigpt.json").read_text(encoding="utf-8"))
    assert info["block_size"] == BLOCK and info["vocabulary"]["chars"] == loaded.tokenizer.chars

    # examples/onnx_sample.py with torch made unimportable: greedy, it writes minigpt's greedy text
    code = (
        "import sys, runpy; sys.modules['torch'] = None; sys.argv = sys.argv[1:]; "
        "runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    args = [
        str(ROOT / "examples" / "onnx_sample.py"),
        str(folder),
        "--prompt",
        "KING:\n",
        "--max-new-tokens",
        "10",
        "--temperature",
        "0",
    ]
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    ours = cli(
        "sample",
        runs["rope_char"],
        "--prompt",
        "KING:\n",
        "--max-new-tokens",
        "10",
        "--temperature",
        "0",
        "--dtype",
        "float32",
        "--device",
        "cpu",
    )
    assert r.stdout == ours.out and len(r.stdout) == 6 + 10 + 1
    sampled = subprocess.run([sys.executable, *args[:4], "--max-new-tokens", "40"], capture_output=True, text=True)
    assert sampled.returncode == 0 and sampled.stdout.startswith("KING:\n") and len(sampled.stdout) > 40


def test_python_api_exports(runs: dict[str, Path], tmp_path: Path) -> None:
    out = minigpt.load(runs["learned_char"], device="cpu").export(tmp_path / "api-hf")
    assert out == tmp_path / "api-hf" and sorted(p.name for p in out.iterdir()) == HF_FILES
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["activation_function"] == "gelu"


def test_bad_requests_are_one_line_and_leave_out_untouched(runs: dict[str, Path], tmp_path: Path, cli) -> None:
    run = runs["rope_char"]
    (tmp_path / "empty_run").mkdir()
    assert "holds no checkpoint" in one_error_line(cli("export", tmp_path / "empty_run", tmp_path / "a"))
    assert not (tmp_path / "a").exists()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    assert "already holds files; pass --force" in one_error_line(cli("export", run, taken))
    assert [p.name for p in taken.iterdir()] == ["notes.txt"]
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert "cannot write" in one_error_line(cli("export", run, blocker / "out"))  # a parent that is a file
    assert "is not a folder" in one_error_line(cli("export", run, blocker))
    assert "holds the checkpoint being exported" in one_error_line(cli("export", run, run, "--force"))
    assert "onnx supports --dtype float32 or float16" in one_error_line(
        cli("export", run, tmp_path / "b", "--format", "onnx", "--dtype", "bfloat16")
    )
    assert "Invalid value for '--format'" in one_error_line(cli("export", run, tmp_path / "b", "--format", "gguf"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "empty_run", "taken"]  # no staging folder left
    assert cli("export", run, taken, "--force").code == 0  # --force replaces what the folder held
    assert sorted(p.name for p in taken.iterdir()) == HF_FILES
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "empty_run", "taken"]


def test_a_missing_extra_names_the_install_command(runs: dict[str, Path], tmp_path: Path, cli, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors now raises ImportError
    line = one_error_line(cli("export", runs["rope_char"], tmp_path / "out"))
    assert "needs safetensors" in line and "pip install 'minigpt[export]'" in line
    assert not list(tmp_path.iterdir())


def test_a_failed_write_leaves_nothing(runs: dict[str, Path], tmp_path: Path, cli, monkeypatch) -> None:
    import safetensors.torch

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    line = one_error_line(cli("export", runs["rope_char"], tmp_path / "deep" / "out"))
    assert "No space left on device" in line and "nothing was written" in line
    assert not list(tmp_path.iterdir())  # neither the staging folder nor the parent it created


def test_the_command_line_loads_no_export_library() -> None:
    code = (
        "import sys, minigpt, minigpt.cli.app\n"
        "print([m for m in ('transformers', 'safetensors', 'tokenizers', 'onnx', 'onnxscript', 'onnxruntime', "
        "'torch') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"
