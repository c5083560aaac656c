from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt.config.schema import DataConfig
from minigpt.data import encoding, sources
from minigpt.data.corpus import Batcher, load_corpus
from minigpt.data.tokenizer import CharTokenizer, tokenizer_from_dict
from minigpt.errors import UserError

from .helpers import make_text


def test_tokenizer_round_trip_and_sorted_vocab() -> None:
    text = "Hello, wörld!\nÜber 😀 alles."
    tok = CharTokenizer.from_text(text)
    assert tok.chars == sorted(set(text))
    assert tok.decode(tok.encode(text)) == text
    assert tok.encode("lo") == [tok.stoi["l"], tok.stoi["o"]]
    assert tokenizer_from_dict(tok.to_dict()).chars == tok.chars
    assert tok.unknown("Hi? Hi!") == ["i", "?"]
    with pytest.raises(KeyError):
        tok.encode("?")


def test_split_is_contiguous_and_last_fraction_is_val(text_file: Path) -> None:
    corpus = load_corpus(DataConfig(path=str(text_file), val_fraction=0.1), block_size=16)
    text = text_file.read_text()
    split = int(len(text) * 0.9)
    assert corpus.tokenizer.decode(corpus.train.tolist()) == text[:split]
    assert corpus.tokenizer.decode(corpus.val.tolist()) == text[split:]


def test_batches_are_shifted_windows_and_seeded(text_file: Path) -> None:
    corpus = load_corpus(DataConfig(path=str(text_file)), block_size=16)
    a = Batcher(corpus.train, 16, 4, seed=7, device=torch.device("cpu"))
    b = Batcher(corpus.train, 16, 4, seed=7, device=torch.device("cpu"))
    x, y = a.next()
    assert x.shape == y.shape == (4, 16) and x.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    x2, y2 = b.next()
    assert torch.equal(x, x2) and torch.equal(y, y2)  # same seed, same batches
    # every row is a real window of the training text
    train = torch.from_numpy(corpus.train.astype(np.int64))
    for row in x:
        starts = [i for i in range(len(train) - 16) if torch.equal(train[i : i + 16], row)]
        assert starts
    state = a.state_dict()
    nxt = a.next()
    a.load_state_dict(state)
    assert torch.equal(a.next()[0], nxt[0])  # the generator state restores the batch stream


def test_encoding_is_cached_by_content_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.txt"
    text = make_text(5000)
    path.write_text(text, encoding="utf-8")
    cache = tmp_path / "cache"
    cfg = DataConfig(path=str(path), cache_dir=str(cache))
    corpus = load_corpus(cfg, 16)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert corpus.sha256 == sha  # a single file's key is its SHA-256, as checkpoints have always recorded
    assert (cache / f"{sha}.char.bin").exists() and (cache / f"{sha}.char.json").exists()
    assert isinstance(corpus.ids, np.memmap)  # read from the entry, not held as a private copy

    def boom(*a, **k):
        raise AssertionError("the text was encoded again instead of read from the cache")

    monkeypatch.setattr(encoding, "encode", boom)
    again = load_corpus(cfg, 16)
    assert again.sha256 == sha and again.tokenizer.chars == corpus.tokenizer.chars
    assert np.array_equal(again.ids, corpus.ids)


def test_nothing_is_written_next_to_the_data(tmp_path: Path) -> None:
    """Data in a read-only folder works: encoding writes only into the cache directory."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "t.txt").write_text(make_text(3000))
    before = sorted(p.name for p in folder.iterdir())
    corpus = load_corpus(DataConfig(path=str(folder / "t.txt"), cache_dir=str(tmp_path / "cache")), 16)
    assert len(corpus.ids) == 3000
    assert sorted(p.name for p in folder.iterdir()) == before


def test_unwritable_cache_dir_is_not_fatal(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    path = tmp_path / "t.txt"
    path.write_text(make_text(3000))
    corpus = load_corpus(DataConfig(path=str(path), cache_dir=str(blocker / "cache")), 16)  # cannot mkdir there
    assert len(corpus.ids) == 3000 and corpus.tokenizer.decode(corpus.ids[:50].tolist()) == path.read_text()[:50]
    assert "warning: cannot use the encoding cache" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, r"does not exist \(pass --data FILE"),
        (b"", r"holds no text"),
        (b"good text\nmore \xff\xfe bad", r"is not UTF-8 text: byte 0xff at offset 15 \(line 2\).*data.tokenizer=byte"),
        (b"too short", r"is too short: 9 chars give 8 for training and 1 for validation"),
    ],
)
def test_bad_data_files(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "t.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UserError, match=message):
        load_corpus(DataConfig(path=str(path)), block_size=16)


def test_the_default_corpus_ships_and_trains_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """data/tinyshakespeare.txt where this folder has none is the copy minigpt ships, SHA-256 checked;
    one the folder has is read as it is."""
    monkeypatch.chdir(tmp_path)  # no data/ here, and no network needed
    corpus = load_corpus(DataConfig(), block_size=16)
    shipped = Path(sources.shipped_text())
    assert corpus.sha256 == sources.TINY_SHAKESPEARE_SHA256 == hashlib.sha256(shipped.read_bytes()).hexdigest()
    assert len(corpus.ids) == 1_115_394 and sources.absolute_spec(DataConfig().path) == str(shipped)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "tinyshakespeare.txt").write_text(make_text(2_000), encoding="utf-8")
    assert load_corpus(DataConfig(), block_size=16).sha256 != sources.TINY_SHAKESPEARE_SHA256
    monkeypatch.setattr(sources, "TINY_SHAKESPEARE_SHA256", "0" * 64)  # a damaged install
    with pytest.raises(UserError, match=r"tinyshakespeare\.txt is damaged \(SHA-256 86c4e6aa.*reinstall minigpt"):
        sources.shipped_text.__wrapped__()
