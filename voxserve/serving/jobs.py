"""The messages between a Ray front end and its engine replicas (`voxserve.ray`).

Plain frozen dataclasses, pickled by Ray: a job carries the serving layer's parameters,
never a wire model of the HTTP API. A streamed reply is the replica's name, then
`Opened` once the work has started (its slot taken, its input accepted), then the
serving layer's items: `AudioChunk`s of speech, text deltas of a transcription, or the
`LiveEvent`s of a live session.

A session's messages after its first carry `replica`, the replica that holds the
session: the router sends them there (`voxserve.ray.router`), and a replica that gets
one meant for another answers `ReplicaLost`.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxserve.errors import VoxError
from voxserve.serving.live_events import LiveSettings
from voxserve.serving.speech import SpeechParams
from voxserve.serving.transcription import TranscriptionParams

__all__ = [
    "Append",
    "Clear",
    "Commit",
    "Configure",
    "LiveAction",
    "LiveInput",
    "LiveOpen",
    "LiveReply",
    "Opened",
    "ReplicaRef",
    "SegmentJob",
    "SessionRef",
    "SpeechJob",
    "TTSCatalog",
    "TranscriptionJob",
    "VoiceCheck",
]


@dataclass(frozen=True)
class TTSCatalog:
    """What a TTS replica serves: the speech model ids it answers to, each with the voice
    model it means, and the `/v1/audio/voices` list."""

    models: dict[str, str]
    voices: list[dict[str, str | None]]


@dataclass(frozen=True)
class SpeechJob:
    """A validated speech request on its way to a TTS replica."""

    params: SpeechParams
    request_id: str


@dataclass(frozen=True)
class TranscriptionJob:
    """A validated transcription or translation, with its upload, on its way to an ASR replica."""

    params: TranscriptionParams
    data: bytes
    request_id: str


@dataclass(frozen=True)
class Opened:
    """The work has started on the replica; errors before it are the request's own."""

    characters: int = 0
    """Characters of a speech stream's input."""
    sample_rate: int = 0
    """A speech stream's output rate in Hz."""


@dataclass(frozen=True)
class SegmentJob:
    """One segment of a speech session, for the TTS replica that holds the session."""

    params: SpeechParams
    request_id: str
    session: str
    replica: str | None
    """The replica the session is pinned to; None until a segment has started on one."""


@dataclass(frozen=True)
class ReplicaRef:
    """One replica by name: a call whose first argument it is goes to that replica, or,
    if it is gone, to whichever the router picks (the answer names who answered)."""

    replica: str


@dataclass(frozen=True)
class SessionRef:
    """A session on the replica that holds it (to end it there)."""

    session: str
    replica: str | None


@dataclass(frozen=True)
class VoiceCheck:
    """Does a TTS replica serve this model, voice and language (a session's settings)?"""

    model: str
    voice: str
    language: str | None


@dataclass(frozen=True)
class LiveOpen:
    """Open a live transcription session on an ASR replica."""

    session: str


@dataclass(frozen=True)
class Append:
    data: bytes
    ref: str | None = None


@dataclass(frozen=True)
class Commit:
    ref: str | None = None


@dataclass(frozen=True)
class Clear:
    ref: str | None = None


@dataclass(frozen=True)
class Configure:
    settings: LiveSettings


LiveAction = Append | Commit | Clear | Configure


@dataclass(frozen=True)
class LiveInput:
    """A live session's client input, in order, for the ASR replica that holds it. The
    reply holds, per action, the error a `Configure` was refused with (else None)."""

    session: str
    replica: str
    actions: tuple[LiveAction, ...]


LiveReply = tuple[VoxError | None, ...]
