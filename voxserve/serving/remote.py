"""The serving layer of a Ray front end: the same use cases, with the engines on replicas.

`RemoteState` implements `voxserve.serving.service.Service` by handing each job to a TTS
or ASR replica through `TTSBackend` or `ASRBackend` (`voxserve.ray.frontend` implements
those with Ray Serve handles). A replica runs the single-machine serving layer and sends
back its items (`voxserve.serving.jobs`); its errors come back as the same `VoxError`s.
`voxserve_replica_requests` counts requests by deployment and replica. Nothing here
imports Ray or HTTP, and no model loads in this process.

Sessions keep to one replica for their whole life:

- **A speech session** (`_RemoteLane`) cuts its text into segments here, in the front
  end (`voxserve.serving.speech_session.SpeechSession`, linear and cheap), and speaks
  each segment on a TTS replica as a stream, through the same path as an HTTP speech
  request: the same credits, and closing the stream cancels the replica's work. The
  first segment goes where the router finds the most headroom; the session is then
  pinned to that replica, which keeps the session's stream slot between the segments of
  a reply (`HeldSlot`) and gives it back `HOLD_SLOT_S` after the last one, or at once
  when the session ends (`end_session`).
- **A live transcription session** (`_RemoteLive`) runs on one ASR replica, whole:
  VAD, turn detection and the turns' transcription as live work, beside that replica's
  engine, whose state (idle workers, live work queued) decides when deltas and early
  finals run. The front end forwards the client's input in order, several appends per
  call when they queue up, and relays the session's events as they come.

A replica that dies takes its sessions with it: their next call, or the stream in
flight, fails with `ReplicaLost`, and the channel ends the session with that error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter

from voxserve.config import ServerConfig
from voxserve.engine.transcribe import TextDelta, TextDone, Transcript
from voxserve.engine.uploads import UploadBudget, UploadLease
from voxserve.errors import ReplicaLost, VoxError
from voxserve.serving.catalog import Health, listed_voice_model, served_models
from voxserve.serving.engine_metrics import Row
from voxserve.serving.jobs import (
    Append,
    Clear,
    Commit,
    Configure,
    LiveAction,
    LiveInput,
    LiveOpen,
    LiveReply,
    Opened,
    SegmentJob,
    SessionRef,
    SpeechJob,
    TranscriptionJob,
    TTSCatalog,
    VoiceCheck,
)
from voxserve.serving.leases import LeaseKeeper, SessionLeases, session_place
from voxserve.serving.live_events import (
    Committed,
    LiveEvent,
    LiveSettings,
    TranscriptCompleted,
    TranscriptFailed,
)
from voxserve.serving.metrics import Metrics
from voxserve.serving.saved_voices import SavedVoices, default_folder
from voxserve.serving.service import Upload
from voxserve.serving.speech import AudioChunk, SpeechParams
from voxserve.serving.state import new_request_id
from voxserve.serving.transcription import asr_disabled, observe
from voxserve.serving.waiting import Gone, unless_gone

__all__ = ["ASRBackend", "Remote", "RemoteState", "RemoteStream", "TTSBackend", "remote_state"]

log = logging.getLogger(__name__)

_LEFT = "client disconnected before a replica took its request"

END_SESSION_S = 2.0
"""How long closing a speech session waits for its replica to give the slot back; the
replica's own hold timer gives it back anyway (`HOLD_SLOT_S`)."""

_ENDING: set[asyncio.Task[None]] = set()
"""Calls that end sessions on their replicas, held until they finish."""

LIVE_INPUTS = 16
"""A live session's client inputs waiting to be forwarded; past it the channel waits
(and reads no more from its client). Also the most one call forwards."""

FORWARD_EVERY_S = 0.05
"""A live session's appends go to its replica at most this often, together: each Serve
call costs CPU on both ends, and a client's 20 ms appends forwarded one by one would cost
more than the transcription beside them (docs/SCALING.md has the figures). The wait adds
at most this to when the replica hears the end of a turn; a commit, clear or configure
with no append waiting before it goes at once."""


@dataclass
class RemoteStream:
    """A reply being produced by one replica, after it said the work had started."""

    replica: str
    opened: Opened
    items: AsyncIterator[Any]
    """The serving layer's items (`AudioChunk`s, or text deltas). Raises a `VoxError` if
    the replica fails; closing it cancels the replica's work."""
    cancel: Callable[[], None] = field(default=lambda: None)
    """Cancels the replica's work now unless its reply was read to the end, whether or
    not `items` was ever read: a reply given up as it opened (a barge-in landing then)
    is never iterated, and closing an async generator that never started runs none of
    its cleanup."""


