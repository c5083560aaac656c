"""Data at any scale: folders, globs and lists of files, the document separator, file-level
validation, byte tokenization, the content-keyed memory-mapped cache, and each bad input."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt.config.schema import DataConfig, ModelConfig
from minigpt.data import encoding, passes
from minigpt.data.corpus import Batcher, encode_corpus, load_corpus
from minigpt.data.encoding import file_sha256
from minigpt.data.sources import choose_val_files, resolve_sources
from minigpt.data.tokenizer import ByteTokenizer, CharTokenizer
from minigpt.errors import UserError
from minigpt.infer.evaluate import evaluate_ids
from minigpt.model import GPT
from minigpt.training.launch import vocabulary_check

from .helpers import TINY, make_text

ROOT = Path(__file__).resolve().parents[1]


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def folder_of(tmp_path: Path, n: int = 12, size: int = 2000) -> Path:
    root = tmp_path / "corpus"
    for i in range(n):
        write(root / ("deep/er" if i % 3 else "top") / f"doc{i:02d}.txt", make_text(size, seed=i))
    return root


def decoded(corpus, ids) -> str:
    return corpus.tokenizer.decode(np.asarray(ids).tolist())


def test_a_folder_reads_nested_files_in_path_order_and_skips_hidden_ones(tmp_path: Path) -> None:
    root = tmp_path / "c"
    write(root / "b.txt", "second\n")
    write(root / "a" / "z.txt", "first\n")
    write(root / ".git" / "HEAD", "ref: refs/heads/main\n")  # a hidden folder
    write(root / ".notes.txt", "hidden\n")  # a hidden file
    write(root / "c.txt", "third")
    files = resolve_sources(str(root))
    assert [f.name for f in files] == ["a/z.txt", "b.txt", "c.txt"]
    corpus = load_corpus(DataConfig(path=str(root), val_fraction=0.3, doc_separator="|"), block_size=2)
    # three small files: whole files cannot come near 30%, so the tail of the joined text is validation
    assert decoded(corpus, corpus.ids) == "first\n|second\n|third"
    assert "ref" not in corpus.tokenizer.chars and "|" in corpus.tokenizer.chars


def test_globs_and_lists_of_sources(tmp_path: Path) -> None:
    root = folder_of(tmp_path, n=6)
    write(root / "top" / "skip.md", "# not matched\n")
    matched = resolve_sources(str(root / "**" / "*.txt"))
    assert len(matched) == 6 and all(f.name.endswith(".txt") for f in matched)
    assert matched[0].name == "deep/er/doc01.txt"  # named relative to the pattern's fixed part
    listed = resolve_sources([str(root / "top"), str(root / "deep" / "er" / "doc01.txt"), str(root / "top")])
    assert [f.name for f in listed] == ["0:doc00.txt", "0:doc03.txt", "0:skip.md", "1:doc01.txt"]  # once each
    with pytest.raises(UserError, match=r"data.path: the pattern .*\*\.csv matches no files"):
        resolve_sources(str(root / "*.csv"))


def test_the_document_separator_joins_files(tmp_path: Path) -> None:
    a, b = write(tmp_path / "a.txt", "no newline at the end"), write(tmp_path / "b.txt", "next file")
    for sep, joined in (
        ("\n", "no newline at the end\nnext file"),
        ("\n\n", "no newline at the end\n\nnext file"),
        ("", "no newline at the endnext file"),
    ):
        corpus = load_corpus(DataConfig(path=[str(a), str(b)], doc_separator=sep, val_fraction=0.2), block_size=4)
        assert decoded(corpus, corpus.ids) == joined


def test_several_files_hold_out_whole_files_by_a_hash_of_their_names(tmp_path: Path) -> None:
    root = folder_of(tmp_path, n=40, size=1000)
    corpus = load_corpus(DataConfig(path=str(root), val_fraction=0.1), block_size=16)
    files = resolve_sources(str(root))
    chosen = choose_val_files(files, 0.1)
    assert chosen is not None and chosen.count(True) == 4  # 10% of 40 equal files
    val_text, train_text = decoded(corpus, corpus.val), decoded(corpus, corpus.train)
    for f, is_val in zip(files, chosen):
        body = Path(f.path).read_text()
        assert (body in val_text) == is_val and (body in train_text) != is_val  # never in both
    # the choice depends on the names, not on where the folder is
    moved = tmp_path / "moved"
    root.rename(moved)
    assert choose_val_files(resolve_sources(str(moved)), 0.1) == chosen


def test_val_path_names_the_validation_text(tmp_path: Path) -> None:
    root = folder_of(tmp_path, n=6)
    held = write(tmp_path / "held_out.txt", make_text(3000, seed=99))
    corpus = load_corpus(DataConfig(path=str(root), val_path=str(held)), block_size=16)
    assert decoded(corpus, corpus.val) == held.read_text()
    assert held.read_text() not in decoded(corpus, corpus.train)
    # a validation folder inside the training folder is taken out of training
    inner = load_corpus(DataConfig(path=str(root), val_path=str(root / "top")), block_size=16)
    top = [p.read_text() for p in sorted((root / "top").iterdir())]
    assert all(t in decoded(inner, inner.val) and t not in decoded(inner, inner.train) for t in top)


def test_byte_mode_reads_any_file_and_its_model_samples(tmp_path: Path, cli) -> None:
    latin = write(tmp_path / "latin1.txt", ("caf\xe9 na\xefve r\xe9sum\xe9\n" * 300).encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1\.txt is not UTF-8 text: byte 0xe9 .*data\.tokenizer=byte"):
        load_corpus(DataConfig(path=str(latin)), block_size=16)
    corpus = load_corpus(DataConfig(path=str(latin), tokenizer="byte"), block_size=16)
    assert isinstance(corpus.tokenizer, ByteTokenizer) and corpus.tokenizer.vocab_size == 256
    assert bytes(np.asarray(corpus.ids)) == latin.read_bytes()
    out = tmp_path / "run"
    r = cli(
        "train",
        "--data",
        latin,
        "--out",
        out,
        *TINY,
        "data.tokenizer=byte",
        "train.max_steps=8",
        "train.eval_interval=8",
    )
    assert r.code == 0, r
    assert "bytes, byte vocab 256" in r.err and "bits/byte" in r.err
    r = cli("sample", out, "--prompt", "caf\u00e9", "--max-new-tokens", "40", "--seed", "3")
    assert r.code == 0, r
    assert r.out.startswith("caf\u00e9")  # the prompt's UTF-8 bytes, decoded back
    r = cli("eval", out, "--json")
    assert r.code == 0 and '"unit": "byte"' in r.out


def test_byte_decoding_never_fails_on_partial_characters() -> None:
    tok = ByteTokenizer()
    ids = tok.encode("a\u00e9\U0001f600")
    assert ids == [97, 0xC3, 0xA9, 0xF0, 0x9F, 0x98, 0x80]
    assert tok.pieces(ids) == ["a", "", "\u00e9", "", "", "", "\U0001f600"]  # each character on its last byte
    stream = tok.streamer()
    assert "".join(stream(i) for i in ids[:-1]) == "a\u00e9"  # the emoji waits for its last byte
    assert tok.decode([0xFF, 0xC3]) == "\ufffd\ufffd" and tok.decode(ids[:2]) == "a\ufffd"


def test_a_changed_added_or_removed_file_re_encodes_the_folder(tmp_path: Path, monkeypatch) -> None:
    root = folder_of(tmp_path, n=5)
    cfg = DataConfig(path=str(root))
    first = load_corpus(cfg, 16)
    entries = lambda: sorted(p.name for p in Path(os.environ["MINIGPT_CACHE_DIR"]).glob("*.bin"))  # noqa: E731
    assert len(entries()) == 1 and load_corpus(cfg, 16).sha256 == first.sha256
    victim = root / "top" / "doc00.txt"
    victim.write_text(victim.read_text().replace("king", "KING"))
    changed = load_corpus(cfg, 16)
    assert changed.sha256 != first.sha256 and "KING" in decoded(changed, changed.ids) and len(entries()) == 2
    write(root / "new.txt", make_text(500, seed=7))
    added = load_corpus(cfg, 16)
    (root / "deep" / "er" / "doc01.txt").unlink()
    removed = load_corpus(cfg, 16)
    assert len({first.sha256, changed.sha256, added.sha256, removed.sha256}) == 4 and len(entries()) == 4


def test_an_unchanged_corpus_is_not_hashed_again(tmp_path: Path, monkeypatch) -> None:
    root = folder_of(tmp_path, n=4)
    old = 1_600_000_000
    for p in root.rglob("*.txt"):
        os.utime(p, (old, old))  # long before the index is written: not a racy entry
    cfg = DataConfig(path=str(root))
    first = load_corpus(cfg, 16)
    read = []
    real = encoding.file_sha256
    monkeypatch.setattr(encoding, "file_sha256", lambda path, *a: read.append(path) or real(path, *a))
    assert load_corpus(cfg, 16).sha256 == first.sha256 and read == []  # size and mtime vouch for the hashes
    touched = root / "top" / "doc00.txt"
    os.utime(touched, (old + 10, old + 10))  # same content, new mtime: hashed again, same key
    assert load_corpus(cfg, 16).sha256 == first.sha256 and read == [str(touched)]


def test_resume_refuses_a_changed_folder(tmp_path: Path, cli) -> None:
    root = folder_of(tmp_path, n=6)
    out = tmp_path / "run"
    r = cli(
        "train",
        "--data",
        root,
        "--out",
        out,
        *TINY,
        "train.max_steps=4",
        "train.eval_interval=4",
        "train.final_eval=false",
    )
    assert r.code == 0, r
    write(root / "top" / "extra.txt", make_text(800, seed=5))
    before = sorted(p.name for p in out.iterdir())
    r = cli("train", "--out", out, "--resume", "train.max_steps=8")
    assert r.code == 2 and "error: cannot resume:" in r.err and "content hash changed" in r.err, r
    assert sorted(p.name for p in out.iterdir()) == before
    (root / "top" / "extra.txt").unlink()
    assert cli("train", "--out", out, "--resume", "train.max_steps=8").code == 0


def test_the_memory_map_gives_the_batches_of_an_in_memory_array(tmp_path: Path) -> None:
    corpus = load_corpus(DataConfig(path=str(folder_of(tmp_path, n=6))), block_size=16)
    assert isinstance(corpus.train, np.memmap)
    in_memory = torch.from_numpy(np.array(corpus.train))
    mapped, plain = (Batcher(d, 16, 8, seed=5, device=torch.device("cpu")) for d in (corpus.train, in_memory))
    for _ in range(3):
        (x1, y1), (x2, y2) = mapped.next(), plain.next()
        assert torch.equal(x1, x2) and torch.equal(y1, y2) and x1.dtype == torch.long


def test_tiny_shakespeare_encodes_and_scores_exactly_as_before() -> None:
    """The single-file char path keeps its vocabulary, ids and validation loss: what the in-memory
    encoder of earlier versions gave (reimplemented here) and the memory-mapped cache agree."""
    path = ROOT / "data" / "tinyshakespeare.txt"
    text = path.read_text(encoding="utf-8")
    before = CharTokenizer.from_text(text)
    ids = before.encode_array(text)
    split = int(len(ids) * 0.9)
    corpus = load_corpus(DataConfig(path=str(path)), block_size=64)
    assert corpus.tokenizer.chars == before.chars and corpus.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert np.array_equal(np.asarray(corpus.ids), ids) and corpus.split == split
    torch.manual_seed(0)
    model = GPT(ModelConfig(n_layer=1, n_head=2, n_embd=32, block_size=64), before.vocab_size).eval()
    old = evaluate_ids(model, torch.from_numpy(ids[split:]))
    assert evaluate_ids(model, corpus.val).loss == old.loss


def test_a_few_non_utf8_files_in_a_folder_are_skipped_with_a_warning(tmp_path: Path, capsys) -> None:
    root = folder_of(tmp_path, n=12, size=500)
    write(root / "top" / "latin.txt", "caf\xe9".encode("latin-1"))
    corpus = load_corpus(DataConfig(path=str(root)), 16)
    assert "caf" not in decoded(corpus, corpus.ids)
    assert (
        "warning: " in (err := capsys.readouterr().err)
        and "skipped 1 file(s) that are not UTF-8 text: top/latin.txt" in err
    )
    load_corpus(DataConfig(path=str(root)), 16)  # cached: said again, never silent
    assert "skipped 1 file(s)" in capsys.readouterr().err
    for i in range(4):
        write(root / f"bin{i}.dat", bytes(range(128, 256)))
    with pytest.raises(
        UserError, match=r"5 of 17 files are not UTF-8 text \(the first: .*bin0\.dat.*data\.tokenizer=byte"
    ):
        load_corpus(DataConfig(path=str(root)), 16)


def test_bad_sources_are_one_clear_error(tmp_path: Path, monkeypatch) -> None:
    empty = tmp_path / "empty"
    write(empty / ".hidden", "x")
    cases = {
        r"the folder .*empty holds no files to read \(hidden files, files a .gitignore ignores": str(empty),
        r"does not exist": str(tmp_path / "nope.txt"),
    }
    loop = tmp_path / "loop"
    loop.mkdir()
    write(loop / "a.txt", make_text(200))
    os.symlink(loop, loop / "again")  # a folder link back to its parent
    cases[r"again is a symlink loop \(it leads back to"] = str(loop)
    selfish = tmp_path / "self"
    selfish.mkdir()
    os.symlink(selfish / "me", selfish / "me")
    cases[r"me is a symlink loop"] = str(selfish)
    for message, path in cases.items():
        with pytest.raises(UserError, match=message):
            load_corpus(DataConfig(path=path), 16)

    unreadable = write(tmp_path / "locked.txt", make_text(500))
    real_open, real_os_open = open, os.open

    def denier(real):
        def deny(path, *a, **k):
            if Path(path) == unreadable:
                raise PermissionError(13, "Permission denied")
            return real(path, *a, **k)

        return deny

    # root reads any file, so the refusal is simulated, for file objects and for os.open alike
    monkeypatch.setattr("builtins.open", denier(real_open))
    monkeypatch.setattr(os, "open", denier(real_os_open))
    with pytest.raises(UserError, match=r"cannot read data file .*locked\.txt: Permission denied"):
        load_corpus(DataConfig(path=str(unreadable)), 16)


def test_a_file_that_changes_while_it_is_encoded(tmp_path: Path, monkeypatch) -> None:
    path = write(tmp_path / "growing.txt", make_text(3000))
    real, real_whole = passes.chunks, passes._read_whole

    def append(p) -> None:
        with open(p, "a") as f:  # a writer appends while minigpt reads
            f.write("more text")

    def appending(p, *args, **kwargs):
        yield from real(p, *args, **kwargs)
        append(p)

    def appending_whole(f):
        data = real_whole(f)
        append(f.path)
        return data

    monkeypatch.setattr(passes, "chunks", appending)  # large files are streamed,
    monkeypatch.setattr(passes, "_read_whole", appending_whole)  # small ones read whole
    with pytest.raises(UserError, match=r"growing\.txt changed while it was being encoded; run again"):
        load_corpus(DataConfig(path=str(path)), 16)
    assert not list(Path(os.environ["MINIGPT_CACHE_DIR"]).glob("*.bin"))  # nothing half-written kept


def test_a_vocabulary_too_large_for_the_model_suggests_bytes(tmp_path: Path, cli) -> None:
    cjk = "".join(chr(0x4E00 + i) for i in range(3000)) * 2
    path = write(tmp_path / "hanzi.txt", cjk)
    check = vocabulary_check(ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=16))
    with pytest.raises(UserError, match=r"3,000 distinct characters.*data\.tokenizer=byte"):
        load_corpus(DataConfig(path=str(path)), 16, check_vocab=check)
    r = cli("train", "--data", path, "--out", tmp_path / "run", *TINY)
    assert r.code == 2 and r.err.count("\n") == 1 and "data.tokenizer=byte" in r.err, r
    assert not (tmp_path / "run").exists()


def _mapped_kb(suffix: str) -> int:
    """Resident kB of this process's mappings of files whose name ends with `suffix`."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[:1].isdigit() or line[:1] in "abcdef":  # a mapping's header line
            inside = line.rstrip().endswith(suffix)
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def test_drawing_windows_keeps_no_page_of_the_corpus_mapped(tmp_path: Path) -> None:
    """Random windows read through the memory map must not pile up in resident memory (each
    touched page, or large folio, would stay mapped: a long run would map the whole corpus)."""
    big = write(tmp_path / "big.txt", make_text(100_000) * 300)  # 30 MB
    corpus = load_corpus(DataConfig(path=str(big)), block_size=64)
    batcher = Batcher(corpus.train, 64, 32, seed=0, device=torch.device("cpu"))
    for _ in range(200):  # 6,400 windows: at least 25 MB of pages if each stayed mapped
        batcher.next()
    evaluate_ids(GPT(ModelConfig(n_layer=1, n_head=1, n_embd=8, block_size=64), 40).eval(), corpus.val[:200_000])
    assert str(corpus.ids.filename).endswith(".char.bin") and _mapped_kb(".char.bin") < 1024


