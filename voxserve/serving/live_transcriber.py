"""What live transcription sessions share (`LiveTranscriber`): the ASR engine, the VAD
engine, the noise filter, a small audio pool, limits and metrics; and how many sessions
are let in.

It opens each `LiveSession` (`serving/realtime.py`) with what the session needs, and
answers the session's questions in the terms of the engines: which model and options its
turns are decoded with, each decode's deadline (the ASR engine's live policy,
`engine/live.py`), and the decode itself. Nothing here knows HTTP or JSON.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from voxserve.config import RealtimeConfig
from voxserve.engine.asr import ASREngine, TranscribeOptions
from voxserve.engine.denoise import DenoiseEngine
from voxserve.engine.live import LivePolicy
from voxserve.engine.stream import StreamFailed
from voxserve.engine.transcribe import start_live
from voxserve.engine.vad import VADEngine
from voxserve.errors import Overloaded, ServerError
from voxserve.serving.catalog import asr_model
from voxserve.serving.live_events import LiveEvent, LiveSettings
from voxserve.serving.metrics import Metrics
from voxserve.serving.realtime import LiveSession

__all__ = ["LiveTranscriber"]


@dataclass
class LiveTranscriber:
    """What live sessions share: the ASR engine, the VAD engine, a small audio pool for
    the turns' features (never behind an upload's decoding), limits and metrics. Sessions
    are admitted up to the engine's live capacity (`LivePolicy.capacity`), within
    `max_sessions`."""

    engine: ASREngine
    vad: VADEngine
    pool: Executor
    config: RealtimeConfig
    metrics: Metrics
    denoise: DenoiseEngine = field(default_factory=DenoiseEngine)
    """The noise filter (`noise_reduction`); one never started refuses every type."""
    clock: Callable[[], float] = time.monotonic
    open_sessions: int = 0
    _sessions: set[LiveSession] = field(default_factory=set)
    _active: int = 0
    _counted_at: float = -math.inf

    def __post_init__(self) -> None:
        self._policy: LivePolicy = self.engine.live_policy
        self._target_s = self.config.final_target_ms / 1000
        self.metrics.realtime_capacity.set_function(self.capacity)

    @classmethod
    def over(cls, engine: ASREngine, config: RealtimeConfig, metrics: Metrics) -> LiveTranscriber:
        """Live sessions over `engine`, with engines and a pool of their own: a VAD whose
        end-of-turn model's calls count as live work in the engine's live policy, a noise
        filter, and one thread for the turns' features. `start` starts them."""
        vad = VADEngine(turn_cost=engine.live_policy.ran_other)
        pool = ThreadPoolExecutor(1, thread_name_prefix="asr-live")
        return cls(engine, vad, pool, config, metrics, denoise=DenoiseEngine())

    def start(self, noise_required: bool) -> None:
        """Start the VAD and the noise filter (`noise_required`: refuse to run without it)."""
        self.vad.start()
        self.denoise.start(required=noise_required)

    def stop(self) -> None:
        """Stop the VAD and the noise filter, and drop what the pool holds."""
        self.vad.stop()
        self.denoise.stop()
        self.pool.shutdown(wait=False, cancel_futures=True)

    # -- admission --------------------------------------------------------------------
    def capacity(self) -> int:
        """Sessions admitted now: the ASR engine's measured live capacity (the end-of-turn
        model's time per call counted in its estimate), within `max_sessions`."""
        return self._policy.capacity(self._target_s, self.config.max_sessions, self.vad.turn_call_s)

    def active_sessions(self) -> int:
        """Sessions active now (`RealtimeConfig.active_s`): they count against the live
        capacity and in the engine's meter; idle ones decode nothing."""
        self.count_active(force=True)
        return self._active

    def filter_weight(self) -> float:
        """What a session with the noise filter on counts for in admission, against 1 for
        one without (`engine/live.py: session_weight`)."""
        return self._policy.session_weight(self.denoise.cost, not self.engine.batched, self.vad.turn_call_s)

    def load(self) -> float:
        """The active sessions, each at its weight: one with the noise filter on counts
        for `filter_weight()`."""
        now = self.clock()
        weight = self.filter_weight()
        return sum(weight if session.filtered else 1.0
                   for session in self._sessions if session.active_until > now)

    def count_active(self, force: bool = False) -> None:
        """Tell the engine's meter how many sessions are active (at most once a second
        unless forced: every append of every session asks)."""
        now = self.clock()
        if not force and now - self._counted_at < 1.0:
            return
        self._counted_at = now
        active = sum(1 for session in self._sessions if session.active_until > now)
        if active != self._active:
            self._active = active
            self._policy.sessions(active)

    @contextlib.asynccontextmanager
    async def session(self, emit: Callable[[LiveEvent], None]) -> AsyncIterator[LiveSession]:
        """Open a session under `max_sessions` and, counting only the active sessions,
        under `capacity()` (Overloaded past either); it is closed, and its transcriptions
        dropped, on the way out."""
        capacity = self.capacity()
        active = self.active_sessions()
        load = self.load()
        weight = self.filter_weight() if self.config.noise_reduction else 1.0
        # One session is always let in, as one stream always is.
        if self.open_sessions >= self.config.max_sessions or (load > 0 and load + weight > capacity + 1e-9):
            raise Overloaded(
                f"the server has {self.open_sessions} live transcription sessions open, "
                f"{active} of them active, against its capacity ({capacity} active, "
                f"{self.config.max_sessions} open); try again later"
            )
        self.open_sessions += 1
        self.engine.live_session(True)
        self.metrics.realtime_sessions.inc()
        session = LiveSession(emit, self, self.vad, self.denoise, self.config, self.metrics, self.clock)
        self._sessions.add(session)
        self.count_active(force=True)
        try:
            yield session
        finally:
            await session.close()
            self._sessions.discard(session)
            self.count_active(force=True)
            self.open_sessions -= 1
            self.engine.live_session(False)
            self.metrics.realtime_sessions.dec()

    # -- what a session asks ------------------------------------------------------------
    def options(self, settings: LiveSettings) -> TranscribeOptions:
        """What a session's turns are decoded with: its language and prompt, and the
        loaded model its `transcription.model` names (OpenAI's names: the default, or a
        loaded model that speaks the session's language). 404 for a model that is not
        loaded, 400 for a language no loaded model speaks."""
        requested = asr_model(settings.model, self.engine.models, "session.audio.input.transcription.model")
        options = TranscribeOptions(language=settings.language or None, prompt=settings.prompt or None)
        return self.engine.choose(options, requested)

    def check(self, settings: LiveSettings) -> None:
        """Refuse settings this server cannot serve: another model (404), or a language
        the model does not speak."""
        self.options(settings)
        if settings.turn_detection is not None and settings.turn_detection.semantic:
            self.vad.check_semantic()
        self.denoise.check(settings.noise_reduction, "session.audio.input.noise_reduction.type")

    def english(self, settings: LiveSettings) -> bool:
        """Whether transcripts are English: the session's language, or an English-only
        model when none is set."""
        language = (settings.language or "").lower()
        if language:
            return language == "en" or language.startswith("en-")
        model = self.engine.model(self.options(settings).model)
        return model.abilities.languages == ("en",)

    def final_deadline(self) -> float:
        return self._policy.final_deadline(self._target_s)

    def early_final_deadline(self, rest_s: float) -> float | None:
        return self._policy.early_final_deadline(rest_s, self._target_s)

    def delta_deadline(self) -> float | None:
        # What speech does on the engine's cores: deltas wait while it holds every TTS worker.
        return self._policy.delta_deadline(self.engine.cores.speech_on_every_worker())

    async def decode(self, samples: np.ndarray, settings: LiveSettings, deadline: float, hint: str) -> str:
        """The transcript of these samples, decoded as live work due at `deadline`."""
        transcription = await start_live(self.engine, samples, self.options(settings), self.pool, deadline, hint)
        try:
            transcript = await transcription.collect()
        except StreamFailed as exc:
            raise ServerError(f"transcription failed: {exc}") from exc
        finally:
            transcription.cancel()
        return transcript.text