class TTSBackend(Protocol):
    async def catalog(self) -> TTSCatalog: ...

    async def speech(self, job: SpeechJob) -> RemoteStream:
        """Start the job on a replica; returns once the stream is admitted and submitted."""
        ...

    async def segment(self, job: SegmentJob) -> RemoteStream:
        """Start a session's segment on the replica that holds the session (any, for the
        first): as `speech`, with the session's slot kept between segments."""
        ...

    async def check_voice(self, check: VoiceCheck) -> None:
        """Raise what a stream with this model, voice and language would be refused with."""
        ...

    async def end_session(self, ref: SessionRef) -> None:
        """Give back the session's slot on its replica now."""
        ...

    def replica_stats(self) -> Mapping[str, Mapping[str, Any]]:
        """Each replica's last report, by replica: `engine` (its engine's snapshot) and `at`
        (when, as `time.time()`). Returns at once: nothing is asked of a replica here."""
        ...


class ASRBackend(Protocol):
    async def models(self) -> dict[str, dict[str, Any]]:
        """Each loaded ASR model's own name with what it can do (`catalog.asr_models`)."""
        ...

    async def transcribe(self, job: TranscriptionJob) -> tuple[str, Transcript]:
        """The replica that served the job, and its transcript."""
        ...

    async def stream(self, job: TranscriptionJob) -> RemoteStream:
        """The text deltas of a `stream=true` transcription, once it has started."""
        ...

    async def live(self, job: LiveOpen) -> RemoteStream:
        """Open a live session on a replica (429 past its session cap); the stream's
        items are the session's `LiveEvent`s, and closing it closes the session."""
        ...

    async def live_input(self, batch: LiveInput) -> LiveReply:
        """Apply client input to the live session on the replica that holds it."""
        ...

    def replica_stats(self) -> Mapping[str, Mapping[str, Any]]:
        """As `TTSBackend.replica_stats`."""
        ...


@dataclass(frozen=True)
class Remote:
    tts: TTSBackend
    asr: ASRBackend | None
    """None when the deployment runs no ASR replicas."""
    sessions: LeaseKeeper | None = None
    """The keeper of the cluster's WebSocket session cap; None with one front end, whose
    own count is the cluster's."""


@dataclass
class RemoteState:
    config: ServerConfig
    remote: Remote
    catalog: TTSCatalog
    asr_about: dict[str, dict[str, Any]]
    """Each loaded ASR model with what it can do; empty with ASR off."""
    metrics: Metrics
    replica_requests: Counter
    uploads: UploadBudget
    """Upload bytes read and not yet handed to an ASR replica, all requests together."""
    started_at: float = field(default_factory=time.time)
    ws_open: int = 0
    """WebSocket sessions open on this front end."""
    leases: SessionLeases | None = None
    """This front end's leases under the cluster's session cap (None: one front end)."""
    saved_voices: SavedVoices | None = None
    """The saved voices, in the folder every replica reads (`serving/saved_voices.py`)."""

    def new_request_id(self) -> str:
        return new_request_id()

    def health(self) -> Health:
        # Ray Serve checks each replica (`check_health`) and replaces one whose workers died.
        return Health(True, [])

    def models(self) -> dict[str, str]:
        return served_models(self.catalog.models, self.asr_about)

    def asr_catalog(self) -> dict[str, dict[str, Any]]:
        return self.asr_about

    def voices(self) -> list[dict[str, str | None]]:
        return self.catalog.voices

    def voice_model(self, voice: str) -> str:
        return listed_voice_model(self.catalog.voices, voice)

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

    async def open_transcription(self, upload: Upload) -> _RemoteTranscription:
        """The whole upload was read, under the upload budget, before a replica is asked
        for a slot: a client that stalls mid-upload holds a connection here, never a slot
        there. `lease` goes back once the replica has the bytes (or the request failed)."""
        self.check_transcriptions()
        job = TranscriptionJob(upload.params, upload.data, upload.request_id)
        if not upload.stream:
            return _RemoteTranscription(self, job, upload.started, upload.lease, None)  # asked in transcript()
        try:
            assert self.remote.asr is not None
            opened = await unless_gone(self.remote.asr.stream(job), upload.gone(), _LEFT)
        finally:
            upload.lease.release()
        self.served("asr", opened.replica)
        return _RemoteTranscription(self, job, upload.started, upload.lease, opened)

    def ws_session(self) -> contextlib.AbstractAsyncContextManager[bool]:
        return session_place(self, self.leases)

    async def close(self) -> None:
        """The front end is stopping: its session leases go back."""
        if self.leases is not None:
            await self.leases.close()

    def speech_lane(self) -> _RemoteLane:
        return _RemoteLane(self)

    @contextlib.asynccontextmanager
    async def live_session(self, emit: Callable[[LiveEvent], None]) -> AsyncIterator[_RemoteLive]:
        asr = self.remote.asr
        if asr is None:
            raise asr_disabled()
        job = LiveOpen(f"live_{uuid.uuid4().hex[:20]}")
        stream = await asr.live(job)
        self.served("asr", stream.replica)
        self.metrics.realtime_sessions.inc()
        session = _RemoteLive(asr, job.session, stream, emit)
        try:
            yield session
        finally:
            self.metrics.realtime_sessions.dec()
            await session.close()


