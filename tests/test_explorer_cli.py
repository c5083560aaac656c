"""`minigpt attention --html` and `minigpt score --html`: the pages from the command line, and
each bad input as one `error:` line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import make_text, page_data


def test_attention_and_score_pages_from_the_cli(trained_run: Path, tmp_path: Path, cli) -> None:
    text = make_text(50, seed=2)
    f = tmp_path / "scene.txt"
    f.write_text(text, encoding="utf-8")
    r = cli("attention", trained_run, "--file", f, "--html", tmp_path / "a.html", "--out", tmp_path / "a.png")
    assert r.code == 0, r
    assert "wrote" in r.err and "50 characters, 2 layer(s) x 2 head(s), 6 window(s)" in r.err
    assert "note: the picture shows the first 16 characters" in r.err and (tmp_path / "a.png").stat().st_size > 5000
    assert page_data(tmp_path / "a.html")["pieces"] == list(text)
    r = cli(
        "attention",
        trained_run,
        "--text",
        text + "~",
        "--html",
        tmp_path / "b.html",
        "--unknown",
        "skip",
        "--layer",
        "1",
    )
    assert r.code == 0, r
    assert page_data(tmp_path / "b.html")["layers"] == [1]
    r = cli("score", trained_run, "--text", text, "--html", tmp_path / "s.html")
    assert r.code == 0 and "bits per character over 49 characters" in r.err, r
    scored = json.loads(cli("score", trained_run, "--text", text, "--json").out)
    data = page_data(tmp_path / "s.html")
    assert data["bitsPerChar"] == scored["bits_per_char"] and len(data["topIds"]) == 49
    assert cli("score", trained_run, "--text", "KING~:", "--unknown", "skip", "--json").code == 0


def test_bad_input_is_one_error_line(trained_run: Path, tmp_path: Path, cli) -> None:
    page = tmp_path / "p.html"
    cases = {
        ("attention", "--text", "KING~", "--html", page): "--text has characters the model never saw in training: '~'; "
        "remove them or pass --unknown skip to drop them",
        ("score", "--text", "", "--html", page): "--text is empty",
        ("attention", "--text", "KING", "--html", tmp_path / "no" / "p.html"): f"cannot write --html {tmp_path / 'no'}"
        f"/p.html: the folder {tmp_path / 'no'} does not exist",
        ("score", "--text", "KING", "--html", tmp_path): "it is a folder",
        ("attention", "--text", "KING"): "give --out PICTURE.png, --html PAGE.html or both",
        ("attention", "--html", page): "give exactly one of --text TEXT or --file FILE",
        ("score", "--file", tmp_path / "none.txt", "--html", page): f"--file {tmp_path / 'none.txt'} does not",
        ("score", "--text", "KING " * 10_001, "--html", page): "--text is 50,005 characters; a page holds at most",
        ("attention", "--text", "KING", "--html", page, "--head", "2"): "--head must be in 0..1",
    }
    for args, message in cases.items():
        r = cli(args[0], trained_run, *args[1:])
        assert r.code == 2 and r.err.startswith("error: ") and message in r.err and r.err.count("\n") == 1, (args, r)
    assert not page.exists()
