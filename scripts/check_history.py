"""Fail when code, tests or docs speak of how they were made, or the tracked tree is too big.

    python scripts/check_history.py [ROOT]

The repository says what the product does and why; how a figure was reached belongs in
the commit messages. Checked in `voxserve/` and `tests/` (Python comments and docstrings),
`README.md` and `docs/*.md` (the prose, outside code blocks and code spans):

- a round of work or a tracker's number: the word "session" or "issue(s)" with a number
  after it;
- the phrase naming a stop of work ("this" then "stop");
- a token of 7 to 40 hexadecimal characters with a digit and a letter: a commit hash.

Also fails when the files git tracks add up to more than `MAX_TREE_BYTES`. Run by
`make lint`; exits 1 and prints each finding as `path:line: text`.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

MAX_TREE_BYTES = 5_000_000
"""The tracked tree ships wherever the code goes (a GPU box, a Ray node, a container)."""

HISTORY = re.compile(r"\b(?:sessions?\s+#?\d+|issues?\s+#?\d+|this\s+stop)\b", re.IGNORECASE)
HEX = re.compile(r"(?<![\w/.-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w/-])(?!\.\w)", re.IGNORECASE)
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+\1")
STATEMENT_START = frozenset({tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT})


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text}"


def prose_findings(text: str, line: int, path: str) -> Iterator[Finding]:
    """The history patterns in a piece of prose that starts at `line`."""
    for offset, row in enumerate(text.splitlines()):
        for match in HISTORY.finditer(row):
            yield Finding(path, line + offset, f"history: {match.group(0)!r}")
        for match in HEX.finditer(CODE_SPAN.sub(" ", row)):
            yield Finding(path, line + offset, f"hash-like token: {match.group(0)!r}")


def markdown_prose(source: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a Markdown file's lines outside fenced code blocks."""
    fenced = False
    for number, row in enumerate(source.splitlines(), 1):
        if FENCE.match(row):
            fenced = not fenced
        elif not fenced:
            yield number, row


def python_prose(source: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of a Python file's comments and docstrings: strings that stand
    as a statement of their own (module, class, function and attribute docstrings)."""
    previous, depth = tokenize.NEWLINE, 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
            continue
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
        elif token.type == tokenize.STRING and depth == 0 and previous in STATEMENT_START:
            yield token.start[0], token.string
        if token.type != tokenize.NL:
            previous = token.type


def tracked(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True, capture_output=True).stdout
    return [name for name in out.decode().split("\0") if name]


def checked(name: str) -> bool:
    if name.startswith(("voxserve/", "tests/")):
        return name.endswith(".py")
    return name == "README.md" or (name.startswith("docs/") and name.count("/") == 1 and name.endswith(".md"))


def findings(root: Path, names: list[str]) -> Iterator[Finding]:
    """Every history pattern in the checked files among `names` (paths under `root`)."""
    for name in names:
        if not checked(name):
            continue
        source = (root / name).read_text(encoding="utf-8")
        pieces = python_prose(source) if name.endswith(".py") else markdown_prose(source)
        for line, text in pieces:
            yield from prose_findings(text, line, name)


def tree_bytes(root: Path, names: list[str]) -> int:
    return sum((root / name).stat().st_size for name in names if (root / name).is_file())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0] if args else ".").resolve()
    names = tracked(root)
    failed = False
    for finding in findings(root, names):
        print(finding)
        failed = True
    size = tree_bytes(root, names)
    if size > MAX_TREE_BYTES:
        print(f"the tracked tree is {size:,} bytes, over {MAX_TREE_BYTES:,}: keep bulky results out of git")
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
