"""Cut text that arrives in fragments (an LLM's tokens) into segments to speak, as early as
each one is known to be complete.

A boundary is a sentence end (`.`, `!`, `?`, `…`, a line break), and in `clause` mode also
a clause mark (`,`, `;`, `:`, a dash). A mark followed by whitespace is a boundary at once.
A mark at the very end of the text so far is one too, unless the next fragment could still
change its meaning: a period after an abbreviation or an initial ("Dr.", "J."), or a period,
comma or colon right after a digit ("3.5", "1,000", "10:30"). Those wait for the next
character. Clauses shorter than `min_clause_chars` are not cut off alone, and text with no
boundary is cut at a space once it reaches `max_chars`, since stage A cannot stream.
Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Literal

from voxserve.text.split import period_is_not_an_end, speakable

__all__ = ["SplitMode", "TextSegmenter"]

SplitMode = Literal["sentence", "clause"]

_SENTENCE_MARKS = ".!?\u2026"
_CLAUSE_MARKS = ",;:\u2014\u2013"
_CLOSERS = "\"')]\u201d\u2019"
_DIGIT_SENSITIVE = ".,:"


class TextSegmenter:
    def __init__(self, mode: SplitMode = "clause", min_clause_chars: int = 12, max_chars: int = 200):
        if mode not in ("sentence", "clause"):
            raise ValueError(f"split must be 'sentence' or 'clause', not {mode!r}")
        if max_chars < 20 or min_clause_chars < 0:
            raise ValueError("max_chars must be >= 20 and min_clause_chars >= 0")
        self.mode: SplitMode = mode
        self.min_clause_chars = min_clause_chars
        self.max_chars = max_chars
        self._buf = ""

    @property
    def pending(self) -> str:
        """Text received but not yet cut into a segment."""
        return self._buf

    def feed(self, text: str) -> list[str]:
        """Add a fragment; returns the segments it completed, in order."""
        self._buf += text
        out: list[str] = []
        while (cut := self._next_cut()) is not None:
            self._emit(cut, out)
        return out

    def flush(self) -> list[str]:
        """Everything pending, as segments (the end of the input ends a sentence)."""
        out = self.feed("")
        while len(self._buf) > self.max_chars:
            self._emit(self._space_cut(), out)
        self._emit(len(self._buf), out)
        return out

    def _emit(self, cut: int, out: list[str]) -> None:
        piece, self._buf = self._buf[:cut].strip(), self._buf[cut:].lstrip()
        if speakable(piece):
            out.append(piece)

    def _next_cut(self) -> int | None:
        """Where the first complete segment ends, or None while none is complete."""
        buf = self._buf
        i = 0
        while i < len(buf):
            ch = buf[i]
            if ch == "\n":
                if buf[:i].strip():
                    return i + 1
            elif ch in _SENTENCE_MARKS or (self.mode == "clause" and ch in _CLAUSE_MARKS):
                end = i + 1
                while end < len(buf) and buf[end] in _SENTENCE_MARKS + _CLOSERS:
                    end += 1
                verdict = self._boundary(buf, i, end)
                if verdict is None:
                    return None  # cannot tell yet: wait for more text
                if verdict and (ch in _SENTENCE_MARKS or len(buf[:end].strip()) >= self.min_clause_chars):
                    return end
                i = end
                continue
            i += 1
        if len(buf) >= self.max_chars:
            return self._space_cut()
        return None

    @staticmethod
    def _boundary(buf: str, mark: int, end: int) -> bool | None:
        """Whether the mark at `mark` (with closers up to `end`) ends a segment; None when
        only the next character can tell."""
        ch = buf[mark]
        at_end = end == len(buf)
        if not at_end and not buf[end].isspace():
            return False  # "3.5", "e.g.,", "a,b": the mark is inside a token
        after_digit = mark > 0 and buf[mark - 1].isdigit()
        if ch in _DIGIT_SENSITIVE and after_digit and at_end:
            return None
        if ch == "." and period_is_not_an_end(buf[:mark]):
            return None if at_end else False
        return True

    def _space_cut(self) -> int:
        space = self._buf.rfind(" ", 0, self.max_chars)
        return space if space > 0 else self.max_chars
