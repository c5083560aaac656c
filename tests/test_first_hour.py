"""What a newcomer meets in the first hour (issue 53): the second training, config mistakes, the
sweep's flags, the shipped configs, the terminal views, the advisor's figures, --dry-run, the runs
table, wrong run paths and which val loss a header prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from minigpt.config.files import load_config
from minigpt.errors import UserError

from .helpers import TINY


@pytest.mark.parametrize(
    ("given", "meant", "where"),
    [
        ("train.lr", "optim.lr", "optim"),
        ("optim.learning_rate", "optim.lr", None),
        ("learning_rate", "optim.lr", "optim"),
        ("lr", "optim.lr", "optim"),
        ("n_layers", "model.n_layer", "model"),
        ("layers", "model.n_layer", "model"),
        ("epochs", "train.max_steps", "train"),
        ("batch", "train.batch_size", "train"),
        ("modle.n_layer", "model.n_layer", "model"),
        ("model.n_layers", "model.n_layer", None),
    ],
)
def test_a_mistyped_key_is_looked_up_in_every_section_and_other_tools_names(given, meant, where) -> None:
    with pytest.raises(UserError) as caught:
        load_config(None, [f"{given}=1"])
    message = str(caught.value)
    assert f"unknown key '{given}' (did you mean '{meant}'?" in message
    if where is None:  # the section written was the right one: the suggestion alone
        assert message.endswith(f"(did you mean '{meant}'?)")
    else:
        assert f"it is in the {where} section: " in message
    if given == "epochs":
        assert "optimizer steps, not passes over the text" in message


def test_the_advisor_rounds_and_words_its_ratio_once(text_file: Path, tmp_path: Path, cli) -> None:
    # 2 x 32 blocks: 24,576 block parameters; 40 steps of 8 x 16 see 5,120 characters, 0.21 a parameter
    r = cli("train", "--data", text_file, "--out", tmp_path / "r", *TINY, "train.max_steps=40", "--dry-run")
    assert r.code == 0, r
    plan = next(line for line in r.err.splitlines() if line.startswith("plan: "))
    big = next(line for line in r.err.splitlines() if line.startswith("advice: the model is big"))
    assert "0.21 chars per block parameter" in plan and "0.21 chars per block parameter, under one" in big


def test_dry_run_says_why_max_steps_is_what_it_is_and_prints_separators_readably(
    text_file: Path, tmp_path: Path, cli
) -> None:
    r = cli("train", "--data", text_file, *TINY, "train.max_time=1m", "data.doc_separator=\n\n", "--dry-run")
    assert r.code == 0, r
    assert 'doc_separator: "\\n\\n"' in r.out and 'field_separator: "\\n"' in r.out
    assert "  max_steps: 300  # or train.max_time 1m, whichever comes first, ends the run" in r.out
    assert yaml.safe_load(r.out)["data"]["doc_separator"] == "\n\n"  # still the YAML it was
    from minigpt.training.launch import dry_run_text  # --auto's cap, without its seconds-long speed probe

    auto = load_config(None, ["train.auto=true", "train.max_time=10m", "train.max_steps=12790"])
    line = next(line for line in dry_run_text(auto, frozenset(), 1279).splitlines() if "max_steps" in line)
    assert line == "  max_steps: 12790  # a cap only: train.max_time 10m ends the run; --auto plans ~1,279 steps"
    mine = dry_run_text(auto, frozenset({"train.max_steps"}), 1279)
    assert "  max_steps: 12790  # or train.max_time 10m, whichever comes first, ends the run" in mine


def test_runs_shows_the_data_when_it_differs_explains_its_marks_and_pluralizes(
    trained_run: Path, tmp_path: Path, cli
) -> None:
    import shutil

    from .helpers import make_text

    shutil.copytree(trained_run, tmp_path / "runs" / "a")
    notes = tmp_path / "notes.txt"
    notes.write_text(make_text(5_000, seed=3), encoding="utf-8")
    r = cli(
        "train", "--data", notes, "--out", tmp_path / "runs" / "b", *TINY, "train.max_steps=4", "train.final_eval=false"
    )
    assert r.code == 0, r
    table = cli("runs", tmp_path / "runs")
    assert table.code == 0, table
    lines = table.out.splitlines()
    assert lines[0].split()[:3] == ["run", "data", "steps"]
    assert lines[1].split()[:2] == ["a", "text.txt"] and lines[2].split()[:2] == ["b", "notes.txt"]
    assert lines[0].split()[3:7] == ["val", "est", "val", "full"]  # the two numbers, each under its own name
    assert lines[2].split()[3] != "-" and lines[2].split()[4] == "-"  # b: no final evaluation, only the estimate
    one = cli("runs", tmp_path / "runs" / "a")
    assert one.code == 0 and "data" not in one.out.splitlines()[0] and "~:" not in one.out  # one text, no marks
    page = cli("runs", tmp_path / "runs", "--html", tmp_path / "runs.html")
    assert re.search(r": 2 runs, 2 with a val loss curve; \d+ config keys differ$", page.err.strip()), page
    single = cli("runs", tmp_path / "runs" / "a", "--html", tmp_path / "one.html")
    assert re.search(r": 1 run, 1 with a val loss curve; every config key is the same$", single.err.strip()), single


def test_a_wrong_run_path_gets_a_did_you_mean_and_a_folder_of_runs_lists_them(trained_run: Path, cli) -> None:
    typo = trained_run.parent / "rnu"
    r = cli("sample", typo)
    assert r.code == 2 and r.err == f"error: {typo} does not exist (did you mean {trained_run}?)\n", r
    folder = cli("sample", trained_run.parent)
    assert folder.code == 2, folder
    assert folder.err.startswith(
        f"error: {trained_run.parent} is a folder of runs, not a run: give one of them, {trained_run} "
    )


def test_every_header_with_a_val_loss_says_which_one(trained_run: Path, cli) -> None:
    r = cli("sample", trained_run, "--max-new-tokens", "3")
    assert r.code == 0 and re.search(r"\(step \d+, val est \d\.\d{4}\)", r.err), r
    lens = cli("lens", trained_run, "--text", "KING:")
    assert lens.code == 0 and re.search(r"\(step \d+, val est \d\.\d{4}; ", lens.out.splitlines()[0]), lens
    heads = cli("heads", trained_run)
    assert heads.code == 0 and re.search(r"\(step \d+, val est \d\.\d{4}; ", heads.out), heads


def test_lens_is_compact_by_default_and_explains_a_layer_worse_than_uniform(
    trained_run: Path, cli, monkeypatch
) -> None:
    import math

    import torch

    from minigpt.cli.lens import lens_terminal
    from minigpt.infer.loading import load_model
    from minigpt.inspect.lens import lens_of

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    text = "KING:\nSpeak now"  # within the tiny run's 16-character context
    short = cli("lens", trained_run, "--text", text)
    assert short.code == 0, short
    lines = short.out.splitlines()
    assert not any(line.startswith("#") for line in lines) and len(lines) < 20  # no top-5 blocks
    assert lines[-1] == "each layer's top 5 guesses: --top (each position), --at POS, --json or --html"
    loaded = load_model(trained_run, torch.device("cpu"))
    vocab = loaded.tokenizer.vocab_size
    uniform = next(line for line in lines if line.startswith("uniform guess"))
    assert float(uniform.split()[2]) == pytest.approx(math.log2(vocab), abs=1e-3) and f"1 in {vocab}" in uniform
    full = cli("lens", trained_run, "--text", text, "--top")
    assert sum(line.startswith("#") for line in full.out.splitlines()) == len(text)
    lens = lens_of(loaded, text, "--text", "error")
    lens.loss[0] = [math.log(vocab) * 2] * len(lens.loss[0])  # the embeddings row at twice uniform's bits
    shown = lens_terminal(lens, False, "run", [], 100, vocab)
    assert "embeddings scores worse than uniform: the output head is the embedding matrix (tied)" in shown


def test_score_prints_the_key_to_its_colours(trained_run: Path, cli, monkeypatch) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")
    r = cli("score", trained_run, "--text", "KING: Speak")
    assert r.code == 0, r
    legend = r.out.splitlines()[1]
    assert legend.startswith("colours: ") and "bits of surprise" in legend
    swatches = re.findall(r"\x1b\[48;5;(\d+)m\x1b\[97m (\d\+?) \x1b\[0m", legend)
    assert [n for _, n in swatches] == [*map(str, range(8)), "8+"]
    plain = cli("score", trained_run, "--text", "KING: Speak", "--no-color")
    assert "colours:" not in plain.out  # the columns say bits themselves


def test_the_shipped_configs_work_by_name_from_any_folder(text_file: Path, tmp_path: Path, cli, monkeypatch) -> None:
    import tomllib

    repo = Path(__file__).resolve().parent.parent
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # no configs/ here
    for given in ("cpu_4min", "cpu_4min.yaml", "configs/cpu_4min.yaml"):
        r = cli("train", given, "--data", text_file, *TINY, "--dry-run")
        assert r.code == 0, (given, r)
        assert "  max_time: 232s" in r.out and "  block_size: 16" in r.out  # the file's keys, then the overrides
    missing = cli("train", "configs/cpu_5min.yaml", "--data", text_file)
    assert missing.code == 2 and "the shipped configs, usable by name: cpu_4min, default, " in missing.err, missing
    assert not (elsewhere / "runs").exists()
    shown = cli("train", "--help")
    assert "Shipped configs, by name from any folder" in shown.out and "shakespeare_char" in shown.out
    from minigpt.config import shipped_configs

    assert sorted(shipped_configs()) == sorted(p.stem for p in (repo / "configs").glob("*.yaml"))
    # an installed minigpt has them too: the wheel puts configs/ into the package
    hatch = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"]
    assert hatch["force-include"]["configs"] == "minigpt/configs"


def test_a_second_training_on_other_data_just_works(text_file: Path, tmp_path: Path, cli, monkeypatch) -> None:
    from .helpers import make_text

    monkeypatch.chdir(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text(make_text(5_000, seed=4), encoding="utf-8")
    tiny = [*TINY, "train.max_steps=2", "train.final_eval=false", "log.tensorboard=false"]
    for data, folder in ((text_file, "text"), (notes, "notes")):
        r = cli("train", "--data", data, *tiny)
        assert r.code == 0 and (tmp_path / "runs" / folder / "last.pt").is_file(), r
    # a missing file is the mistake, whatever the run folder holds
    missing = cli("train", "--data", tmp_path / "nosuch.txt", "--out", "runs/text", *tiny)
    assert missing.code == 2 and "nosuch.txt does not exist" in missing.err and "already holds" not in missing.err
    # --resume is offered only where it would work
    other_model = cli("train", "--data", text_file, *tiny, "model.n_layer=1")
    assert other_model.code == 2, other_model
    assert other_model.err == (
        "error: runs/text already holds a run (last.pt) with another config (model.n_layer 2 -> 1); "
        "pick another --out, e.g. --out runs/text-2\n"
    )
    other_data = cli("train", "--data", notes, "--out", "runs/text", *tiny)
    assert other_data.code == 2 and "--resume" not in other_data.err and f"trained on {text_file}" in other_data.err
    copy = tmp_path / "copy.txt"
    copy.write_bytes(text_file.read_bytes())  # the same text elsewhere: a resume would work
    same_text = cli("train", "--data", copy, "--out", "runs/text", *tiny)
    assert same_text.code == 2 and "continue it with --resume" in same_text.err, same_text
    longer = cli("train", "--data", text_file, *tiny[:-2], "train.max_steps=3", "train.final_eval=false")
    assert longer.code == 2 and "continue it with --resume" in longer.err, longer
    resumed = cli("train", "--data", text_file, *tiny[:-2], "train.max_steps=3", "train.final_eval=false", "--resume")
    assert resumed.code == 0, resumed


def test_sweep_takes_trains_flags(tmp_path: Path, cli, monkeypatch) -> None:
    from typer.main import get_command

    from minigpt.cli.app import app

    from .helpers import make_text

    commands = get_command(app).commands
    shared = ("--data", "--device", "--init-from", "--auto")
    for flag in shared:
        train_opt = next(p for p in commands["train"].params if flag in p.opts)
        sweep_opt = next(p for p in commands["sweep"].params if flag in p.opts)
        assert (train_opt.help, train_opt.metavar, train_opt.is_flag) == (
            sweep_opt.help,
            sweep_opt.metavar,
            sweep_opt.is_flag,
        )
    monkeypatch.chdir(tmp_path)
    notes = tmp_path / "my notes, 2024.txt"  # a comma in a path stays one value
    notes.write_text(make_text(5_000, seed=5), encoding="utf-8")
    tiny = [o for o in TINY if not o.startswith(("model.n_layer=", "train.device="))]
    r = cli("sweep", "--data", notes, "--device", "cpu", *tiny, "model.n_layer=1,2", "train.max_steps=2")
    assert r.code == 0, r
    for n in (1, 2):
        config = yaml.safe_load(
            (tmp_path / "runs" / "my notes, 2024-sweep" / f"n_layer={n}" / "config.yaml").read_text()
        )
        assert config["data"]["path"] == str(notes) and config["model"]["n_layer"] == n
