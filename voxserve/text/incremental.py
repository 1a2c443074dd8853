"""Cut text that arrives in fragments (an LLM's tokens) into segments to speak, as early as
each one is known to be complete.

A boundary is a sentence end (`.`, `!`, `?`, `…`, `。`, `！`, `？`, a line break), and in
`clause` mode also a clause mark (`,`, `;`, `:`, a dash, `、`, `，`, `；`, `：`). A mark
followed by whitespace is a boundary at once, and so is a full-width one, which needs none.
A mark at the very end of the text so far is one too, unless the next fragment could still
change its meaning: a period after an abbreviation or an initial ("Dr.", "J."), or a period,
comma or colon right after a digit ("3.5", "1,000", "10:30"). Those wait for the next
character. Clauses shorter than `min_clause_chars` are not cut off alone.

No segment is longer than `max_chars`, whatever the marks say, since stage A cannot stream:
text that holds no boundary within `max_chars` (or only one still waiting for its next
character) is cut at the last space in that span, or inside a word when it has none.

The work is linear in the text fed, however it is split into fragments: a scan position
remembers how far the pending text is known to hold no boundary, so each character is
looked at once (text after a cut at a space is looked at again once, and such a cut
consumes up to `max_chars`); the pending text is never longer than `max_chars` plus the
last fragment. Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from typing import Literal

from voxserve.text.split import period_is_not_an_end, speakable

__all__ = ["SplitMode", "TextSegmenter"]

SplitMode = Literal["sentence", "clause"]

_SENTENCE_MARKS = ".!?\u2026。！？"
_CLAUSE_MARKS = ",;:\u2014\u2013、，；："
_CLOSERS = "\"')]\u201d\u2019」』）"
_FULL_WIDTH = frozenset("。！？、，；：")
"""Chinese and Japanese marks: a boundary with no space after them."""
_DIGIT_SENSITIVE = ".,:"
_WORD_TAIL = 16
"""Characters before a period passed to `period_is_not_an_end` (more than it reads)."""

# What may end a segment, per mode; and the marks and closers that follow a mark.
_CANDIDATES = {
    "sentence": re.compile(f"[\n{re.escape(_SENTENCE_MARKS)}]"),
    "clause": re.compile(f"[\n{re.escape(_SENTENCE_MARKS + _CLAUSE_MARKS)}]"),
}
_RUN = re.compile(f"[{re.escape(_SENTENCE_MARKS + _CLOSERS)}]*")
_NON_SPACE = re.compile(r"\S")


class TextSegmenter:
    def __init__(self, mode: SplitMode = "clause", min_clause_chars: int = 12, max_chars: int = 200):
        if mode not in ("sentence", "clause"):
            raise ValueError(f"split must be 'sentence' or 'clause', not {mode!r}")
        if max_chars < 20 or min_clause_chars < 0:
            raise ValueError("max_chars must be >= 20 and min_clause_chars >= 0")
        self.mode: SplitMode = mode
        self.min_clause_chars = min_clause_chars
        self.max_chars = max_chars
        self._candidates = _CANDIDATES[mode]
        self._buf = ""
        self._start = 0
        """Where the pending segment starts in `_buf`."""
        self._scan = 0
        """`_buf[_start:_scan]` is known to hold no boundary: scanning resumes here."""

    @property
    def pending(self) -> str:
        """Text received but not yet cut into a segment."""
        return self._buf[self._start :].lstrip()

    @property
    def pending_chars(self) -> int:
        """`len(pending)`, give or take leading whitespace, without a copy."""
        return len(self._buf) - self._start

    def feed(self, text: str) -> list[str]:
        """Add a fragment; returns the segments it completed, in order."""
        if self._start:  # drop what was cut off: one copy per fragment, not per segment
            self._buf = self._buf[self._start :] + text
            self._scan -= self._start
            self._start = 0
        else:
            self._buf += text
        out: list[str] = []
        while (cut := self._next_cut()) is not None:
            self._emit(cut, out)
        return out

    def flush(self) -> list[str]:
        """Everything pending, as segments (the end of the input ends a sentence)."""
        out = self.feed("")  # leaves less than max_chars pending
        self._emit(len(self._buf), out)
        return out

    def _emit(self, cut: int, out: list[str]) -> None:
        piece = self._buf[self._start : cut].strip()
        self._start = self._scan = cut
        if speakable(piece):
            out.append(piece)

    def _next_cut(self) -> int | None:
        """Where the pending segment ends, or None while the text does not tell yet."""
        buf, size = self._buf, len(self._buf)
        if self._scan == self._start:  # a new segment starts at its first non-space
            first = _NON_SPACE.search(buf, self._start)
            self._start = self._scan = first.start() if first else size
        start = self._start
        limit = start + self.max_chars
        stop = min(size, limit)
        i = self._scan
        while i < stop:
            found = self._candidates.search(buf, i, stop)
            if found is None:
                i = stop
                break
            i = found.start()
            ch = buf[i]
            if ch == "\n":  # buf[start] is not a space, so there is text before it
                return i + 1
            run = _RUN.match(buf, i + 1)
            end = run.end() if run else i + 1
            verdict = self._boundary(buf, start, i, end)
            if verdict and end <= limit and (ch in _SENTENCE_MARKS or end - start >= self.min_clause_chars):
                return end
            if verdict is None or end == size:
                break  # more marks or closers may follow: look at this mark again then
            i = end
        self._scan = i
        if size - start >= self.max_chars:
            return self._space_cut()
        return None

    @staticmethod
    def _boundary(buf: str, start: int, mark: int, end: int) -> bool | None:
        """Whether the mark at `mark` (with closers up to `end`) ends the segment that
        starts at `start`; None when only the next character can tell."""
        ch = buf[mark]
        at_end = end == len(buf)
        if ch in _FULL_WIDTH:
            return True
        if not at_end and not buf[end].isspace():
            return False  # "3.5", "e.g.,", "a,b": the mark is inside a token
        after_digit = mark > start and buf[mark - 1].isdigit()
        if ch in _DIGIT_SENSITIVE and after_digit and at_end:
            return None
        if ch == "." and period_is_not_an_end(buf[max(start, mark - _WORD_TAIL) : mark]):
            return None if at_end else False
        return True

    def _space_cut(self) -> int:
        start = self._start
        space = self._buf.rfind(" ", start, start + self.max_chars)
        return space if space > start else start + self.max_chars
