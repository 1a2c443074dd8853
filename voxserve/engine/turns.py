"""Server VAD's turn detection: speech probabilities per 32 ms frame in, turn events out.
Pure and synchronous; frames are counted from the start of the session.

The rules follow Silero's own hysteresis:
- a frame is speech at `threshold` or above, and silence below `threshold - 0.15`; a frame
  in between keeps the state it finds;
- speech starts after `MIN_SPEECH_FRAMES` speech frames in a row (a click does not start
  a turn); the turn starts at the first of them;
- the first silence frame after speech is a `Pause`, the possible end of speech; a speech
  frame after it is a `Resume` and forgets it;
- a pause that lasts `silence_ms` ends the turn: `Stop`, whose end of speech is the
  pause's first frame.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["FRAME_MS", "MIN_SPEECH_FRAMES", "Pause", "Resume", "Start", "Stop", "TurnDetector", "TurnEvent"]

FRAME_MS = 32.0
MIN_SPEECH_FRAMES = 2
NEGATIVE_MARGIN = 0.15


@dataclass(frozen=True)
class Start:
    frame: int
    """First frame of the speech."""


@dataclass(frozen=True)
class Pause:
    frame: int
    """First silent frame after speech: where speech ends if the silence lasts."""


@dataclass(frozen=True)
class Resume:
    frame: int


@dataclass(frozen=True)
class Stop:
    frame: int
    """End of speech: the first frame of the silence that ended the turn."""


TurnEvent = Start | Pause | Resume | Stop


class TurnDetector:
    def __init__(self, threshold: float = 0.5, silence_ms: float = 500.0):
        self.threshold = threshold
        self.negative = max(0.0, threshold - NEGATIVE_MARGIN)
        self.silence_frames = max(1, math.ceil(silence_ms / FRAME_MS))
        self.speaking = False
        self._run = 0
        """Speech frames in a row while not speaking."""
        self._pause: int | None = None

    def reset(self) -> None:
        """Back to silence (after a commit or clear ended the turn from outside)."""
        self.speaking = False
        self._run = 0
        self._pause = None

    @property
    def paused_at(self) -> int | None:
        return self._pause

    def feed(self, probs: np.ndarray, first_frame: int) -> list[TurnEvent]:
        """Events for frames `first_frame`, `first_frame + 1`, ... with these probabilities."""
        events: list[TurnEvent] = []
        for i, p in enumerate(probs.tolist()):
            frame = first_frame + i
            if not self.speaking:
                self._run = self._run + 1 if p >= self.threshold else 0
                if self._run >= MIN_SPEECH_FRAMES:
                    self.speaking = True
                    self._run = 0
                    events.append(Start(frame - MIN_SPEECH_FRAMES + 1))
                continue
            if p >= self.threshold:
                if self._pause is not None:
                    self._pause = None
                    events.append(Resume(frame))
            elif p < self.negative and self._pause is None:
                self._pause = frame
                events.append(Pause(frame))
            if self._pause is not None and frame - self._pause + 1 >= self.silence_frames:
                events.append(Stop(self._pause))
                self.speaking = False
                self._pause = None
        return events
