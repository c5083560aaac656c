"""The Python API (docs/inside.md): `minigpt.load(RUN)` and what the loaded model does, each method through
the functions the command line calls, so the numbers and pages are the same."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from minigpt.config.schema import SampleOptions
from minigpt.data.tokenizer import checked_text
from minigpt.errors import UserError
from minigpt.infer.loading import LoadedModel, column_major_for_decoding, load_model, source_line
from minigpt.infer.sample import plan_samples, run_plan
from minigpt.infer.score import Scores, score_text
from minigpt.inspect.attention import attention_maps_for, attention_page
from minigpt.inspect.lens import Lens, lens_of
from minigpt.inspect.pages import HtmlPage
from minigpt.inspect.surprise import score_page
from minigpt.runtime.cores import CoreLoad
from minigpt.runtime.device import resolve_device

DEFAULT = SampleOptions()  # Model.sample's defaults are `minigpt sample`'s, the schema's

if TYPE_CHECKING:
    from minigpt.training.callbacks import Callback
    from minigpt.training.trainer import TrainResult


class Model:
    """A trained minigpt model, loaded from a run directory or checkpoint (see `load`)."""

    def __init__(self, loaded: LoadedModel):
        self.loaded = loaded

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def config(self):
        """The run's resolved config (`config.model.block_size`, `config.model.pos_emb`, ...)."""
        return self.loaded.config

    @property
    def module(self) -> torch.nn.Module:
        """The torch module itself (minigpt.model.GPT, in eval mode), its weights by name and its HookPoints;
        changing a weight here changes what this Model samples and scores."""
        return self.loaded.model

    @property
    def path(self) -> Path:
        """The checkpoint file this model came from."""
        return self.loaded.path

    def __repr__(self) -> str:
        return f"<minigpt.Model {source_line(self.loaded)}>"

    def sample(
        self,
        prompt: str = "",
        max_new_tokens: int = DEFAULT.max_new_tokens,
        temperature: float = DEFAULT.temperature,
        top_k: int | None = DEFAULT.top_k,
        top_p: float | None = DEFAULT.top_p,
        seed: int = DEFAULT.seed,
        unknown: str = DEFAULT.unknown,
    ) -> str:
        """Continue `prompt` (`minigpt sample`'s options and defaults); returns prompt + continuation.
        The same seed gives the same text; temperature 0 is greedy."""
        opts = SampleOptions(1, max_new_tokens, temperature, top_k, top_p, seed, unknown, "float32")
        return "".join(p.text for p in run_plan(self.loaded, plan_samples(self.tokenizer, [prompt], opts)))

    def score(self, text: str, unknown: str = "error", top: int = 5) -> Scores:
        """The model's surprise at each character of `text` (`minigpt score`): `.bits[i]` is -log2 p of
        character i + 1, with `.probs`, `.bits_per_char` and the `top` guesses (`.top_ids`, `.top_probs`,
        named by `tokenizer.pieces(ids)`)."""
        text = checked_text(self.tokenizer, text, "the text", unknown)
        return score_text(self.loaded, text, top=top)

    def attention(self, text: str, unknown: str = "error") -> tuple[torch.Tensor, list[str]]:
        """The attention weights over `text` (at most block_size characters) as a (layer, head, T, T)
        tensor (row i: what character i takes from each j <= i), and the characters."""
        text = checked_text(self.tokenizer, text, "the text", unknown)
        block = self.config.model.block_size
        n = len(self.tokenizer.encode(text))
        if n > block:
            raise UserError(
                f"the text is {n} characters; attention() returns one window of at most block_size "
                f"({block}); show_attention(text) reads longer texts window by window"
            )
        maps, chars = attention_maps_for(self.loaded.model, self.tokenizer, text)
        return maps.float().cpu(), chars

    def show_attention(
        self, text: str, layer: int | None = None, head: int | None = None, unknown: str = "error"
    ) -> HtmlPage:
        """The attention explorer over `text` (`minigpt attention --html`); `.save(path)` writes it."""
        return attention_page(
            self.loaded.model, self.tokenizer, text, source_line(self.loaded), layer, head, "the text", unknown
        )

    def show_score(self, text: str, unknown: str = "error") -> HtmlPage:
        """The text coloured by surprise (`minigpt score --html`), inline in Jupyter; `.save(path)` writes it."""
        return score_page(self.loaded, text, "the text", unknown)

    def lens(self, text: str, unknown: str = "error") -> Lens:
        """The logit lens over `text` (`minigpt lens`; its first block_size characters): what the model
        would predict after each layer (docs/inside.md)."""
        return lens_of(self.loaded, text, "the text", unknown)

    def hooked(self):
        """The model inside TransformerLens (`pip install 'minigpt[interp]'`): a `TransformerBridge` with the
        same weights and logits that takes token ids (docs/inside.md); what it cannot express is refused."""
        from minigpt.inspect.hooked import hooked_model

        return hooked_model(self.loaded)

    def heads(
        self,
        data: str | Path | None = None,
        ablation: str = "mean",
        exact: int | str | None = "auto",
        text: str | None = None,
    ):
        """What each attention head does (`minigpt heads`), measured on the run's validation text (or `data`,
        or `text`): a `HeadsReport`; `.to_dict()` for JSON (docs/inside.md)."""
        from minigpt.inspect.heads import heads_of

        return heads_of(self.loaded, data, ablation, exact, text)

    def export(self, out: str | Path, format: str = "hf", dtype: str = "float32", force: bool = False) -> Path:
        """Write the model for other tools (`minigpt export`): format 'hf', a folder transformers
        loads as it is, or 'onnx', model.onnx plus minigpt.json (docs/export.md). Returns the folder."""
        from minigpt.export.folder import export_loaded

        export_loaded(self.loaded, Path(out), format, dtype, force)
        return Path(out)

    def playground(self, path: str | Path | None = None, dtype: str = "float32") -> HtmlPage:
        """The playground page (`minigpt playground`), written to `path` when given, inline in Jupyter."""
        from minigpt.export.playground import playground_page

        page = playground_page(self.loaded, dtype)
        if path is not None:
            page.save(path)
        return page


