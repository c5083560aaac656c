"""The fuzzer's inputs (scripts/fuzz.py): one `Reader` per way a user's bytes reach minigpt, each
with its hypothesis strategy and the command that reads the input."""

from __future__ import annotations

import io
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from fuzzing.harness import BASE_TEXT, CONFIG, TINY, Reader, train_dry, write


@st.composite
def mutated(draw: st.DrawFn, base: bytes) -> bytes:
    """`base` with a few random edits: cut, bits flipped, bytes inserted or deleted, NULs, a huge
    line, invalid UTF-8; or random bytes, or nothing."""
    kind = draw(st.sampled_from(["edit", "edit", "edit", "random", "empty"]))
    if kind == "empty":
        return b""
    if kind == "random":
        return draw(st.binary(max_size=600))
    data = bytearray(base)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["cut", "flip", "insert", "delete", "nul", "huge", "bad_utf8", "yaml"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if op == "cut":
            del data[at:]
        elif op == "flip" and data:
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=40))
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 40))]
        elif op == "nul":
            data[at:at] = b"\x00" * draw(st.integers(1, 8))
        elif op == "huge":
            data[at:at] = b"x" * draw(st.sampled_from([1_000, 100_000, 2_000_000]))
        elif op == "yaml":
            data[at:at] = draw(st.sampled_from(YAML_TRAPS))
        elif op == "bad_utf8":
            data[at:at] = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82", b"\x80\x80"]))
    return bytes(data)


TEXTS = st.text(max_size=60) | st.sampled_from(["", "\x00", "KING", "\ud800", "é" * 30, "\n\n", "x" * 5000])
YAML_TRAPS = [  # what a YAML reader must refuse or read as plain data
    b"!!python/object/apply:os.system ['touch pwned']",
    b"!!python/name:os.system",
    b"&a [*a]",
    b"*undefined",
    b"{a: 1, a: 2}",
    b"? [1, 2]\n: x",
    b"%YAML 9.9\n---",
    b"---\n---\n",
    b"\t- x",
    b"1e999",
    b".nan",
    b"0x_",
    b"2001-12-14t21:59:43.10-05:00",
]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | TEXTS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXTS, inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.sampled_from(["text", "content", "Text", ""]) | TEXTS
RECORDS = st.lists(st.dictionaries(FIELDS, JSON_VALUES | TEXTS, max_size=4), max_size=40)
GOOD_RECORDS = st.lists(st.builds(lambda t: {"text": BASE_TEXT[:400] + t}, TEXTS), min_size=1, max_size=8)


def _text_case(tokenizer: str) -> Reader:
    def make(data: bytes, work: Path, run: Path) -> list[str]:
        return train_dry(work, write(work / "in" / "corpus.txt", data), f"data.tokenizer={tokenizer}")

    return Reader(f"text-{tokenizer}", mutated(BASE_TEXT.encode()), make)


def _record_bytes(fmt: str, records: list[dict[str, Any]]) -> bytes:
    if fmt == "jsonl":
        return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode("utf-8", "surrogatepass")
    if fmt == "json":
        return json.dumps(records, ensure_ascii=False).encode("utf-8", "surrogatepass")
    import csv

    out = io.StringIO()
    keys = sorted({k for r in records for k in r}) or ["text"]
    writer = csv.DictWriter(out, keys, delimiter="\t" if fmt == "tsv" else ",", extrasaction="ignore")
    writer.writeheader()
    for r in records:
        writer.writerow({k: v if isinstance(v, str) else json.dumps(v) for k, v in r.items()})
    return out.getvalue().encode("utf-8", "surrogatepass")


def _records_case(fmt: str) -> Reader:
    inputs = st.tuples(RECORDS | GOOD_RECORDS, st.booleans(), st.data())

    def make(value: tuple, work: Path, run: Path) -> list[str]:
        records, mutate, data = value
        raw = _record_bytes(fmt, records)
        if mutate:
            raw = data.draw(mutated(raw))
        field_set = data.draw(st.sampled_from([[], ["data.skip_bad_records=true"], ["data.text_field=[text,content]"]]))
        return train_dry(work, write(work / "in" / f"records.{fmt}", raw), *field_set)

    return Reader(fmt, inputs, make)


