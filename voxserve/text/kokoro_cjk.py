"""What the Mandarin and Japanese readers share: text rewritten step by step while each
character remembers where in the input it came from, and the phoneme pieces a reader
gives back.

Kokoro's own readers rewrite the text before reading it: numbers become words, full-width
marks become ASCII ones with a space. Word timings must still name the words the client
wrote, so every rewrite here is traced: a piece of text is either aligned with the input
(one character for one, though the character may have changed: a full-width digit made
ASCII) or a replacement that stands for a whole span of it ("二零二四年" for "2024年").
A word built from replaced characters covers the whole span they stand for.

It owns: the traced text (`Traced`, `traced_sub`, `traced_chars`) and the readers' output
(`Unit`, `Latin`). It must not: import a dictionary or a reader, or know any language.
Every function is linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["Char", "Latin", "Piece", "Reader", "Traced", "Unit", "traced_chars", "traced_sub"]


@dataclass(frozen=True)
class Piece:
    text: str
    start: int
    """Offset in the input of the span this piece stands for."""
    end: int
    aligned: bool
    """Whether text[i] stands for input[start + i] alone (len(text) == end - start)."""


Traced = list[Piece]


@dataclass(frozen=True)
class Char:
    ch: str
    start: int
    end: int


def traced_sub(pieces: Traced, pattern: re.Pattern[str], repl: Callable[[re.Match[str]], str | None]) -> Traced:
    """`pattern.sub(repl, ...)` over the aligned pieces only (a replacement is never
    rewritten again); `repl` returning None keeps the match as it is, and an empty match
    is never replaced."""
    out: Traced = []
    for piece in pieces:
        if not piece.aligned:
            out.append(piece)
            continue
        at = 0
        for m in pattern.finditer(piece.text):
            if m.end() == m.start():
                continue
            new = repl(m)
            if new is None:
                continue
            if m.start() > at:
                out.append(Piece(piece.text[at : m.start()], piece.start + at, piece.start + m.start(), True))
            out.append(Piece(new, piece.start + m.start(), piece.start + m.end(), False))
            at = m.end()
        if at == 0:
            out.append(piece)
        elif at < len(piece.text):
            out.append(Piece(piece.text[at:], piece.start + at, piece.end, True))
    return out


def traced_chars(pieces: Traced) -> Iterator[Char]:
    """Each character with the input span it stands for."""
    for piece in pieces:
        if piece.aligned:
            for i, ch in enumerate(piece.text):
                yield Char(ch, piece.start + i, piece.start + i + 1)
        else:
            for ch in piece.text:
                yield Char(ch, piece.start, piece.end)


@dataclass(frozen=True)
class Unit:
    """A run of Kokoro symbols in the reading, and the input span of the word it reads
    (None for spaces and punctuation). Symbols Kokoro has no token for are dropped when
    the units are joined, as Kokoro's model drops them."""

    symbols: str
    start: int = -1
    end: int = -1

    @property
    def is_word(self) -> bool:
        return self.start >= 0


class Latin(Protocol):
    """Reads a run of Latin-script text (English: misaki's readers pass it through
    unread) and gives its units, with spans relative to the run."""

    def __call__(self, text: str) -> Sequence[Unit]: ...


class Reader(Protocol):
    """A language's reader: normalized text -> units, in order."""

    def __call__(self, text: str, latin: Latin) -> list[Unit]: ...


def shift(units: Sequence[Unit], chars: Sequence[Char]) -> list[Unit]:
    """Units whose spans index `chars` (a run handed to `Latin`), with input spans."""
    out: list[Unit] = []
    for u in units:
        if u.is_word and u.end > u.start:
            out.append(Unit(u.symbols, chars[u.start].start, chars[u.end - 1].end))
        else:
            out.append(Unit(u.symbols))
    return out
