"""The engine replicas of a Ray Serve deployment: `TTSReplica` and `ASRReplica`.

Each replica is one Ray actor that runs the single-machine engine unchanged: the TTS
replica enters `running_state` (engine, deadline scheduler, admission with its capacity
gate, credits, text and audio pools, warm-up) exactly as the app's lifespan does, and
serves each stream with `voxserve.serving.speech.open_speech`, the function the HTTP
handler calls. The ASR replica runs `voxserve.serving.transcription.Transcriber` on its own
engine, pool and admission. Models load from the installed packages on whichever node runs the replica.

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
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from ray import serve

from voxserve.config import ServerConfig
from voxserve.engine.admission import Admission
from voxserve.engine.asr import ASREngine
from voxserve.engine.transcribe import Transcript
from voxserve.engine.tts import TTSEngine
from voxserve.ray.loopback import bind_replica_grpc_to_node
from voxserve.serving.catalog import speech_model_ids, voice_list
from voxserve.serving.jobs import Opened, SpeechJob, TranscriptionJob, TTSCatalog
from voxserve.serving.metrics import Metrics
from voxserve.serving.speech import AudioChunk, open_speech
from voxserve.serving.state import running_state
from voxserve.serving.transcription import Transcriber

__all__ = ["ASRReplica", "TTSReplica", "replica_name"]

STOP_WAIT_S = 0.5
"""How long a stopping replica waits for its workers to leave an inference call."""


def replica_name() -> str:
    """`Deployment#id`, as Serve names the replica (its actor is `SERVE_REPLICA::app#...`)."""
    return serve.get_replica_context().replica_id.to_full_id_str()


def _describe(name: str) -> dict[str, Any]:
    import ray

    return {"replica": name, "pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}


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

    async def speech(self, job: SpeechJob) -> AsyncIterator[str | Opened | AudioChunk]:
        """This replica's name, `Opened` once the stream is admitted and submitted, then its
        chunks; cancelling the call ends the stream (and a wait in the admission queue) as
        a client disconnect does."""
        yield self.name
        started = time.perf_counter()
        stream = await open_speech(self.state, job.params, job.request_id, started)
        completed = False
        try:
            yield Opened(stream.characters, stream.sample_rate)
            async with contextlib.aclosing(stream.chunks()) as chunks:
                async for chunk in chunks:
                    yield chunk
            completed = True
        finally:
            stream.close(completed)

    def catalog(self) -> TTSCatalog:
        engine = self.state.engine
        return TTSCatalog(speech_model_ids(engine), voice_list(engine))

    def describe(self) -> dict[str, Any]:
        """Name, process and node, and the routing stats (for tests and operators)."""
        return {**_describe(self.name), **self.record_routing_stats()}

    def record_routing_stats(self) -> dict[str, Any]:
        """Polled by Serve's controller; read by `HeadroomRouter` in every front end."""
        state = self.state
        return {
            "capacity": state.engine.capacity_streams(),
            "active": state.engine.active_streams,
            "queued": state.admission.queued,
            "limit": state.engine.max_streams,
        }

    def check_health(self) -> None:
        """Serve replaces a replica whose inference workers died."""
        engine = self.state.engine
        if not engine.healthy:
            raise RuntimeError(f"TTS workers died: {', '.join(engine.dead_workers) or 'unknown'}")

    async def __del__(self) -> None:
        await self._stack.aclose()


class ASRReplica:
    """One ASR engine with its own batcher, audio pool and admission."""

    async def __init__(self, config: ServerConfig) -> None:  # type: ignore[misc]  # Serve awaits it
        bind_replica_grpc_to_node()
        # The replica's batches use at most the CPUs Ray reserved for it (`num_cpus` =
        # workers): a batch that runs alone gets that many intra-op threads, no more. It
        # cannot see speech replicas, so `busy_elsewhere` stays unset; within its own
        # reservation a solo batch uses no more cores than two batches side by side.
        asr = replace(config.asr, solo_threads=min(config.asr.solo_threads, config.asr.workers))
        self.engine = ASREngine(asr)
        self.pool = self.engine.audio_pool()
        self.admission = Admission(asr.max_requests, asr.max_queue, asr.queue_timeout_s)
        self.metrics = Metrics(None)
        self.metrics.attach_asr(self.engine.snapshot)
        self.transcriber = Transcriber(self.engine, self.pool, self.admission, self.metrics)
        self.engine.start()
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

    async def stream(self, job: TranscriptionJob) -> AsyncIterator[str | Opened]:
        """This replica's name, `Opened` once the audio is decoded and feeding the engine,
        then the text of each piece as it finishes."""
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

    def model_name(self) -> str:
        return self.engine.name

    def describe(self) -> dict[str, Any]:
        return _describe(self.name)

    def check_health(self) -> None:
        if not self.engine.healthy:
            raise RuntimeError(f"ASR workers died: {', '.join(self.engine.dead_workers) or 'unknown'}")

    async def __del__(self) -> None:
        self.admission.close()
        self.engine.drain()
        self.engine.stop(timeout=STOP_WAIT_S)
        self.pool.shutdown(wait=False, cancel_futures=True)