def _parquet_case() -> Reader:
    inputs = st.tuples(RECORDS | GOOD_RECORDS, st.booleans(), st.data())

    def make(value: tuple, work: Path, run: Path) -> list[str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        records, mutate, data = value
        columns = {"text": [r.get("text") if isinstance(r.get("text"), str) else None for r in records]}
        columns["other"] = [json.dumps(r, ensure_ascii=True)[:50] for r in records]
        path = work / "in" / "records.parquet"
        try:
            pq.write_table(pa.table(columns), path)
        except (pa.ArrowException, UnicodeEncodeError):  # text pyarrow will not write (lone surrogates)
            pq.write_table(pa.table({"text": ["fallback " * 10]}), path)
        if mutate:
            write(path, data.draw(mutated(path.read_bytes())))
        return train_dry(work, path)

    return Reader("parquet", inputs, make)


def _datasets_case() -> Reader:
    inputs = st.tuples(
        GOOD_RECORDS | RECORDS, st.sampled_from(["none", "state.json", "arrow", "info", "remove"]), st.data()
    )

    def make(value: tuple, work: Path, run: Path) -> list[str]:
        import datasets

        records, damage, data = value
        texts = [r.get("text") if isinstance(r.get("text"), str) else "" for r in records]
        texts = [t.encode("utf-8", "replace").decode("utf-8") for t in texts]
        folder = work / "in" / "saved"
        datasets.disable_progress_bars()
        datasets.Dataset.from_dict({"text": texts}).save_to_disk(str(folder))
        if damage == "remove":
            (folder / "state.json").unlink()
        elif damage != "none":
            name = {"state.json": "state.json", "info": "dataset_info.json"}.get(damage)
            target = folder / name if name else next(folder.glob("*.arrow"), folder / "state.json")
            write(target, data.draw(mutated(target.read_bytes())))
        return train_dry(work, folder)

    return Reader("datasets", inputs, make)


def _yaml_case() -> Reader:
    base = CONFIG.read_bytes()
    structured = st.dictionaries(
        st.sampled_from(["model", "data", "train", "optim", "log", "sample", "x"]) | TEXTS,
        st.dictionaries(
            st.sampled_from(["n_layer", "lr", "tokenizer", "max_steps", "format", "dtype"]) | TEXTS,
            JSON_VALUES,
            max_size=4,
        )
        | JSON_VALUES,
        max_size=4,
    ).map(lambda d: json.dumps(d).encode("utf-8", "surrogatepass"))  # JSON is YAML

    def make(raw: bytes, work: Path, run: Path) -> list[str]:
        config = write(work / "in" / "config.yaml", raw)
        args = train_dry(work, write(work / "in" / "corpus.txt", BASE_TEXT.encode()))
        return [args[0], str(config), *args[1:]]

    return Reader("yaml", mutated(base) | structured, make)


def _overrides_case() -> Reader:
    from minigpt.config.schema import Config

    keys = sorted(k for k in Config().flat() if k not in ("data.cache_dir", "train.init_from"))
    key = st.sampled_from(keys) | TEXTS.filter(lambda k: "=" not in k)
    traps = st.sampled_from([t.decode() for t in YAML_TRAPS] + ["[]", "{}", "[1, 2", "null", "~", "true", "-1"])
    value = TEXTS | st.integers().map(str) | st.floats().map(str) | traps
    pairs = st.lists(st.tuples(key, value), min_size=1, max_size=3)

    def make(items: list[tuple[str, str]], work: Path, run: Path) -> list[str]:
        corpus = write(work / "in" / "corpus.txt", BASE_TEXT.encode())
        return train_dry(work, corpus, *(f"{k}={v}" for k, v in items))

    return Reader("overrides", pairs, make)


def _checkpoint_bytes_case() -> Reader:
    commands = st.sampled_from(["sample", "score", "eval", "resume", "resume auto", "train over it"])

    def make(value: tuple, work: Path, run: Path) -> list[str]:
        command, data = value
        ckpt = work / "in" / "run" / "last.pt"
        shutil.copytree(run, ckpt.parent, ignore=shutil.ignore_patterns("*.lock", ".lock"))
        write(ckpt, data.draw(mutated_checkpoint(ckpt.read_bytes())))
        if command == "train over it":  # a new run into a folder that holds one: refused, the folder intact
            corpus = write(work / "in" / "corpus.txt", BASE_TEXT.encode())
            return ["train", "--data", str(corpus), "--out", str(ckpt.parent), *TINY, "train.max_steps=1"]
        if command.startswith("resume"):
            return ["train", "--out", str(ckpt.parent), *command.replace("resume", "--resume").split(), "--dry-run"]
        return _reading(command, ckpt)

    return Reader("checkpoint-bytes", st.tuples(commands, st.data()), make)


@st.composite
def mutated_checkpoint(draw: st.DrawFn, whole: bytes) -> bytes:
    """A checkpoint cut short, or with bits flipped anywhere (headers, the pickle, tensors)."""
    data = bytearray(whole)
    if draw(st.booleans()):
        return bytes(data[: draw(st.integers(0, len(data) - 1))])
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, min(len(data), 4096) - 1) | st.integers(0, len(data) - 1))
        data[at] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


class Strange:
    """An object no checkpoint holds: pickled, it names a class torch's safe loader must refuse."""


