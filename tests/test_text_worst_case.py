"""Worst-case text through every splitter: inputs built to make a backtracking regex or a
rescanning loop quadratic finish in milliseconds, whole and fed one character at a time.

Fragments of "Dr. " runs and numbers ending in a period could make a segmenter that
rescans its pending text per fragment take seconds, on the event loop. The bound is CPU
time of this thread (not wall time, which a busy machine inflates), the best of three runs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import pytest

from voxserve.text.incremental import SplitMode, TextSegmenter
from voxserve.text.split import (
    normalize,
    segment,
    split_clauses,
    split_sentences,
)

BUDGET_S = 0.05

WORST = {
    "bangs": "a" + "!" * 4095,
    "abbreviations": "Dr. " * 1000,
    "initials": "a. " * 2000,
    "dotted digits": ".".join(str(i % 10) for i in range(10_000)),
    "numbered": " ".join(f"{i % 10}." for i in range(4000)),
    "spaces": "a" + " " * 10_000 + "b",
    "spaces before a dash": "a," + " " * 10_000 + "- b",
    "spaces after a newline": "a\n" + " " * 10_000 + "b.",
    "closers": "a!" + '"' * 4094,
    "no marks": "x" * 10_000,
}


def cpu_seconds(fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        fn()
        best = min(best, time.thread_time() - start)
    return best


def fed(text: str, mode: SplitMode, step: int) -> list[str]:
    seg = TextSegmenter(mode)
    out = [piece for i in range(0, len(text), step) for piece in seg.feed(text[i : i + step])]
    return out + seg.flush()


@pytest.mark.parametrize("name", list(WORST))
def test_pure_splitters_are_linear(name: str) -> None:
    text = WORST[name]
    for label, fn in [
        ("normalize", lambda: normalize(text)),
        ("split_sentences", lambda: split_sentences(text)),
        ("split_clauses", lambda: split_clauses(text, 20)),
        ("segment raw", lambda: segment(text)),
        ("segment normalized", lambda: segment(normalize(text))),
        ("segment whole sentences", lambda: segment(text, first_max_chars=None, max_chars=300)),
    ]:
        assert cpu_seconds(fn) < BUDGET_S, label


@pytest.mark.parametrize("mode", ["clause", "sentence"])
@pytest.mark.parametrize("name", list(WORST))
def test_segmenter_is_linear_whole_and_per_character(name: str, mode: SplitMode) -> None:
    text = WORST[name]
    for step in (len(text), 1):
        assert cpu_seconds(functools.partial(fed, text, mode, step)) < BUDGET_S, f"step {step}"
        pieces = fed(text, mode, step)
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
