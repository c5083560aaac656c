"""Character tokenizer: one id per distinct character, ids in sorted character order."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from minigpt.errors import UserError


class CharTokenizer:
    """Maps characters to ids and back. Stored in checkpoints as plain data (`to_dict`)."""

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

    def unknown(self, text: str) -> list[str]:
        """Characters of `text` that are not in the vocabulary, in order of first appearance."""
        return list(dict.fromkeys(c for c in text if c not in self.stoi))

    def encode_checked(self, text: str, what: str, unknown: str = "error", skip_hint: bool = True) -> np.ndarray:
        """Ids of `text` (int64). Characters outside the vocabulary are an error naming them
        (`what` says which input it was) or, with unknown='skip', dropped."""
        missing = self.unknown(text)
        if not missing:
            return self.encode_array(text)
        if unknown != "skip":
            names = ", ".join(repr(c) for c in missing[:10]) + (", ..." if len(missing) > 10 else "")
            hint = "; remove them or pass --unknown skip to drop them" if skip_hint else ""
            raise UserError(f"{what} has characters the model never saw in training: {names}{hint}")
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

    def unknown_to(self, other: CharTokenizer) -> list[str]:
        """Characters of this vocabulary that `other` lacks."""
        return [c for c in self.chars if c not in other.stoi]

    def ids_of(self, other: CharTokenizer) -> np.ndarray:
        """For each id of `other`, this vocabulary's id of the same character: a lookup table that
        moves ids encoded with `other` into this vocabulary (every character must be known here)."""
        return np.array([self.stoi[c] for c in other.chars], dtype=np.int64)

    def extended(self, chars: Iterable[str]) -> CharTokenizer:
        """This vocabulary with `chars` appended (sorted, new ones only): known characters keep their ids."""
        new = sorted(set(chars) - set(self.chars))
        return CharTokenizer(self.chars + new)

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.chars[i] for i in ids)

    def to_dict(self) -> dict[str, list[str]]:
        return {"chars": list(self.chars)}

    @classmethod
    def from_dict(cls, d: dict) -> CharTokenizer:
        return cls(d["chars"])
