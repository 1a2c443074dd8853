"""The HTTP front end of a scaled-out deployment: the same app, with the engines elsewhere.

`create_app(config, remote=...)` builds this. The routes read and validate requests with
the very functions the single-machine handlers use (`read_speech_request`,
`read_upload`), then hand each one to an engine replica through `TTSBackend` or
`ASRBackend`. `voxserve.ray` implements those with Ray Serve handles; the replica runs
the serving layer (`voxserve.serving`) and sends back its items (`voxserve.serving.jobs`),
framed here by the single-machine framing (`speech_body`, `transcript_events`); its
errors come back as the same `VoxError`s, rendered here in the OpenAI shape. Nothing here imports
Ray, and no model loads in this process.

As on one machine, an upload is read in full, under the upload budget
(`--max-buffered-upload-mb`, 429 past it), before a replica is asked for a slot.

Every engine response names the replica that served it in `x-voxserve-replica`, and
`voxserve_replica_requests` counts requests by deployment and replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from prometheus_client import Counter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response

from voxserve.api.routes import route_table
from voxserve.api.speech import read_speech_request, speech_body, speech_head, speech_params
from voxserve.api.stack import assemble
from voxserve.api.streaming import StreamResponse, until_disconnect
from voxserve.api.transcriptions import read_upload, render, transcript_events, transcription_params
from voxserve.config import ServerConfig
from voxserve.engine.transcribe import Transcript
from voxserve.engine.uploads import UploadBudget
from voxserve.serving.catalog import Health, model_ids
from voxserve.serving.jobs import Opened, SpeechJob, TranscriptionJob, TTSCatalog
from voxserve.serving.metrics import Metrics
from voxserve.serving.speech import AudioChunk
from voxserve.serving.state import new_request_id
from voxserve.serving.transcription import asr_disabled, observe
from voxserve.serving.waiting import unless_gone

__all__ = [
    "REPLICA_HEADER",
    "ASRBackend",
    "Remote",
    "RemoteState",
    "RemoteStream",
    "SpeechJob",
    "TTSBackend",
    "TTSCatalog",
    "TranscriptionJob",
    "create_remote_app",
]

REPLICA_HEADER = "x-voxserve-replica"

T = TypeVar("T")


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
        return model_ids(self.catalog.model, self.asr_name)

    def voices(self) -> list[dict[str, str | None]]:
        return self.catalog.voices

    def served(self, deployment: str, replica: str, headers: dict[str, str]) -> None:
        headers[REPLICA_HEADER] = replica
        self.replica_requests.labels(deployment, replica).inc()


async def _unless_gone(request: Request, work: Awaitable[T]) -> T:
    """Await `work`, cancelling it (and so the replica's call) if the client leaves first."""
    return await unless_gone(work, until_disconnect(request), "client disconnected before a replica took its request")


class _RemoteSpeech:
    """A replica's speech stream, as `speech_body` reads it; observes time to the first
    audio as seen by this front end."""

    def __init__(self, stream: RemoteStream, metrics: Metrics, started: float):
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


class _RemoteDeltas:
    """A replica's transcription, as `transcript_events` reads it."""

    def __init__(self, stream: RemoteStream):
        self._items = stream.items

    async def deltas(self) -> AsyncGenerator[str, None]:
        try:
            async for delta in self._items:
                yield delta
        finally:
            await _aclose(self._items)


async def _aclose(items: AsyncIterator[Any]) -> None:
    aclose = getattr(items, "aclose", None)
    if aclose is not None:
        await aclose()


async def _speech(request: Request) -> StreamResponse:
    state: RemoteState = request.app.state.vox
    started = time.perf_counter()
    body = await read_speech_request(request, state.config.tts.max_input_chars)
    request_id = request.headers.get("x-request-id") or state.new_request_id()
    media_type, headers = speech_head(body, state.config.default_sample_rate, request_id)
    stream = await _unless_gone(request, state.remote.tts.speech(SpeechJob(speech_params(body), request_id)))
    state.served("tts", stream.replica, headers)
    audio = speech_body(_RemoteSpeech(stream, state.metrics, started), body.stream_format)
    return StreamResponse(audio, media_type, headers)


async def _transcriptions(request: Request) -> Response | StreamResponse:
    return await _transcribe(request, "transcribe")


async def _translations(request: Request) -> Response | StreamResponse:
    return await _transcribe(request, "translate")


async def _transcribe(request: Request, task: str) -> Response | StreamResponse:
    state: RemoteState = request.app.state.vox
    asr = state.remote.asr
    if asr is None:
        raise asr_disabled()
    started = time.perf_counter()
    request_id = request.headers.get("x-request-id") or state.new_request_id()
    headers = {"x-request-id": request_id}
    # The whole upload is read, under the upload budget, before a replica is asked for
    # a slot: a client that stalls mid-upload holds a connection here, never a slot there.
    lease = state.uploads.lease()
    try:
        body, data = await read_upload(request, state.config.asr.max_upload_mb, task, lease)
        job = TranscriptionJob(transcription_params(body, task), data, request_id)
        del data
        if body.stream:
            stream = await _unless_gone(request, asr.stream(job))
            state.served("asr", stream.replica, headers)
            return StreamResponse(transcript_events(_RemoteDeltas(stream)), "text/event-stream", headers)
        replica, transcript = await _unless_gone(request, asr.transcribe(job))
    finally:
        lease.release()  # the replica has the bytes (or the request failed)
    state.served("asr", replica, headers)
    observe(state.metrics, task, body.response_format, transcript.duration, started)
    return render(transcript, body, task, headers)


def create_remote_app(config: ServerConfig, remote: Remote) -> Starlette:
    """The front-end app. Its lifespan asks a TTS (and an ASR) replica what they serve."""
    holder: dict[str, RemoteState] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        catalog = await remote.tts.catalog()
        asr_name = await remote.asr.model_name() if remote.asr is not None else None
        metrics = Metrics(None)
        replica_requests = Counter(
            "voxserve_replica_requests",
            "Requests handed to each engine replica",
            ["deployment", "replica"],
            registry=metrics.registry,
        )
        uploads = UploadBudget(int(config.asr.max_buffered_upload_mb * 1024 * 1024))
        state = RemoteState(config, remote, catalog, asr_name, metrics, replica_requests, uploads)
        holder["state"] = state
        app.state.vox = state
        lag = asyncio.create_task(metrics.watch_loop_lag())
        try:
            yield
        finally:
            lag.cancel()

    routes = route_table(_speech, _transcriptions, _translations)
    return assemble(config, routes, lifespan, lambda: holder["state"].metrics if holder else None)
