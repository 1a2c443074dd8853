"""What a running server holds, and how it starts and stops: `AppState` and `running_state`.

The app's lifespan runs `running_state`, and so does each TTS replica of a Ray
deployment. Handlers read the state (through Starlette's `app.state.vox`); this module
never imports them, nor anything of HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from voxserve.config import ServerConfig
from voxserve.engine.admission import Admission
from voxserve.engine.asr import ASREngine
from voxserve.engine.devices import sim_device_use
from voxserve.engine.pool import BoundedPool
from voxserve.engine.tts import TTSEngine
from voxserve.engine.uploads import UploadBudget
from voxserve.serving.catalog import (
    Health,
    asr_models,
    engine_devices,
    engines_health,
    saved_voice_model,
    served_models,
    speech_models,
    voice_list,
)
from voxserve.serving.collector import collector_policy
from voxserve.serving.leases import session_place
from voxserve.serving.live_events import LiveEvent
from voxserve.serving.live_transcriber import LiveTranscriber
from voxserve.serving.metrics import Metrics
from voxserve.serving.realtime import LiveSession
from voxserve.serving.saved_voices import SavedVoices, default_folder
from voxserve.serving.service import Upload
from voxserve.serving.speech import SpeechParams, SpeechStream, open_speech
from voxserve.serving.speech_session import LocalLane
from voxserve.serving.transcription import (
    Transcriber,
    TranscriptionStream,
    asr_disabled,
)
from voxserve.serving.waiting import Gone

__all__ = ["WORKER_JOIN_S", "ASRSide", "AppState", "new_request_id", "running_state"]

log = logging.getLogger(__name__)

WORKER_JOIN_S = 0.5
"""How long shutdown waits, in all, for worker threads to leave the inference call they
are in (its results are discarded). A whisper batch can take seconds: then an exit hook
waits for it (`voxserve.engine.threads`), and `voxserve serve` leaves without it."""


def new_request_id() -> str:
    """An id for a request that came without `x-request-id`."""
    return f"req_{uuid.uuid4().hex[:20]}"


@dataclass
class ASRSide:
    """What a server with speech-to-text holds: all of it, or none of it (ASR off)."""

    engine: ASREngine
    pool: ThreadPoolExecutor
    """Threads that decode, cut and featurize uploads for the engine."""
    admission: Admission
    """Transcriptions in progress at once; more wait, then get 429."""
    uploads: UploadBudget
    """Upload bytes read by transcriptions and not decoded yet, all together (429 past it)."""
    live: LiveTranscriber
    """Live transcription sessions (`/v1/realtime`), whose engines and audio pool are
    started and stopped with the side."""

    def start(self, noise_required: bool) -> None:
        self.engine.start()
        self.live.start(noise_required)

    def stop(self, timeout: float) -> None:
        """Stop the engine within `timeout` seconds and drop what the pools hold."""
        self.engine.stop(timeout=timeout)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.live.stop()


def _asr_side(config: ServerConfig, asr: ASREngine, metrics: Metrics) -> ASRSide:
    """Everything a server with speech-to-text holds beside the ASR engine, built around
    it; `ASRSide.start` starts it."""
    uploads = UploadBudget(int(config.asr.max_buffered_upload_mb * 1024 * 1024))
    metrics.attach_asr(lambda: {**asr.snapshot(), "upload_bytes": uploads.held, "upload_refused": uploads.refused})
    return ASRSide(
        engine=asr,
        pool=asr.audio_pool(),
        admission=Admission(asr.config.max_requests, config.asr.max_queue, config.asr.queue_timeout_s, gate=asr.admits),
        uploads=uploads,
        live=LiveTranscriber.over(asr, config.realtime, metrics),
    )


@dataclass
class AppState:
    config: ServerConfig
    engine: TTSEngine
    admission: Admission
    metrics: Metrics
    text_pool: BoundedPool
    audio_pool: BoundedPool
    started_at: float = field(default_factory=time.time)
    asr: ASRSide | None = None
    """Speech-to-text; None when started with ASR off."""
    ws_open: int = 0
    """WebSocket sessions open now, on every WebSocket route (`config.ws.max_sessions`)."""
    saved_voices: SavedVoices | None = None
    """The saved voices (`serving/saved_voices.py`); set by `running_state`."""

    @property
    def uploads(self) -> UploadBudget | None:
        """The ASR side's upload budget (`Service.uploads`); None with ASR off."""
        return None if self.asr is None else self.asr.uploads

    def new_request_id(self) -> str:
        return new_request_id()

    def health(self) -> Health:
        return engines_health(self.engine, None if self.asr is None else self.asr.engine)

    def models(self) -> dict[str, str]:
        return served_models(speech_models(self.engine), {} if self.asr is None else asr_models(self.asr.engine))

    def asr_catalog(self) -> dict[str, dict[str, Any]]:
        return {} if self.asr is None else asr_models(self.asr.engine)

    def voices(self) -> list[dict[str, str | None]]:
        return voice_list(self.engine)

    def voice_model(self, voice: str) -> str:
        return saved_voice_model(self.engine, voice)

    async def open_speech(
        self, params: SpeechParams, request_id: str, started: float, gone: Gone | None = None
    ) -> SpeechStream:
        return await open_speech(self, params, request_id, started, gone)

    def transcriber(self) -> Transcriber:
        if self.asr is None:
            raise asr_disabled()
        return Transcriber(self.asr.engine, self.asr.pool, self.asr.admission, self.metrics, self.asr.live.denoise)

    def check_transcriptions(self) -> None:
        self.transcriber().admission.refuse_if_full()  # a request refused now skips its upload

    async def open_transcription(self, upload: Upload) -> TranscriptionStream:
        """Take a transcription slot, then decode: the upload's bytes go back to the budget
        once decoded (or refused)."""
        try:
            return await self.transcriber().open(
                upload.params, upload.data, upload.request_id, upload.started, upload.gone
            )
        finally:
            upload.lease.release()

    def ws_session(self) -> contextlib.AbstractAsyncContextManager[bool]:
        return session_place(self, None)

    def speech_lane(self) -> LocalLane:
        return LocalLane(self)

    @contextlib.asynccontextmanager
    async def live_session(self, emit: Callable[[LiveEvent], None]) -> AsyncIterator[LiveSession]:
        if self.asr is None:
            raise asr_disabled()
        async with self.asr.live.session(emit) as session:
            yield session

    def drain(self) -> None:
        """First step of a shutdown, without blocking: refuse new work with 503 and fail
        every live stream and transcription, so that their responses end now instead of
        running on until uvicorn's graceful timeout cancels them."""
        self.admission.close()
        self.engine.drain()
        if self.asr is not None:
            self.asr.admission.close()
            self.asr.engine.drain()

    def engine_snapshot(self) -> dict[str, Any]:
        stats = self.engine.stats
        return {
            "active": self.engine.active_streams,
            "queued": self.admission.queued,
            "rejected": self.admission.rejected,
            "chunks": stats.chunks,
            "acoustic_runs": stats.acoustic_runs,
            "idle_core_units": self.engine.idle_core_units(),
            "admission_held": self.engine.admission_held(),
            "failures": stats.failures,
            "busy": dict(stats.busy_s),
            "healthy": self.engine.healthy,
            "capacity": self.engine.capacity_streams(),
            "costs": self.engine.costs(),
            "gated": self.admission.gated,
            **self.engine.step_stats(),
        }


