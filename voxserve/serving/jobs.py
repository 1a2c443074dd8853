"""The messages between a Ray front end and its engine replicas (`voxserve.ray`).

Plain frozen dataclasses, pickled by Ray: a job carries the serving layer's parameters,
never a wire model of the HTTP API. A streamed reply is the replica's name, then
`Opened` once the work has started (its slot taken, its input accepted), then the
serving layer's items: `AudioChunk`s of speech, or text deltas of a transcription.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxserve.serving.speech import SpeechParams
from voxserve.serving.transcription import TranscriptionParams

__all__ = ["Opened", "SpeechJob", "TTSCatalog", "TranscriptionJob"]


@dataclass(frozen=True)
class TTSCatalog:
    """What a TTS replica serves: the speech model ids it answers to and the
    `/v1/audio/voices` list."""

    models: list[str]
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