class _RemoteLane:
    """A speech session's lane on a TTS replica, pinned at its first segment."""

    def __init__(self, state: RemoteState):
        self._state = state
        self._session = f"wss_{uuid.uuid4().hex[:20]}"
        self.replica: str | None = None
        self._releasing: asyncio.Task[None] | None = None

    async def check(self, model: str, voice: str, language: str | None) -> None:
        await self._state.remote.tts.check_voice(VoiceCheck(model, voice, language))

    async def speak(self, params: SpeechParams, request_id: str, started: float) -> _RemoteSpeech:
        releasing, self._releasing = self._releasing, None
        if releasing is not None:  # the slot must be back before the next segment takes one
            await asyncio.wait({releasing})
        job = SegmentJob(params, request_id, self._session, self.replica)
        stream = await self._state.remote.tts.segment(job)
        if self.replica is None:
            self.replica = stream.replica
        self._state.served("tts", stream.replica)
        return _RemoteSpeech(stream, self._state.metrics, started)

    def idle(self) -> None:
        """Nothing to do: the replica starts its hold timer when the segment ends."""

    def release(self) -> None:
        """Give the slot back on the replica now (a cancelled reply), keeping the session
        pinned there; the next segment waits for this call first."""
        if self.replica is None or self._releasing is not None:
            return
        self._releasing = self._ending(SessionRef(self._session, self.replica))

    async def close(self) -> None:
        """Tell the replica, in a task of its own: Serve cancels a WebSocket's handler
        once its client has gone, and the call must go out all the same."""
        if self.replica is None:
            return
        ref = SessionRef(self._session, self.replica)
        self.replica = None
        self._ending(ref)

    def _ending(self, ref: SessionRef) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._end(ref))
        _ENDING.add(task)
        task.add_done_callback(_ENDING.discard)
        return task

    async def _end(self, ref: SessionRef) -> None:
        try:
            async with asyncio.timeout(END_SESSION_S):
                await self._state.remote.tts.end_session(ref)
        except (TimeoutError, VoxError) as exc:  # the hold timer frees the slot anyway
            log.info("ending speech session %s on its replica: %s", ref.session, exc)


