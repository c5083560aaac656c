"""The fuzz suite's short profile: every reader of scripts/fuzz.py (configs, overrides, text,
record files, Parquet, `datasets` folders, checkpoints, prompts, `--text`) on a few derandomized
inputs, so CI runs the same property as `scripts/fuzz.py --minutes N` in seconds: exit 0, or
exit 2 with one `error:` line and no traceback; nothing outside the output and the cache
changes; the run read stays intact. The inputs the long profile found broken stay here as
examples."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fuzz.py"
_spec = importlib.util.spec_from_file_location("fuzz", SCRIPT)
fuzz = importlib.util.module_from_spec(_spec)
sys.modules["fuzz"] = fuzz  # its dataclasses look their module up there
_spec.loader.exec_module(fuzz)
harness = importlib.import_module("fuzzing.harness")  # the property, beside scripts/fuzz.py

READERS = list(fuzz.readers())


@pytest.mark.parametrize("name", READERS)
def test_every_reader_keeps_the_property_on_derandomized_inputs(name: str, trained_run: Path, tmp_path: Path) -> None:
    reader = fuzz.readers()[name]
    fuzz.fuzz_reader(reader, trained_run, tmp_path, examples=2, derandomize=True)
    assert reader.tried >= 2 and not reader.failures


def test_the_property_catches_a_crash_an_exit_code_and_a_second_error_line() -> None:
    ok = harness.Outcome(2, "", "data: x\nerror: x.txt is empty; give a text\n")
    harness.check(ok, ["train"])
    for broken, kind in [
        (harness.Outcome(None, "", "", "Traceback (most recent call last):\nValueError: boom\n"), "crash ValueError"),
        (harness.Outcome(1, "", "error: x\n"), "exit 1"),
        (harness.Outcome(2, "", "error: x\nerror: y\n"), "2 error lines"),
        (harness.Outcome(2, "", "Traceback (most recent call last):\nerror: x\n"), "traceback"),
    ]:
        with pytest.raises(harness.Broken) as caught:
            harness.check(broken, ["train"])
        assert caught.value.kind.startswith(kind)


def found(tmp_path: Path, argv: list[str]) -> harness.Outcome:
    """An input the long profile found broken, run again: it must keep the property now."""
    outcome = harness.run_cli(argv, tmp_path)
    harness.check(outcome, argv)
    return outcome


def test_a_json_record_with_a_lone_surrogate_escape_is_one_line(tmp_path: Path) -> None:
    """Valid JSON ("\\ud800") that is no text: the extract's UTF-8 encoding crashed with a traceback."""
    data = tmp_path / "records.jsonl"
    data.write_text('{"text": "' + "KING: speak. " * 40 + '"}\n{"text": "a \\ud800 b"}\n', encoding="utf-8")
    outcome = found(tmp_path, harness.train_dry(tmp_path, data))
    assert outcome.code == 2 and f"{data}, line 2: field 'text' is a string with a lone surrogate" in outcome.err


@pytest.mark.parametrize("case", ["text with NULs and bad UTF-8", "a checkpoint cut short"])
def test_a_real_process_on_a_mutated_input_exits_2_with_one_line(case: str, trained_run: Path, tmp_path: Path) -> None:
    """The same property through `python -m minigpt`, as a user runs it."""
    if case == "a checkpoint cut short":
        whole = (trained_run / "last.pt").read_bytes()
        given = tmp_path / "cut.pt"
        given.write_bytes(whole[: len(whole) * 2 // 3])
        argv = ["sample", str(given), "--max-new-tokens", "3"]
    else:
        given = tmp_path / "corpus.txt"
        given.write_bytes(harness.BASE_TEXT.encode() + b"\x00\x00\xff\xfe" + harness.BASE_TEXT.encode())
        argv = harness.train_dry(tmp_path, given)
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1])}
    r = subprocess.run([sys.executable, "-m", "minigpt", *argv], capture_output=True, text=True, env=env, cwd=tmp_path)
    harness.check(harness.Outcome(r.returncode, r.stdout, r.stderr), argv)
    assert r.returncode == 2 and str(given) in r.stderr, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == [given.name]  # nothing written beside it