@dataclass
class Run:
    """What `minigpt.train()` trained: the run folder, the numbers of this training (`result`: steps,
    best_val_loss, val_loss, full.loss on the whole validation split, stopped; None when `resume="auto"` found
    the run finished), and its model as `minigpt.load` gives it (under torchrun, None on ranks but 0)."""

    path: Path
    result: TrainResult | None
    model: Model | None

    def __repr__(self) -> str:
        r = self.result
        done = "finished already" if r is None else f"{r.step:,} steps, best val est {r.best_val_loss:.4f}"
        return f"<minigpt.Run {self.path}: {done}>"


def train(
    config: str | Path | Mapping[str, Any] | None = None,
    overrides: Sequence[str] | Mapping[str, Any] = (),
    *,
    out: str | Path | None = None,
    data: str | Path | None = None,
    device: str | None = None,
    resume: bool | str = False,
    init_from: str | Path | None = None,
    auto: bool = False,
    callbacks: Sequence[Callback] = (),
    model_on_every_rank: bool = False,
) -> Run:
    """Train as `minigpt train` does: `config` a YAML file, a shipped config's name or a dict of sections,
    `overrides` "KEY=VALUE" strings or a dict; `callbacks` (minigpt.Callback) get every event too. Under
    torchrun every rank returns after rank 0's last save; rank 0 alone loads the model, unless `model_on_every_rank`."""
    from minigpt.config.files import default_run_dir
    from minigpt.runtime.distributed import launched
    from minigpt.training.launch import start_run
    from minigpt.training.plan import Resume, train_request

    if resume not in (False, True, "auto"):
        raise UserError(f"resume must be False, True or 'auto', not {resume!r}")
    started, cores = time.perf_counter(), CoreLoad()
    path, items = train_request(
        config, overrides, data=data, device=device, init_from=init_from, auto=auto, resume=Resume(resume), python=True
    )
    out_dir = Path(out) if out is not None else default_run_dir(path, items)
    result = start_run(
        path, items, out_dir, Resume(resume), started, callbacks=callbacks, load=cores, origin="minigpt.train()"
    )
    dist = launched()  # under torchrun, each rank's own device: the one it trained on (cuda:1, or the CPU)
    wanted = dist.is_main or model_on_every_rank
    model = load(out_dir, str(resolve_device(trained_device(out_dir, device), dist))) if wanted else None
    return Run(out_dir, result, model)


def trained_device(out_dir: Path, device: str | None) -> str:
    """The device a run trains on: `device` where given, else its config.yaml's train.device (auto without)."""
    from minigpt.config.files import load_config

    if device is not None or not (out_dir / "config.yaml").is_file():
        return device or "auto"
    return load_config(out_dir / "config.yaml").train.device


def load(target: str | Path = "runs/default", device: str = "auto") -> Model:
    """Load a trained model: a run directory (its best.pt, else last.pt) or a .pt file, in float32
    on `device` (auto: cuda, else mps, else cpu)."""
    loaded = load_model(Path(target), resolve_device(device))
    column_major_for_decoding(loaded.model)  # decoding reads the weights faster (float32 CPU only)
    return Model(loaded)
