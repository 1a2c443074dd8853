"""The engine replicas of a Ray Serve deployment: `TTSReplica` and `ASRReplica`.

Each replica is one Ray actor that runs the single-machine engine unchanged: the TTS
replica enters `running_state` (engine, deadline scheduler, admission with its capacity
gate, credits, text and audio pools, warm-up) exactly as the app's lifespan does, and
serves each stream with `voxserve.serving.speech.open_speech`, the function the HTTP
handler calls. The ASR replica runs `voxserve.serving.transcription.Transcriber` on its own
engine, pool and admission. Models load from the installed packages on whichever node runs the replica.

Sessions live on one replica each. A TTS replica keeps a speech session's stream slot
between the segments of a reply (`HeldSlot`, keyed by the session's id), and gives it
back `HOLD_SLOT_S` after the last segment, at `end_session`, or when the replica stops.
An ASR replica runs each live session whole (`LiveTranscriber`: VAD on its own thread,
turn detection, the turns as live work for its engine), takes its input through
`live_input` and streams its events back from `live`; a session whose front end stops
calling is closed after `idle_timeout_s` plus `LIVE_GRACE_S`.

Replies are the serving layer's dataclasses (`voxserve.serving.jobs`). A streaming
reply's first item is the replica's name, sent before any work, so that the front end
can label the response; errors (`VoxError`s such as 429) are raised and reach the front
end intact. No HTTP here: this module imports the serving layer, never `voxserve.api`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from ray import serve

from voxserve.config import ServerConfig
from voxserve.engine.admission import Admission
from voxserve.engine.asr import ASREngine
from voxserve.engine.transcribe import TextDelta, TextDone, Transcript
from voxserve.engine.tts import TTSEngine
from voxserve.errors import ReplicaLost, ServerError, VoxError
from voxserve.ray.loopback import bind_replica_grpc_to_node
from voxserve.serving.catalog import asr_models, speech_models, speech_voice, voice_list
from voxserve.serving.jobs import (
    Append,
    Clear,
    Commit,
    Configure,
    LiveInput,
    LiveOpen,
    LiveReply,
    Opened,
    ReplicaRef,
    SegmentJob,
    SessionRef,
    SpeechJob,
    TranscriptionJob,
    TTSCatalog,
    VoiceCheck,
)
from voxserve.serving.live_events import LiveEvent
from voxserve.serving.live_transcriber import LiveTranscriber
from voxserve.serving.metrics import Metrics
from voxserve.serving.realtime import LiveSession
from voxserve.serving.speech import AudioChunk, SpeechStream, open_speech
from voxserve.serving.speech_session import HeldSlot
from voxserve.serving.state import running_state
from voxserve.serving.transcription import Transcriber

__all__ = ["ASRReplica", "TTSReplica", "replica_name"]

STOP_WAIT_S = 0.5
"""How long a stopping replica waits for its workers to leave an inference call."""

LIVE_EVENTS = 256
"""A live session's events waiting for its front end to take them; past it the front
end is not reading, and the session ends."""

LIVE_GRACE_S = 5.0
"""How much longer than the client's idle timeout a live session waits for its front
end's next call before it closes itself (the front end died)."""


def _not_held(name: str) -> ReplicaLost:
    return ReplicaLost(
        f"the replica that held this session is gone (this is {name}); open a new session"
    )


def replica_name() -> str:
    """`Deployment#id`, as Serve names the replica (its actor is `SERVE_REPLICA::app#...`)."""
    return serve.get_replica_context().replica_id.to_full_id_str()


