"""Plan a long recording's pieces from voice activity: cut in silences, never in words. Pure.

Input is the speech probability of each 32 ms frame (`FRAME_SAMPLES` at 16 kHz, Silero
VAD's frame; the engine runs the model and passes the numbers here). A frame is silence
when its probability is under `Chunking.threshold`; a cut may fall only in a run of
silence at least `silence_duration_ms` long. Pieces are packed greedily: each runs from
its start to the latest such silence that keeps it within `max_seconds`, so a piece holds
as much speech as Whisper's window takes and no more cuts are made than needed.

At a cut the piece before keeps up to `TAIL_MS` of the silence after its speech, and the
piece after starts `prefix_padding_ms` before its speech, so Whisper hears each word's
onset and release. What lies between them, silence only, is not decoded at all; a piece
keeps its true start (`Span`), so every timestamp stays exact.

A stretch of `max_seconds` with no long enough silence (fluent reading, music) is cut
inside its last `FALLBACK_SECONDS`, in the middle of the longest run of silent frames
there, and with none at all at the quietest 100 ms of the last second
(`quietest_point`, the energy rule of `audio/cut.py`).

A run of silent frames counts as a silence only if it is also quiet: the median power of
its 100 ms windows at least `QUIET_RATIO` (10 dB) under the speech's typical level. The VAD can miss speech
(a second recording joined to a first, in another room, was scored silent for 14 s while
as loud as the first): such a run is decoded like speech, never dropped or cut. Audio with
no speech frame at all gets the energy plan (`plan_spans`): nothing is dropped on the
VAD's word alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voxserve.audio.blocks import Samples
from voxserve.audio.cut import CHUNK_SAMPLES, Span, plan_spans, quietest_point, typical_power

__all__ = ["AUTO", "FRAME_SAMPLES", "Chunking", "plan_chunks"]

FRAME_SAMPLES = 512
"""Samples each probability covers: 32 ms at 16 kHz."""
TAIL_MS = 200
"""Silence a piece keeps after its last speech frame: the VAD's last frame can end
before a word's release (a final "s" or "t")."""
QUIET_RATIO = 0.1
"""A silence's typical power is at most this share of the speech's typical power (-10 dB).
A room's tone in a recording's pauses sits under it, and so does babble at 10 dB SNR;
speech the VAD missed does not (the missed run above was 11 dB over the speech)."""
FALLBACK_SECONDS = 5.0
"""How far back from a piece's limit the fallback looks for the longest silent run."""


@dataclass(frozen=True)
class Chunking:
    """Where a long recording may be cut (OpenAI's `chunking_strategy`)."""

    prefix_padding_ms: int = 300
    """Audio kept before the speech that starts a piece."""
    silence_duration_ms: int = 200
    """The shortest run of silence a cut may fall in."""
    threshold: float = 0.5
    """A frame whose speech probability is under this is silence (0..1)."""


AUTO = Chunking()
"""What `"auto"` means, and what audio over 30 s gets when the request names no strategy.
On the long clips of docs/ASR.md ("Cutting") 200 ms of silence at threshold 0.5 left no
word cut in two; shorter pauses than that are rare between words."""


