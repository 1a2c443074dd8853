"""The serving layer of a Ray front end: the same use cases, with the engines on replicas.

`RemoteState` implements `voxserve.serving.service.Service` by handing each job to a TTS
or ASR replica through `TTSBackend` or `ASRBackend` (`voxserve.ray.frontend` implements
those with Ray Serve handles). A replica runs the single-machine serving layer and sends
back its items (`voxserve.serving.jobs`); its errors come back as the same `VoxError`s.
`voxserve_replica_requests` counts requests by deployment and replica. Nothing here
imports Ray or HTTP, and no model loads in this process.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter

from voxserve.config import ServerConfig
from voxserve.engine.transcribe import Transcript
from voxserve.engine.uploads import UploadBudget, UploadLease
from voxserve.serving.catalog import Health, model_ids
from voxserve.serving.jobs import Opened, SpeechJob, TranscriptionJob, TTSCatalog
from voxserve.serving.metrics import Metrics
from voxserve.serving.speech import AudioChunk, SpeechParams
from voxserve.serving.state import new_request_id
from voxserve.serving.transcription import TranscriptionParams, asr_disabled, observe
from voxserve.serving.waiting import Gone, unless_gone

__all__ = ["ASRBackend", "Remote", "RemoteState", "RemoteStream", "TTSBackend", "remote_state"]

_LEFT = "client disconnected before a replica took its request"


@dataclass
class RemoteStream:
    """A reply being produced by one replica, after it said the work had started."""

    replica: str
    opened: Opened
    items: AsyncIterator[Any]
    """The serving layer's items (`AudioChunk`s, or text deltas). Raises a `VoxError` if
    the replica fails; closing it cancels the replica's work."""


class TTSBackend(Protocol):
    async def catalog(self) -> TTSCatalog: ...

    async def speech(self, job: SpeechJob) -> RemoteStream:
        """Start the job on a replica; returns once the stream is admitted and submitted."""
        ...


class ASRBackend(Protocol):
    async def model_name(self) -> str: ...

    async def transcribe(self, job: TranscriptionJob) -> tuple[str, Transcript]:
        """The replica that served the job, and its transcript."""
        ...

    async def stream(self, job: TranscriptionJob) -> RemoteStream:
        """The text deltas of a `stream=true` transcription, once it has started."""
        ...


@dataclass(frozen=True)
class Remote:
    tts: TTSBackend
    asr: ASRBackend | None
    """None when the deployment runs no ASR replicas."""


@dataclass
class RemoteState:
    config: ServerConfig
    remote: Remote
    catalog: TTSCatalog
    asr_name: str | None
    metrics: Metrics
    replica_requests: Counter
    uploads: UploadBudget
    """Upload bytes read and not yet handed to an ASR replica, all requests together."""
    started_at: float = field(default_factory=time.time)

    def new_request_id(self) -> str:
        return new_request_id()

    def health(self) -> Health:
        # Ray Serve checks each replica (`check_health`) and replaces one whose workers died.
        return Health(True, [])

    def model_ids(self) -> list[str]:
        return model_ids(self.catalog.models, self.asr_name)

    def voices(self) -> list[dict[str, str | None]]:
        return self.catalog.voices

    def served(self, deployment: str, replica: str) -> None:
        self.replica_requests.labels(deployment, replica).inc()

    async def open_speech(
        self, params: SpeechParams, request_id: str, started: float, gone: Gone | None = None
    ) -> _RemoteSpeech:
        work = self.remote.tts.speech(SpeechJob(params, request_id))
        stream = await unless_gone(work, gone() if gone is not None else None, _LEFT)
        self.served("tts", stream.replica)
        return _RemoteSpeech(stream, self.metrics, started)

    def check_transcriptions(self) -> None:
        if self.remote.asr is None:
            raise asr_disabled()

    async def open_transcription(
        self,
        params: TranscriptionParams,
        data: bytes,
        request_id: str,
        started: float,
        gone: Gone,
        stream: bool,
        lease: UploadLease,
    ) -> _RemoteTranscription:
        """The whole upload was read, under the upload budget, before a replica is asked
        for a slot: a client that stalls mid-upload holds a connection here, never a slot
        there. `lease` goes back once the replica has the bytes (or the request failed)."""
        self.check_transcriptions()
        job = TranscriptionJob(params, data, request_id)
        if not stream:
            return _RemoteTranscription(self, job, started, lease, None)  # asked in transcript()
        try:
            assert self.remote.asr is not None
            opened = await unless_gone(self.remote.asr.stream(job), gone(), _LEFT)
        finally:
            lease.release()
        self.served("asr", opened.replica)
        return _RemoteTranscription(self, job, started, lease, opened)


class _RemoteSpeech:
    """A replica's speech stream; observes time to the first audio as seen here."""

    def __init__(self, stream: RemoteStream, metrics: Metrics, started: float):
        self.replica: str | None = stream.replica
        self.characters = stream.opened.characters
        self.sample_rate = stream.opened.sample_rate
        self._items = stream.items
        self._metrics = metrics
        self._started = started

    async def chunks(self) -> AsyncGenerator[AudioChunk, None]:
        first = True
        try:
            async for chunk in self._items:
                if first and chunk.data:
                    first = False
                    self._metrics.ttfp.observe(time.perf_counter() - self._started)
                yield chunk
        finally:
            await _aclose(self._items)

    def close(self, completed: bool = False) -> None:
        """Nothing to do: closing `chunks()` cancels the replica's work."""


class _RemoteTranscription:
    """A replica's transcription: its text deltas (a stream that has started), or its
    whole transcript (asked for when read)."""

    def __init__(
        self,
        state: RemoteState,
        job: TranscriptionJob,
        started: float,
        lease: UploadLease,
        stream: RemoteStream | None,
    ):
        self.replica: str | None = stream.replica if stream is not None else None
        self._state = state
        self._job: TranscriptionJob | None = job
        self._params = job.params
        self._started = started
        self._lease = lease
        self._stream = stream

    async def deltas(self) -> AsyncGenerator[str, None]:
        assert self._stream is not None, "opened without stream=True"
        items = self._stream.items
        try:
            async for delta in items:
                yield delta
        finally:
            await _aclose(items)

    async def transcript(self, gone: Gone | None = None) -> Transcript:
        state, job = self._state, self._job
        assert state.remote.asr is not None and job is not None
        self._job = None  # the bytes go with the call
        try:
            replica, transcript = await unless_gone(
                state.remote.asr.transcribe(job), gone() if gone is not None else None, _LEFT
            )
        finally:
            del job
            self._lease.release()  # the replica has the bytes (or the request failed)
        self.replica = replica
        state.served("asr", replica)
        params = self._params
        observe(state.metrics, params.task, params.response_format, transcript.duration, self._started)
        return transcript

    def close(self, completed: bool = False) -> None:
        self._lease.release()


async def _aclose(items: AsyncIterator[Any]) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        await aclose()


def remote_state(config: ServerConfig, remote: Remote, catalog: TTSCatalog, asr_name: str | None) -> RemoteState:
    """A front end's state, with its own metrics and upload budget."""
    metrics = Metrics(None)
    replica_requests = Counter(
        "voxserve_replica_requests",
        "Requests handed to each engine replica",
        ["deployment", "replica"],
        registry=metrics.registry,
    )
    uploads = UploadBudget(int(config.asr.max_buffered_upload_mb * 1024 * 1024))
    return RemoteState(config, remote, catalog, asr_name, metrics, replica_requests, uploads)
