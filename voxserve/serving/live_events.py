"""What a live transcription session is set with (`LiveSettings`) and what it tells its
channel (`LiveEvent`): the vocabulary that the session (`serving/realtime.py`), its
channels (`api/realtime.py`, a Ray front end) and its replicas share. Plain frozen
records; nothing here knows HTTP or JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from voxserve.engine.turns import TurnDetection
from voxserve.errors import VoxError

__all__ = [
    "Cleared",
    "Committed",
    "LiveEvent",
    "LiveSettings",
    "SessionError",
    "SpeechStarted",
    "SpeechStopped",
    "TranscriptCompleted",
    "TranscriptDelta",
    "TranscriptFailed",
    "TurnDetection",
]


@dataclass(frozen=True)
class LiveSettings:
    format: str = "audio/pcm"
    """`audio/pcm` (16-bit, 24 kHz), `audio/pcmu` or `audio/pcma` (G.711, 8 kHz)."""
    model: str = "whisper-1"
    language: str | None = None
    prompt: str = ""
    turn_detection: TurnDetection | None = field(default_factory=TurnDetection)
    """None: turns end only when the client commits."""
    noise_reduction: str | None = None
    """`near_field`, `far_field` or None: the noise filter the VAD hears the audio through
    (`engine/denoise.py`); None for the raw audio."""


# -- events ------------------------------------------------------------------------------
@dataclass(frozen=True)
class SpeechStarted:
    item_id: str
    audio_start_ms: int


@dataclass(frozen=True)
class SpeechStopped:
    item_id: str
    audio_end_ms: int


@dataclass(frozen=True)
class Committed:
    item_id: str
    previous_item_id: str | None


@dataclass(frozen=True)
class Cleared:
    pass


@dataclass(frozen=True)
class TranscriptDelta:
    item_id: str
    delta: str


@dataclass(frozen=True)
class TranscriptCompleted:
    item_id: str
    transcript: str
    seconds: float
    """The turn's audio, for usage."""


@dataclass(frozen=True)
class TranscriptFailed:
    item_id: str
    error: VoxError


@dataclass(frozen=True)
class SessionError:
    """A client mistake that leaves the session open."""

    error: VoxError
    ref: str | None = None
    """The id the client gave the input that caused it."""


LiveEvent = (
    SpeechStarted
    | SpeechStopped
    | Committed
    | Cleared
    | TranscriptDelta
    | TranscriptCompleted
    | TranscriptFailed
    | SessionError
)