def _runs(silent: np.ndarray) -> np.ndarray:
    """[first, past-last) frame indices of each run of True, shape [k, 2]."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], silent.astype(np.int8), [0]))))
    return edges.reshape(-1, 2)


def plan_chunks(
    audio: Samples, probs: np.ndarray, rate: int, chunking: Chunking, max_seconds: float = 30.0
) -> list[Span]:
    """Pieces of `audio` of at most `max_seconds`, cut only in silences (see the module).

    `probs[k]` is the speech probability of samples [512k, 512(k+1)); samples past the
    last whole frame go with it."""
    n = len(audio)
    limit = int(max_seconds * rate)
    frames = min(len(probs), n // FRAME_SAMPLES)
    silent = np.asarray(probs[:frames]) < chunking.threshold
    if silent.all():
        return plan_spans(audio, rate, max_seconds=max_seconds)
    prefix = int(chunking.prefix_padding_ms * rate / 1000)
    tail = int(TAIL_MS * rate / 1000)
    frame_ms = FRAME_SAMPLES * 1000 / rate
    min_run = max(1, round(chunking.silence_duration_ms / frame_ms)) * FRAME_SAMPLES
    runs = _runs(silent) * FRAME_SAMPLES
    if len(runs) and runs[-1, 1] == frames * FRAME_SAMPLES:
        runs[-1, 1] = n  # the samples past the last whole frame go with it
    quiet = typical_power(audio, rate // 10) * QUIET_RATIO
    window = rate // 10
    gaps = [
        (int(a), int(b))
        for a, b in runs
        if b - a >= min_run and _typical_level(audio, int(a), int(b), window) <= quiet
    ]
    start, end = 0, n
    if gaps and gaps[0][0] == 0:
        start = max(0, gaps[0][1] - prefix)  # leading silence
    if gaps and gaps[-1][1] == n:
        end = min(n, gaps[-1][0] + tail)  # trailing silence
    spans: list[Span] = []
    while end - start > limit:
        hi = start + limit
        cut = _latest_gap(gaps, start, hi, prefix, tail)
        if cut is None:
            at = _fallback(audio, silent, start, hi, rate)
            cut = (at, at)
        spans.append(Span(start, cut[0]))
        start = cut[1]
    if end > start:
        spans.append(Span(start, end))
    return spans


def _typical_level(audio: Samples, start: int, end: int, window: int) -> float:
    """Median power of the `window`-sample windows of audio[start:end] (its mean when
    shorter than two windows), read a bounded chunk at a time. The median, not the mean:
    the VAD's frames lag a word's onset, so a silent run's last frames may hold the next
    word's first syllable, which would dominate its mean."""
    count = (end - start) // window
    if count < 2:
        x = np.asarray(audio[start:end], dtype=np.float64)
        return float(np.dot(x, x)) / max(1, end - start)
    per_chunk = max(1, CHUNK_SAMPLES // window)
    powers = np.empty(count, dtype=np.float64)
    for first in range(0, count, per_chunk):
        k = min(per_chunk, count - first)
        lo = start + first * window
        x = np.asarray(audio[lo : lo + k * window], dtype=np.float64).reshape(k, window)
        powers[first : first + k] = np.einsum("ij,ij->i", x, x) / window
    return float(np.median(powers))


def _latest_gap(
    gaps: list[tuple[int, int]], start: int, hi: int, prefix: int, tail: int
) -> tuple[int, int] | None:
    """(end of this piece, start of the next) in the latest silence that ends this piece
    at or before `hi` and leaves it some speech; None when no silence qualifies."""
    for a, b in reversed(gaps):
        if a <= start:
            return None
        stop = min(a + tail, b)
        resume = max(b - prefix, a)
        if stop > resume:  # a short silence: one cut in its middle
            stop = resume = (a + b) // 2
        if stop <= hi:
            return stop, max(resume, stop)
    return None


def _fallback(audio: Samples, silent: np.ndarray, start: int, hi: int, rate: int) -> int:
    """Cut point of a stretch with no long silence: the middle of its longest silent run
    in the last `FALLBACK_SECONDS`, else the quietest 100 ms of its last second."""
    lo = max(start + 1, hi - int(FALLBACK_SECONDS * rate))
    first, past = lo // FRAME_SAMPLES + 1, hi // FRAME_SAMPLES
    runs = _runs(silent[first:past]) if past > first else np.zeros((0, 2), dtype=np.int64)
    if len(runs):
        lengths = runs[:, 1] - runs[:, 0]
        best = len(runs) - 1 - int(np.argmax(lengths[::-1]))  # the latest of the longest
        a, b = (runs[best] + first) * FRAME_SAMPLES
        return int((a + b) // 2)
    return quietest_point(audio, max(start + 1, hi - rate), hi, rate // 10, rate // 100)
