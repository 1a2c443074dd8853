"""Word timings: where each word of a segment falls in its frames, then in the stream.

A voice model that predicts per-phoneme durations (Kokoro, Piper's `w_ceil`) turns them
into `WordFrames` (a word's frames inside its segment's latent) with `word_frames`; the
engine turns those into `WordTime`s (seconds of the stream's output) with `word_times`,
adding the audio of the segments before. Pure functions; no model, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["WordFrames", "WordTime", "word_frames", "word_times"]


@dataclass(frozen=True)
class WordFrames:
    """A word of one segment and its frames [start, end) in that segment's latent."""

    word: str
    start: int
    end: int


@dataclass(frozen=True)
class WordTime:
    """A word of a stream and the seconds [start, end) of the stream's audio it spans."""

    word: str
    start: float
    end: float


def word_frames(
    words: Sequence[tuple[str, int, int]], durations: np.ndarray, lead: int = 0
) -> tuple[WordFrames, ...]:
    """Each word's frames, from `words` (text, first id, id just past its last) and
    `durations` (frames per id); `lead`: frames before the first id (a pad's). Words
    that produced no id are left out."""
    cum = lead + np.concatenate(([0], np.cumsum(np.asarray(durations, dtype=np.int64))))
    return tuple(
        WordFrames(text, int(cum[first]), int(cum[last]))
        for text, first, last in words
        if last > first and last < len(cum)
    )


def word_times(words: Sequence[WordFrames], offset_s: float, frame_s: float) -> tuple[WordTime, ...]:
    """Each word's seconds in the stream, its segment starting at `offset_s` and each
    frame lasting `frame_s` (hop / sample rate: resampling the output does not move it)."""
    return tuple(
        WordTime(w.word, round(offset_s + w.start * frame_s, 3), round(offset_s + w.end * frame_s, 3))
        for w in words
    )
