"""The core: its line budget and import rule (core_budget.toml), the loop asking components when
they are due, and a seeded float32 run whose weights match those the code gave before the core
was split out (tests/fixtures/seeded_float32_run.pt)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import tomllib

from tests.helpers import ROOT, make_text

BUDGET = tomllib.loads((ROOT / "core_budget.toml").read_text(encoding="utf-8"))
SEEDED = [
    "model.n_layer=2", "model.n_head=2", "model.n_embd=32", "model.block_size=16", "model.dropout=0.1",
    "train.batch_size=8", "train.eval_steps=2", "train.device=cpu", "train.dtype=float32", "train.threads=1",
    "train.max_steps=40", "train.eval_interval=10", "train.ckpt_interval=15", "train.keep_every=20",
    "train.seed=7", "log.interval=5", "log.sample_length=20", "log.attention_probe=", "log.tensorboard=false",
    "optim.warmup_steps=5", "optim.optimizer=adamw",
]  # fmt: skip


def lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_the_core_fits_its_budget_in_the_files_design_md_names_in_order() -> None:
    core = BUDGET["core"]["files"]
    total = sum(lines(ROOT / f) for f in core)
    assert total <= BUDGET["core"]["max_lines"], f"the core is {total} lines: {core}"
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    places = [design.find(f"`{f}`") for f in core]
    assert all(p >= 0 for p in places) and places == sorted(places), "docs/design.md names the core in reading order"


def test_the_scripts_fit_their_budget() -> None:
    scripts = sum(lines(p) for p in (ROOT / "scripts").rglob("*.py"))
    assert scripts <= BUDGET["scripts"]["max_lines"], scripts
    assert "package" not in BUDGET  # the package stays small by one of each thing, not by a line cap


def runtime_imports(path: Path) -> set[str]:
    """The modules a file imports when it runs (an `if TYPE_CHECKING:` block is for type hints only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}  # fmt: skip
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            found.add(node.module)
    return found


def test_the_core_imports_only_torch_numpy_the_standard_library_and_itself() -> None:
    core_modules = {f.removesuffix(".py").replace("/", ".") for f in BUDGET["core"]["files"]}
    wrong = {}
    for f in BUDGET["core"]["files"]:
        for module in runtime_imports(ROOT / f):
            top = module.split(".")[0]
            if top in ("torch", "numpy", "__future__") or top in sys.stdlib_module_names or module in core_modules:
                continue
            wrong.setdefault(f, []).append(module)
    assert not wrong, wrong


def test_runtime_imports_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "m.py"
    bad.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import yaml\nimport minigpt.io\n")
    assert runtime_imports(bad) == {"typing", "minigpt.io"}