def test_an_arrow_stream_damaged_after_its_first_batch_is_one_line(tmp_path: Path) -> None:
    """A datasets folder's Arrow stream cut inside its second batch: pyarrow's error came from
    reading the batches, past the check that guarded opening the file, as a traceback."""
    import pyarrow as pa

    first = pa.record_batch({"text": [harness.BASE_TEXT[:1500]]})
    second = pa.record_batch({"text": [harness.BASE_TEXT[:1500]]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, first.schema) as writer:
        writer.write_batch(first)
        whole_first = sink.tell()
        writer.write_batch(second)
    data = tmp_path / "records.arrow"
    data.write_bytes(sink.getvalue().to_pybytes()[: whole_first + 700])
    outcome = found(tmp_path, harness.train_dry(tmp_path, data))
    assert outcome.code == 2 and f"error: {data} is damaged after row 1: not a readable Arrow file (" in outcome.err


def test_an_arrow_string_column_whose_offsets_run_backwards_is_one_line(tmp_path: Path) -> None:
    """scripts/fuzz.py (datasets): a bit flipped in a string column's offsets made one string's
    length negative, and pyarrow's to_pylist crashed with SystemError (PyUnicode_New)."""
    import numpy as np
    import pyarrow as pa

    good = pa.array(["First Citizen:", "Before we proceed"])
    offsets = pa.py_buffer(np.array([0, 14, 5], dtype=np.int32).tobytes())  # the second string: 14 -> 5
    bad = pa.Array.from_buffers(pa.string(), 2, [None, offsets, good.buffers()[2]])
    sink = pa.BufferOutputStream()
    batch = pa.record_batch({"text": bad})
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    data = tmp_path / "records.arrow"
    data.write_bytes(sink.getvalue().to_pybytes())
    outcome = found(tmp_path, harness.train_dry(tmp_path, data))
    assert outcome.code == 2 and f"error: {data} is damaged after row 0: not a readable Arrow file (" in outcome.err


@pytest.mark.parametrize("section", ["tokenizer", "config", "data"])
def test_a_checkpoint_whose_section_is_a_list_is_one_line(section: str, trained_run: Path, tmp_path: Path) -> None:
    """A minigpt-marked checkpoint whose tokenizer (say) is a list, not a dict: `sample` crashed
    with AttributeError ('list' object has no attribute 'get')."""
    import torch

    from minigpt.checkpoint import load_checkpoint

    raw = {k: v for k, v in load_checkpoint(trained_run / "last.pt").items() if k != "checksums"}
    path = tmp_path / "odd.pt"
    torch.save({**raw, section: [1, 2]}, path)
    outcome = found(tmp_path, ["sample", str(path), "--max-new-tokens", "3"])
    assert (
        outcome.code == 2
        and f"{path} is a damaged minigpt checkpoint: its {section} is list, not a dict" in outcome.err
    )


@pytest.mark.parametrize("where", ["override", "config"])
def test_a_yaml_scalar_pyyaml_cannot_convert_is_one_line(where: str, tmp_path: Path) -> None:
    """`0x_` looks like a hexadecimal number to PyYAML, whose int() then raises ValueError: a
    traceback from `train.seed=0x_` or a config holding it."""
    data = tmp_path / "corpus.txt"
    data.write_text(harness.BASE_TEXT, encoding="utf-8")
    argv = harness.train_dry(tmp_path, data)
    if where == "override":
        argv.append("train.seed=0x_")
    else:
        config = tmp_path / "config.yaml"
        config.write_text("train:\n  seed: 0x_\n", encoding="utf-8")
        argv.insert(1, str(config))
    outcome = found(tmp_path, argv)
    assert outcome.code == 2 and ("train.seed" in outcome.err or str(tmp_path / "config.yaml") in outcome.err)
