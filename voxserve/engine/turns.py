"""Turn detection: speech probabilities per 32 ms frame in, turn events out, and when a
turn's transcripts are decoded. Pure and synchronous; frames are counted from the start of
the session. `semantic_vad`'s further rule, on the end-of-turn model and the transcript,
is in `engine/semantic.py`; when live work may take a worker, and its deadlines, are the
ASR engine's live policy's (`engine/live.py`).

`TurnDetector` follows Silero's own hysteresis:
- a frame is speech at `threshold` or above, and silence below `threshold - 0.15`; a frame
  in between keeps the state it finds;
- speech starts after `MIN_SPEECH_FRAMES` speech frames in a row (a click does not start
  a turn); the turn starts at the first of them;
- the first silence frame after speech is a `Pause`, the possible end of speech; a speech
  frame after it is a `Resume` and forgets it;
- a pause that lasts `silence_ms` ends the turn: `Stop`, whose end of speech is the
  pause's first frame.

While a turn runs, its transcripts are decoded ahead of its end:
- **early final**: once speech has paused `TurnDetection.early_lead_ms`, the final is
  decoded while the rest of the silence that will end the turn runs; speech that resumes
  drops it, and a commit at that pause takes it as it is;
- **deltas**: while the user speaks, at most every `DELTA_INTERVAL_MS` (`delta_due`), the
  turn so far is decoded again, and the words two decodes in a row agree on go out
  (`agreed_words`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from voxserve.engine.semantic import EAGERNESS_FIRST_MS, EAGERNESS_WAIT_S, early_lead_ms

__all__ = [
    "DELTA_INTERVAL_MS",
    "DELTA_MIN_S",
    "EARLY_FINAL_MS",
    "FRAME_MS",
    "MIN_SPEECH_FRAMES",
    "MIN_TAIL_S",
    "TAIL_S",
    "Pause",
    "Resume",
    "Start",
    "Stop",
    "TurnDetection",
    "TurnDetector",
    "TurnEvent",
    "agreed_words",
    "delta_due",
]

FRAME_MS = 32.0
MIN_SPEECH_FRAMES = 2
NEGATIVE_MARGIN = 0.15
MIN_TAIL_S = 0.096
"""Audio after the end of speech that a final always includes."""
EARLY_FINAL_MS = 96.0
"""Once speech has paused this long, the final is decoded at once (unless other live work
waits for a worker) while the rest of the silence that ends the turn runs; speech that
resumes drops it. Shorter pauses come inside words, so a decode they started would
mostly be thrown away."""
TAIL_S = max(EARLY_FINAL_MS / 1000, MIN_TAIL_S)
"""Audio after the end of speech that a turn's final decodes: an early final, started
`EARLY_FINAL_MS` into the pause, holds all of it, so a commit at that pause can take it."""
DELTA_MIN_S = 1.0
"""A turn is decoded for deltas once it holds this much audio."""
DELTA_INTERVAL_MS = 1000.0
"""Partial transcripts of a turn in progress are decoded at most this often, and only
when an ASR worker is idle: each costs a decode of the whole turn so far."""


@dataclass(frozen=True)
class TurnDetection:
    """OpenAI's `turn_detection`: `server_vad` ends a turn after `silence_duration_ms` of
    silence; `semantic_vad` ends it when the end-of-turn model and the turn's transcript
    say the thought is complete, or after its eagerness's longest wait."""

    threshold: float = 0.5
    prefix_padding_ms: float = 300.0
    silence_duration_ms: float = 500.0
    type: str = "server_vad"
    eagerness: str = "auto"

    @property
    def semantic(self) -> bool:
        return self.type == "semantic_vad"

    @property
    def silence_ms(self) -> float:
        """The silence after which the detector ends a turn by itself."""
        return EAGERNESS_WAIT_S[self.eagerness] * 1000 if self.semantic else self.silence_duration_ms

    @property
    def early_lead_ms(self) -> float:
        """How far into a pause the final is decoded early: `EARLY_FINAL_MS`, or under
        semantic VAD halfway to the model's first question (`semantic.early_lead_ms`)."""
        return early_lead_ms(self.eagerness, EARLY_FINAL_MS) if self.semantic else EARLY_FINAL_MS

    @property
    def end_wait_ms(self) -> float:
        """The silence after which the turn may end soonest: an early final is due the
        live target after the rest of it."""
        return EAGERNESS_FIRST_MS[self.eagerness] if self.semantic else self.silence_duration_ms


def delta_due(now: float, last: float, turn_s: float) -> bool:
    """Whether a turn that holds `turn_s` seconds of audio, and whose last delta decode
    started at `last`, is due another one at `now` (a worker's being idle is the live
    policy's to say)."""
    interval = DELTA_INTERVAL_MS / 1000
    return interval > 0 and now - last >= interval and turn_s >= DELTA_MIN_S


def agreed_words(before: list[str], now: list[str]) -> int:
    """How many leading words two decodes of a turn in a row agree on, by their letters
    and digits (case and marks aside): those are stable enough to send as a delta."""
    agreed = 0
    for old, new in zip(before, now, strict=False):
        if _key(old) != _key(new):
            break
        agreed += 1
    return agreed


def _key(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalnum())


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
