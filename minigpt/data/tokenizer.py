"""Tokenizers: `char` (one id per distinct character, in sorted order) and `byte` (the 256 UTF-8 byte values)."""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from minigpt.errors import UserError


class CharTokenizer:
    """Maps characters to ids and back. Stored in checkpoints as plain data (`to_dict`)."""

    kind = "char"
    unit = "char"  # what one id is, for "bits per char"

    def __init__(self, chars: Sequence[str]):
        chars = list(chars)
        if any(len(c) != 1 for c in chars) or len(set(chars)) != len(chars):
            raise ValueError("a CharTokenizer vocabulary is a list of distinct single characters")
        self.chars: list[str] = chars
        self.stoi: dict[str, int] = {c: i for i, c in enumerate(chars)}
        # sorted code points for vectorised encoding (ids are in sorted order already
        # when built from text; keep a permutation in case a vocabulary is not sorted)
        points = np.array([ord(c) for c in chars], dtype=np.uint32)
        self._order = np.argsort(points, kind="stable")
        self._sorted_points = points[self._order]

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def same_as(self, other: Tokenizer) -> bool:
        return isinstance(other, CharTokenizer) and other.chars == self.chars

    def unknown(self, text: str) -> list[str]:
        """Characters of `text` that are not in the vocabulary, in order of first appearance."""
        return list(dict.fromkeys(c for c in text if c not in self.stoi))

    def encode_checked(self, text: str, label: str, unknown: str = "error", skip_hint: bool = True) -> np.ndarray:
        """Ids of `text` (int64). Characters outside the vocabulary are an error naming them
        (`label` says which input it was) or, with unknown='skip', dropped."""
        missing = self.unknown(text)
        if not missing:
            return self.encode_array(text)
        if unknown != "skip":
            names = name_chars(missing)
            skip = "--unknown skip" if label.startswith("--") else 'unknown="skip"'  # a flag, or the API's argument
            hint = f"; remove them or pass {skip} to drop them" if skip_hint else ""
            raise UserError(f"{label} has characters the model never saw in training: {names}{hint}")
        return np.array([self.stoi[c] for c in text if c in self.stoi], dtype=np.int64)

    def encode(self, text: str) -> list[int]:
        return self.encode_array(text).tolist()

    def encode_array(self, text: str) -> np.ndarray:
        """Vectorised encoding (fast on large corpora). Raises KeyError on an unknown character."""
        points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        pos = np.searchsorted(self._sorted_points, points)
        pos = np.minimum(pos, len(self._sorted_points) - 1)
        bad = self._sorted_points[pos] != points
        if bad.any():
            raise KeyError(chr(int(points[np.argmax(bad)])))
        return self._order[pos].astype(np.int64)

    def unknown_to(self, other: Tokenizer) -> list[str]:
        """Characters of this vocabulary that `other` lacks."""
        return [c for c in self.chars if c not in other.stoi] if isinstance(other, CharTokenizer) else list(self.chars)

    def ids_of(self, other: CharTokenizer) -> np.ndarray:
        """For each id of `other`, this vocabulary's id of the same character: a lookup table that
        moves ids encoded with `other` into this vocabulary (every character must be known here)."""
        return np.array([self.stoi[c] for c in other.chars], dtype=np.int64)

    def extended(self, chars: Iterable[str]) -> CharTokenizer:
        """This vocabulary with `chars` appended (sorted, new ones only): known characters keep their ids."""
        return CharTokenizer(self.chars + sorted(set(chars) - set(self.chars)))

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """What each id shows as, one string per id (labels for attention maps and scores)."""
        return [self.chars[i] for i in ids]

    def streamer(self) -> Callable[[int], str]:
        """A function from each next id to the text it completes (streaming output)."""
        return self.chars.__getitem__

    @property
    def start_id(self) -> int:
        """The id an empty prompt starts from: a newline where the vocabulary has one."""
        return self.stoi.get("\n", 0)

    def to_dict(self) -> dict[str, Any]:
        return {"chars": list(self.chars)}


class ByteTokenizer:
    """The UTF-8 bytes of a text, one id per byte value (256 ids). Decoding never fails: bytes that do not form UTF-8
    show as U+FFFD, and a streamed character appears once its last byte is out."""

    kind = "byte"
    unit = "byte"
    vocab_size = 256

    def same_as(self, other: Tokenizer) -> bool:
        return isinstance(other, ByteTokenizer)

    def unknown(self, text: str) -> list[str]:
        return []

    def encode_checked(self, text: str, label: str, unknown: str = "error", skip_hint: bool = True) -> np.ndarray:
        return self.encode_array(text)

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_array(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)

    def unknown_to(self, other: Tokenizer) -> list[str]:
        return [] if isinstance(other, ByteTokenizer) else ["(byte values)"]

    def ids_of(self, other: ByteTokenizer) -> np.ndarray:
        return np.arange(256, dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        # through uint8: bytes() of an int64 array would take its raw 8-byte buffer, not its values
        values = ids if isinstance(ids, (list, tuple, np.ndarray)) else list(ids)
        return np.asarray(values, dtype=np.uint8).tobytes().decode("utf-8", errors="replace")

    def pieces(self, ids: Iterable[int]) -> list[str]:
        """One string per byte: a whole character on its last byte, '' on the bytes before it (so
        the pieces join to the decoded text), U+FFFD for a byte that is not part of UTF-8."""
        stream = self.streamer()
        return [stream(i) for i in ids]

    def streamer(self) -> Callable[[int], str]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return lambda i: decoder.decode(bytes((i,)))

    @property
    def start_id(self) -> int:
        return 10  # b"\n"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "byte"}


Tokenizer = CharTokenizer | ByteTokenizer


def tokenizer_from_dict(d: dict[str, Any]) -> Tokenizer:
    """The tokenizer a checkpoint or cache entry describes (older ones hold only "chars")."""
    kind = d.get("kind", "char")
    if kind == "byte":
        return ByteTokenizer()
    if kind != "char":
        raise ValueError(f"unknown tokenizer kind {kind!r}")
    return CharTokenizer(d["chars"])


def checked_text(tok: Tokenizer, text: str, label: str, unknown: str = "error") -> str:
    """`text` when the model can read it: not empty, each character one it saw (unknown='skip': others dropped)."""
    if not text:
        raise UserError(f"{label} is empty; give some text to look at")
    kept = tok.decode(tok.encode_checked(text, label, unknown))
    if not kept:
        raise UserError(f"{label} has no character the model saw in training")
    return kept


def name_chars(chars: list[str], most: int = 10) -> str:
    """Characters a model never saw, as error messages name them: the first `most`, quoted."""
    return ", ".join(repr(c) for c in chars[:most]) + (", ..." if len(chars) > most else "")
