"""A live session's recent audio (`SessionAudio`) and, with manual commits, where speech
lies in it (`SpeechSpans`): what a commit decodes, and what is dropped first when the
uncommitted audio outgrows its bound.

Sample indices count from the start of the session at 16 kHz and stay so when audio is
dropped. Pure and synchronous: nothing here scores, decodes or knows a protocol.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from voxserve.engine.vad import FRAME_SAMPLES, SAMPLE_RATE

__all__ = ["PREFIX_S", "SPEECH_AT", "SessionAudio", "SpeechSpans"]

PREFIX_S = 0.3
"""With manual commits: audio kept before and after speech when silence is dropped."""
SPEECH_AT = 0.5
"""With manual commits: a frame is speech at this probability or above."""


class SessionAudio:
    """The session's recent audio, as chunks addressed by sample index since the start.
    A range may be cut out of the middle (`cut`): what is held then has holes, which
    `take` skips, and indices stay those of the stream."""

    def __init__(self) -> None:
        self._chunks: deque[tuple[int, np.ndarray]] = deque()
        self.end = 0
        self.held = 0

    @property
    def start(self) -> int:
        return self._chunks[0][0] if self._chunks else self.end

    def __len__(self) -> int:
        """Samples held (holes not counted)."""
        return self.held

    def add(self, samples: np.ndarray) -> None:
        if len(samples):
            self._chunks.append((self.end, samples))
            self.end += len(samples)
            self.held += len(samples)

    def drop_before(self, sample: int) -> None:
        """Forget audio before `sample` (whole chunks, so a little more may stay)."""
        while self._chunks and self._chunks[0][0] + len(self._chunks[0][1]) <= sample:
            self.held -= len(self._chunks.popleft()[1])

    def cut(self, a: int, b: int) -> int:
        """Forget the samples in [a, b); returns how many were held. Touches only the
        chunks up to `b` (what is cut is the oldest audio, near the front)."""
        before: list[tuple[int, np.ndarray]] = []
        gone = 0
        while self._chunks and self._chunks[0][0] < b:
            at, chunk = self._chunks.popleft()
            lo, hi = max(a - at, 0), min(b - at, len(chunk))
            if lo >= hi:
                before.append((at, chunk))
                continue
            gone += hi - lo
            if lo > 0:
                before.append((at, chunk[:lo]))
            if hi < len(chunk):
                before.append((at + hi, chunk[hi:]))
        self._chunks.extendleft(reversed(before))
        self.held -= gone
        return gone

    def count(self, a: int, b: int) -> int:
        """How many samples in [a, b) are held."""
        return sum(max(0, min(b - at, len(chunk)) - max(a - at, 0)) for at, chunk in self._chunks)

    def take(self, a: int, b: int) -> np.ndarray:
        """The held samples in [a, b), holes skipped."""
        parts = []
        for at, chunk in self._chunks:
            if at >= b:
                break
            lo, hi = max(a - at, 0), min(b - at, len(chunk))
            if lo < hi:
                parts.append(chunk[lo:hi])
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)


class SpeechSpans:
    """With manual commits (no turns): the uncommitted audio's speech, as [start, end)
    sample spans of frames heard as speech, oldest first. Spans closer than the prefix
    padding merge."""

    def __init__(self) -> None:
        self._spans: deque[list[int]] = deque()

    def clear(self) -> None:
        self._spans.clear()

    def hear(self, probs: np.ndarray, first: int) -> bool:
        """Note which of these frames, the first starting at sample `first`, are speech;
        whether any was."""
        loud = np.flatnonzero(probs >= SPEECH_AT)
        gap = int(PREFIX_S * SAMPLE_RATE)
        for k in loud.tolist():
            a = first + k * FRAME_SAMPLES
            b = a + FRAME_SAMPLES
            if self._spans and a - self._spans[-1][1] <= gap:
                self._spans[-1][1] = b
            else:
                self._spans.append([a, b])
        return bool(len(loud))

    def shed(self, audio: SessionAudio, floor: int, limit: int) -> None:
        """Keep `audio` after `floor` within `limit` samples: drop the oldest silence
        first (what lies further than the prefix padding from any speech, the newest
        padding's worth kept for speech yet to come), then the oldest audio."""
        if len(audio) <= limit:
            return
        # Silence goes down to a second below the limit, so that a long listener sheds
        # once a second rather than at every append; speech only down to the limit.
        over = len(audio) - max(limit // 2, limit - SAMPLE_RATE)
        pad = int(PREFIX_S * SAMPLE_RATE)
        at = max(audio.start, floor)
        quiet: list[tuple[int, int]] = []
        for a, b in self._spans:
            if a - pad > at:
                quiet.append((at, a - pad))
            at = max(at, b + pad)
        if audio.end - pad > at:
            quiet.append((at, audio.end - pad))
        for a, b in quiet:
            if over <= 0:
                break
            over -= audio.cut(a, min(b, a + over))
        over = len(audio) - limit
        while over > 0:  # the oldest audio, holes skipped
            over -= audio.cut(audio.start, audio.start + over)
        start = audio.start
        while self._spans and self._spans[0][1] <= start:
            self._spans.popleft()

    def commit_start(self, audio: SessionAudio, floor: int, max_turn: int) -> int:
        """Where a manual commit's audio starts: from the first speech less the prefix
        padding, so that silence before it (a client that appends everything and commits
        when its own VAD hears the end of speech) is not decoded: Whisper would spend a
        window or more on it. Without speech, the newest `max_turn` samples."""
        held = max(floor, audio.start)
        if self._spans:
            return max(held, self._spans[0][0] - int(PREFIX_S * SAMPLE_RATE))
        return max(held, audio.end - max_turn)