def test_a_seeded_float32_run_gives_the_weights_it_gave_before_the_core_moved(tmp_path: Path) -> None:
    """The fixture holds the weights of this run trained by the code before the split (at e44a71f):
    bit for bit on a CPU of the same kernel family; within float rounding on another."""
    import torch

    import minigpt

    text = tmp_path / "text.txt"
    text.write_text(make_text(20_000, seed=3), encoding="utf-8")
    minigpt.train(None, [*SEEDED, f"data.path={text}"], out=tmp_path / "run")
    fixture = torch.load(ROOT / "tests" / "fixtures" / "seeded_float32_run.pt", weights_only=True)
    same_kernels = fixture["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    for name, snapshot in (("last", "last.pt"), ("step_20", "step_0000020.pt")):
        got = torch.load(tmp_path / "run" / snapshot, weights_only=True)["model"]
        assert got.keys() == fixture[name].keys()
        for key, want in fixture[name].items():
            if same_kernels:
                assert torch.equal(got[key], want), (name, key, (got[key] - want).abs().max())
            else:
                torch.testing.assert_close(got[key], want, atol=1e-4, rtol=0)


def test_the_loop_asks_each_component_at_every_step_and_runs_it_when_it_is_due(tmp_path: Path) -> None:
    """A component decides its own timing: the loop asks `due(step, last)` after every step and
    calls `on_due` exactly then; the loop itself tests no interval."""
    import minigpt
    from minigpt.training.callbacks import Callback

    class EveryThird(Callback):
        def __init__(self) -> None:
            self.asked: list[tuple[int, bool]] = []
            self.ran: list[int] = []

        def due(self, step: int, last: bool) -> bool:
            self.asked.append((step, last))
            return step % 3 == 0

        def on_due(self, trainer, stats) -> None:
            self.ran.append(trainer.state.step)
            assert stats.loss.ndim == 0

    text = tmp_path / "text.txt"
    text.write_text(make_text(5_000), encoding="utf-8")
    watcher = EveryThird()
    overrides = [*SEEDED[:9], "train.max_steps=10", "train.eval_interval=4", "log.interval=5", "log.tensorboard=false"]
    minigpt.train(None, [*overrides, f"data.path={text}", "train.final_eval=false"], out=tmp_path / "run",
                  callbacks=[watcher])  # fmt: skip
    assert watcher.asked == [(s, s == 10) for s in range(1, 11)]
    assert watcher.ran == [3, 6, 9]
    loop = (ROOT / "minigpt" / "training" / "loop.py").read_text(encoding="utf-8")
    assert "%" not in loop  # no `step % interval` in the loop
    # the built-in intervals answer from the step and their own key alone
    from tests.helpers import make_trainer

    keys = ["log.interval=5", "train.eval_interval=4", "train.ckpt_interval=6", "train.keep_every=0"]
    trainer = make_trainer(text, tmp_path / "timing", *keys)
    named = ("logging", "evaluation", "checkpointing", "snapshots")
    timing = {name: [s for s in range(1, 13) if getattr(trainer, name).due(s, s == 12)] for name in named}
    assert timing == {"logging": [5, 10, 12], "evaluation": [4, 8, 12], "checkpointing": [6, 12], "snapshots": []}


def empty_methods(source: str) -> list[str]:
    """The methods whose body does nothing (a docstring, `...` or `pass`), outside a Protocol: hooks
    left for another class to fill."""
    found = []
    for cls in ast.walk(ast.parse(source)):
        if not isinstance(cls, ast.ClassDef) or any("Protocol" in ast.unparse(base) for base in cls.bases):
            continue
        for fn in cls.body:
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = [n for n in fn.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
            if all(isinstance(n, ast.Pass) for n in body):
                found.append(f"{cls.name}.{fn.name}")
    return found


def test_the_training_function_names_each_call_and_the_core_leaves_nothing_to_fill() -> None:
    """One step followed statically: `loop.train`'s body takes the step, then logs, evaluates and
    saves, each under its own `due`, meets the other processes and says why it stops; the core has
    no empty method for a subclass to fill, and nothing subclasses its Protocols (the run's shape)."""
    source = (ROOT / "minigpt" / "training" / "loop.py").read_text(encoding="utf-8")
    train = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "train")
    calls = {ast.unparse(n.func) for n in ast.walk(train) if isinstance(n, ast.Call)}
    assert {"train_step", "run.log", "run.evaluate_and_save", "run.save_last", "run.save_snapshot"} <= calls, calls
    assert {"run.agreement.meet", "run.agreement.stop_requested", "run.agreement.stop_if_signalled"} <= calls, calls
    guarded = {}  # each named call sits under an `if` on that component's due answer
    for node in ast.walk(train):
        if isinstance(node, ast.If):
            for call in (c for c in ast.walk(node) if isinstance(c, ast.Call)):
                guarded.setdefault(ast.unparse(call.func), ast.unparse(node.test))
    assert guarded["run.log"] == "log_due" and guarded["run.save_last"] == "save_due", guarded
    assert guarded["run.save_snapshot"] == "snapshot_due" and guarded["run.agreement.meet"] == "met", guarded
    assert "eval_due" in guarded["run.evaluate_and_save"], guarded
    assert "run.stopped = stop" in ast.unparse(train)  # why the run stops, set in the body
    for f in BUDGET["core"]["files"]:
        assert empty_methods((ROOT / f).read_text(encoding="utf-8")) == [], f
    classes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]
    protocols = {c.name for c in classes if any("Protocol" in ast.unparse(b) for b in c.bases)}
    assert {"Run", "Agreement", "Due"} <= protocols
    for path in (ROOT / "minigpt").rglob("*.py"):
        for cls in (n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.ClassDef)):
            assert not {ast.unparse(b).split(".")[-1] for b in cls.bases} & protocols, (path, cls.name)


def test_empty_methods_sees_a_hook_left_to_fill() -> None:
    hooks = (
        'class Loop:\n    def before_step(self) -> None: ...\n    def meet(self):\n        """Sync."""\n'
        "    def run(self):\n        self.before_step()\n"
        "class Shape(Protocol):\n    def due(self) -> bool: ...\n"
    )
    assert empty_methods(hooks) == ["Loop.before_step", "Loop.meet"]


OPTIONS = ("pos_emb", "norm", "attn_only", "qk_norm", "mlp_act", "value_embeds", "logit_softcap", "softcap", "bias")


def option_branches(source: str) -> list[str]:
    """Every `if` (or conditional expression) inside a forward pass that tests the config or a model option."""
    found = []
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "forward"):
            for node in ast.walk(fn):
                if isinstance(node, ast.If | ast.IfExp):
                    test = ast.unparse(node.test)
                    if "cfg" in test or any(option in test for option in OPTIONS):
                        found.append(f"{cls.name}.forward: {test}")
    return found


