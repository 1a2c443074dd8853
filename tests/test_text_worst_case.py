"""Worst-case text through every splitter: inputs built to make a backtracking regex or a
rescanning loop quadratic grow linearly, whole and fed one character at a time.

Fragments of "Dr. " runs and numbers ending in a period could make a segmenter that
rescans its pending text per fragment take seconds, on the event loop. Each input is
built at two sizes and timed against itself (tests/growth.py), so the bound does not
depend on how fast the machine is.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.growth import grows_linearly
from voxserve.text.incremental import SplitMode, TextSegmenter
from voxserve.text.split import (
    normalize,
    segment,
    split_clauses,
    split_sentences,
)

SIZE = 10_000
"""Characters of the full-size input (the WebSocket's pending text may hold 16 KiB)."""

BUILD: dict[str, Callable[[int], str]] = {
    "bangs": lambda n: "a" + "!" * (n - 1),
    "abbreviations": lambda n: "Dr. " * (n // 4),
    "initials": lambda n: "a. " * (n // 3),
    "dotted digits": lambda n: ".".join(str(i % 10) for i in range(n // 2)),
    "numbered": lambda n: " ".join(f"{i % 10}." for i in range(n // 3)),
    "spaces": lambda n: "a" + " " * n + "b",
    "spaces before a dash": lambda n: "a," + " " * n + "- b",
    "spaces after a newline": lambda n: "a\n" + " " * n + "b.",
    "closers": lambda n: "a!" + '"' * (n - 2),
    "no marks": lambda n: "x" * n,
    "full-width stops": lambda n: "中" + "。" * (n - 1),
    "full-width commas": lambda n: "中" + "，" * (n - 1),
    "full-width closers": lambda n: "中。" + "」" * (n - 2),
    "ideographs": lambda n: "中" * n,
    "clauses of ideographs": lambda n: "中文，" * (n // 3),
}
"""Each worst case at a given size in characters."""
WORST = {name: build(SIZE) for name, build in BUILD.items()}


def fed(text: str, mode: SplitMode, step: int) -> list[str]:
    seg = TextSegmenter(mode)
    out = [piece for i in range(0, len(text), step) for piece in seg.feed(text[i : i + step])]
    return out + seg.flush()


@pytest.mark.parametrize("name", list(WORST))
def test_pure_splitters_are_linear(name: str) -> None:
    build = BUILD[name]
    for label, fn in [
        ("normalize", normalize),
        ("split_sentences", split_sentences),
        ("split_clauses", lambda text: split_clauses(text, 20)),
        ("segment raw", segment),
        ("segment normalized", lambda text: segment(normalize(text))),
        ("segment whole sentences", lambda text: segment(text, first_max_chars=None, max_chars=300)),
    ]:
        linear, times = grows_linearly(lambda n: fn(build(n)), SIZE)  # noqa: B023 (called at once)
        assert linear, f"{label}: {times}"


@pytest.mark.parametrize("mode", ["clause", "sentence"])
@pytest.mark.parametrize("name", list(WORST))
def test_segmenter_is_linear_whole_and_per_character(name: str, mode: SplitMode) -> None:
    text = WORST[name]
    for whole in (True, False):

        def feed(n: int) -> list[str]:
            built = BUILD[name](n)
            return fed(built, mode, len(built) if whole else 1)  # noqa: B023 (called at once)

        linear, times = grows_linearly(feed, SIZE)
        assert linear, f"{'whole' if whole else 'per character'}: {times}"
        pieces = fed(text, mode, len(text) if whole else 1)
        assert all(len(piece) <= 200 for piece in pieces)  # max_chars, whatever the marks say
        kept = "".join(ch for ch in "".join(pieces) if ch.isalnum())
        assert kept == "".join(ch for ch in text if ch.isalnum())  # nothing spoken is lost


def test_segments_are_bounded_even_when_a_word_is_not() -> None:
    assert all(len(s) <= 400 for s in segment(WORST["dotted digits"]))
    assert all(len(s) <= 400 for s in segment(WORST["no marks"]))
    for name in ("dotted digits", "no marks", "spaces", "numbered"):
        pieces = segment(WORST[name], first_max_chars=None, max_chars=300)
        assert all(len(s) <= 300 for s in pieces), name


def test_a_pending_verdict_does_not_hold_back_a_long_buffer() -> None:
    # Every fragment ends in "Dr." or a number's period: each time, only the next
    # character could tell whether the sentence ended. The buffer is still cut at max_chars.
    seg = TextSegmenter("sentence", max_chars=50)
    out: list[str] = []
    for i in range(30):
        out += seg.feed(f" Dr. Who number {i}.")
        assert len(seg.pending) < 50
    assert out and all(len(piece) <= 50 for piece in out)
    assert seg.pending_chars < 50
