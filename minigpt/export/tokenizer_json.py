"""minigpt's tokenizers as `tokenizers` library tokenizers (tokenizer.json), with the same ids: a char
model's unseen characters are dropped, a byte model's ids are the bytes (docs/export.md#the-tokenizer)."""

from __future__ import annotations

from typing import Any

from minigpt.data.tokenizer import ByteTokenizer, CharTokenizer, Tokenizer

UNKNOWN_RULE = {
    "char": "characters the model never saw are dropped (as `minigpt sample --unknown skip`)",
    "byte": "none: every text is UTF-8 bytes, and every byte value has an id",
}


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-in character for each byte value 0..255 (what ByteLevel maps bytes to)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _char_class(chars: list[str]) -> str:
    """A regex class of exactly these characters, each written as \\x{HEX} (no escaping rules to get wrong)."""
    return "".join(f"\\x{{{ord(c):X}}}" for c in chars)


def build_tokenizer(tok: Tokenizer) -> Any:
    """The `tokenizers.Tokenizer` giving the same ids as `tok` (see the module docstring)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    if isinstance(tok, ByteTokenizer):
        vocab = {c: b for b, c in enumerate(byte_alphabet())}
        out = Tokenizer(models.BPE(vocab=vocab, merges=[]))
        out.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        out.decoder = decoders.ByteLevel()
        return out
    assert isinstance(tok, CharTokenizer)
    # BPE without merges: each character is its own token
    out = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(tok.chars)}, merges=[]))
    out.normalizer = normalizers.Replace(Regex(f"[^{_char_class(tok.chars)}]"), "")
    out.decoder = decoders.Fuse()  # join the characters, no spaces between them
    return out


def tokenizer_config(block_size: int) -> dict[str, Any]:
    """tokenizer_config.json: the plain fast tokenizer (no model-specific class, no special tokens)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": block_size,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {},
    }


def vocabulary(tok: Tokenizer) -> dict[str, Any]:
    """The vocabulary as plain data, for minigpt.json (a reader needs no tokenizers library)."""
    if isinstance(tok, ByteTokenizer):
        return {"kind": "byte", "vocab_size": 256, "ids": "the UTF-8 byte values"}
    return {"kind": "char", "vocab_size": tok.vocab_size, "chars": list(tok.chars)}
