"""The lessons/ notebooks run headless (nbclient, an ipykernel) in order on tiny runs that lesson 1
trains, every "by hand" assertion passing; and lesson 2's assertions fail once the model's weights
are no longer the ones it computed with. Slow (a kernel and a training each): `.ci/run` runs them
after the suite, `uv run pytest -m slow tests/test_lessons.py`."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from tests.conftest import TINY, make_text

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))
pytestmark = pytest.mark.slow


def execute(name: str, cwd: Path, insert_after: tuple[str, str] | None = None):
    """Run lessons/<name> in a fresh kernel from `cwd`; with insert_after (marker, code), `code` runs
    in a cell of its own right after the first cell whose source holds `marker`. Returns the notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(ROOT / "lessons" / name, as_version=4)
    if insert_after is not None:
        marker, code = insert_after
        at = next(i for i, c in enumerate(nb.cells) if marker in c.source)
        nb.cells.insert(at + 1, nbformat.v4.new_code_cell(code))
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def outputs(nb) -> tuple[str, int]:
    """What the notebook printed, and how many pictures it drew; asserts that every code cell ran."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and all(c.execution_count for c in code)
    outs = [o for c in code for o in c.outputs]
    assert not [o for o in outs if o.output_type == "error"]
    printed = "".join(o.get("text", "") for o in outs if o.output_type == "stream")
    return printed, sum("image/png" in o.get("data", {}) for o in outs)


def test_the_series_names_six_lessons() -> None:
    assert [p.name for p in LESSONS] == [
        "01_characters_to_vectors.ipynb",
        "02_one_head_by_hand.ipynb",
        "03_heads_and_block.ipynb",
        "04_what_the_heads_do.ipynb",
        "05_grow_an_induction_head.ipynb",
        "06_what_a_decoder_does_not_have.ipynb",
    ]


@pytest.mark.parametrize(
    ("positions", "options"),
    [
        ("rope", ""),  # the defaults: rotary positions, pre-norm, no biases, GELU
        ("learned", "model.norm=post model.bias=true model.mlp_act=relu2 model.logit_softcap=30"),
        ("sinusoidal", "model.attn_only=true"),
    ],
    ids=["rope-pre", "learned-post-bias-relu2-softcap", "sinusoidal-attn-only"],
)
def test_lessons_train_a_run_and_check_every_step_on_it(
    positions: str, options: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "text.txt"
    data.write_text(make_text(), encoding="utf-8")
    run = tmp_path / "run"
    train = [*TINY, "train.max_steps=20", "train.eval_interval=20", f"model.pos_emb={positions}"]
    train += options.split()
    monkeypatch.setenv("MINIGPT_RUN", str(run))  # not there yet: lesson 1 trains it
    monkeypatch.setenv("MINIGPT_DATA", str(data))
    monkeypatch.setenv("MINIGPT_TRAIN_ARGS", shlex.join(train))
    monkeypatch.setenv("MINIGPT_RUN_LEARNED", str(tmp_path / "no-such-run"))
    monkeypatch.setenv("MINIGPT_TEXT", make_text(40, seed=3)[:14])  # characters the tiny model knows
    monkeypatch.setenv("MINIGPT_PASSAGE", make_text(600)[:300])  # the start of the training text: known characters

    printed, pictures = outputs(execute("01_characters_to_vectors.ipynb", tmp_path))
    assert (run / "best.pt").exists()
    assert f"this run: pos_emb={positions}" in printed
    # the embedding table, its projection, sinusoidal and rotary; learned: this run's table, or none to show
    assert pictures == (5 if positions == "learned" else 4)

    printed, pictures = outputs(execute("02_one_head_by_hand.ipynb", tmp_path))
    assert "head 0 of layer 0 by hand = the model's" in printed and pictures == 1
    assert printed.count("by hand = the model's;") == 2  # every head of the first layer

    printed, pictures = outputs(execute("03_heads_and_block.ipynb", tmp_path))
    assert "block 0 by hand = the model's block 0" in printed and pictures == 1
    assert "the whole model by hand = its logits" in printed

    printed, pictures = outputs(execute("04_what_the_heads_do.ipynb", tmp_path))
    for step in ("pattern scores by hand = minigpt heads'", "by hand = minigpt heads' ablation, every head",
                 "by hand = minigpt eval --by-position's", "roles: "):  # fmt: skip
        assert step in printed, step
    assert printed.count(" bits per character") == 3  # the embeddings and the two blocks of the lens
    assert pictures == 4  # a head and its targets, the ablation bars, the lens, the command's loss curve

    printed, pictures = outputs(execute("06_what_a_decoder_does_not_have.ipynb", tmp_path))
    assert printed.count("by hand = nn.MultiheadAttention") == 3
    assert "reversed correctly:" in printed  # the tiny encoder-decoder, trained in the notebook
    assert "cross-attention = self-attention over source|target" in printed and pictures == 3


def test_lesson_2_fails_when_one_weight_changes_after_its_hand_computation(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("MINIGPT_RUN", str(trained_run))
    monkeypatch.setenv("MINIGPT_TEXT", make_text(40, seed=3)[:14])
    # one weight of head 0's queries in the first layer, changed after q, k and v were computed by
    # hand from the run's weights and before the model's own attention is compared with them
    change = ("q, k, v = a @ Wq.T", "gpt.blocks[0].attn.c_attn.weight[0, 0] += 0.05")
    with pytest.raises(CellExecutionError) as failed:
        execute("02_one_head_by_hand.ipynb", tmp_path, insert_after=change)
    assert "AssertionError" in str(failed.value) and "not close" in str(failed.value)
    assert "model_weights[head]" in str(failed.value)  # the first comparison with the model's numbers


def test_lesson_5_grows_an_induction_head_and_ablates_it(tmp_path: Path) -> None:
    """Lesson 5 trains its own model (half a minute on 2 cores) and asserts the phase change, the
    callback's scores against minigpt heads', and the ablation."""
    printed, pictures = outputs(execute("05_grow_an_induction_head.ipynb", tmp_path))
    assert "the strongest induction head at the end: L1H" in printed
    assert "without L1H" in printed and pictures == 3


def test_lesson_4_fails_when_the_attention_it_scored_is_not_the_models(
    trained_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nbclient.exceptions import CellExecutionError

    monkeypatch.setenv("MINIGPT_RUN", str(trained_run))
    monkeypatch.setenv("MINIGPT_PASSAGE", make_text(600)[:300])
    # one weight of the first layer's queries, changed after the pattern scores were computed by hand
    # from the attention weights and before minigpt heads measures the same window
    change = ("mine = {(layer, head): by_hand(", "gpt.blocks[0].attn.c_attn.weight[0, 0] += 0.05")
    with pytest.raises(CellExecutionError) as failed:
        execute("04_what_the_heads_do.ipynb", tmp_path, insert_after=change)
    assert "AssertionError" in str(failed.value) and "not close" in str(failed.value)
    assert "mine[h.layer, h.head]" in str(failed.value)  # the first comparison: the pattern scores