def _checkpoint_shapes_case() -> Reader:
    import torch

    tensors = st.builds(lambda n: torch.zeros(n), st.integers(0, 4))
    leaf = st.none() | st.integers() | st.floats() | TEXTS | tensors
    nested = st.recursive(
        leaf, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3), max_leaves=8
    )
    section = st.sampled_from(["model", "config", "tokenizer", "data", "step", "optimizer", "rng", "checksums", "x"])
    shapes = st.dictionaries(section, nested, max_size=6)
    kinds = st.sampled_from(["dict", "marked", "pickle", "object", "list"])

    def make(value: tuple, work: Path, run: Path) -> list[str]:
        kind, shape, command = value
        from minigpt.checkpoint import FORMAT, VERSION, load_checkpoint

        path = work / "in" / "model.pt"
        if kind == "pickle":  # a bare pickle, not torch's zip
            write(path, pickle.dumps(Strange()))
        elif kind == "object":  # torch's zip, holding an object its safe loader must refuse
            torch.save({"format": FORMAT, "version": VERSION, "model": Strange(), **shape}, path)
        elif kind == "list":
            torch.save([shape], path)
        else:
            payload = dict(shape)
            if kind == "marked":  # a real checkpoint's sections, some replaced by the drawn ones
                real = load_checkpoint(run / "last.pt")
                payload = {
                    **{k: v for k, v in real.items() if k != "checksums"},
                    **shape,
                    "format": FORMAT,
                    "version": VERSION,
                }
            torch.save(payload, path)
        return _reading(command, path)

    return Reader("checkpoint-shapes", st.tuples(kinds, shapes, st.sampled_from(["sample", "score", "eval"])), make)


def _reading(command: str, target: Path) -> list[str]:
    if command == "sample":
        return ["sample", str(target), "--max-new-tokens", "3", "--seed", "0", "--device", "cpu"]
    if command == "score":
        return ["score", str(target), "--text", "KING: speak", "--device", "cpu"]
    return ["eval", str(target), "--device", "cpu"]


def _prompt_case() -> Reader:
    stops = st.lists(TEXTS, max_size=3)

    def make(value: tuple, work: Path, run: Path) -> list[str]:
        prompt, stop, as_file, unknown = value
        args = ["sample", str(run), "--max-new-tokens", "4", "--seed", "0", "--device", "cpu", "--unknown", unknown]
        if as_file:
            raw = write(work / "in" / "prompt.txt", prompt.encode("utf-8", "surrogatepass"))
            args += [as_file, str(raw)]
        else:
            args += ["--prompt", prompt]
        for s in stop:
            args += ["--stop", s]
        return args

    as_file = st.sampled_from([None, "--prompt-file", "--prompts-file"])
    inputs = st.tuples(TEXTS, stops, as_file, st.sampled_from(["error", "skip"]))
    return Reader("prompt", inputs, make)


def _text_commands_case() -> Reader:
    commands = st.sampled_from(["score", "attention", "lens", "heads"])

    def make(value: tuple, work: Path, run: Path) -> list[str]:
        command, text = value
        out = work / "out"
        out.mkdir()
        if command == "heads":
            data = write(work / "in" / "heads.txt", text.encode("utf-8", "surrogatepass"))
            return ["heads", str(run), "--data", str(data), "--device", "cpu", "--no-color"]
        args = [command, str(run), "--text", text, "--device", "cpu"]
        if command == "attention":
            args += ["--out", str(out / "attention.png")]
        return args

    return Reader("text-commands", st.tuples(commands, TEXTS | st.just("KING: speak now")), make)


def _file_commands_case() -> Reader:
    """A file a user hands to a command that reads a trained model: `eval --data`, `score --file`,
    `attention --file`, `lens --file`; text or a record file, mutated."""
    commands = st.sampled_from(["eval", "score", "attention", "lens"])
    base = "".join(json.dumps({"text": BASE_TEXT[i : i + 200]}) + "\n" for i in range(0, 1200, 200)).encode()
    inputs = st.tuples(commands, st.sampled_from(["txt", "jsonl", "csv", "json"]), st.data())

    def make(value: tuple, work: Path, run: Path) -> list[str]:
        command, ext, data = value
        raw = data.draw(mutated(base if ext == "jsonl" else BASE_TEXT.encode()))
        given = write(work / "in" / f"input.{ext}", raw)
        flag = "--data" if command == "eval" else "--file"
        args = [command, str(run), flag, str(given), "--device", "cpu"]
        if command == "attention":
            (work / "out").mkdir()
            args += ["--out", str(work / "out" / "attention.png")]
        return args

    return Reader("file-commands", inputs, make)


def readers() -> dict[str, Reader]:
    """Every reader, by name (fresh counters)."""
    all_ = [
        _yaml_case(),
        _overrides_case(),
        _text_case("char"),
        _text_case("byte"),
        *(_records_case(fmt) for fmt in ("jsonl", "json", "csv", "tsv")),
        _parquet_case(),
        _datasets_case(),
        _checkpoint_bytes_case(),
        _checkpoint_shapes_case(),
        _prompt_case(),
        _text_commands_case(),
        _file_commands_case(),
    ]
    return {r.name: r for r in all_}
