"""The documentation's promises that can drift: the key table, the Quick start commands, the
README's length, the relative links between the README and the pages under docs/, and the headline
numbers every page quotes for the default run and the four-minute recipe (against docs/recorded/)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIG_PAGE = ROOT / "docs" / "configuration.md"
GUIDE = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PAGES = [*GUIDE, *sorted((ROOT / "docs" / "lab").glob("*.md"))]  # the lab keeps history: links only


def test_readme_config_table_is_current() -> None:
    spec = importlib.util.spec_from_file_location("config_table", ROOT / "scripts" / "config_table.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    config_table = script.config_table
    page = CONFIG_PAGE.read_text(encoding="utf-8")
    block = page.split("<!-- config-table:start -->")[1].split("<!-- config-table:end -->")[0]
    assert block.strip() == config_table(), (
        "run: uv run python scripts/config_table.py, and paste it into docs/configuration.md"
    )


def test_quick_start_is_two_commands_and_ci_runs_the_test_one() -> None:
    quick = README.split("## Quick start")[1].split("```bash")[1].split("```")[0]
    commands = [re.sub(r"\s+#.*", "", line).strip() for line in quick.strip().splitlines()]
    assert commands == ["uv run minigpt train", "uv run pytest"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^uv run pytest$", ci, re.M)


def test_readme_is_short() -> None:
    lines = len(README.splitlines())
    assert lines <= 100, f"README.md has {lines} lines; move detail into a page under docs/"


FENCE = re.compile(r"^ {0,3}(```|~~~)")
HEADING = re.compile(r"^ {0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
# [text](target) and ![alt](target), an optional "title" after the target.
LINK = re.compile(r"!?\[[^\[\]]*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def outside_fences(text: str) -> list[str]:
    """The lines that are not in a fenced code block (nor its fence lines)."""
    out, fence = [], None
    for line in text.splitlines():
        m = FENCE.match(line)
        if m and fence is None:
            fence = m.group(1)
        elif m and m.group(1) == fence:
            fence = None
        elif fence is None:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: link markup dropped (its text kept), lower case, every
    character but letters, digits, '_', '-' and spaces removed, spaces turned into '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for line in outside_fences(path.read_text(encoding="utf-8")):
        m = HEADING.match(line)
        if m:
            base = name = slug(m.group(1))
            n = 0
            while name in found:  # GitHub numbers a repeated heading: x, x-1, x-2, ...
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def relative_links(path: Path) -> list[str]:
    targets = []
    for line in outside_fences(path.read_text(encoding="utf-8")):
        for target in LINK.findall(re.sub(r"`[^`]*`", "``", line)):  # not inside inline code
            if not re.match(r"^(https?:|mailto:)", target, re.I):
                targets.append(target)
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_named_in_plain_text_exists() -> None:
    """A page named as text, not a link (`docs/lens.md` in a command's printed output, a docstring,
    a lesson's prose), names a page that exists: the merged guide left such names pointing nowhere."""
    named = re.compile(r"(?<![\w/.])docs/(?:lab/)?[a-z_]+\.md")
    places = [
        *ROOT.glob("*.md"),
        *ROOT.glob("docs/**/*.md"),
        *ROOT.glob("lessons/*.ipynb"),
        *ROOT.glob("minigpt/**/*.*"),
    ]
    missing = sorted(
        f"{path.relative_to(ROOT)}: {name}"
        for path in places
        if path.suffix in (".md", ".ipynb", ".py", ".js", ".html")
        for name in set(named.findall(path.read_text(encoding="utf-8")))
        if not (ROOT / name).is_file()
    )
    assert not missing, missing
    assert named.findall("see docs/lens.md, ../docs/x.md, mydocs/y.md") == ["docs/lens.md"]


def test_link_checker_sees_links_and_headings(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## What `data.path` accepts\n\n## A, b (c) 2026-11-22\n\n## A, b (c) 2026-11-22\n\n"
        "See [x](other.md#part), ![img](img/a.png), [web](https://example.com), [self](#title).\n\n"
        "```bash\n# not a heading\necho '[no](link.md)'\n```\n\n`[no](code.md)`\n",
        encoding="utf-8",
    )
    assert relative_links(page) == ["other.md#part", "img/a.png", "#title"]
    assert anchors(page) == {"title", "what-datapath-accepts", "a-b-c-2026-11-22", "a-b-c-2026-11-22-1"}


# The headline numbers: what the pages say about the default run and the four-minute recipe, held to
# the recorded run (scripts/record_default.py writes docs/recorded/default/; re-record when the
# default changes) and to the recipe's recorded median (docs/recorded/cpu_4min.json).
RECORD = ROOT / "docs" / "recorded" / "default"
RESULTS = json.loads((RECORD / "results.json").read_text(encoding="utf-8"))
CONFIG = yaml.safe_load((RECORD / "config.yaml").read_text(encoding="utf-8"))
RECIPE = json.loads((ROOT / "docs" / "recorded" / "cpu_4min.json").read_text(encoding="utf-8"))
# Every guide page, and the two configs whose comments quote these numbers; docs/lab/ keeps history.
HEADLINE_PAGES = [*GUIDE, ROOT / "configs" / "default.yaml", ROOT / "configs" / "cpu_4min.yaml"]
LN2 = 0.6931471805599453

DONE = re.compile(
    r"done: (?P<steps>[\d,]+) steps in [\d.]+s, [\d,]+ tokens/s, "
    r"best val est (?P<est>\d\.\d+) \((?P<est_bpc>\d\.\d+) bpc\)"
    r"; val full (?P<full>\d\.\d+) \((?P<full_bpc>\d\.\d+) bpc"
)
EVAL = re.compile(
    r"loss (?P<loss>\d\.[\dx]+) nats \\?\| (?P<bpc>\d\.[\dx]+) bits/char \\?\| perplexity (?P<ppl>\d+\.?[\dx]*)"
)  # a table cell escapes its pipes: \|
# A line that speaks of the default run: the words, or the command that trains it with nothing after it.
ABOUT_DEFAULT = re.compile(
    r"\bdefault (run|model|config|optimizer)\b|minigpt train`(?! \S)|^# The built-in default run", re.I
)
STEPS = re.compile(r"(?<!after )\b(\d[\d,]*) (?:AdamW |Muon )?steps\b")  # "after N steps": part of a run
OPTIMIZER = re.compile(r"default (?:optimizer )?(?:is|stays|uses|trains with|was)\s+\**(AdamW|Muon)\b", re.I)
# The run's own time: "takes about 20 seconds", "trains ... in about a minute", "runs/default, ~30 s".
DURATION = re.compile(
    r"(?:takes|took|trains(?: [\w-]+){0,6} in|runs/default,)\s+(?:about |under |~)?"
    r"(?P<n>\d+(?:\.\d+)?|a|half a)\s*(?P<unit>s|seconds?|minutes?)\b(?![\w/])",
    re.I,
)
BPC = re.compile(r"\b(\d\.\d{2,4})\s*(?:bits/char|bits per character|bits a character|bpc)\b")
LOSS = re.compile(r"(?:loss|val full|val est|ends near|reaches)(?: of| is| about| near| at)?\s*\**~?(\d\.\d{2,4})\b")
RECIPE_LINE = re.compile(r"cpu_4min|four-minute (?:CPU )?(?:recipe|model)", re.I)


def shown(value: float, text: str) -> bool:
    """Whether `text` is `value` to the digits it shows ('1.74' for 1.7395; an 'x' digit matches nothing)."""
    if "x" in text:
        return False
    digits = len(text.split(".")[1]) if "." in text else 0
    return abs(round(value, digits) - float(text)) < 10**-digits / 2


def seconds(n: str, unit: str) -> float:
    count = {"a": 1.0, "half a": 0.5}.get(n.lower(), None)
    count = float(n) if count is None else count
    return count * (60 if unit.lower().startswith("minute") else 1)


def units(text: str, yaml_file: bool = False) -> list[str]:
    """The text as the pieces a claim lives in: a sentence of prose (a paragraph's lines joined; in
    a YAML file, its comment lines'), and each heading, table row and line of code by itself."""
    out: list[str] = []
    paragraph: list[str] = []
    fence = None

    def flush() -> None:
        out.extend(re.split(r"(?<=[.!?])\s+(?=[A-Z`(*\[])", " ".join(paragraph)))
        paragraph.clear()

    for line in text.splitlines():
        m = None if yaml_file else FENCE.match(line)
        if m and (fence is None or m.group(1) == fence):
            fence = m.group(1) if fence is None else None
            flush()
        elif fence is not None or line.lstrip().startswith("|"):
            out.append(line)
        elif yaml_file and line.startswith("#"):
            paragraph.append(line.lstrip("#").strip())
        elif yaml_file or HEADING.match(line) or not line.strip():
            flush()
            out.append(line)
        else:
            paragraph.append(line.strip())
    flush()
    return [u for u in out if u.strip()]


def output_mistakes(lines: list[str]) -> list[str]:
    """The default run's done: lines and eval lines, as a page quotes what the commands printed."""
    steps, est, full, bpc = (RESULTS[k] for k in ("steps", "best_val_loss_est", "val_loss_full", "val_bpc_full"))
    wrong: list[str] = []
    for i, line in enumerate(lines):
        around = " ".join(lines[max(0, i - 3) : i + 4])
        for m in DONE.finditer(line):  # a done: line that train printed for runs/default
            if "sample runs/default" not in around:
                continue
            if int(m["steps"].replace(",", "")) != steps:
                wrong.append(f"{m['steps']} steps in a done: line of the default run (recorded: {steps})")
            for key, value in (("est", est), ("est_bpc", est / LN2), ("full", full), ("full_bpc", bpc)):
                if not shown(value, m[key]):
                    wrong.append(f"{key} {m[key]} in a done: line of the default run (recorded: {value:.4f})")
        for m in EVAL.finditer(line):  # minigpt eval's line for the default run on its own split
            command = lines[i - 1] if i and lines[i - 1].startswith("$ ") else ""  # the command that printed it
            if "--data" in line + command or re.search(r"runs/(?!default\b)[\w.-]+", line + command):
                continue
            for key, value in (("loss", full), ("bpc", bpc), ("ppl", 2.718281828459045**full)):
                if not shown(value, m[key]):
                    wrong.append(f"eval's {key} {m[key]} (recorded: {value:.4f})")
    return wrong


def claim_mistakes(unit: str) -> list[str]:
    """What one sentence (or code line) says about the default run or the four-minute recipe."""
    wall, steps, est, full = RESULTS["wall_s"], RESULTS["steps"], RESULTS["best_val_loss_est"], RESULTS["val_loss_full"]
    wrong = [f"'{m[0]}' (recorded: optim.optimizer {CONFIG['optim']['optimizer']})"
             for m in OPTIMIZER.finditer(unit) if m[1].lower() != CONFIG["optim"]["optimizer"]]  # fmt: skip
    if RECIPE_LINE.search(unit):
        for m in LOSS.finditer(unit):
            if not shown(RECIPE["val_loss_full_median"], m[1]):
                wrong.append(f"'{m[0]}' for the four-minute recipe (recorded: {RECIPE['val_loss_full_median']})")
    elif ABOUT_DEFAULT.search(unit):
        for m in STEPS.finditer(unit):
            if int(m[1].replace(",", "")) != steps:
                wrong.append(f"'{m[0]}' about the default run (recorded: {steps} steps)")
        for m in DURATION.finditer(unit):
            claimed = seconds(m["n"], m["unit"])
            if not claimed / 1.5 <= wall <= claimed * 1.5:
                wrong.append(f"'{m[0].strip()}' for the default run (recorded: {wall:.1f} s)")
        for m in BPC.finditer(unit):
            if not any(shown(v, m[1]) for v in (est / LN2, RESULTS["val_bpc_full"])):
                wrong.append(f"{m[0]} for the default run (recorded: {RESULTS['val_bpc_full']:.4f} full)")
        for m in LOSS.finditer(unit):
            if not any(shown(v, m[1]) for v in (est, full)):
                wrong.append(f"'{m[0]}' for the default run (recorded: {full:.4f} full, {est:.4f} est)")
    return wrong


def headline_mistakes(text: str, yaml_file: bool = False) -> list[str]:
    """What a page says about the default run or the four-minute recipe that the records contradict."""
    claims = [w for unit in units(text, yaml_file) for w in claim_mistakes(unit)]
    return output_mistakes(text.splitlines()) + claims


@pytest.mark.parametrize("page", HEADLINE_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_headline_numbers_agree_with_the_recorded_runs(page: Path) -> None:
    wrong = headline_mistakes(page.read_text(encoding="utf-8"), yaml_file=page.suffix == ".yaml")
    assert not wrong, (
        f"{page.relative_to(ROOT)}: "
        + "; ".join(wrong)
        + " (the records: docs/recorded/; the default's: uv run python scripts/record_default.py)"
    )


def test_the_headline_check_catches_the_contradictions_it_was_written_for() -> None:
    """Each line below is one the pages once held; each must be caught, and the true ones pass."""
    stale = [
        "minigpt eval runs/default      # loss 1.8xxx nats | 2.6xxx bits/char | perplexity 6.x | 111,539 characters",
        r"| `minigpt eval RUN` | the exact loss: `loss 1.7396 nats \| 2.5096 bits/char \| perplexity 5.694` |",
        "Examples from the default model (`minigpt train`, 480 steps):",
        "The default stays AdamW; a run keeps the optimizer it started with.",
        "# The built-in default run: a small character-level GPT that trains on a laptop CPU in about",
        "The default run takes about a minute on a 2-core CPU.",
        "`configs/cpu_4min.yaml` is a four-minute CPU recipe (val loss about 1.49)",
    ]
    for line in stale:
        if line.startswith("# The built-in"):
            line += " a minute"
        assert headline_mistakes(line), line
    # across a line break, and in a YAML comment
    assert headline_mistakes("The default run (300 steps of Muon,\n0.60M parameters) takes about a minute.")
    old_header = (
        "# The built-in default run: a small character-level GPT that trains on a laptop CPU in about\n# a minute"
    )
    assert headline_mistakes(old_header + "\nmodel:\n  n_layer: 3\n", yaml_file=True)
    done = (RECORD / "train_tail.txt").read_text(encoding="utf-8")
    evaluation = (RECORD / "eval.txt").read_text(encoding="utf-8")
    wall = RESULTS["wall_s"]
    assert headline_mistakes(done) == [] and headline_mistakes(evaluation) == []
    assert headline_mistakes(f"The default run (300 steps of Muon) takes about {round(wall)} seconds.") == []
    assert (
        headline_mistakes("`configs/cpu_4min.yaml` is the four-minute CPU recipe (whole-split loss about 1.45)") == []
    )
    assert headline_mistakes(done.replace("val full 1.7395", "val full 1.7396"))  # one digit off


def test_the_readme_shows_the_recorded_run() -> None:
    """The README's done: line and sample are the recorded run's own lines, not a retyped copy."""
    done = next(
        line
        for line in (RECORD / "train_tail.txt").read_text(encoding="utf-8").splitlines()
        if line.startswith("done:")
    )
    assert done in README
    sample = (RECORD / "sample.txt").read_text(encoding="utf-8").splitlines()
    block = README.split(sample[0].replace("$ minigpt", "$ uv run minigpt"))[1].split("```")[0].strip().splitlines()
    assert len(block) >= 4 and block == sample[1 : 1 + len(block)]


def test_the_first_hour_shows_the_recorded_run() -> None:
    """Its quick start's training block ends with the recorded run's own last lines."""
    page = (ROOT / "docs" / "first_hour.md").read_text(encoding="utf-8")
    tail = (RECORD / "train_tail.txt").read_text(encoding="utf-8").rstrip()
    block = page.split("$ minigpt train\n")[1].split("```")[0]
    assert block.rstrip().endswith(tail)


def test_the_record_is_of_the_default_of_today() -> None:
    """The recorded config.yaml is the built-in default but for what the run decided on its machine
    (precision, attention form, threads): a changed default fails here until it is re-recorded."""
    import dataclasses

    from minigpt.config.files import load_config

    default = dataclasses.asdict(load_config(None, []))
    decided = {("train", "dtype"), ("train", "attention"), ("train", "threads")}
    differ = [
        f"{section}.{key}: recorded {value!r}, default {default[section].get(key)!r}"
        for section, keys in CONFIG.items()
        for key, value in keys.items()
        if (section, key) not in decided and default[section].get(key) != value
    ]
    assert not differ, "re-record: uv run python scripts/record_default.py (" + "; ".join(differ) + ")"
    assert set(CONFIG) == set(default) and all(set(CONFIG[s]) == set(default[s]) for s in CONFIG)


def test_the_saved_lessons_show_the_recorded_run_with_pictures_and_no_machine_path() -> None:
    """lessons/ as a reader sees them on GitHub: every code cell run, the pictures kept, no folder
    of the machine that saved them, and lesson 1's run the recorded default (same steps, same loss)."""
    pictures = {}
    for path in sorted((ROOT / "lessons").glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert all(c["execution_count"] for c in code), f"{path.name}: a cell was not run before saving"
        outs = [o for c in code for o in c["outputs"]]
        text = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")) for o in outs)
        assert not re.search(r"/(tmp|home|work|Users|root)/|[A-Z]:\\\\", text), f"{path.name} shows a machine path"
        pictures[path.name] = sum("image/png" in o.get("data", {}) for o in outs)
        if path.name.startswith("01"):
            run = f"(step {RESULTS['steps']}, val est {RESULTS['best_val_loss_est']:.4f};"
            assert f"runs/default/best.pt {run}" in text, f"{path.name} was not saved from the recorded default run"
    assert all(n >= 1 for n in pictures.values()) and pictures["01_characters_to_vectors.ipynb"] >= 4, pictures