def test_no_forward_pass_branches_on_a_model_option() -> None:
    """Each option is chosen once, at construction (docs/configuration.md): no forward tests one."""
    assert option_branches((ROOT / "minigpt" / "model.py").read_text(encoding="utf-8")) == []
    old = "class MLP:\n    def forward(self, h):\n        return relu(h) if self.cfg.mlp_act == 'relu2' else gelu(h)\n"
    assert option_branches(old) == ["MLP.forward: self.cfg.mlp_act == 'relu2'"]


def test_one_plan_takes_each_source_in_the_order_design_md_gives(tmp_path: Path) -> None:
    """data.path (and model.dropout) through the file, an override, a flag and a checkpoint, on a new
    run, a resume and a fine-tune: the later source wins (docs/design.md, "Which value wins")."""
    import minigpt
    from minigpt.config.schema import DEFAULT_DATA_PATH
    from minigpt.data.sources import absolute_spec
    from minigpt.training.launch import Mode, plan_run
    from minigpt.training.plan import Resume, train_request

    texts = {}
    for name in ("file", "override", "flag", "trained"):
        texts[name] = tmp_path / f"{name}.txt"
        texts[name].write_text(make_text(4_000), encoding="utf-8")  # the same text: a resume may change the path
    config = tmp_path / "c.yaml"
    config.write_text(f"data:\n  path: {texts['file']}\nmodel:\n  dropout: 0.1\n", encoding="utf-8")

    def plan(config_arg, overrides=(), resume=Resume.NO, out="new", **flags):
        path, items = train_request(config_arg, overrides, resume=resume, **flags)
        return plan_run(path, items, tmp_path / out, resume, dry_run=False)

    def data(p) -> str:
        return p.cfg.data.path

    # a new run: defaults < CONFIG < overrides < flags
    assert plan(None).cfg.data.path == absolute_spec(DEFAULT_DATA_PATH)  # the shipped text, from the root
    assert data(plan(config)) == str(texts["file"])
    assert data(plan(config, [f"data.path={texts['override']}"])) == str(texts["override"])
    assert data(plan(config, [f"data.path={texts['override']}"], data=texts["flag"])) == str(texts["flag"])
    assert plan(config, ["model.dropout=0.2"]).cfg.model.dropout == 0.2

    tiny = [
        *SEEDED[:9],
        "train.max_steps=2",
        "train.eval_interval=2",
        "train.final_eval=false",
        "log.tensorboard=false",
    ]
    minigpt.train(None, [*tiny, f"data.path={texts['trained']}", "model.dropout=0.05"], out=tmp_path / "run")
    # a resume: the checkpoint's config < overrides < flags
    more = ["train.max_steps=4"]  # the run finished at 2: a resume trains on
    resumed = plan(None, more, resume=Resume.YES, out="run")
    assert resumed.mode is Mode.RESUME and data(resumed) == str(texts["trained"].resolve())
    overridden = plan(None, [*more, f"data.path={texts['override']}"], resume=Resume.YES, out="run")
    assert data(overridden) == str(texts["override"])
    flagged = plan(None, [*more, f"data.path={texts['override']}"], resume=Resume.YES, out="run", data=texts["flag"])
    assert data(flagged) == str(texts["flag"])
    # a resume reads a CONFIG by one rule, a dict, a file or none: the checkpoint's config < what it sets
    minigpt.train(None, [*tiny, f"data.path={texts['trained']}", "train.eval_interval=1"], out=tmp_path / "every")
    longer = tmp_path / "longer.yaml"
    longer.write_text("train:\n  max_steps: 4\n", encoding="utf-8")
    for config_arg, overrides in ((None, more), ({"train": {"max_steps": 4}}, ()), (longer, ())):
        resumed = plan(config_arg, overrides, resume=Resume.YES, out="every")
        assert resumed.mode is Mode.RESUME and resumed.cfg.train.max_steps == 4, config_arg
        assert resumed.cfg.train.eval_interval == 1, config_arg  # the checkpoint's, which the CONFIG leaves alone
        assert resumed.cfg.model.dropout == 0.1 and data(resumed) == str(texts["trained"].resolve()), config_arg
    # a fine-tune: defaults < the checkpoint's model.* < overrides < flags
    tuned = plan(None, init_from=tmp_path / "run", out="tuned")
    assert tuned.mode is Mode.FINE_TUNE and tuned.cfg.model.n_embd == 32 and tuned.cfg.model.dropout == 0.05
    assert data(tuned) == absolute_spec(DEFAULT_DATA_PATH)  # the data is the defaults' here, not the checkpoint's
    tuned = plan(None, ["model.dropout=0.3"], init_from=tmp_path / "run", out="tuned", data=texts["flag"])
    assert tuned.cfg.model.dropout == 0.3 and data(tuned) == str(texts["flag"])
