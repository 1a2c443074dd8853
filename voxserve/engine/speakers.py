"""A transcript's words given to speakers by time: the words come from transcribing the
audio as without diarization, and each one goes to the speaker whose turn covers most
of it (the nearest turn when none does), so diarization costs no words.

Consecutive words of one speaker make a segment; a pause of `PAUSE_S` or more between
words starts a new one. Pure: dataclasses in, dataclasses out.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from voxserve.engine.diarize import Turn
from voxserve.engine.segments import TimedSegment, Word
from voxserve.engine.transcribe import Transcript

__all__ = ["PAUSE_S", "DiarizedTranscript", "SegmentDone", "SpeakerSegment", "speaker_segments"]

PAUSE_S = 1.5
"""A pause this long between one speaker's words ends their segment."""


@dataclass(frozen=True)
class SpeakerSegment:
    start: float
    end: float
    speaker: str
    text: str
    source: int
    """Index of the transcript segment its first word came from."""


@dataclass(frozen=True)
class DiarizedTranscript(Transcript):
    """A transcript with its words given to speakers."""

    speaker_segments: list[SpeakerSegment]
    speakers: list[str]
    """Every label that speaks, in order of first word."""
    turns: list[Turn]
    """Who spoke when, words or not (`engine/diarize.py`)."""


@dataclass(frozen=True)
class SegmentDone:
    """One finished speaker segment of a streamed, diarized transcription."""

    index: int
    segment: SpeakerSegment


def _speaker(word: Word, turns: Sequence[Turn], starts: list[float]) -> str:
    i = bisect.bisect_right(starts, word.end)
    best, best_overlap = "", 0.0
    for t in turns[max(0, i - 8) : i]:
        overlap = min(t.end, word.end) - max(t.start, word.start)
        if overlap > best_overlap:
            best, best_overlap = t.speaker, overlap
    if best:
        return best
    mid = (word.start + word.end) / 2
    return min(turns, key=lambda t: max(t.start - mid, mid - t.end, 0.0)).speaker


def speaker_segments(segments: Sequence[TimedSegment], turns: Sequence[Turn], first: int = 0) -> list[SpeakerSegment]:
    """The words of `segments` (which carry word times) grouped by speaker. With no
    turns (no speech heard) every word goes to speaker "A". `first` numbers the source
    segments (their index in the whole transcript)."""
    ordered = sorted(turns, key=lambda t: t.start)
    starts = [t.start for t in ordered]
    out: list[SpeakerSegment] = []
    words: list[tuple[Word, int]] = []
    for k, s in enumerate(segments):
        if s.words:
            words += [(w, first + k) for w in s.words]
        elif s.text.strip():  # a segment without word times counts as one word
            words.append((Word(s.text, s.start, s.end, 1.0), first + k))
    current: list[tuple[Word, int]] = []
    label = ""

    def close() -> None:
        if current:
            text = "".join(w.word for w, _ in current).strip()
            out.append(SpeakerSegment(round(current[0][0].start, 3), round(current[-1][0].end, 3), label, text,
                                      current[0][1]))

    for w, k in words:
        who = _speaker(w, ordered, starts) if ordered else "A"
        if current and (who != label or w.start - current[-1][0].end >= PAUSE_S):
            close()
            current = []
        label = who
        current.append((w, k))
    close()
    return out
