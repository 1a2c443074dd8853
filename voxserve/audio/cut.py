"""Cut long audio into pieces of at most 30 s, at quiet points. Pure.

Whisper sees 30 s at a time. Cutting at fixed 30 s marks lands inside words, and Whisper
then loses the words the cut splits; cutting at the quietest ~100 ms window of the
last second before each limit keeps them, as sequential decoding does. Each span keeps its
true sample offsets, so timestamps across cuts are exact.

In fluent speech the last second may hold no pause at all, and its quietest 100 ms is
then a stop consonant's closure inside a word. So the latest real pause in the last
`wide_seconds` wins: at least `min_pause_seconds` under -20 dB from the audio's typical
level, cut in its middle. Only without one does the quietest window of the last second
decide.

Memory: the audio may be an hour long, so nothing here copies or converts all of it. The
typical level is computed in float32 chunks of at most `CHUNK_SAMPLES`; window energies
are summed in float64 (the differences of a running sum need the precision) only over the
few seconds searched before each cut. `audio` is a numpy array or `SampleBlocks`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from voxserve.audio.blocks import Samples

__all__ = ["CHUNK_SAMPLES", "Span", "plan_spans", "quietest_point", "typical_power"]

CHUNK_SAMPLES = 1 << 18
"""Most samples the level scan squares at once (1 MB of float32)."""


@dataclass(frozen=True)
class Span:
    """Samples [start, end) of the source audio."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start


def _window_power(audio: Samples, lo: int, hi: int, window: int, hop: int) -> tuple[np.ndarray, np.ndarray]:
    """Start offsets and mean power of the windows that fit in [lo, hi) (a short range)."""
    x = audio[lo:hi].astype(np.float64)
    energy = np.concatenate(([0.0], np.cumsum(x * x)))
    starts = np.arange(0, hi - lo - window + 1, hop)
    return starts, (energy[starts + window] - energy[starts]) / window


def quietest_point(audio: Samples, lo: int, hi: int, window: int, hop: int) -> int:
    """Centre of the `window`-sample window with the lowest RMS that lies within [lo, hi).

    On a tie (digital silence), the latest window wins, so the piece before it is as long
    as possible.
    """
    if hi - lo <= window:
        return (lo + hi) // 2
    starts, power = _window_power(audio, lo, hi, window, hop)
    best = len(power) - 1 - int(np.argmin(power[::-1]))
    return lo + int(starts[best]) + window // 2


def _latest_pause(
    audio: Samples, lo: int, hi: int, window: int, hop: int, threshold: float, min_len: int
) -> int | None:
    """Middle of the latest run of quiet windows at least `min_len` samples long."""
    if hi - lo <= window:
        return None
    starts, power = _window_power(audio, lo, hi, window, hop)
    quiet = np.concatenate(([0], (power <= threshold).astype(np.int8), [0]))
    edges = np.flatnonzero(np.diff(quiet))
    runs = edges.reshape(-1, 2)  # [first, past-last) window indices of each quiet run
    for first, past in runs[::-1]:
        a, b = int(starts[first]), int(starts[past - 1]) + window
        if b - a >= min_len:
            return lo + (a + b) // 2
    return None


def typical_power(audio: Samples, window: int) -> float:
    """Median power of the non-silent windows: the level of the speech."""
    frames = len(audio) // window
    if not frames:
        return 0.0
    per_chunk = max(1, CHUNK_SAMPLES // window)
    power = np.empty(frames, dtype=np.float64)
    scratch = np.empty(min(frames, per_chunk) * window, dtype=np.float32)
    for first in range(0, frames, per_chunk):
        k = min(per_chunk, frames - first)
        x = audio[first * window : (first + k) * window]
        squares = np.square(x, out=scratch[: k * window]).reshape(k, window)
        power[first : first + k] = squares.mean(axis=1, dtype=np.float64)
    loud = power[power > 1e-8]
    return float(np.median(loud)) if len(loud) else 0.0


def plan_spans(
    audio: Samples,
    rate: int,
    max_seconds: float = 30.0,
    search_seconds: float = 1.0,
    window_seconds: float = 0.1,
    hop_seconds: float = 0.01,
    wide_seconds: float = 5.0,
    pause_ratio: float = 0.01,
    min_pause_seconds: float = 0.3,
) -> list[Span]:
    """Consecutive spans that cover `audio`, none longer than `max_seconds`.

    `pause_ratio` is in power: 0.01 is -20 dB under the typical speech level.
    """
    n = len(audio)
    limit = int(max_seconds * rate)
    search = max(1, min(int(search_seconds * rate), limit - 1))
    wide = max(search, min(int(wide_seconds * rate), limit // 2))
    window = max(1, int(window_seconds * rate))
    hop = max(1, int(hop_seconds * rate))
    pause = typical_power(audio, window) * pause_ratio if n > limit else 0.0
    min_pause = int(min_pause_seconds * rate)
    spans: list[Span] = []
    start = 0
    while n - start > limit:
        hi = start + limit
        cut = _latest_pause(audio, hi - wide, hi, window, hop, pause, min_pause)
        if cut is None:
            cut = quietest_point(audio, hi - search, hi, window, hop)
        spans.append(Span(start, cut))
        start = cut
    if n > start or not spans:
        spans.append(Span(start, n))
    return spans
