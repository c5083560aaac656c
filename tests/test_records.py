"""Text kept in records (JSON Lines, JSON, CSV, TSV, Parquet, a saved `datasets` folder): each
format gives exactly the ids of the plain text that holds the same documents, validation takes
whole records, and every bad input is one error line naming the file and the line, row or record."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from minigpt.config.schema import DataConfig
from minigpt.data.corpus import encode_corpus, load_corpus
from minigpt.errors import UserError
from tests.helpers import TINY, make_text

# documents with the awkward parts: commas, quotes, tabs and newlines inside a field, non-ASCII
DOCS = [
    'First, the "quoted" part,\nthen a second line.',
    "Tabs\there, a comma, and café ünïcode.",
    "",
    "A line\r\nwith CRLF inside, and 'single quotes'.",
] + [make_text(300, seed=i) for i in range(40)]
SEP = "\n"


def _ids(path: Path | str, tmp_path: Path, **data: object) -> tuple[np.ndarray, list[str]]:
    cfg = DataConfig(path=str(path), cache_dir=str(tmp_path / "cache"), **data)
    enc, _, _ = encode_corpus(cfg)
    return np.asarray(enc.ids), list(enc.tokenizer.to_dict().get("chars", []))


def _plain(tmp_path: Path, docs: list[str], sep: str = SEP) -> Path:
    path = tmp_path / "plain.txt"
    path.write_bytes(sep.join(docs).encode("utf-8"))
    return path


def _write(tmp_path: Path, fmt: str, docs: list[str], field: str = "text") -> Path:
    rows = [{"id": i, field: d} for i, d in enumerate(docs)]
    if fmt == "jsonl":
        path = tmp_path / "docs.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif fmt == "json":
        path = tmp_path / "docs.json"
        path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    elif fmt in ("csv", "tsv"):
        path = tmp_path / f"docs.{fmt}"
        with open(path, "w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, ["id", field], dialect="excel" if fmt == "csv" else "excel-tab")
            writer.writeheader()
            writer.writerows(rows)
    elif fmt == "parquet":
        path = tmp_path / "docs.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    else:  # a folder written by the datasets library itself
        path = tmp_path / "saved"
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "tsv", "parquet", "saved"])
@pytest.mark.parametrize("kind", ["char", "byte"])
def test_each_format_gives_the_ids_of_the_plain_text(tmp_path: Path, fmt: str, kind: str) -> None:
    path = _write(tmp_path, fmt, DOCS)
    ids, chars = _ids(path, tmp_path, tokenizer=kind)
    want, want_chars = _ids(_plain(tmp_path, DOCS), tmp_path, tokenizer=kind)
    assert chars == want_chars
    np.testing.assert_array_equal(ids, want)


def test_fields_joined_and_the_field_named(tmp_path: Path) -> None:
    path = tmp_path / "posts.jsonl"
    posts = [{"title": f"Title {i}", "body": make_text(200, seed=i), "n": i} for i in range(30)]
    path.write_text("".join(json.dumps(p) + "\n" for p in posts), encoding="utf-8")
    ids, _ = _ids(path, tmp_path, text_field=["title", "body"], field_separator=" | ")
    want, _ = _ids(_plain(tmp_path, [f"{p['title']} | {p['body']}" for p in posts]), tmp_path)
    np.testing.assert_array_equal(ids, want)
    only_body, _ = _ids(path, tmp_path, text_field="body")
    np.testing.assert_array_equal(only_body, _ids(_plain(tmp_path, [p["body"] for p in posts]), tmp_path)[0])


def test_validation_takes_whole_records(tmp_path: Path) -> None:
    docs = [f"record {i}: " + make_text(500, seed=i) for i in range(60)]
    corpus = load_corpus(DataConfig(path=str(_write(tmp_path, "jsonl", docs)), cache_dir=str(tmp_path / "c")), 16)
    tok = corpus.tokenizer
    train, val = tok.decode(corpus.train.tolist()), tok.decode(corpus.val.tolist())
    k = next(i for i, d in enumerate(docs) if val.startswith(d))  # validation starts with a record
    assert train == SEP.join(docs[:k]) + SEP and val == SEP.join(docs[k:])
    assert 0.05 < len(val) / (len(train) + len(val)) < 0.15  # about data.val_fraction (0.1)


def test_changing_the_field_encodes_again(tmp_path: Path) -> None:
    path = tmp_path / "two.jsonl"
    path.write_text("".join(json.dumps({"a": make_text(300, i), "b": f"other {i} " * 5}) + "\n" for i in range(20)))
    cfg = DataConfig(path=str(path), text_field="a", cache_dir=str(tmp_path / "c"))
    a = load_corpus(cfg, 8)
    b = load_corpus(DataConfig(**{**cfg.__dict__, "text_field": "b"}), 8)
    assert a.sha256 != b.sha256 and len(a.ids) != len(b.ids)
    assert "other 19" in b.tokenizer.decode(b.val.tolist())


def test_records_and_plain_text_mix_in_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.txt").write_text(DOCS[0], encoding="utf-8")
    _write(folder, "jsonl", DOCS[1:])
    ids, _ = _ids(folder, tmp_path, val_fraction=0.5)
    text = _ids(_plain(tmp_path, DOCS), tmp_path)
    assert len(ids) == len(text[0])  # the same documents, in some order of the two files


def _error(tmp_path: Path, body: str, name: str = "bad.jsonl", **data: object) -> str:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    with pytest.raises(UserError) as e:
        load_corpus(DataConfig(path=str(path), cache_dir=str(tmp_path / "cache"), **data), 8)
    assert not list((tmp_path / "cache").glob("**/*.txt")) and not list((tmp_path / "cache").glob("*.bin"))
    return str(e.value)


def test_bad_records_are_one_clear_error(tmp_path: Path) -> None:
    good = json.dumps({"text": "fine text " * 10}) + "\n"
    msg = _error(tmp_path, good * 3 + '{"text": "cut\n' + good)
    assert "bad.jsonl, line 4 is not JSON" in msg
    msg = _error(tmp_path, good + json.dumps({"txet": "x", "id": 1}) + "\n")
    assert "line 2 has no field 'text'" in msg and "txet, id" in msg and "did you mean data.text_field=txet" in msg
    msg = _error(tmp_path, good + json.dumps({"text": 5}) + "\n")
    assert "line 2: field 'text' is a number (5), not text" in msg and "data.skip_bad_records" in msg
    assert "is null, not text" in _error(tmp_path, good + json.dumps({"text": None}) + "\n")
    assert "line 2 is a list, not a record" in _error(tmp_path, good + "[1, 2]\n")
    assert "holds no jsonl records" in _error(tmp_path, "\n\n")
    assert "is not a JSON array of records" in _error(tmp_path, '{"text": "x"}', name="one.json")
    assert "record 2 is not JSON" in _error(tmp_path, '[{"text": "x"}, {"text": ', name="cut.json")


def test_csv_faults_name_the_line(tmp_path: Path) -> None:
    msg = _error(tmp_path, 'id,text\n1,"fine"\n2,"fine, too"\n3,a,b\n', name="ragged.csv")
    assert "ragged.csv, line 4: 3 fields where the header has 2" in msg
    msg = _error(tmp_path, 'id,text\n1,"fine"\n2,"never closed\n3,more\n', name="quote.csv")
    assert "quote.csv, line" in msg and "unterminated quote" in msg
    assert "has no field 'text'" in _error(tmp_path, "id\tbody\n1\tx\n", name="t.tsv")


def test_bad_records_skipped_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = [json.dumps({"text": make_text(400, i)}) for i in range(20)] + [json.dumps({"text": None}), "{}"]
    path = tmp_path / "some_bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus = load_corpus(DataConfig(path=str(path), skip_bad_records=True, cache_dir=str(tmp_path / "c")), 8)
    assert "skipped 2 of 22 records" in capsys.readouterr().err
    assert len(corpus.ids) == len(SEP.join(make_text(400, i) for i in range(20)))


def test_parquet_column_that_is_not_text(tmp_path: Path) -> None:
    path = tmp_path / "nums.parquet"
    pq.write_table(pa.table({"text": [1, 2, 3], "body": ["a", "b", "c"]}), path)
    with pytest.raises(UserError, match=r"nums.parquet: column 'text' holds int64, not strings"):
        load_corpus(DataConfig(path=str(path)), 8)
    with pytest.raises(UserError, match=r"has no column 'bdy' \(it has: text, body; did you mean .*=body"):
        load_corpus(DataConfig(path=str(path), text_field="bdy"), 8)


def test_a_saved_dataset_dict_names_its_splits(tmp_path: Path) -> None:
    ds = datasets.Dataset.from_list([{"text": "x"}])
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(UserError, match=r"saved DatasetDict with the splits test, train; name one"):
        load_corpus(DataConfig(path=str(tmp_path / "dd")), 8)


def test_train_eval_and_score_take_record_files(tmp_path: Path, cli) -> None:
    docs = [make_text(600, seed=i) for i in range(30)]
    data = _write(tmp_path, "jsonl", docs)
    out = tmp_path / "run"
    r = cli("train", "--data", str(data), "--out", str(out), *TINY, "train.max_steps=4", "train.eval_interval=4")
    assert r.code == 0, r.err
    (tmp_path / "other").mkdir()
    other = _write(tmp_path / "other", "csv", docs[:5])
    r = cli("eval", str(out), "--data", str(other), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["tokens"] == len(SEP.join(docs[:5])) - 1
    r = cli("score", str(out), "--file", str(other), "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["chars"] == len(SEP.join(docs[:5]))
    r = cli("train", "--data", str(data), "--out", str(tmp_path / "r2"), *TINY, "data.text_field=body")
    assert r.code == 2 and r.err.count("\n") == 1 and "has no field 'body' (it has: id, text" in r.err


def test_parquet_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    path = _write(tmp_path, "parquet", DOCS)
    code = (
        "import sys; sys.modules['pyarrow'] = None; from minigpt.cli.app import run; "
        f"sys.argv = ['minigpt', 'train', '--data', {str(path)!r}, '--out', {str(tmp_path / 'run')!r}]; run()"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        "error: reading Parquet and Arrow files needs pyarrow: pip install 'minigpt[parquet]' "
        "(or uv sync --extra parquet)"
    ]


def test_a_json_array_read_in_small_pieces(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from minigpt.data import records

    monkeypatch.setattr(records, "JSON_READ", 7)  # every record and number crosses a refill
    path = tmp_path / "docs.json"
    path.write_text(json.dumps([{"n": 12345678, "text": d} for d in DOCS]), encoding="utf-8")
    np.testing.assert_array_equal(_ids(path, tmp_path)[0], _ids(_plain(tmp_path, DOCS), tmp_path)[0])


def test_val_path_takes_a_record_file(tmp_path: Path) -> None:
    train = _write(tmp_path, "jsonl", DOCS)
    (tmp_path / "v").mkdir()
    val = _write(tmp_path / "v", "tsv", [make_text(400, seed=99)])
    corpus = load_corpus(DataConfig(path=str(train), val_path=str(val), cache_dir=str(tmp_path / "c")), 8)
    assert corpus.tokenizer.decode(corpus.val.tolist()) == make_text(400, seed=99)
    assert corpus.tokenizer.decode(corpus.train.tolist()) == SEP.join(DOCS) + SEP


def test_json_lines_parsed_in_batches_still_name_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from minigpt.data import records

    monkeypatch.setattr(records, "JSONL_BATCH", 50)  # a handful of lines per batch
    path = _write(tmp_path, "jsonl", DOCS)
    np.testing.assert_array_equal(_ids(path, tmp_path)[0], _ids(_plain(tmp_path, DOCS), tmp_path)[0])
    good = json.dumps({"text": "fine text " * 3}) + "\n"
    (tmp_path := tmp_path / "errors").mkdir()
    assert "line 9 is not JSON" in _error(tmp_path, good * 8 + '{"text": "a"}, {"text": "b"}\n' + good)
    assert "line 2 is not JSON" in _error(tmp_path, good + "[1,\n2]\n" + good)  # a value split over lines