def test_byte_decoding_takes_arrays_by_value() -> None:
    tok = ByteTokenizer()
    ids = tok.encode_array("caf\u00e9")  # int64, as encode_checked returns them
    assert tok.decode(ids) == tok.decode(ids.tolist()) == "caf\u00e9"


@pytest.mark.parametrize("batch", [passes.BATCH, 40])  # 40 bytes: batches end mid-file list, large files stream
def test_a_tree_of_small_mixed_files_encodes_as_each_file_would_alone(tmp_path: Path, monkeypatch, batch) -> None:
    """The batched encoder (small files read whole and joined) gives exactly the ids, vocabulary,
    split and skipped files of encoding each file's text on its own, for ASCII, 2-, 3- and 4-byte
    characters, files that start or end on one, and files that are not UTF-8 in each way."""
    monkeypatch.setattr(passes, "BATCH", batch)
    root = tmp_path / "tree"
    good = {
        "a.py": "print('hello')\n" * 5,
        "b.py": "\u00e9t\u00e9 = 1  # caf\u00e9\n",
        "c.py": "\u4e2d\u6587 comment \u4e2d\n" * 4,
        "d.py": "\U0001f600 smile\n\U0001f600",
        "e.py": "\u00fcber",  # starts on a 2-byte character
        "f.py": "ends on \u00e9",
        "g.py": "",
        "h.py": "plain ASCII " * 9,
    }
    bad = {
        # a lone lead byte followed by ASCII, and long enough to be streamed in 40-byte batches
        "x1.txt": "caf\xe9 latin-1, read on past the fault to its end".encode("latin-1"),
        "x2.txt": b"truncated \xe4\xb8",  # a 3-byte character cut short at the end
        "x3.txt": b"\xa9 starts on a continuation byte",
    }
    for name, text in {**good, **bad}.items():
        write(root / name, text)
    more = {f"m{i:02d}.py": make_text(300, seed=i) + "\u0416" * (i % 3) for i in range(20)}  # many small files
    for name, text in more.items():
        write(root / "sub" / name, text)
    enc, _, _ = encode_corpus(DataConfig(path=str(root), doc_separator="\n--\n"))
    files = resolve_sources(str(root))
    chosen = choose_val_files(files, 0.1) or [False] * len(files)  # chosen before the bad files are left out
    keep = [Path(f.path).name not in bad for f in files]
    texts = [Path(f.path).read_text(encoding="utf-8") if k else None for f, k in zip(files, keep)]
    train = [t for t, v in zip(texts, chosen) if t is not None and not v]
    val = [t for t, v in zip(texts, chosen) if t is not None and v]
    joined = "\n--\n".join(train + val)
    tok = CharTokenizer(sorted(set(joined)))
    assert enc.tokenizer.chars == tok.chars and enc.tokenizer.vocab_size > 20
    assert np.array_equal(np.asarray(enc.ids), tok.encode_array(joined))
    assert sorted(Path(name).name for name in enc.skipped) == sorted(bad)
    assert val and enc.split == len(tok.encode_array("\n--\n".join(train) + "\n--\n"))