class _RemoteLive:
    """A live session on one ASR replica: input forwarded in order, events relayed."""

    def __init__(self, asr: ASRBackend, session: str, stream: RemoteStream, emit: Callable[[LiveEvent], None]):
        self.settings = LiveSettings()
        self._asr = asr
        self._session = session
        self._replica = stream.replica
        self._emit = emit
        self._inputs: asyncio.Queue[tuple[LiveAction, asyncio.Future[VoxError | None] | None]] = asyncio.Queue(
            LIVE_INPUTS
        )
        self._lost: asyncio.Future[VoxError] = asyncio.get_running_loop().create_future()
        self._turns = 0
        """Turns committed and not yet transcribed."""
        self._items = stream.items
        self._relay = asyncio.create_task(self._relay_events())
        self._forward = asyncio.create_task(self._forward_inputs())

    @property
    def busy(self) -> bool:
        return self._turns > 0 or not self._inputs.empty()

    @property
    def lost(self) -> asyncio.Future[VoxError]:
        return self._lost

    async def configure(self, settings: LiveSettings) -> None:
        answer: asyncio.Future[VoxError | None] = asyncio.get_running_loop().create_future()
        await self._put(Configure(settings), answer)
        error = await self._unless_lost(answer)
        if error is not None:
            raise error
        self.settings = settings

    async def append(self, data: bytes, ref: str | None = None) -> None:
        await self._put(Append(data, ref))

    async def commit(self, ref: str | None = None) -> None:
        await self._put(Commit(ref))

    async def clear(self, ref: str | None = None) -> None:
        await self._put(Clear(ref))

    async def _put(self, action: LiveAction, answer: asyncio.Future[VoxError | None] | None = None) -> None:
        """Queue the action; waits while `LIVE_INPUTS` wait (the replica is behind)."""
        await self._unless_lost(self._inputs.put((action, answer)))

    async def _unless_lost(self, work: Any) -> Any:
        if self._lost.done():
            raise self._lost.result()
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait({task, self._lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not task.done():
                task.cancel()
        if not task.done() or task.cancelled():
            raise self._lost.result()
        return task.result()

    def _fail(self, error: Exception) -> None:
        if not self._lost.done():
            if not isinstance(error, ReplicaLost):
                detail = error.message if isinstance(error, VoxError) else type(error).__name__
                error = ReplicaLost(f"the live session's replica failed: {detail}")
            self._lost.set_result(error)

    async def _forward_inputs(self) -> None:
        loop = asyncio.get_running_loop()
        sent = -FORWARD_EVERY_S
        while True:
            batch = [await self._inputs.get()]
            wait = sent + FORWARD_EVERY_S - loop.time()
            if wait > 0 and isinstance(batch[0][0], Append):
                await asyncio.sleep(wait)
            while not self._inputs.empty() and len(batch) < LIVE_INPUTS:
                batch.append(self._inputs.get_nowait())
            sent = loop.time()
            try:
                replies = await self._asr.live_input(
                    LiveInput(self._session, self._replica, tuple(action for action, _ in batch))
                )
            except Exception as exc:  # noqa: BLE001 - the session ends, with the reason
                self._fail(exc)
                return
            for (_, answer), error in zip(batch, replies, strict=True):
                if answer is not None and not answer.done():
                    answer.set_result(error)

    async def _relay_events(self) -> None:
        try:
            async for event in self._items:
                if isinstance(event, Committed):
                    self._turns += 1
                elif isinstance(event, TranscriptCompleted | TranscriptFailed):
                    self._turns = max(0, self._turns - 1)
                self._emit(event)
        except Exception as exc:  # noqa: BLE001 - the session ends, with the reason
            self._fail(exc)
            return
        self._fail(ReplicaLost("the replica ended the live session"))

    async def close(self) -> None:
        for task in (self._forward, self._relay):
            task.cancel()
        await asyncio.gather(self._forward, self._relay, return_exceptions=True)
        await _aclose(self._items)


class _RemoteSpeech:
    """A replica's speech stream; observes time to the first audio as seen here."""

    def __init__(self, stream: RemoteStream, metrics: Metrics, started: float):
        self.replica: str | None = stream.replica
        self.characters = stream.opened.characters
        self.sample_rate = stream.opened.sample_rate
        self._items = stream.items
        self._cancel = stream.cancel
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
        """Cancel the replica's work unless the reply was read to its end. Closing
        `chunks()` already does, but a stream stopped as it opened is closed without
        `chunks()` ever running."""
        self._cancel()


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

    async def deltas(self) -> AsyncGenerator[TextDelta | TextDone, None]:
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


def _engine_rows(backend: TTSBackend | ASRBackend) -> Callable[[], list[Row]]:
    def rows() -> list[Row]:
        stats = backend.replica_stats()
        return [((name,), report["engine"]) for name, report in sorted(stats.items()) if "engine" in report]

    return rows


def _report_ages(remote: Remote) -> list[tuple[str, str, float]]:
    now = time.time()
    backends: list[tuple[str, TTSBackend | ASRBackend]] = [("tts", remote.tts)]
    if remote.asr is not None:
        backends.append(("asr", remote.asr))
    return [
        (deployment, name, max(0.0, now - float(report["at"])))
        for deployment, backend in backends
        for name, report in sorted(backend.replica_stats().items())
        if "at" in report
    ]


def remote_state(
    config: ServerConfig, remote: Remote, catalog: TTSCatalog, asr_catalog: dict[str, dict[str, Any]]
) -> RemoteState:
    """A front end's state, with its own metrics and upload budget. Its /metrics has each
    replica's engine figures, labelled `replica`, as the replica last reported them."""
    metrics = Metrics(None)
    metrics.attach_replicas(
        _engine_rows(remote.tts),
        _engine_rows(remote.asr) if remote.asr is not None else None,
        lambda: _report_ages(remote),
    )
    replica_requests = Counter(
        "voxserve_replica_requests",
        "Requests handed to each engine replica",
        ["deployment", "replica"],
        registry=metrics.registry,
    )
    uploads = UploadBudget(int(config.asr.max_buffered_upload_mb * 1024 * 1024))
    leases = SessionLeases(remote.sessions) if remote.sessions is not None else None
    saved = SavedVoices(config.tts.saved_voices_dir or default_folder(), config.tts.max_saved_voices)
    return RemoteState(
        config, remote, catalog, asr_catalog, metrics, replica_requests, uploads, leases=leases, saved_voices=saved
    )
