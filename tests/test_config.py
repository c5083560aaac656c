from __future__ import annotations

from pathlib import Path

import pytest

from minigpt.config.files import load_config, parse_override
from minigpt.config.schema import Config, all_keys
from minigpt.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_builtin_default_equals_configs_default_yaml() -> None:
    assert load_config(ROOT / "configs" / "default.yaml") == load_config(None) == Config()


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads_and_sets_every_key(path: Path) -> None:
    import yaml

    raw = yaml.safe_load(path.read_text())
    written = {f"{s}.{k}" for s, body in raw.items() for k in body}
    assert written == set(all_keys()), f"{path.name} should spell out every key"
    for line in path.read_text().splitlines():
        if line.startswith("  ") and ":" in line:
            assert "#" in line, f"{path.name}: every key is commented: {line!r}"
    load_config(path)


def test_shakespeare_char_is_the_published_recipe() -> None:
    cfg = load_config(ROOT / "configs" / "shakespeare_char.yaml")
    m, t, o = cfg.model, cfg.train, cfg.optim
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size, m.dropout) == (6, 6, 384, 256, 0.2)
    assert (t.batch_size, t.max_steps) == (64, 5000)
    assert (o.lr, o.min_lr, o.warmup_steps, o.beta2) == (1e-3, 1e-4, 100, 0.99)