@pytest.mark.parametrize("batch", [passes.BATCH, 40])
def test_a_first_run_reads_each_file_twice_and_finds_what_three_passes_find(tmp_path: Path, monkeypatch, batch) -> None:
    """Hashes and vocabulary come from one read, ids from the second; a cached run reads nothing."""
    monkeypatch.setattr(passes, "BATCH", batch)
    root = tmp_path / "tree"
    texts = {f"f{i:02d}.txt": make_text(70, seed=i) + "\u00e9\u4e2d"[: i % 3] for i in range(12)}
    texts["bad.bin"] = b"a streamed file that is not UTF-8 \xff past its fault" * 2
    for name, text in texts.items():
        write(root / name, text)
        os.utime(root / name, (1e9, 1e9))  # not just modified: the hash index trusts it next time
    files = resolve_sources(str(root))
    hashes, chars, bad, _ = passes.hashes_and_vocabulary(files, lambda n: None)
    assert hashes == [file_sha256(f.path) for f in files]
    assert (chars, bad) == passes.vocabulary(files, lambda n: None) and len(bad) == 1

    reads: list[str] = []
    real_chunks, real_whole = passes.chunks, passes._read_whole

    def counted(path, *args, **kwargs):
        reads.append(Path(path).name)
        return real_chunks(path, *args, **kwargs)

    def counted_whole(f):
        reads.append(Path(f.path).name)
        return real_whole(f)

    monkeypatch.setattr(passes, "chunks", counted)
    monkeypatch.setattr(passes, "_read_whole", counted_whole)
    monkeypatch.setattr(encoding, "chunks", counted)
    cfg = DataConfig(path=str(root), cache_dir=str(tmp_path / "cache"))
    first, _, _ = encode_corpus(cfg)
    good = sorted(n for n in texts if n != "bad.bin")
    assert sorted(reads) == sorted(good * 2 + ["bad.bin"])  # a skipped file is not read for ids
    reads.clear()
    again, _, _ = encode_corpus(cfg)
    assert reads == [] and np.array_equal(np.asarray(again.ids), np.asarray(first.ids))


def test_joined_files_are_utf8_only_where_each_file_is() -> None:
    cut, rest = b"ends in half a \xe4\xb8", b"\xad character"  # joined, they would make one valid character
    assert passes.non_ascii(cut + rest).text == "\u4e2d"
    assert passes.non_ascii(cut + rest, [0, len(cut)]) is None  # the second file starts inside it
    assert passes.non_ascii(b"caf\xc3 \xa9") is None  # an ASCII byte inside a character
    assert passes.non_ascii(b"\xa9 then text") is None
    part = passes.non_ascii("a\u00e9b\U0001f600c".encode())
    assert part.text == "\u00e9\U0001f600" and part.at.tolist() == [1, 2, 4, 5, 6, 7]
    assert part.continues.tolist() == [False, True, False, True, True, True]
