""".gitignore files, as a folder walk reads them: a well-defined subset of git's syntax, enough
for the files people keep. Standard library only.

Each non-blank line that is not a `#` comment is a pattern; `!` before it re-includes what an
earlier pattern excluded; a trailing `/` matches folders only; a `/` at its start or in its middle
anchors it to the .gitignore's own folder, otherwise it matches a name at any depth below; `*`
and `?` match within a name, `[...]` one character of a set, `**/` any number of folders and a
trailing `/**` everything inside. A deeper .gitignore's patterns come after its parents' (the
last pattern that matches decides). Not read: `.git/info/exclude`, the global excludes file,
and .gitignore files above the folder walked."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    negate: bool
    folders_only: bool


def _translate(glob: str) -> str:
    """A gitignore glob (anchored or not already decided) as a regular expression's body."""
    out, i = [], 0
    while i < len(glob):
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == len(glob):
            out.append("/.*")
            i += 3
        elif glob[i] == "*":
            while i < len(glob) and glob[i] == "*":
                i += 1
            out.append("[^/]*")
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[" and (end := glob.find("]", i + 2)) != -1:
            body = glob[i + 1 : end]
            body = "^" + body[1:] if body[0] in "!^" else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        elif glob[i] == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def _pattern(line: str) -> _Pattern | None:
    line = line.rstrip("\r\n")
    if not line.endswith("\\ "):
        line = line.rstrip(" ")
    if not line or line.startswith("#"):
        return None
    negate = line.startswith("!")
    if negate or line.startswith("\\"):
        line = line[1:]
    folders_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    body = _translate(line.lstrip("/"))
    try:
        regex = re.compile(("" if anchored else "(?:.*/)?") + body + r"\Z")
    except re.error:
        return None  # a malformed set: git ignores such a line too
    return _Pattern(regex, negate, folders_only)


class GitIgnore:
    """The patterns of one .gitignore file, for paths relative to its folder."""

    def __init__(self, text: str) -> None:
        self.patterns = [p for p in map(_pattern, text.splitlines()) if p is not None]
        # one regex that tells whether any pattern matches at all: most paths match none
        self.any = re.compile("|".join(f"(?:{p.regex.pattern})" for p in self.patterns) or r"(?!)")

    def decide(self, rel: str, is_folder: bool) -> bool | None:
        """True: ignored; False: re-included by a `!` pattern; None: no pattern matches."""
        if not self.any.match(rel):
            return None
        verdict = None
        for p in self.patterns:
            if (not p.folders_only or is_folder) and p.regex.match(rel):
                verdict = not p.negate
        return verdict


def ignored(rules: list[tuple[str, GitIgnore]], rel: str, is_folder: bool) -> bool:
    """Whether `rel` (relative to the walked folder, `/`-separated) is ignored by the .gitignore
    files on its way, given outermost first as (their folder's relative path with a trailing `/`,
    or "" for the walked folder itself, the file)."""
    verdict = False
    for base, rules_of in rules:
        decided = rules_of.decide(rel[len(base) :], is_folder)
        if decided is not None:
            verdict = decided
    return verdict
