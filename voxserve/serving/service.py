"""`Service`: the use cases every channel calls (HTTP and both WebSockets), whoever runs
the engines.

`voxserve.serving.state.AppState` runs them here; `voxserve.serving.remote.RemoteState`
hands them to Ray replicas. The streams they return own their life cycle: read once,
closed once. A session (`SpeechLane`, `Live`) keeps to one engine for its whole life:
this process's, or one replica's. No HTTP here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from voxserve.config import ServerConfig
from voxserve.engine.transcribe import TextDelta, TextDone, Transcript
from voxserve.engine.uploads import UploadBudget, UploadLease
from voxserve.errors import VoxError
from voxserve.serving.catalog import ServerInfo
from voxserve.serving.live_events import LiveEvent, LiveSettings
from voxserve.serving.speech import AudioChunk, SpeechParams
from voxserve.serving.transcription import TranscriptionParams
from voxserve.serving.waiting import Gone

__all__ = ["Live", "Service", "Speech", "SpeechLane", "TranscriptionReply", "Upload"]


class Speech(Protocol):
    """A speech stream being produced, here or on a Ray replica."""

    characters: int
    sample_rate: int
    replica: str | None

    def chunks(self) -> AsyncGenerator[AudioChunk, None]: ...

    def close(self, completed: bool = False) -> None: ...


@dataclass(frozen=True)
class Upload:
    """A transcription request whose audio was read whole, under the upload budget."""

    params: TranscriptionParams
    data: bytes
    request_id: str
    started: float
    """When the request arrived (`time.perf_counter`)."""
    gone: Gone
    stream: bool
    """Whether the reply is read as text deltas."""
    lease: UploadLease
    """The audio's share of the upload budget, released once the bytes are no longer held."""


class TranscriptionReply(Protocol):
    """A transcription being produced, here or on a Ray replica: read as text deltas or
    as the whole transcript, once."""

    replica: str | None

    def deltas(self) -> AsyncGenerator[TextDelta | TextDone, None]: ...

    async def transcript(self, gone: Gone | None = None) -> Transcript: ...

    def close(self, completed: bool = False) -> None: ...


class SpeechLane(Protocol):
    """Where one speech session speaks, for its whole life: this process's engine, or
    one Ray TTS replica (pinned at the session's first segment)."""

    async def check(self, model: str, voice: str, language: str | None) -> None:
        """Raise the `VoxError` an unknown model, voice or language gets (404, 400)."""
        ...

    async def speak(self, params: SpeechParams, request_id: str, started: float) -> Speech:
        """Start one segment. Takes the session's stream slot unless it holds it (429
        when full); `ReplicaLost` when the replica that held the session is gone."""
        ...

    def idle(self) -> None:
        """The segment is over: keep the slot a moment for the next one, then give it back."""
        ...

    def release(self) -> None:
        """Give the slot back now (the reply was cancelled); the session goes on."""
        ...

    async def close(self) -> None:
        """Give back everything the session holds; idempotent."""
        ...


class Live(Protocol):
    """A live transcription session (`voxserve.serving.realtime.LiveSession`), here or on
    the Ray ASR replica that holds it. Its events go to the `emit` it was opened with;
    `ref` (the client's id for the input) comes back on the `SessionError` it causes."""

    settings: LiveSettings

    @property
    def busy(self) -> bool:
        """A committed turn is still being transcribed."""
        ...

    @property
    def lost(self) -> asyncio.Future[VoxError]:
        """Resolves if the session cannot go on (its replica died); never here."""
        ...

    async def configure(self, settings: LiveSettings) -> None:
        """Check and apply new settings (404 for an unknown model, 400 for a language)."""
        ...

    async def append(self, data: bytes, ref: str | None = None) -> None: ...

    async def commit(self, ref: str | None = None) -> None: ...

    async def clear(self, ref: str | None = None) -> None: ...


class Service(ServerInfo, Protocol):
    config: ServerConfig
    ws_open: int
    """WebSocket sessions open now on this process, every route (`config.ws.max_sessions`)."""

    @property
    def uploads(self) -> UploadBudget | None:
        """Upload bytes read and not decoded yet, all together; None with ASR off."""
        ...

    def ws_session(self) -> AbstractAsyncContextManager[bool]:
        """A place for one WebSocket session under `config.ws.max_sessions` while the block
        runs: True when admitted, False at the cap (on Ray, the cap of every front end
        together: `voxserve.serving.leases`)."""
        ...

    def new_request_id(self) -> str: ...

    async def open_speech(self, params: SpeechParams, request_id: str, started: float, gone: Gone) -> Speech:
        """Admit and start a speech stream (429 when full, 499 when `gone` first)."""
        ...

    def check_transcriptions(self) -> None:
        """Refuse now (404 when off, 429 when full), before an upload is read."""
        ...

    async def open_transcription(self, upload: Upload) -> TranscriptionReply:
        """Admit and start a transcription of the upload's audio; its lease is released
        as soon as the audio is no longer held."""
        ...

    def speech_lane(self) -> SpeechLane:
        """Where a new speech session speaks; it holds nothing until its first segment."""
        ...

    def live_session(self, emit: Callable[[LiveEvent], None]) -> AbstractAsyncContextManager[Live]:
        """Open a live transcription session (404 when ASR is off, 429 past the session
        cap); it is closed, and its work dropped, on the way out."""
        ...