def test_precedence_defaults_yaml_overrides(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  n_layer: 3\n  n_head: 2\noptim:\n  lr: 1.0e-3\n")
    cfg = load_config(path, ["model.n_layer=5", "optim.min_lr=1e-5"])
    assert cfg.model.n_layer == 5  # override beats YAML
    assert cfg.model.n_head == 2  # YAML beats default
    assert cfg.optim.lr == 1e-3
    assert cfg.optim.min_lr == 1e-5  # "1e-5" is a string to YAML 1.1; still a number here
    assert cfg.model.n_embd == Config().model.n_embd  # default


def test_string_keys_take_the_override_as_written() -> None:
    assert parse_override("log.sample_prompt=no") == ("log.sample_prompt", "no")  # not YAML 1.1's False
    assert parse_override("log.sample_prompt=ROMEO:") == ("log.sample_prompt", "ROMEO:")
    assert parse_override('log.sample_prompt="\\nKING:"') == ("log.sample_prompt", "\nKING:")
    assert parse_override("data.cache_dir=null") == ("data.cache_dir", None)
    # a key that takes a list reads one in brackets, as docs/training.md writes it; a name stays a name
    assert parse_override("data.text_field=[title,body]") == ("data.text_field", ["title", "body"])
    assert parse_override("data.text_field=[title, body]") == ("data.text_field", ["title", "body"])
    assert parse_override("data.text_field=body") == ("data.text_field", "body")
    assert load_config(None, ["data.text_field=[title,body]"]).data.text_field == ["title", "body"]


def test_file_and_overrides_are_validated_together(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  n_head: 5\n")
    assert load_config(path, ["model.n_embd=40"]).model.n_embd == 40
    with pytest.raises(UserError, match=r"cfg\.yaml with the command-line overrides: model\.n_embd \(42\)"):
        load_config(path, ["model.n_embd=42"])


def test_override_values_are_yaml_scalars() -> None:
    assert parse_override("train.compile=true") == ("train.compile", True)
    assert parse_override("data.path=my file.txt") == ("data.path", "my file.txt")
    assert parse_override("train.max_steps=500") == ("train.max_steps", 500)
    cfg = load_config(None, ["train.max_steps=5e3", ("data.path", "a: b.txt")])
    assert cfg.train.max_steps == 5000 and cfg.data.path == "a: b.txt"


def test_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  n_layers: 3\n")
    with pytest.raises(
        UserError, match=r"cfg\.yaml: unknown key 'model\.n_layers' \(did you mean 'model\.n_layer'\?\)"
    ):
        load_config(path)
    with pytest.raises(UserError, match=r"command line: unknown key 'optim\.learning_rate'"):
        load_config(None, ["optim.learning_rate=1"])
    with pytest.raises(UserError, match=r"did you mean 'optim\.lr'"):
        load_config(None, ["lr=1e-3"])
    with pytest.raises(UserError, match=r"unknown section 'modle' \(did you mean 'model'\?\)"):
        load_config(write(tmp_path, "modle:\n  n_layer: 3\n"))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.n_layer=two", r"model\.n_layer must be a whole number, got 'two'"),
        ("model.n_layer=2.5", r"model\.n_layer must be a whole number, got 2\.5"),
        ("train.compile=yes please", r"train\.compile must be true or false"),
        ("optim.lr=fast", r"optim\.lr must be a number"),
        ("model.n_embd=102", r"model\.n_embd \(102\) must be divisible by model\.n_head \(4\)"),
        ("model.n_layer=0", r"model\.n_layer must be >= 1, got 0"),
        ("train.max_steps=0", r"train\.max_steps must be >= 1"),
        ("optim.lr=-1", r"optim\.lr must be a finite number >= 0"),
        ("optim.min_lr=1", r"optim\.min_lr \(1\.0\) must be <= optim\.lr"),
        ("data.val_fraction=1.5", r"data\.val_fraction must be in \(0, 1\)"),
        ("data.val_fraction=0", r"data\.val_fraction must be in \(0, 1\)"),
        ("model.dropout=1", r"model\.dropout must be in \[0, 1\)"),
        (
            "optim.schedule=cosin",
            r"optim\.schedule must be one of cosine, linear, constant, got 'cosin' \(did you mean 'cosine'\?\)",
        ),
        ("train.dtype=fp64", r"train\.dtype must be one of"),
        ("train.device=gpu", r"train\.device must be auto, cpu, cuda, cuda:N or mps"),
        ("train.grad_accum_steps=3", r"train\.batch_size \(32\) must be divisible by train\.grad_accum_steps \(3\)"),
    ],
)
def test_invalid_values_name_the_key(override: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_config(None, [override])


def test_integer_keys_take_whole_numbers_in_any_notation(tmp_path: Path) -> None:
    for text in ("5000", "5_000", "5e3", "5.0e+3", "5000.0", '"5000"'):
        assert load_config(None, [f"train.max_steps={text}"]).train.max_steps == 5000, text
        assert load_config(write(tmp_path, f"train:\n  max_steps: {text}\n")).train.max_steps == 5000, text
    assert load_config(None, [f"train.seed={2**63 - 1}"]).train.seed == 2**63 - 1  # the largest there is


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("override", "1e30", "train.max_steps must be a whole number below 2**63, got 1e30"),
        ("override", "2.5", "train.max_steps must be a whole number, got 2.5"),
        ("override", "99999999999999999999", "must be a whole number below 2**63, got 99999999999999999999"),
        ("override", "1e999999999", "must be a whole number below 2**63, got 1e999999999"),
        ("yaml", "1.0e+30", "train.max_steps must be a whole number below 2**63, got 1e+30"),
        ("yaml", "2.5", "train.max_steps must be a whole number, got 2.5"),
    ],
)
def test_an_integer_key_refuses_a_non_integer_in_one_line(where, value, message, tmp_path: Path, cli) -> None:
    """train.max_steps=1e30 used to be taken as 10**30 steps (training for ever), and 2.5 as 2."""
    from .helpers import one_error_line

    out = tmp_path / "run"
    if where == "yaml":
        config = write(tmp_path, f"train:\n  max_steps: {value}\n")
        line = one_error_line(cli("train", config, "--out", out))
        assert line == f"error: {config}: {message}"
    else:
        line = one_error_line(cli("train", f"train.max_steps={value}", "--out", out))
        assert line.startswith("error: command line: train.max_steps ") and line.endswith(message), line
    assert not out.exists()  # refused before anything was made


def test_malformed_override() -> None:
    with pytest.raises(UserError, match=r"override 'model\.n_layer' must look like KEY=VALUE"):
        load_config(None, ["model.n_layer"])
    with pytest.raises(UserError, match=r"must look like KEY=VALUE"):
        load_config(None, ["=3"])


def test_malformed_yaml_names_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path, "model:\n  n_layer: 3\n  n_head: [2\n")
    with pytest.raises(UserError, match=r"cfg\.yaml:\d+:\d+: malformed YAML"):
        load_config(path)


def test_yaml_shapes(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, "")) == Config()  # empty file = defaults
    with pytest.raises(UserError, match="top level must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(UserError, match="section 'model' must be a mapping"):
        load_config(write(tmp_path, "model: 3\n"))
    with pytest.raises(UserError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(UserError, match="is a directory"):
        load_config(tmp_path)


def test_yaml_is_read_with_the_safe_loader(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = write(tmp_path, f"model: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(UserError, match="malformed YAML"):
        load_config(path)
    assert not marker.exists()
