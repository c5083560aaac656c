"""`minigpt.load(run).hooked()`: the model inside TransformerLens (the dev group installs it, so these
run everywhere) computes minigpt's logits and attention, TransformerLens' own head detector scores
its patterns as minigpt's `pattern_scores` does, and what it cannot express is refused in one line."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import torch
from transformer_lens.head_detector import (
    compute_head_attention_similarity_score,
    get_duplicate_token_head_detection_pattern,
    get_induction_head_detection_pattern,
    get_previous_token_head_detection_pattern,
)

import minigpt
from minigpt.checkpoint import Checkpoint
from minigpt.config.schema import Config, ModelConfig
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import UserError
from minigpt.inspect.heads import detection_patterns, pattern_scores, repeated_tokens
from minigpt.model import GPT

from .helpers import make_text

BLOCK = 16
TL_PATTERNS = {
    "previous": get_previous_token_head_detection_pattern,
    "duplicate": get_duplicate_token_head_detection_pattern,
    "induction": get_induction_head_detection_pattern,
}


def random_run(tmp_path: Path, **options) -> Path:
    """A checkpoint of an untrained tiny model with every weight random and large enough that each
    head attends somewhere of its own (LayerNorm weights near 1), so a wrong mapping shows."""
    cfg = Config(model=ModelConfig(n_layer=2, n_head=2, n_embd=32, block_size=BLOCK, **options))
    tok = CharTokenizer.from_text(make_text(2000))
    torch.manual_seed(0)
    model = GPT(cfg.model, tok.vocab_size)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn_like(p) * 0.3 + (1.0 if p.ndim == 1 and p.shape[0] == 32 else 0.0))
    path = tmp_path / "model.pt"
    Checkpoint(model=model.state_dict(), config=cfg.to_dict(), tokenizer=tok.to_dict(), data={}, step=0).save(path)
    return path


MODELS = {
    "learned": {"pos_emb": "learned"},
    "rope": {"pos_emb": "rope"},
    "sinusoidal, biases, soft-cap": {"pos_emb": "sinusoidal", "bias": True, "logit_softcap": 3.0},
    "attn_only": {"pos_emb": "rope", "attn_only": True},
}


@pytest.mark.parametrize("options", MODELS.values(), ids=MODELS.keys())
def test_transformer_lens_computes_minigpts_logits_and_attention(tmp_path: Path, options: dict) -> None:
    m = minigpt.load(random_run(tmp_path, **options), device="cpu")
    rng = torch.get_rng_state()
    tl = m.hooked()
    assert torch.equal(torch.get_rng_state(), rng)  # building it draws nothing from the global generator
    assert not tl.training
    ids = torch.randint(m.tokenizer.vocab_size, (3, BLOCK), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours = m.loaded.model(ids)[0]
        theirs, cache = tl.run_with_cache(ids)
    assert (theirs - ours).abs().max().item() < 1e-4
    patterns = torch.stack([cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(2)])  # (L, B, nh, T, T)
    assert (patterns - m.loaded.model.attention_maps(ids)).abs().max().item() < 1e-5
    # the hook names docs/inside.md lists
    for name in (
        "hook_embed",
        "blocks.1.hook_resid_pre",
        "blocks.1.hook_attn_out",
        "blocks.1.hook_resid_post",
        "blocks.0.attn.hook_z",
        "blocks.0.attn.hook_attn_scores",
        "ln_final.hook_normalized",
    ):
        assert name in cache, name
    assert ("blocks.0.hook_mlp_out" in cache) != bool(options.get("attn_only"))
    assert ("hook_pos_embed" in cache) == (options["pos_emb"] != "rope")
    with torch.no_grad():  # the residual stream is minigpt's: its head on the last block's output gives the logits
        head = m.loaded.model.logits(cache["blocks.1.hook_resid_post"])
    assert (head - ours).abs().max().item() < 1e-4
    # as docs/inside.md warns: TransformerLens 4.3 fires hook_attn_scores on the weights
    assert torch.equal(cache["blocks.0.attn.hook_attn_scores"], cache["blocks.0.attn.hook_pattern"])


@pytest.mark.parametrize("pos_emb", ["learned", "rope"])
def test_transformer_lens_head_detector_scores_as_pattern_scores(tmp_path: Path, pos_emb: str) -> None:
    """TransformerLens' detection patterns and its sum(A * P) / sum(A), with detect_head's default
    options, over its own cached patterns of the repeated sequences: minigpt's numbers."""
    m = minigpt.load(random_run(tmp_path, pos_emb=pos_emb), device="cpu")
    tokens = repeated_tokens(m.tokenizer.vocab_size, BLOCK)  # (B, T)
    weights = m.loaded.model.attention_maps(tokens)  # (L, B, nh, T, T)
    assert weights.amax(-1).mean() > 0.5  # sharp patterns, not near-uniform ones that any mapping matches
    ours = pattern_scores(weights, tokens)
    with torch.no_grad():
        _, cache = m.hooked().run_with_cache(tokens)
    for name, tl_pattern in TL_PATTERNS.items():
        theirs = torch.zeros(2, 2)
        for b, seq in enumerate(tokens):
            P = tl_pattern(seq)
            assert torch.equal(P, detection_patterns(seq)[name]), name
            for layer in range(2):
                for head in range(2):
                    A = cache["pattern", layer, "attn"][b, head]  # (T, T)
                    theirs[layer, head] += compute_head_attention_similarity_score(
                        A, detection_pattern=P, exclude_bos=False, exclude_current_token=False, error_measure="mul"
                    )
        theirs /= len(tokens)
        assert (theirs - ours[name]).abs().max().item() < 1e-5, name


@pytest.mark.parametrize(
    "options, line",
    [
        ({"norm": "post"}, "model.norm=post: TransformerLens has no post-LayerNorm block"),
        ({"mlp_act": "relu2"}, "model.mlp_act=relu2: TransformerLens has no relu(x)^2 activation"),
        ({"qk_norm": True}, "model.qk_norm=true: TransformerLens' native attention has no RMS norm"),
        ({"value_embeds": True}, "model.value_embeds=true: TransformerLens' attention has no per-block value"),
    ],
)
def test_what_transformer_lens_cannot_express_is_refused_in_one_line(tmp_path: Path, options: dict, line: str) -> None:
    m = minigpt.load(random_run(tmp_path, pos_emb="learned", **options), device="cpu")
    with pytest.raises(UserError) as e:
        m.hooked()
    assert str(e.value).startswith(line) and "\n" not in str(e.value)


def test_without_transformer_lens_it_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = minigpt.load(random_run(tmp_path, pos_emb="learned"), device="cpu")

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    with pytest.raises(UserError, match=r"^TransformerLens is not installed: pip install 'minigpt\[interp\]'"):
        m.hooked()
    monkeypatch.setattr(metadata, "version", lambda name: "3.5.1")
    with pytest.raises(UserError, match=r"^TransformerLens 3\.5\.1 is installed; hooked\(\) needs 4\.3 or newer"):
        m.hooked()