def _describe(name: str) -> dict[str, Any]:
    import ray

    return {"replica": name, "pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}


async def _relay(stream: SpeechStream) -> AsyncGenerator[Opened | AudioChunk, None]:
    """A stream as a replica's reply: `Opened`, then its chunks; the stream is closed at
    the end, as completed only if every chunk went out (a cancelled call aborts it)."""
    completed = False
    try:
        yield Opened(stream.characters, stream.sample_rate)
        async with contextlib.aclosing(stream.chunks()) as chunks:
            async for chunk in chunks:
                yield chunk
        completed = True
    finally:
        stream.close(completed)


class TTSReplica:
    """One TTS engine with its own scheduler, admission and credits."""

    async def __init__(self, config: ServerConfig) -> None:  # type: ignore[misc]  # Serve awaits it
        bind_replica_grpc_to_node()
        config = replace(config, asr=replace(config.asr, enabled=False))
        self._stack = contextlib.AsyncExitStack()
        self.state = await self._stack.enter_async_context(
            running_state(config, TTSEngine(config.tts), None)
        )
        self.name = replica_name()
        self.slots: dict[str, HeldSlot] = {}
        """Speech sessions' slots, by session id, while held."""

    async def speech(self, job: SpeechJob) -> AsyncIterator[str | Opened | AudioChunk]:
        """This replica's name, `Opened` once the stream is admitted and submitted, then its
        chunks; cancelling the call ends the stream (and a wait in the admission queue) as
        a client disconnect does."""
        yield self.name
        started = time.perf_counter()
        stream = await open_speech(self.state, job.params, job.request_id, started)
        async with contextlib.aclosing(_relay(stream)) as items:
            async for item in items:
                yield item

    async def segment(self, job: SegmentJob) -> AsyncIterator[str | Opened | AudioChunk]:
        """One segment of a speech session, as `speech`, in the session's slot: taken for
        its first segment (or after the slot went back), kept between segments. A segment
        the front end cancels (a barge-in, a client gone) gives the slot back at once:
        the session's `end_session` may have come before the slot was taken."""
        yield self.name
        if job.replica is not None and job.replica != self.name:
            raise _not_held(self.name)
        started = time.perf_counter()
        slot = self.slots.get(job.session)
        if slot is None:
            slot = self.slots[job.session] = HeldSlot(
                self.state.admission, on_release=self._forget(job.session), ledger=self.state.engine
            )
        try:
            params, state = job.params, self.state
            voice = speech_voice(state.engine, params.model, params.voice, params.language, state.saved_voices)
            await slot.take(voice.model)  # 429 when full
            stream = await open_speech(self.state, job.params, job.request_id, started, admitted=True)
        except BaseException as exc:
            if isinstance(exc, asyncio.CancelledError | GeneratorExit):
                slot.release()
            else:
                slot.idle()
            if not slot.held:
                self.slots.pop(job.session, None)
            raise
        spoken = False
        try:
            async with contextlib.aclosing(_relay(stream)) as items:
                async for item in items:
                    yield item
            spoken = True
        finally:
            if spoken:
                slot.idle()
            else:
                slot.release()

    def _forget(self, session: str) -> Callable[[], None]:
        def forget() -> None:
            self.slots.pop(session, None)

        return forget

    async def end_session(self, ref: SessionRef) -> None:
        """Give a speech session's slot back now (its client left or closed). Async, as
        everything that touches the admission: it runs on the replica's event loop."""
        slot = self.slots.get(ref.session)
        if slot is not None:
            slot.release()

    async def check_voice(self, check: VoiceCheck) -> None:
        speech_voice(self.state.engine, check.model, check.voice, check.language, self.state.saved_voices)

    def catalog(self) -> TTSCatalog:
        engine = self.state.engine
        return TTSCatalog(speech_models(engine), voice_list(engine))

    def describe(self, at: ReplicaRef | None = None) -> dict[str, Any]:
        """Name, process and node, and the routing stats (for tests and operators); `at`
        only routes the call to one replica."""
        return {**_describe(self.name), **self.record_routing_stats()}

    def record_routing_stats(self) -> dict[str, Any]:
        """Polled by Serve's controller; read by `HeadroomRouter` in every front end."""
        state = self.state
        return {
            "capacity": state.engine.capacity_streams(),
            # A session's slot counts while held, between its segments too.
            "active": max(state.engine.active_streams, state.admission.active),
            "queued": state.admission.queued,
            "limit": state.engine.max_streams,
            "sessions": len(self.slots),
            # For the front ends' /metrics (`voxserve.ray.stats.replica_stats`).
            "engine": state.engine_snapshot(),
            "at": time.time(),
        }

    def check_health(self) -> None:
        """Serve replaces a replica whose inference workers died."""
        engine = self.state.engine
        if not engine.healthy:
            raise RuntimeError(f"TTS workers died: {', '.join(engine.dead_workers) or 'unknown'}")

    async def __del__(self) -> None:
        for slot in list(self.slots.values()):
            slot.release()
        await self._stack.aclose()


class ASRReplica:
    """One ASR engine with its own batcher, audio pool and admission."""

    async def __init__(self, config: ServerConfig) -> None:  # type: ignore[misc]  # Serve awaits it
        bind_replica_grpc_to_node()
        # The replica's batches use at most the CPUs Ray reserved for it (`num_cpus` =
        # workers): a batch that runs alone gets that many intra-op threads, no more. It
        # cannot see speech replicas, so its `cores` say that speech is idle; within its own
        # reservation a solo batch uses no more cores than two batches side by side.
        asr = replace(config.asr, solo_threads=min(config.asr.solo_threads, config.asr.workers))
        self.engine = ASREngine(asr)
        self.pool = self.engine.audio_pool()
        self.admission = Admission(
            self.engine.config.max_requests, asr.max_queue, asr.queue_timeout_s, gate=self.engine.admits
        )
        self.metrics = Metrics(None)
        self.metrics.attach_asr(self.engine.snapshot)
        self.live_transcriber = LiveTranscriber.over(self.engine, config.realtime, self.metrics)
        self.transcriber = Transcriber(self.engine, self.pool, self.admission, self.metrics,
                                       self.live_transcriber.denoise)
        self.sessions: dict[str, _LiveHold] = {}
        """Live sessions open here, by id."""
        self.engine.start()
        self.live_transcriber.start(noise_required=config.realtime.noise_reduction is not None)
        await asyncio.get_running_loop().run_in_executor(None, self.engine.warmup)
        self.name = replica_name()

    async def transcribe(self, job: TranscriptionJob) -> tuple[str, Transcript]:
        started = time.perf_counter()
        stream = await self.transcriber.open(job.params, job.data, job.request_id, started)
        try:
            transcript = await stream.transcript()
        finally:
            stream.close()
        return self.name, transcript

    async def stream(self, job: TranscriptionJob) -> AsyncIterator[str | Opened | TextDelta | TextDone]:
        """This replica's name, `Opened` once the audio is decoded and feeding the engine,
        then the text of each piece as it finishes, then the whole text."""
        yield self.name
        started = time.perf_counter()
        stream = await self.transcriber.open(job.params, job.data, job.request_id, started)
        try:
            yield Opened()
            async with contextlib.aclosing(stream.deltas()) as deltas:
                async for delta in deltas:
                    yield delta
        finally:
            stream.close()

    async def live(self, job: LiveOpen) -> AsyncIterator[str | Opened | LiveEvent]:
        """This replica's name, `Opened` once the session is open (429 past
        `realtime.max_sessions` here), then its events as they come; cancelling the call
        closes the session and drops its work."""
        yield self.name
        live = self.live_transcriber
        hold = _LiveHold(live.config.idle_timeout_s + LIVE_GRACE_S)
        async with live.session(hold.emit) as session:
            hold.session = session
            self.sessions[job.session] = hold
            try:
                yield Opened()
                while True:
                    yield await hold.next_event()
            finally:
                self.sessions.pop(job.session, None)

    async def live_input(self, batch: LiveInput) -> LiveReply:
        """Apply a live session's client input in order; a refused `Configure` gives its
        error in the reply, in its place, and the rest goes on."""
        hold = self.sessions.get(batch.session) if batch.replica == self.name else None
        if hold is None or hold.session is None:
            raise _not_held(self.name)
        hold.heard()
        session = hold.session
        errors: list[VoxError | None] = []
        for action in batch.actions:
            error: VoxError | None = None
            match action:
                case Append(data, ref):
                    await session.append(data, ref)
                case Commit(ref):
                    await session.commit(ref)
                case Clear(ref):
                    await session.clear(ref)
                case Configure(settings):
                    try:
                        await session.configure(settings)
                    except VoxError as exc:
                        error = exc
            errors.append(error)
        hold.heard()
        return tuple(errors)

    def models(self) -> dict[str, dict[str, Any]]:
        """Each loaded model with what it can do (`catalog.asr_models`)."""
        return asr_models(self.engine)

    def describe(self, at: ReplicaRef | None = None) -> dict[str, Any]:
        """As `TTSReplica.describe`, with this replica's live sessions."""
        snapshot = self.engine.snapshot()
        return {
            **_describe(self.name),
            "live_sessions": len(self.sessions),
            "requests": snapshot.get("requests", 0),
            "engine_live_sessions": snapshot.get("live_sessions", 0),
        }

    def record_routing_stats(self) -> dict[str, Any]:
        """Polled by Serve's controller: the engine's figures, for the front ends' /metrics
        (routing ranks ASR replicas by requests in flight alone)."""
        return {"engine": self.engine.snapshot(), "at": time.time()}

    def check_health(self) -> None:
        if not self.engine.healthy:
            raise RuntimeError(f"ASR workers died: {', '.join(self.engine.dead_workers) or 'unknown'}")

    async def __del__(self) -> None:
        self.admission.close()
        self.engine.drain()
        self.engine.stop(timeout=STOP_WAIT_S)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.live_transcriber.stop()


class _LiveHold:
    """One live session on an ASR replica: its events, waiting for the front end (a
    bounded queue), and when the front end last called."""

    def __init__(self, silent_s: float):
        self.session: LiveSession | None = None
        self._events: asyncio.Queue[LiveEvent] = asyncio.Queue(LIVE_EVENTS)
        self._overflow = False
        self._silent_s = silent_s
        self._loop = asyncio.get_running_loop()
        self._heard = self._loop.time()

    def emit(self, event: LiveEvent) -> None:
        try:
            self._events.put_nowait(event)
        except asyncio.QueueFull:
            self._overflow = True

    def heard(self) -> None:
        self._heard = self._loop.time()

    async def next_event(self) -> LiveEvent:
        """The next event; ServerError when the front end takes none, or neither calls nor
        waits on a turn for `silent_s` (it is gone)."""
        while True:
            if self._overflow:
                raise ServerError(f"the front end left {LIVE_EVENTS} live events unread")
            left = self._heard + self._silent_s - self._loop.time()
            busy = self.session is not None and self.session.busy
            try:
                async with asyncio.timeout(self._silent_s if busy else max(left, 0.0)):
                    return await self._events.get()
            except TimeoutError:
                if busy:
                    self.heard()
                elif self._loop.time() - self._heard >= self._silent_s:
                    raise ServerError(f"no input from the front end for {self._silent_s:g} s") from None