def _new_state(config: ServerConfig, engine: TTSEngine, asr: ASREngine | None) -> AppState:
    """The state of a server around its engines, nothing started yet."""
    tts = config.tts
    metrics = Metrics(lambda: state.engine_snapshot())
    state = AppState(
        config=config,
        engine=engine,
        admission=Admission(
            engine.max_streams, tts.max_queue, tts.queue_timeout_s, gate=engine.keeping_up,
            carry=engine.carries if engine.batched else None,
            drain=engine.drain_s if engine.batched else None,
        ),
        metrics=metrics,
        text_pool=BoundedPool(tts.text_workers, engine.max_streams + tts.max_queue, "text"),
        audio_pool=BoundedPool(tts.audio_workers, 4 * (engine.max_streams + tts.max_queue), "audio"),
        asr=None if asr is None else _asr_side(config, asr, metrics),
        saved_voices=SavedVoices(tts.saved_voices_dir or default_folder(), tts.max_saved_voices),
    )
    return state


def _log_ready(state: AppState, asr: ASREngine | None) -> None:
    """Show the devices in the metrics, and say in the log what runs where."""
    engine, tts = state.engine, state.config.tts
    devices = engine_devices(engine, asr)
    state.metrics.attach_devices(devices, sim_device_use if "sim" in devices.values() else None)
    if devices.get("transcription") == "sim":
        log.warning("transcription runs on the sim device: a simulated H200 whose stand-in answers "
                    "[sim] and made-up words, never a transcript (capacity planning and CI)")
    if engine.device == "sim":
        log.warning("speech runs on the sim device: a simulated H200%s whose stand-ins make a tone, "
                    "never speech (capacity planning and CI); transcription runs on %s",
                    "" if tts.sim_speed == 1 else f" at {tts.sim_speed:g}x its speed",
                    devices.get("transcription", "no engine"))
    log.info("voxserve ready: voice models %s on %s, %d workers", ", ".join(engine.models),
             engine.device, tts.workers)


@contextlib.asynccontextmanager
async def running_state(
    config: ServerConfig,
    engine: TTSEngine,
    asr: ASREngine | None,
    publish: Callable[[AppState], None] | None = None,
) -> AsyncIterator[AppState]:
    """Start the engines, admission and pools, warm them up and yield their state; drain
    and stop everything on exit. The app's lifespan runs this, and so does each TTS
    replica of a Ray deployment (`voxserve.ray`). `publish` receives the state before
    the engines start, so that a shutdown during warm-up can already drain it."""
    state = _new_state(config, engine, asr)
    if publish is not None:
        publish(state)
    collector_policy()
    engine.start()
    loop = asyncio.get_running_loop()
    warmups = [loop.run_in_executor(None, engine.warmup)]
    if state.asr is not None:
        state.asr.start(noise_required=config.realtime.noise_reduction is not None)
        warmups.append(loop.run_in_executor(None, state.asr.engine.warmup))
    await asyncio.gather(*warmups)
    if asr is not None:
        await loop.run_in_executor(None, asr.estimate_live)
    lag = asyncio.create_task(state.metrics.watch_loop_lag())
    _log_ready(state, asr)
    try:
        yield state
    finally:
        lag.cancel()
        state.drain()
        deadline = time.monotonic() + WORKER_JOIN_S
        engine.stop(timeout=WORKER_JOIN_S)
        state.text_pool.shutdown()
        state.audio_pool.shutdown()
        if state.asr is not None:
            state.asr.stop(timeout=max(0.0, deadline - time.monotonic()))
