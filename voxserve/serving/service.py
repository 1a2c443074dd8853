"""`Service`: the use cases one HTTP handler set calls, whoever runs the engines.

`voxserve.serving.state.AppState` runs them here; `voxserve.serving.remote.RemoteState`
hands them to Ray replicas. The streams they return own their life cycle: read once,
closed once. No HTTP here.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from voxserve.config import ServerConfig
from voxserve.engine.transcribe import Transcript
from voxserve.engine.uploads import UploadBudget, UploadLease
from voxserve.serving.catalog import ServerInfo
from voxserve.serving.speech import AudioChunk, SpeechParams
from voxserve.serving.transcription import TranscriptionParams
from voxserve.serving.waiting import Gone

__all__ = ["Service", "Speech", "TranscriptionReply"]


class Speech(Protocol):
    """A speech stream being produced, here or on a Ray replica."""

    characters: int
    sample_rate: int
    replica: str | None

    def chunks(self) -> AsyncGenerator[AudioChunk, None]: ...

    def close(self, completed: bool = False) -> None: ...


class TranscriptionReply(Protocol):
    """A transcription being produced, here or on a Ray replica: read as text deltas or
    as the whole transcript, once."""

    replica: str | None

    def deltas(self) -> AsyncGenerator[str, None]: ...

    async def transcript(self, gone: Gone | None = None) -> Transcript: ...

    def close(self, completed: bool = False) -> None: ...


class Service(ServerInfo, Protocol):
    config: ServerConfig
    uploads: UploadBudget | None

    def new_request_id(self) -> str: ...

    async def open_speech(self, params: SpeechParams, request_id: str, started: float, gone: Gone) -> Speech:
        """Admit and start a speech stream (429 when full, 499 when `gone` first)."""
        ...

    def check_transcriptions(self) -> None:
        """Refuse now (404 when off, 429 when full), before an upload is read."""
        ...

    async def open_transcription(
        self,
        params: TranscriptionParams,
        data: bytes,
        request_id: str,
        started: float,
        gone: Gone,
        stream: bool,
        lease: UploadLease,
    ) -> TranscriptionReply:
        """Admit and start a transcription of `data`; `lease` (the upload's share of the
        budget) is released as soon as the upload is no longer held."""
        ...
